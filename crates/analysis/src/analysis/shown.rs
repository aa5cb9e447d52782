//! An analysis as the app shows it, made once here from `Analysis` for the GUI's views and for
//! every export (`export`), so that no caller rebuilds it: per layer each token's top group (the
//! raw centroid index) and top-k set (a bitmask), a short label per group, and the shown
//! numbering (`align`): the number each raw group is shown by, matched across layers (or to a
//! reference run) so that a number keeps meaning the same tokens.

use super::identity::{group_name, GroupIds, Matched};
use super::{align, Analysis, TokenInfo};
use super::stats::TokenRouting;
use std::collections::HashMap;

pub use super::identity::Numbering;

#[derive(Debug, Clone)]
pub struct ShownAnalysis {
    pub analysis: Analysis,
    /// `argmax[layer][token]`: the token's top group (raw index).
    pub argmax: Vec<Vec<u8>>,
    /// `masks[layer][token]`: bitmask of the token's top-k groups (raw indices).
    pub masks: Vec<Vec<u64>>,
    /// `labels[layer][group]`: a short automatic label per raw group.
    pub labels: Vec<Vec<String>>,
    /// `aligned[layer][group]`: the number raw group `group` is shown by, matched across layers
    /// (`align::chain`), or, after `aligned_to`, to a reference run's numbers layer by layer.
    pub aligned: Vec<Vec<usize>>,
    /// What the numbers were matched to, after `aligned_to` or `numbered` (the reference run,
    /// said in legends and exports).
    pub aligned_to: Option<String>,
}

impl ShownAnalysis {
    /// Derives what is shown from an analysis: each layer's top groups and top-k sets (from the
    /// per-token routing it kept, else from its raw routing), the labels, the numbering.
    pub fn new(analysis: Analysis) -> ShownAnalysis {
        let k = analysis.k;
        let (argmax, masks): (Vec<Vec<u8>>, Vec<Vec<u64>>) = analysis
            .layers
            .iter()
            .enumerate()
            .map(|(l, st)| match (&st.tokens, analysis.routing.get(l)) {
                (Some(t), _) => (t.iter().map(|r| r.top[0] as u8).collect(), t.iter().map(|r| r.top.iter().fold(0u64, |m, &g| m | 1 << g)).collect()),
                (None, Some(r)) => ((0..r.t).map(|i| r.top_groups(i, 1)[0] as u8).collect(), r.topk_masks(k)),
                (None, None) => (Vec::new(), Vec::new()),
            })
            .unzip();
        // Labels by linguistic category ("punctuation 96%") from the centroid profiles; the most
        // frequent token where a layer has no profile.
        let groups = analysis.groups;
        let labels = argmax
            .iter()
            .enumerate()
            .map(|(l, a)| match analysis.profiles.get(l) {
                Some(p) if p.centroids.len() == groups => p.centroids.iter().map(|c| c.label.clone()).collect(),
                _ => group_labels(&analysis.tokens, a, groups),
            })
            .collect();
        ShownAnalysis::from_parts(analysis, argmax, masks, labels)
    }

    /// An analysis with its top groups, top-k sets and labels already derived (read back from a
    /// cache), numbered across layers.
    pub fn from_parts(analysis: Analysis, argmax: Vec<Vec<u8>>, masks: Vec<Vec<u64>>, labels: Vec<Vec<String>>) -> ShownAnalysis {
        let aligned = align::chain(&masks, analysis.groups);
        ShownAnalysis { analysis, argmax, masks, labels, aligned, aligned_to: None }
    }

    /// The same analysis with its numbers matched, layer by layer, to `reference`'s (the same
    /// tokens run with another adapter or mode), so that a number keeps meaning the same tokens.
    pub fn aligned_to(&self, reference: &ShownAnalysis) -> ShownAnalysis {
        ShownAnalysis {
            aligned: align::to_reference(&reference.masks, &reference.aligned, &self.masks, self.groups()),
            aligned_to: Some(reference.analysis.adapter.clone()),
            ..self.clone()
        }
    }

