//! What a layer's groups capture, measured so that adapters can be compared fairly
//! (FOCUS-METHOD section 6) [ours]: per layer, the normalised mutual information between each
//! token's top group and its word category, against a permutation null (the group labels
//! shuffled, group sizes kept), and the same against three things that are not linguistic
//! categories: the token id (a random projection already groups tokens by identity), a position
//! bucket, and "repeats an earlier token". Purity and the centroids >= 60% pure with enough
//! tokens complete the table. A figure means something only beside the adapter's untrained twin
//! on the same text (`Structure::against`).
//!
//! NMI here is I(X; Y) / ((H(X) + H(Y)) / 2), in [0, 1]; 0 for a constant labelling.

use super::categories::Category;
use super::{Analysis, TokenInfo};
use crate::focus::mask::top_k_indices;
use crate::io::csv::csv_field;
use rand::{rngs::StdRng, seq::SliceRandom, SeedableRng};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// A centroid counts as pure from this share of its tokens in one category...
pub const PURE_SHARE: f64 = 0.6;
/// ...when it holds at least this many tokens (issue 28's bar).
pub const PURE_MIN_TOKENS: usize = 50;
/// Shuffles of the group labels behind each null.
pub const NULL_SHUFFLES: usize = 20;

/// One token as the structure measures see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProbeToken {
    pub id: u32,
    /// Position in its segment (from 0).
    pub position: usize,
    pub category: Category,
    /// The token id occurred earlier in the same segment.
    pub repeat: bool,
}

/// An NMI and its permutation null.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Nmi {
    pub value: f64,
    /// Mean and largest NMI over `NULL_SHUFFLES` shuffles of the group labels.
    pub null_mean: f64,
    pub null_max: f64,
}

impl Nmi {
    /// The value above the null's mean.
    pub fn excess(&self) -> f64 {
        self.value - self.null_mean
    }
}

/// One layer's structure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerStructure {
    pub layer: usize,
    /// NMI of the top group with the word category, token id, position bucket and repeat flag.
    pub category: Nmi,
    pub token: Nmi,
    pub position: Nmi,
    pub repeat: Nmi,
    /// Token-weighted purity: the share of tokens in their group's top category.
    pub purity: f64,
    /// Centroids with >= `PURE_MIN_TOKENS` tokens that are >= `PURE_SHARE` pure.
    pub pure60: usize,
    /// The share of tokens in the largest group (balance: 1/K is ideal).
    pub dominance: f64,
    /// Whether the adapter routes the layer (`LayerStats::routed`). A layer it does not route
    /// attends densely: it is measured, but left out of the medians, the best layer and the
    /// worst dominance. (Logs written before this field existed read as routed.)
    #[serde(default = "super::stats::routed_by_default")]
    pub routed: bool,
}

/// The structure of every layer of one adapter on one text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Structure {
    pub tokens: usize,
    pub groups: usize,
    pub layers: Vec<LayerStructure>,
}

/// NMI of two labellings of the same items (labels are any integers).
pub fn nmi(a: &[usize], b: &[usize]) -> f64 {
    assert_eq!(a.len(), b.len(), "two labellings of the same items");
    let n = a.len() as f64;
    if a.is_empty() {
        return 0.0;
    }
    // Ordered maps: sums in a fixed order, so that the same labellings give the same bits.
    let mut ca: BTreeMap<usize, f64> = BTreeMap::new();
    let mut cb: BTreeMap<usize, f64> = BTreeMap::new();
    let mut cab: BTreeMap<(usize, usize), f64> = BTreeMap::new();
    for (&x, &y) in a.iter().zip(b) {
        *ca.entry(x).or_default() += 1.0;
        *cb.entry(y).or_default() += 1.0;
        *cab.entry((x, y)).or_default() += 1.0;
    }
    let h = |c: &BTreeMap<usize, f64>| -c.values().map(|&v| v / n * (v / n).ln()).sum::<f64>();
    let (ha, hb) = (h(&ca), h(&cb));
    if ha <= 0.0 || hb <= 0.0 {
        return 0.0;
    }
    let i: f64 = cab.iter().map(|(&(x, y), &v)| v / n * (v * n / (ca[&x] * cb[&y])).ln()).sum();
    (2.0 * i / (ha + hb)).clamp(0.0, 1.0)
}

