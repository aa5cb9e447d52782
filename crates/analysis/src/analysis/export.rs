//! The statistics set of an analysis, written here only, for `focus-lens analyze --out` and the
//! GUI's export alike, in the numbering asked for (`Numbering`: shown or raw): the same inputs
//! give the same bytes from both. `STEM.json` holds everything (the analysis with its arrays
//! indexed by number, each layer's `group_raw_of_shown`, the structure, and the caller's
//! provenance); `STEM.csv` is the set `files` lists: per group, category profiles, tokens, each
//! token's group per layer (CSV and Arrow IPC), and the structure per layer with the best layer's
//! paper-form table. Every file is made from typed values: nothing is parsed back or edited as
//! text. The Arrow encoder is the caller's (`ArrowEncoder`: the app holds the Arrow crates).

use super::categories::{Category, CentroidProfile, LayerProfile};
use super::shown::{Numbering, ShownAnalysis};
use super::structure::StructureReport;
use super::TokenInfo;
use crate::error::{Error, Result};
use crate::focus::mask::PairStats;
use crate::io::csv::csv_field;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Encodes each token's group and memberships in every layer as Arrow IPC (STEM.groups.arrow).
pub type ArrowEncoder<'a> = &'a dyn Fn(&ShownAnalysis, Numbering) -> Result<Vec<u8>>;

/// One analysis, numbered one way, with its structure (its best-layer table renumbered too).
pub struct StatsExport<'a> {
    pub shown: &'a ShownAnalysis,
    pub numbering: Numbering,
    pub structure: StructureReport,
}

