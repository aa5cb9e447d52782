//! One identity per group: the number (and so the colour) each raw centroid of each layer is
//! shown by, held once and handed to every surface that names a group (the app's views, their
//! exports, the Centroids view, Intervene, Generate; the CLI's statistics), so that one group
//! has one name everywhere.
//!
//! A centroid is a fixed vector of its adapter: run with another k, mode, Sinkhorn variant or
//! text, or generating, centroid c of layer l is still the same centroid. The numbers are
//! therefore established once per adapter, from a run's top-k sets (`align::chain`: each layer
//! matched to the previous one by token overlap), and reused as they are for every later run of
//! the same adapter. A run of *another* adapter is matched to the identity's reference run by
//! token overlap (`align::to_reference`) over the tokens both runs share from the start; with no
//! shared tokens it keeps its own chain. A pinned identity never moves to another adapter: every
//! later run is numbered by its match to the pinned run.
//!
//! Raw indices (the centroids' own) are named `c5`, shown numbers `g3` (`group_name`), so that a
//! raw index is never read as a shown number.

use super::align;

/// Which group numbers a view or an export uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Numbering {
    /// Matched across layers (`align::chain`) or to a reference run (`align::to_reference`).
    #[default]
    Shown,
    /// The centroids' own indices.
    Raw,
}

impl Numbering {
    /// `Raw` when `raw` (the GUI's "raw group numbers" setting), else `Shown`.
    pub fn raw_if(raw: bool) -> Numbering {
        if raw {
            Numbering::Raw
        } else {
            Numbering::Shown
        }
    }

    /// What the numbers are, as the exports say it.
    pub fn note(self) -> &'static str {
        match self {
            Numbering::Raw => "raw centroid indices, named c0, c1, ... (as shown with raw group numbers ticked)",
            Numbering::Shown => "shown, named g0, g1, ...: one number per centroid of the adapter (analysis::identity), matched across layers (align::chain) or to the reference run, as on screen; group_raw gives the centroid index",
        }
    }
}


/// The name of group `number` in `numbering`: "g3" for a shown number, "c5" for a raw centroid
/// index. Every surface names groups through this.
pub fn group_name(number: usize, numbering: Numbering) -> String {
    match numbering {
        Numbering::Shown => format!("g{number}"),
        Numbering::Raw => format!("c{number}"),
    }
}

/// How a run got its numbers from a `GroupIds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Matched {
    /// The identity's own adapter: its numbers as they are.
    SameAdapter,
    /// Another adapter, matched by token overlap to the reference run on `tokens` shared tokens.
    ByTokens { tokens: usize },
}

/// The numbering of one adapter's groups, and the run it was matched on.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupIds {
    /// What names the adapter's weights (the SHA-256 of its files, or any key that changes with
    /// them).
    pub adapter: String,
    /// The adapter's K.
    pub groups: usize,
    /// `maps[layer][raw]`: the number raw centroid `raw` of `layer` is shown by.
    pub maps: Vec<Vec<usize>>,
    /// The reference run's token ids and per-layer top-k sets, for matching another adapter's
    /// run on the same tokens.
    pub tokens: Vec<u32>,
    pub masks: Vec<Vec<u64>>,
    /// What the numbers come from, as legends and exports say it ("top-2 of sample.txt,
    /// adapter smollm2-135m-k8").
    pub source: String,
    /// Pinned by the user: kept when the adapter changes.
    pub pinned: bool,
    /// Where these numbers were matched from another adapter's run: that run (its `source`),
    /// which every later run of this adapter names as its reference too.
    pub matched_to: Option<String>,
}

/// Fewer shared tokens than this match nothing.
pub const MIN_SHARED_TOKENS: usize = 16;

impl GroupIds {
    /// The identity a run establishes: its own chain across layers.
    pub fn from_run(adapter: &str, groups: usize, tokens: &[u32], masks: &[Vec<u64>], source: &str) -> GroupIds {
        GroupIds { adapter: adapter.to_string(), groups, maps: align::chain(masks, groups), tokens: tokens.to_vec(), masks: masks.to_vec(), source: source.to_string(), pinned: false, matched_to: None }
    }