/// `nmi(groups, labels)` with its permutation null: the group labels shuffled (so every
/// group keeps its size), `NULL_SHUFFLES` times from `seed`.
pub fn nmi_with_null(groups: &[usize], labels: &[usize], seed: u64) -> Nmi {
    let value = nmi(groups, labels);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut shuffled = groups.to_vec();
    let (mut sum, mut max) = (0.0, 0.0f64);
    for _ in 0..NULL_SHUFFLES {
        shuffled.shuffle(&mut rng);
        let v = nmi(&shuffled, labels);
        sum += v;
        max = max.max(v);
    }
    Nmi { value, null_mean: sum / NULL_SHUFFLES as f64, null_max: max }
}

/// The position bucket of a token: 0, 1, 2-3, 4-7, ... (doubling), so that the first tokens
/// of a segment (attention sinks) stand apart.
pub fn position_bucket(position: usize) -> usize {
    (usize::BITS - position.leading_zeros()) as usize
}

/// One layer's structure from each token's top group (`groups[i]` in 0..k).
pub fn layer_structure(layer: usize, top: &[usize], k: usize, tokens: &[ProbeToken]) -> LayerStructure {
    assert_eq!(top.len(), tokens.len(), "one top group per token");
    let seed = 0x5eed ^ layer as u64;
    let cat: Vec<usize> = tokens.iter().map(|t| t.category.index()).collect();
    let id: Vec<usize> = tokens.iter().map(|t| t.id as usize).collect();
    let pos: Vec<usize> = tokens.iter().map(|t| position_bucket(t.position)).collect();
    let rep: Vec<usize> = tokens.iter().map(|t| t.repeat as usize).collect();
    let mut counts = vec![[0usize; Category::COUNT]; k];
    for (&g, &c) in top.iter().zip(&cat) {
        counts[g][c] += 1;
    }
    let sizes: Vec<usize> = counts.iter().map(|c| c.iter().sum()).collect();
    let best: Vec<usize> = counts.iter().map(|c| *c.iter().max().unwrap_or(&0)).collect();
    let n = top.len().max(1) as f64;
    let pure60 = (0..k).filter(|&g| sizes[g] >= PURE_MIN_TOKENS && best[g] as f64 >= PURE_SHARE * sizes[g] as f64).count();
    LayerStructure {
        layer,
        category: nmi_with_null(top, &cat, seed),
        token: nmi_with_null(top, &id, seed + 1),
        position: nmi_with_null(top, &pos, seed + 2),
        repeat: nmi_with_null(top, &rep, seed + 3),
        purity: best.iter().sum::<usize>() as f64 / n,
        pure60,
        dominance: *sizes.iter().max().unwrap_or(&0) as f64 / n,
        routed: true,
    }
}

/// The probe tokens of one segment of ids with their categories: positions from 0, repeats
/// within the segment.
pub fn probe_tokens(ids: &[u32], categories: &[Category]) -> Vec<ProbeToken> {
    let mut seen = std::collections::HashSet::new();
    ids.iter().zip(categories).enumerate().map(|(position, (&id, &category))| ProbeToken { id, position, category, repeat: !seen.insert(id) }).collect()
}

/// Median of the values (NaN for none).
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    if s.is_empty() {
        return f64::NAN;
    }
    s.sort_by(|a, b| a.total_cmp(b));
    let m = s.len() / 2;
    if s.len() % 2 == 1 { s[m] } else { (s[m - 1] + s[m]) / 2.0 }
}

/// The probe tokens of an analysis' tokens: positions and repeats count within each segment.
pub fn probe_of(tokens: &[TokenInfo]) -> Vec<ProbeToken> {
    let mut out = Vec::with_capacity(tokens.len());
    for seg in tokens.chunk_by(|x, y| x.segment == y.segment) {
        let ids: Vec<u32> = seg.iter().map(|t| t.id).collect();
        let cats: Vec<Category> = seg.iter().map(|t| t.category).collect();
        out.extend(probe_tokens(&ids, &cats));
    }
    out
}

/// Each token's top group per layer (`tops[layer][token]`) from the routing an analysis recorded
/// (`Analysis::routing`; ties to the lower group, as in the top-k mask).
pub fn top_groups(a: &Analysis) -> Vec<Vec<usize>> {
    a.routing.iter().map(|r| (0..r.t.min(a.tokens.len())).map(|i| top_k_indices(r.row(i), 1)[0]).collect()).collect()
}