impl<'a> StatsExport<'a> {
    pub fn new(shown: &'a ShownAnalysis, numbering: Numbering, structure: &StructureReport) -> StatsExport<'a> {
        let mut structure = structure.clone();
        if let Some(t) = structure.table.as_mut() {
            let (number, _) = shown.numbers(t.layer, numbering);
            t.rows.iter_mut().for_each(|r| r.group = number.get(r.group).copied().unwrap_or(r.group));
            t.rows.sort_by_key(|r| r.group);
        }
        StatsExport { shown, numbering, structure }
    }

    /// The files of the set `out` names (`.json`: one; `.csv`: the CSV set), in order, with their
    /// bytes; the caller writes them as one set (`io::export_set::write_set`).
    pub fn files(&self, out: &Path, provenance: Option<&serde_json::Value>, arrow: ArrowEncoder) -> Result<Vec<(PathBuf, Vec<u8>)>> {
        let ext = out.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
        match ext.as_str() {
            "json" => Ok(vec![(out.to_path_buf(), self.json(provenance)?.into_bytes())]),
            "csv" => {
                let table = self.structure.table.as_ref().map(|t| t.to_csv()).unwrap_or_default();
                Ok(vec![
                    (out.to_path_buf(), self.groups_csv().into_bytes()),
                    (out.with_extension("profiles.csv"), self.profiles_csv().into_bytes()),
                    (out.with_extension("tokens.csv"), self.shown.analysis.tokens_csv().into_bytes()),
                    (out.with_extension("groups.csv"), self.token_groups_csv().into_bytes()),
                    (out.with_extension("groups.arrow"), arrow(self.shown, self.numbering)?),
                    (out.with_extension("structure.csv"), self.structure.to_csv().into_bytes()),
                    (out.with_extension("structure_table.csv"), table.into_bytes()),
                ])
            }
            _ => Err(Error::Invalid(format!("the statistics go to a .json or .csv file, not {}", out.display()))),
        }
    }

    /// One row per (layer, group) by number, with the raw index and the layer's summary
    /// repeated, for spreadsheets.
    pub fn groups_csv(&self) -> String {
        let an = &self.shown.analysis;
        let mut s = String::from(
            "layer,group,group_raw,size,size_share,mass_before,mass_after,dominance,mean_confidence,mean_entropy,pairs_retained,pairs_local,pairs_same_group_distant,pairs_causal\n",
        );
        let t = an.tokens.len().max(1) as f64;
        for l in &an.layers {
            let (_, raw_of) = self.shown.numbers(l.layer, self.numbering);
            for (n, g) in raw_of.iter().enumerate().filter_map(|(n, g)| g.map(|g| (n, g))) {
                s += &format!(
                    "{},{n},{g},{},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{},{},{}\n",
                    l.layer,
                    l.group_size[g],
                    l.group_size[g] as f64 / t,
                    l.mass_before[g],
                    l.mass_after[g],
                    l.dominance,
                    l.mean_confidence,
                    l.mean_entropy,
                    l.pairs.retained,
                    l.pairs.local,
                    l.pairs.same_group_distant,
                    l.pairs.causal
                );
            }
        }
        s
    }

    /// One row per (layer, centroid) by number with its category profile (by largest
    /// membership): token count, label, top category, purity (empty for an empty group), the
    /// token count of every category (`n_<category>`) and its membership mass (`mass_<category>`).
    pub fn profiles_csv(&self) -> String {
        let mut s = String::from("layer,group,group_raw,tokens,label,top_category,purity");
        for c in Category::ALL {
            s += &format!(",n_{c}");
        }
        for c in Category::ALL {
            s += &format!(",mass_{c}");
        }
        s.push('\n');
        for p in &self.shown.analysis.profiles {
            for (n, c) in self.numbered_centroids(p) {
                s += &format!(
                    "{},{n},{},{},{},{},{}",
                    p.layer,
                    c.group,
                    c.tokens,
                    csv_field(&c.label),
                    c.top_category.map(|c| c.name()).unwrap_or(""),
                    c.purity.map(|p| format!("{p:.6}")).unwrap_or_default()
                );
                c.by_category.iter().for_each(|n| s += &format!(",{n}"));
                c.mass_by_category.iter().for_each(|m| s += &format!(",{m:.6}"));
                s.push('\n');
            }
        }
        s
    }

    /// One row per (token, layer), tidy: the token's index and text, the layer, its top group
    /// by number and raw, its confidence (largest membership; empty when the analysis kept no
    /// per-token routing) and its word's category.
    pub fn token_groups_csv(&self) -> String {
        let sh = self.shown;
        let mut s = String::from("token,text,layer,group,group_raw,confidence,category\n");
        let numbers: Vec<Vec<usize>> = (0..sh.layers()).map(|l| sh.numbers(l, self.numbering).0).collect();
        for (i, t) in sh.analysis.tokens.iter().enumerate() {
            let text = csv_field(&t.text);
            for (layer, number) in numbers.iter().enumerate() {
                let Some(&g) = sh.argmax.get(layer).and_then(|a| a.get(i)) else { continue };
                let g = g as usize;
                let conf = sh.token_routing(layer, i).map(|r| format!("{:.6}", r.confidence)).unwrap_or_default();
                s += &format!("{i},{text},{layer},{},{g},{conf},{}\n", number[g], t.category);
            }
        }
        s
    }

    /// The whole analysis as JSON: per-group arrays indexed by number (null where no raw group
    /// has that number), tokens' `top` by number and `memberships` indexed by number, each
    /// layer's `group_raw_of_shown`, the profiles' `group` by number with `group_raw` beside it,
    /// the structure, and `provenance` when given.
    pub fn json(&self, provenance: Option<&serde_json::Value>) -> Result<String> {
        let an = &self.shown.analysis;
        let layers = an
            .layers
            .iter()
            .map(|l| {
                let (number, raw_of) = self.shown.numbers(l.layer, self.numbering);
                let by_number = |v: &[f64]| raw_of.iter().map(|g| g.and_then(|g| v.get(g).copied())).collect();
                LayerJson {
                    layer: l.layer,
                    group_size: raw_of.iter().map(|g| g.and_then(|g| l.group_size.get(g).copied())).collect(),
                    mass_before: by_number(&l.mass_before),
                    mass_after: by_number(&l.mass_after),
                    dominance: l.dominance,
                    mean_confidence: l.mean_confidence,
                    mean_entropy: l.mean_entropy,
                    pairs: &l.pairs,
                    routed: l.routed,
                    tokens: l.tokens.as_ref().map(|ts| {
                        ts.iter()
                            .map(|t| TokenJson {
                                memberships: raw_of.iter().map(|g| g.and_then(|g| t.memberships.get(g).copied())).collect(),
                                top: t.top.iter().map(|&g| number.get(g).copied().unwrap_or(g)).collect(),
                                confidence: t.confidence,
                            })
                            .collect()
                    }),
                    group_raw_of_shown: raw_of,
                }
            })
            .collect();
        let profiles = an
            .profiles
            .iter()
            .map(|p| ProfileJson {
                layer: p.layer,
                categories: &p.categories,
                centroids: self.numbered_centroids(p).map(|(n, c)| CentroidJson { centroid: CentroidProfile { group: n, ..c.clone() }, group_raw: c.group }).collect(),
            })
            .collect();
        let out = StatsJson {
            model: &an.model,
            adapter: &an.adapter,
            groups: an.groups,
            window: an.window,
            sink: an.sink,
            mode: &an.mode,
            k: an.k,
            segment_len: an.segment_len,
            tokens: &an.tokens,
            layers,
            profiles,
            group_numbers: self.numbering.note(),
            groups_aligned_to: self.shown.aligned_to.as_deref(),
            structure: &self.structure,
            provenance,
        };
        serde_json::to_string_pretty(&out).map_err(|e| Error::Invalid(format!("the statistics as JSON: {e}")))
    }

    /// A layer's centroid profiles in the order of their numbers, each with its number.
    fn numbered_centroids<'p>(&self, p: &'p LayerProfile) -> impl Iterator<Item = (usize, &'p CentroidProfile)> {
        let (number, _) = self.shown.numbers(p.layer, self.numbering);
        let mut v: Vec<(usize, &CentroidProfile)> = p.centroids.iter().map(|c| (number.get(c.group).copied().unwrap_or(c.group), c)).collect();
        v.sort_by_key(|&(n, _)| n);
        v.into_iter()
    }
}