    /// The numbers of a run of `adapter` (K `groups`) on `tokens` with top-k sets `masks`, by
    /// this identity: its maps for its own adapter (any k, mode or text), else a match to its
    /// reference run over the tokens both share from the start. `None`: nothing to match by
    /// (another adapter on other tokens, or a layer count that differs).
    pub fn numbers_for(&self, adapter: &str, groups: usize, tokens: &[u32], masks: &[Vec<u64>]) -> Option<(Vec<Vec<usize>>, Matched)> {
        if masks.len() != self.maps.len() {
            return None;
        }
        if adapter == self.adapter && groups == self.groups {
            return Some((self.maps.clone(), Matched::SameAdapter));
        }
        let shared = self.tokens.iter().zip(tokens).take_while(|(a, b)| a == b).count();
        // Layers the adapter leaves unrouted have no sets: the longest layer counts.
        let longest = |m: &[Vec<u64>]| m.iter().map(Vec::len).max().unwrap_or(0);
        let shared = shared.min(longest(&self.masks)).min(longest(masks));
        if shared < MIN_SHARED_TOKENS {
            return None;
        }
        let cut = |m: &[Vec<u64>]| m.iter().map(|l| l[..shared.min(l.len())].to_vec()).collect::<Vec<_>>();
        let maps = align::to_reference(&cut(&self.masks), &self.maps, &cut(masks), groups);
        Some((maps, Matched::ByTokens { tokens: shared }))
    }

    /// The number raw centroid `raw` of `layer` is shown by (`raw` itself outside the maps).
    pub fn number(&self, layer: usize, raw: usize) -> usize {
        self.maps.get(layer).and_then(|m| m.get(raw)).copied().unwrap_or(raw)
    }

    /// The raw centroid of `layer` shown as `number`.
    pub fn raw_of(&self, layer: usize, number: usize) -> Option<usize> {
        self.maps.get(layer)?.iter().position(|&n| n == number)
    }

    /// The identity of a run of another adapter numbered by this one (`maps`): the later runs
    /// of that adapter keep these numbers, and name this identity's run as their reference.
    pub fn moved_to(&self, adapter: &str, groups: usize, maps: Vec<Vec<usize>>, tokens: &[u32], masks: &[Vec<u64>], source: &str) -> GroupIds {
        GroupIds {
            adapter: adapter.to_string(),
            groups,
            maps,
            tokens: tokens.to_vec(),
            masks: masks.to_vec(),
            source: source.to_string(),
            pinned: false,
            matched_to: Some(self.matched_to.clone().unwrap_or_else(|| self.source.clone())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(argmax: &[usize], perm: &[usize]) -> Vec<u64> {
        argmax.iter().map(|&g| 1u64 << perm[g]).collect()
    }

    /// The same adapter keeps its numbers whatever its tokens' sets are now (another k or
    /// text); another adapter on the same tokens is matched by overlap; on other tokens it is
    /// not matched at all.
    #[test]
    fn one_adapter_keeps_its_numbers_and_another_is_matched() {
        let argmax: Vec<usize> = (0..40).map(|i| (i * 7 + i / 5) % 4).collect();
        let tokens: Vec<u32> = (0..40).collect();
        let l0 = run(&argmax, &[0, 1, 2, 3]);
        let l1 = run(&argmax, &[2, 0, 3, 1]);
        let ids = GroupIds::from_run("A", 4, &tokens, &[l0.clone(), l1.clone()], "ref");
        // Same adapter, other sets (a shuffled text): the maps as they are.
        let other: Vec<u64> = l1.iter().rev().cloned().collect();
        let (m, how) = ids.numbers_for("A", 4, &[9; 40], &[other.clone(), other]).unwrap();
        assert_eq!(how, Matched::SameAdapter);
        assert_eq!(m, ids.maps);
        // Another adapter whose raw groups are a permutation of the reference's, on the same
        // tokens: each of its groups gets the number of the reference group holding its tokens.
        let perm = [3usize, 2, 1, 0];
        let b0 = run(&argmax, &perm);
        let (m, how) = ids.numbers_for("B", 4, &tokens, &[b0.clone(), b0]).unwrap();
        assert_eq!(how, Matched::ByTokens { tokens: 40 });
        for g in 0..4 {
            assert_eq!(m[0][perm[g]], ids.number(0, g));
            assert_eq!(ids.raw_of(0, m[0][perm[g]]), Some(g));
        }
        // Another adapter on other tokens: nothing to match by.
        assert!(ids.numbers_for("B", 4, &[99; 40], &[l0.clone(), l0]).is_none());
        assert_eq!(group_name(3, Numbering::Shown), "g3");
        assert_eq!(group_name(3, Numbering::Raw), "c3");
    }
}