/// The structure of every layer from each token's top group per layer (`tops[layer][token]`,
/// each in 0..groups; a layer may cover a prefix of the tokens). `routed[layer]` says whether
/// the adapter routes the layer (a layer past its end counts as routed).
pub fn of_tops(tokens: &[TokenInfo], tops: &[Vec<usize>], groups: usize, routed: &[bool]) -> Structure {
    let probe = probe_of(tokens);
    let layers = tops
        .iter()
        .enumerate()
        .map(|(l, top)| {
            let n = top.len().min(probe.len());
            LayerStructure { routed: routed.get(l).copied().unwrap_or(true), ..layer_structure(l, &top[..n], groups, &probe[..n]) }
        })
        .collect();
    Structure { tokens: probe.len(), groups, layers }
}

/// The structure of every layer of an analysis (its tokens, their categories, and the routing
/// it recorded: `Analysis::routing`). Positions and repeats count within each segment.
pub fn of_analysis(a: &Analysis) -> Structure {
    of_tops(&a.tokens, &top_groups(a), a.groups, &a.routed_layers())
}

/// Tokens listed per centroid in the paper-form table.
pub const TABLE_TOKENS: usize = 5;

/// A token and how often it falls in a centroid's group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCount {
    pub text: String,
    pub count: usize,
}

/// One centroid of the paper-form table: "G4 punctuation 96% (`,` x55, `.` x24, `;` x4)".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CentroidRow {
    pub group: usize,
    /// Tokens whose top group this is, and their share of all tokens.
    pub tokens: usize,
    pub share: f64,
    /// The most frequent category among them and its share (None for an empty group).
    pub top_category: Option<Category>,
    pub purity: Option<f64>,
    /// >= `PURE_MIN_TOKENS` tokens and >= `PURE_SHARE` pure.
    pub pure: bool,
    /// The most frequent tokens (by id, shown by their first text), most frequent first, ties to
    /// the lower id; at most `TABLE_TOKENS`.
    pub top_tokens: Vec<TokenCount>,
}

/// The paper's section-5 table for one layer (the best: `Structure::best_layer`): what each
/// centroid's group holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaperTable {
    pub layer: usize,
    pub tokens: usize,
    /// Centroids >= 60% pure with >= 50 tokens, and NMI(top group, category) of the layer.
    pub pure60: usize,
    pub category_nmi: f64,
    pub rows: Vec<CentroidRow>,
}

/// A token's text as a table shows it: blanks and line breaks made visible.
pub fn shown_token(t: &str) -> String {
    t.chars()
        .map(|c| match c {
            ' ' => '·',
            '\n' => '¶',
            '\t' => '»',
            c => c,
        })
        .collect()
}

/// The paper-form table of `layer` from its tokens' top groups (`top[i]` in 0..groups, for a
/// prefix of `tokens`).
pub fn paper_table(layer: usize, top: &[usize], groups: usize, tokens: &[TokenInfo]) -> PaperTable {
    let n = top.len().min(tokens.len());
    let mut cats = vec![[0usize; Category::COUNT]; groups];
    let mut ids: Vec<HashMap<u32, usize>> = vec![HashMap::new(); groups];
    let mut text: HashMap<u32, &str> = HashMap::new();
    for (&g, t) in top[..n].iter().zip(tokens) {
        cats[g][t.category.index()] += 1;
        *ids[g].entry(t.id).or_default() += 1;
        text.entry(t.id).or_insert(&t.text);
    }
    let rows: Vec<CentroidRow> = (0..groups)
        .map(|g| {
            let size: usize = cats[g].iter().sum();
            // The first of the most frequent categories (in `Category::ALL` order).
            let top_cat = (size > 0).then(|| Category::ALL.into_iter().fold(Category::ALL[0], |b, c| if cats[g][c.index()] > cats[g][b.index()] { c } else { b }));
            let purity = top_cat.map(|c| cats[g][c.index()] as f64 / size as f64);
            let mut tops: Vec<(u32, usize)> = ids[g].iter().map(|(&id, &c)| (id, c)).collect();
            tops.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            CentroidRow {
                group: g,
                tokens: size,
                share: size as f64 / n.max(1) as f64,
                top_category: top_cat,
                purity,
                pure: size >= PURE_MIN_TOKENS && purity.is_some_and(|p| p >= PURE_SHARE),
                top_tokens: tops.into_iter().take(TABLE_TOKENS).map(|(id, count)| TokenCount { text: text[&id].to_string(), count }).collect(),
            }
        })
        .collect();
    let probe = probe_of(&tokens[..n]);
    let category_nmi = nmi(&top[..n], &probe.iter().map(|t| t.category.index()).collect::<Vec<_>>());
    PaperTable { layer, tokens: n, pure60: rows.iter().filter(|r| r.pure).count(), category_nmi, rows }
}