    /// The same analysis numbered by `ids` (`identity`: the identity's numbers for its own
    /// adapter, else a match to its reference run), `adapter` naming this run's adapter as `ids`
    /// names its own. `None`: nothing to match by; the analysis keeps its own chain.
    pub fn numbered(&self, ids: &GroupIds, adapter: &str) -> Option<(ShownAnalysis, Matched)> {
        let (maps, how) = ids.numbers_for(adapter, self.groups(), &self.token_ids(), &self.masks)?;
        let to = match how {
            Matched::SameAdapter if !ids.pinned => ids.matched_to.clone(),
            _ => Some(ids.source.clone()),
        };
        Some((ShownAnalysis { aligned: maps, aligned_to: to, ..self.clone() }, how))
    }

    /// The analysed tokens' ids.
    pub fn token_ids(&self) -> Vec<u32> {
        self.analysis.tokens.iter().map(|t| t.id).collect()
    }

    /// The name group `g` (raw index) of `layer` goes by: "g3" (its shown number), or with `raw`
    /// "c5" (the centroid's own index), as every view and export names it.
    pub fn group_name(&self, layer: usize, g: usize, raw: bool) -> String {
        group_name(self.shown_group(layer, g, raw), Numbering::raw_if(raw))
    }

    pub fn tokens(&self) -> usize {
        self.analysis.tokens.len()
    }
    pub fn layers(&self) -> usize {
        self.analysis.layers.len()
    }
    pub fn groups(&self) -> usize {
        self.analysis.groups
    }
    pub fn window(&self) -> usize {
        self.analysis.window
    }
    /// The adapter's attention sinks [ours]: the first `sink` tokens of each segment are
    /// always attendable.
    pub fn sink(&self) -> usize {
        self.analysis.sink
    }

    /// The number group `g` of `layer` is shown by: matched (`raw` false), or raw.
    pub fn shown_group(&self, layer: usize, g: usize, raw: bool) -> usize {
        if raw {
            return g;
        }
        self.aligned.get(layer).and_then(|m| m.get(g)).copied().unwrap_or(g)
    }

    /// Each raw group's number in `layer` (`shown[g]`), and its inverse (`raw_of[s]`: None
    /// where no raw group has number `s`, as in a run aligned to one of larger K).
    pub fn numbers(&self, layer: usize, numbering: Numbering) -> (Vec<usize>, Vec<Option<usize>>) {
        let raw = numbering == Numbering::Raw;
        let shown: Vec<usize> = (0..self.groups()).map(|g| self.shown_group(layer, g, raw)).collect();
        let n = shown.iter().map(|&s| s + 1).max().unwrap_or(0).max(self.groups());
        let mut raw_of = vec![None; n];
        for (g, &s) in shown.iter().enumerate() {
            raw_of[s] = Some(g);
        }
        (shown, raw_of)
    }

    /// The raw groups of `layer` in the order they are shown (by number).
    pub fn groups_in_shown_order(&self, layer: usize, raw: bool) -> Vec<usize> {
        let mut v: Vec<usize> = (0..self.groups()).collect();
        v.sort_by_key(|&g| self.shown_group(layer, g, raw));
        v
    }

    /// Token `i`'s routing in `layer`, when the analysis kept it.
    pub fn token_routing(&self, layer: usize, i: usize) -> Option<&TokenRouting> {
        self.analysis.layers.get(layer)?.tokens.as_ref()?.get(i)
    }
}

/// A short label per group: its most frequent token and that token's share of the group.
pub fn group_labels(tokens: &[TokenInfo], argmax: &[u8], groups: usize) -> Vec<String> {
    let mut counts: Vec<HashMap<&str, usize>> = vec![HashMap::new(); groups];
    let mut size = vec![0usize; groups];
    for (t, &g) in tokens.iter().zip(argmax) {
        *counts[g as usize].entry(t.text.as_str()).or_default() += 1;
        size[g as usize] += 1;
    }
    counts
        .iter()
        .zip(&size)
        .map(|(c, &n)| {
            let best = c.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)));
            match best {
                Some((t, &k)) if n > 0 => format!("{:?} {:.0}%", t.trim_end_matches('\n'), 100.0 * k as f64 / n as f64),
                _ => "empty".into(),
            }
        })
        .collect()
}