/// The JSON file's shape: `Analysis`'s fields, numbered, then the numbering, the structure and
/// the provenance.
#[derive(Serialize)]
struct StatsJson<'a> {
    model: &'a str,
    adapter: &'a str,
    groups: usize,
    window: usize,
    sink: usize,
    mode: &'a str,
    k: usize,
    segment_len: usize,
    tokens: &'a [TokenInfo],
    layers: Vec<LayerJson<'a>>,
    profiles: Vec<ProfileJson<'a>>,
    group_numbers: &'static str,
    groups_aligned_to: Option<&'a str>,
    structure: &'a StructureReport,
    #[serde(skip_serializing_if = "Option::is_none")]
    provenance: Option<&'a serde_json::Value>,
}

/// `LayerStats` with its per-group arrays indexed by number.
#[derive(Serialize)]
struct LayerJson<'a> {
    layer: usize,
    group_size: Vec<Option<usize>>,
    mass_before: Vec<Option<f64>>,
    mass_after: Vec<Option<f64>>,
    dominance: f64,
    mean_confidence: f64,
    mean_entropy: f64,
    pairs: &'a PairStats,
    routed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens: Option<Vec<TokenJson>>,
    group_raw_of_shown: Vec<Option<usize>>,
}

/// `TokenRouting` by number.
#[derive(Serialize)]
struct TokenJson {
    memberships: Vec<Option<f32>>,
    top: Vec<usize>,
    confidence: f32,
}

#[derive(Serialize)]
struct ProfileJson<'a> {
    layer: usize,
    categories: &'a [Category],
    centroids: Vec<CentroidJson>,
}

/// A centroid's profile with `group` by number and the raw index beside it.
#[derive(Serialize)]
struct CentroidJson {
    #[serde(flatten)]
    centroid: CentroidProfile,
    group_raw: usize,
}