impl PaperTable {
    /// The table of the best layer of `s` (`Structure::best_layer`) from each token's top group
    /// per layer (`tops`, as given to `of_tops`). None without layers.
    pub fn best(s: &Structure, tops: &[Vec<usize>], tokens: &[TokenInfo]) -> Option<PaperTable> {
        let l = s.best_layer()?.layer;
        Some(paper_table(l, tops.get(l)?, s.groups, tokens))
    }

    /// The best layer's table of an analysis (its recorded routing).
    pub fn of_analysis(a: &Analysis, s: &Structure) -> Option<PaperTable> {
        Self::best(s, &top_groups(a), &a.tokens)
    }

    /// One row's top tokens as the paper lists them: "`,` x55, `.` x24".
    pub fn tokens_of(r: &CentroidRow) -> String {
        r.top_tokens.iter().map(|t| format!("`{}` x{}", shown_token(&t.text), t.count)).collect::<Vec<_>>().join(", ")
    }

    /// The table as text: a heading and one line per centroid, largest first, e.g.
    /// `G4  punctuation   96%  12.5%  (`,` x55, `.` x24, `;` x4)`; `*` marks a pure centroid.
    pub fn render(&self) -> String {
        let mut s = format!("layer {}: {} of {} centroids >= {:.0}% pure (>= {} tokens), NMI(group, category) {:.3}, {} tokens\n", self.layer, self.pure60, self.rows.len(), 100.0 * PURE_SHARE, PURE_MIN_TOKENS, self.category_nmi, self.tokens);
        let mut rows: Vec<&CentroidRow> = self.rows.iter().collect();
        rows.sort_by(|a, b| b.tokens.cmp(&a.tokens).then(a.group.cmp(&b.group)));
        for r in rows {
            let cat = r.top_category.map(|c| c.name()).unwrap_or("empty");
            let pur = r.purity.map(|p| format!("{:.0}%", 100.0 * p)).unwrap_or_else(|| "-".into());
            s += &format!("{}G{:<3} {:<12} {:>4}  {:>5.1}% of tokens  ({})\n", if r.pure { '*' } else { ' ' }, r.group, cat, pur, 100.0 * r.share, Self::tokens_of(r));
        }
        s
    }

    /// One row per centroid: layer, group, tokens, share, top category, purity, pure, the top
    /// tokens ("text xN" joined by spaces).
    pub fn to_csv(&self) -> String {
        let mut s = String::from("layer,group,tokens,share,top_category,purity,pure,top_tokens\n");
        for r in &self.rows {
            let tops = r.top_tokens.iter().map(|t| format!("{} x{}", shown_token(&t.text), t.count)).collect::<Vec<_>>().join(" ");
            s += &format!(
                "{},{},{},{:.6},{},{},{},{}\n",
                self.layer,
                r.group,
                r.tokens,
                r.share,
                r.top_category.map(|c| c.name()).unwrap_or(""),
                r.purity.map(|p| format!("{p:.6}")).unwrap_or_default(),
                r.pure,
                csv_field(&tops)
            );
        }
        s
    }
}

/// Structure as `analyze` and the Categories view report it: the adapter's per layer, its
/// untrained twin's on the same text (when computed), the medians over layers >= 1, the ratio
/// to the twin, and the best layer's paper-form table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StructureReport {
    pub adapter: Structure,
    /// The untrained twin (a random init with the adapter's config) on the same text, mode and k.
    pub twin: Option<Structure>,
    pub twin_seed: Option<u64>,
    /// Median over layers >= 1 of NMI(top group, category): the adapter's, its null's, the twin's.
    pub median_category_nmi: f64,
    pub median_category_null: f64,
    pub twin_median_category_nmi: Option<f64>,
    /// `Structure::against` the twin (issue 28's bar: median >= 2).
    pub vs_twin: Option<TwinComparison>,
    /// The largest dominance over layers (issue 28's bar: <= 1.3 / K).
    pub worst_dominance: f64,
    /// The best layer's paper-form table.
    pub table: Option<PaperTable>,
}

impl StructureReport {
    pub fn new(adapter: Structure, twin: Option<(Structure, u64)>, table: Option<PaperTable>) -> StructureReport {
        let (twin, twin_seed) = match twin {
            Some((t, s)) => (Some(t), Some(s)),
            None => (None, None),
        };
        StructureReport {
            median_category_nmi: adapter.median_from_layer_1(|l| l.category.value),
            median_category_null: adapter.median_from_layer_1(|l| l.category.null_mean),
            twin_median_category_nmi: twin.as_ref().map(|t| t.median_from_layer_1(|l| l.category.value)),
            vs_twin: twin.as_ref().map(|t| adapter.against(t)),
            worst_dominance: adapter.worst_dominance(),
            adapter,
            twin,
            twin_seed,
            table,
        }
    }

    /// The report of an analysis (its recorded routing) beside its twin's analysis of the same
    /// text, when given with the twin's seed.
    pub fn of_analysis(a: &Analysis, twin: Option<(&Analysis, u64)>) -> StructureReport {
        let s = of_analysis(a);
        let table = PaperTable::of_analysis(a, &s);
        StructureReport::new(s, twin.map(|(t, seed)| (of_analysis(t), seed)), table)
    }

    /// The twin's layer `l`, when computed.
    pub fn twin_layer(&self, l: usize) -> Option<&LayerStructure> {
        self.twin.as_ref().and_then(|t| t.layers.get(l))
    }

    /// One row per layer: the NMIs with their null means and maxima, purity, pure centroids and
    /// dominance, the twin's category NMI, null, purity, pure centroids and dominance (empty
    /// without a twin), and whether the adapter routes the layer.
    pub fn to_csv(&self) -> String {
        let mut s = String::from(
            "layer,nmi_category,nmi_category_null_mean,nmi_category_null_max,nmi_token,nmi_token_null_mean,nmi_position,nmi_position_null_mean,nmi_repeat,nmi_repeat_null_mean,purity,pure60,dominance,twin_nmi_category,twin_nmi_category_null_mean,twin_purity,twin_pure60,twin_dominance,ratio_to_twin,routed\n",
        );
        for (i, l) in self.adapter.layers.iter().enumerate() {
            s += &format!(
                "{},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{:.6},{},{:.6}",
                l.layer, l.category.value, l.category.null_mean, l.category.null_max, l.token.value, l.token.null_mean, l.position.value, l.position.null_mean, l.repeat.value, l.repeat.null_mean, l.purity, l.pure60, l.dominance
            );
            match self.twin_layer(i) {
                Some(t) => s += &format!(",{:.6},{:.6},{:.6},{},{:.6}", t.category.value, t.category.null_mean, t.purity, t.pure60, t.dominance),
                None => s += ",,,,,",
            }
            match self.vs_twin.as_ref().and_then(|v| v.per_layer.get(i)) {
                Some(r) => s += &format!(",{r:.6}"),
                None => s += ",",
            }
            s += &format!(",{}\n", l.routed);
        }
        s
    }

    /// A short summary: the medians over layers >= 1 against the twin, the best layer's pure
    /// centroids against the twin's, the worst dominance, and the best layer's table.
    pub fn summary(&self) -> String {
        let k = self.adapter.groups.max(1) as f64;
        let mut s = format!("structure over {} tokens, K = {}:\n", self.adapter.tokens, self.adapter.groups);
        let dense: Vec<String> = self.adapter.layers.iter().filter(|l| !l.routed).map(|l| l.layer.to_string()).collect();
        if !dense.is_empty() {
            s += &format!(
                "  the adapter routes {} of {} layers; layers {} attend densely and are left out of the medians, the best layer and the worst dominance\n",
                self.adapter.layers.len() - dense.len(),
                self.adapter.layers.len(),
                dense.join(", ")
            );
        }
        s += &format!("  median NMI(top group, category) over layers >= 1: {:.3} (null {:.3})", self.median_category_nmi, self.median_category_null);
        match (self.twin_median_category_nmi, &self.vs_twin) {
            (Some(t), Some(v)) => s += &format!("; untrained twin (seed {}) {:.3}; ratio {:.2}x (bar: 2x)\n", self.twin_seed.unwrap_or(0), t, v.median),
            _ => s += "; no untrained twin (--no-twin)\n",
        }
        let med = |f: fn(&LayerStructure) -> f64| self.adapter.median_from_layer_1(f);
        s += &format!(
            "  median over layers >= 1: NMI(token) {:.3} (null {:.3}), NMI(position) {:.3} (null {:.3}), NMI(repeat) {:.3} (null {:.3}), purity {:.3}",
            med(|l| l.token.value),
            med(|l| l.token.null_mean),
            med(|l| l.position.value),
            med(|l| l.position.null_mean),
            med(|l| l.repeat.value),
            med(|l| l.repeat.null_mean),
            med(|l| l.purity)
        );
        if let Some(t) = &self.twin {
            s += &format!(" (twin {:.3})", t.median_from_layer_1(|l| l.purity));
        }
        s.push('\n');
        if let Some(b) = self.adapter.best_layer() {
            s += &format!("  best layer {}: {} centroids >= 60% pure, NMI(category) {:.3} (null {:.3})", b.layer, b.pure60, b.category.value, b.category.null_mean);
            if let Some(t) = self.twin_layer(b.layer) {
                s += &format!("; twin there: {} pure, NMI {:.3}", t.pure60, t.category.value);
            }
            if let Some(t) = self.twin.as_ref().and_then(|t| t.best_layer()) {
                s += &format!("; twin's best layer {}: {} pure", t.layer, t.pure60);
            }
            s.push('\n');
        }
        s += &format!("  worst-layer dominance {:.3} (1/K = {:.3}, bar 1.3/K = {:.3})\n", self.worst_dominance, 1.0 / k, 1.3 / k);
        if let Some(t) = &self.table {
            s += "  paper-form table of the best layer:\n";
            for line in t.render().lines() {
                s += &format!("    {line}\n");
            }
        }
        s
    }
}

impl Structure {
    /// The layers the adapter routes (every layer, for an adapter that routes them all).
    pub fn routed(&self) -> impl Iterator<Item = &LayerStructure> {
        self.layers.iter().filter(|l| l.routed)
    }

    /// Median over the routed layers >= 1 (layer 0 sees token identity only) of `f`.
    pub fn median_from_layer_1(&self, f: impl Fn(&LayerStructure) -> f64) -> f64 {
        median(&self.routed().filter(|l| l.layer >= 1).map(f).collect::<Vec<_>>())
    }

    /// The routed layer with the most pure centroids, ties to the higher category NMI.
    pub fn best_layer(&self) -> Option<&LayerStructure> {
        self.routed().max_by(|a, b| a.pure60.cmp(&b.pure60).then(a.category.value.total_cmp(&b.category.value)))
    }

    /// The largest dominance over the routed layers (issue 28's bar: <= 1.3 / K).
    pub fn worst_dominance(&self) -> f64 {
        self.routed().map(|l| l.dominance).fold(0.0, f64::max)
    }

    /// This adapter beside its untrained twin on the same text: per layer the ratio of the
    /// category NMIs, and the ratio of the medians over layers >= 1.
    pub fn against(&self, twin: &Structure) -> TwinComparison {
        let per_layer = self.layers.iter().zip(&twin.layers).map(|(a, b)| a.category.value / b.category.value.max(1e-12)).collect();
        let median = self.median_from_layer_1(|l| l.category.value) / twin.median_from_layer_1(|l| l.category.value).max(1e-12);
        TwinComparison { per_layer, median }
    }
}

/// `Structure::against`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TwinComparison {
    /// Per layer, NMI(top group, category) of the adapter / of its twin.
    pub per_layer: Vec<f64>,
    /// The ratio of the medians over layers >= 1 (issue 28's bar: >= 2).
    pub median: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nmi_is_one_for_a_relabelling_and_zero_for_independence() {
        let a = [0, 0, 1, 1, 2, 2];
        assert!((nmi(&a, &[5, 5, 3, 3, 9, 9]) - 1.0).abs() < 1e-12);
        // Each group holds one of each label: no information.
        assert!(nmi(&[0, 0, 1, 1], &[0, 1, 0, 1]).abs() < 1e-12);
        assert_eq!(nmi(&[0, 0, 0], &[1, 2, 3]), 0.0);
        // Against a hand computation: a = [0,0,1,1], b = [0,0,0,1]: I = H(b) - H(b|a).
        let (ha, hb) = (2f64.ln(), -(0.75f64 * 0.75f64.ln() + 0.25 * 0.25f64.ln()));
        let i = hb - 0.5 * 2f64.ln();
        assert!((nmi(&[0, 0, 1, 1], &[0, 0, 0, 1]) - 2.0 * i / (ha + hb)).abs() < 1e-12);
    }

    #[test]
    fn the_null_is_low_for_a_real_dependence_and_high_for_many_labels() {
        // Groups that follow the label: far above the null.
        let labels: Vec<usize> = (0..600).map(|i| i % 3).collect();
        let groups = labels.clone();
        let m = nmi_with_null(&groups, &labels, 1);
        assert!(m.value > 0.99 && m.null_max < 0.05, "{m:?}");
        // A label of its own per item (a token id that never repeats): any grouping has a high
        // NMI, and so does its null; the excess is what tells.
        let ids: Vec<usize> = (0..600).collect();
        let g: Vec<usize> = (0..600).map(|i| (i * 7) % 8).collect();
        let m = nmi_with_null(&g, &ids, 2);
        assert!(m.null_mean > 0.3 && m.excess().abs() < 1e-9, "{m:?}");
    }

    #[test]
    fn layer_structure_counts_pure_centroids_and_dominance() {
        let cats = [Category::Punctuation, Category::Noun];
        let tokens: Vec<ProbeToken> = (0..200).map(|i| ProbeToken { id: (i % 2) as u32, position: i, category: cats[i % 2], repeat: i >= 2 }).collect();
        // Group 0 holds the punctuation, group 1 the nouns, group 2 nothing.
        let top: Vec<usize> = (0..200).map(|i| i % 2).collect();
        let s = layer_structure(3, &top, 3, &tokens);
        assert_eq!((s.pure60, s.purity, s.dominance), (2, 1.0, 0.5));
        assert!(s.category.value > 0.99);
        assert_eq!(position_bucket(0), 0);
        assert_eq!((position_bucket(1), position_bucket(3), position_bucket(4)), (1, 2, 3));
        let p = probe_tokens(&[5, 6, 5], &[Category::Noun; 3]);
        assert_eq!(p.iter().map(|t| t.repeat).collect::<Vec<_>>(), vec![false, false, true]);
    }

    /// A layer the adapter does not route (it attends densely) is measured, but counts neither
    /// as the best layer nor in the medians and the worst dominance; the CSV and the summary
    /// say which layers they are.
    #[test]
    fn unrouted_layers_are_left_out_of_the_summaries() {
        let cats = [Category::Punctuation, Category::Noun];
        let tokens: Vec<TokenInfo> = (0..200)
            .map(|i| TokenInfo { id: (i % 2) as u32, text: [",", " house"][i % 2].into(), start: i, end: i + 1, segment: 0, category: cats[i % 2], piece: Default::default() })
            .collect();
        let by_category: Vec<usize> = (0..200).map(|i| i % 2).collect();
        // Layers 0 and 1 group by category, layer 2 puts every token in group 0, layer 3 mixes
        // the categories evenly over four groups.
        let tops = vec![by_category.clone(), by_category, vec![0; 200], (0..200).map(|i| (i / 2) % 4).collect()];
        let every = of_tops(&tokens, &tops, 4, &[]);
        assert_eq!((every.best_layer().unwrap().layer, every.worst_dominance()), (1, 1.0));
        let s = of_tops(&tokens, &tops, 4, &[true, false, false, true]);
        assert_eq!(s.layers.iter().map(|l| l.routed).collect::<Vec<_>>(), vec![true, false, false, true]);
        // The unrouted layers are still measured.
        assert!(s.layers[1].category.value > 0.99 && (s.layers[2].dominance - 1.0).abs() < 1e-12);
        assert_eq!(s.best_layer().unwrap().layer, 0);
        assert!((s.worst_dominance() - 0.5).abs() < 1e-12);
        // The median over routed layers >= 1 is layer 3's alone (no category information).
        assert!((s.median_from_layer_1(|l| l.category.value) - s.layers[3].category.value).abs() < 1e-12);
        assert!(s.layers[3].category.value < 0.01);
        let r = StructureReport::new(s, None, None);
        assert!((r.worst_dominance - 0.5).abs() < 1e-12);
        assert!(r.summary().contains("the adapter routes 2 of 4 layers; layers 1, 2 attend densely"), "{}", r.summary());
        let csv = r.to_csv();
        let rows: Vec<&str> = csv.lines().collect();
        assert!(rows[0].ends_with(",ratio_to_twin,routed"));
        assert!(rows[1].ends_with(",true") && rows[2].ends_with(",false") && rows[3].ends_with(",false") && rows[4].ends_with(",true"), "{csv}");
    }

    /// The paper-form table on a constructed case: a punctuation group (`,` x55, `.` x24,
    /// `;` x4), a group 60% nouns, a small determiner group and an empty one; the table is
    /// drawn for the best layer (the one with pure centroids), not a layer with one group.
    #[test]
    fn paper_table_of_the_best_layer() {
        let mut tokens = Vec::new();
        let mut top1 = Vec::new();
        let mut push = |text: &str, id: u32, category: Category, group: usize, n: usize| {
            for _ in 0..n {
                let i = tokens.len();
                tokens.push(TokenInfo { id, text: text.into(), start: i, end: i + 1, segment: i / 100, category, piece: Default::default() });
                top1.push(group);
            }
        };
        push(",", 11, Category::Punctuation, 0, 55);
        push(".", 12, Category::Punctuation, 0, 24);
        push(";", 13, Category::Punctuation, 0, 4);
        push(" house", 20, Category::Noun, 1, 35);
        push(" garden", 21, Category::Noun, 1, 25);
        push(" ran", 30, Category::Verb, 1, 40);
        push(" the", 40, Category::Determiner, 2, 30);
        let n = tokens.len();
        assert_eq!(n, 213);
        // Layer 0: every token in group 0; layer 1: the groups above.
        let tops = vec![vec![0; n], top1];
        let s = of_tops(&tokens, &tops, 4, &[]);
        assert_eq!((s.layers[0].pure60, s.layers[1].pure60), (0, 2));
        let t = PaperTable::best(&s, &tops, &tokens).unwrap();
        assert_eq!((t.layer, t.tokens, t.pure60, t.rows.len()), (1, 213, 2, 4));
        assert!((t.category_nmi - s.layers[1].category.value).abs() < 1e-12);
        let g0 = &t.rows[0];
        assert_eq!((g0.tokens, g0.top_category, g0.purity, g0.pure), (83, Some(Category::Punctuation), Some(1.0), true));
        assert!((g0.share - 83.0 / 213.0).abs() < 1e-12);
        let want = [(",", 55), (".", 24), (";", 4)].map(|(t, c)| TokenCount { text: t.into(), count: c });
        assert_eq!(g0.top_tokens, want);
        let g1 = &t.rows[1];
        assert_eq!((g1.tokens, g1.top_category, g1.purity, g1.pure), (100, Some(Category::Noun), Some(0.6), true));
        assert_eq!(g1.top_tokens.iter().map(|t| (t.text.as_str(), t.count)).collect::<Vec<_>>(), vec![(" ran", 40), (" house", 35), (" garden", 25)]);
        // 30 determiners: pure, but too few tokens to count.
        let g2 = &t.rows[2];
        assert_eq!((g2.tokens, g2.top_category, g2.purity, g2.pure), (30, Some(Category::Determiner), Some(1.0), false));
        let g3 = &t.rows[3];
        assert_eq!((g3.tokens, g3.top_category, g3.purity, g3.pure, g3.top_tokens.len()), (0, None, None, false, 0));
        let text = t.render();
        assert!(text.contains("*G0   punctuation  100%   39.0% of tokens  (`,` x55, `.` x24, `;` x4)"), "{text}");
        assert!(text.contains("G1   noun          60%") && text.contains("`·ran` x40"), "{text}");
        assert!(text.contains("G3   empty"), "{text}");
        let csv = t.to_csv();
        assert_eq!(csv.lines().count(), 5);
        assert!(csv.contains("1,0,83,0.389671,punctuation,1.000000,true,\", x55 . x24 ; x4\""), "{csv}");
        // The report: the twin (every token in one group) scores zero, so the ratio is large.
        let twin = of_tops(&tokens, &[vec![0; n], vec![0; n]], 4, &[]);
        let r = StructureReport::new(s.clone(), Some((twin, 0)), Some(t));
        assert_eq!(r.twin_median_category_nmi, Some(0.0));
        assert!(r.median_category_nmi > 0.5 && r.vs_twin.as_ref().unwrap().median > 1e6);
        assert!((r.worst_dominance - 1.0).abs() < 1e-12);
        assert_eq!(r.to_csv().lines().count(), 3);
        assert!(r.summary().contains("paper-form table of the best layer"));
        let json = serde_json::to_string(&r).unwrap();
        // (serde_json's default float parsing may differ from the written value in the last bit.)
        let back: StructureReport = serde_json::from_str(&json).unwrap();
        let t = back.table.unwrap();
        assert_eq!((t.layer, t.pure60, &t.rows[0].top_tokens, back.twin_seed, back.adapter.layers.len()), (1, 2, &want.to_vec(), Some(0), 2));
    }
}
