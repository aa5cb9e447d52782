//! Corpus statistics of every centroid, accumulated one document at a time.
//!
//! A token is a *member* of the group of its largest membership (ties to the lower index), as in
//! `analysis::categories::layer_profile`, so a centroid's member count, category counts and top
//! tokens here are that profile's, summed over the corpus. A group *holds* a token when it is one
//! of the token's top-k groups (the groups the mask lets it attend through); the membership
//! histogram is over the tokens a group holds, since the index keeps only the top-k memberships.

use super::document::DocRouting;
use crate::analysis::categories::Category;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Bins of the membership histogram over [0, 1] (a membership of 1 falls in the last).
pub const HIST_BINS: usize = 20;
/// Highest-membership examples kept per centroid.
pub const TOP_EXAMPLES: usize = 50;

/// One token of the corpus: the `doc`-th document added (0-based), position `pos` in it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Example {
    pub doc: u32,
    pub pos: u32,
    pub membership: f32,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct CentroidStats {
    /// Tokens whose largest membership is this group.
    pub members: u64,
    /// Tokens that have this group among their top k.
    pub held: u64,
    /// Sum of this group's membership over the tokens it holds.
    pub held_mass: f64,
    /// Members per category, in `Category::ALL` order.
    pub by_category: Vec<u64>,
    /// Memberships of the tokens the group holds, in `HIST_BINS` equal bins over [0, 1].
    pub histogram: Vec<u64>,
    /// Members per token id.
    pub token_counts: HashMap<u32, u64>,
    /// The members of highest membership, highest first (ties: earlier document, then earlier
    /// position); at most `TOP_EXAMPLES`.
    pub examples: Vec<Example>,
}

/// The statistics of a whole corpus.
#[derive(Debug, Clone, PartialEq)]
pub struct CorpusStats {
    pub n_layers: usize,
    pub groups: usize,
    pub k: usize,
    pub documents: u32,
    pub tokens: u64,
    /// Tokens per id over the corpus (the base rate a centroid's make-up is read against).
    pub token_totals: HashMap<u32, u64>,
    /// Tokens per category over the corpus, in `Category::ALL` order.
    pub category_totals: Vec<u64>,
    /// `centroids[layer][group]`.
    pub centroids: Vec<Vec<CentroidStats>>,
    /// Tokens that are members of group `ga` at layer `la` and of `gb` at `lb`, at
    /// `comembership_index(la, ga, lb, gb)` (both orders are stored).
    pub comembership: Vec<u64>,
}

fn hist_bin(m: f32) -> usize {
    ((m.clamp(0.0, 1.0) * HIST_BINS as f32) as usize).min(HIST_BINS - 1)
}

/// Highest membership first; among equals the earlier document, then the earlier position.
fn example_order(a: &Example, b: &Example) -> std::cmp::Ordering {
    b.membership.total_cmp(&a.membership).then(a.doc.cmp(&b.doc)).then(a.pos.cmp(&b.pos))
}

impl CorpusStats {
    /// The bytes `new(n_layers, groups, _)` allocates before any document is added (the
    /// co-membership table, (layers x groups)^2 counts, is most of it); `None` when that does not
    /// even fit a u64. Checked against the memory available before `new` is called with counts
    /// read from an untrusted file.
    pub fn bytes_needed(n_layers: usize, groups: usize) -> Option<u64> {
        let cells = (n_layers as u64).checked_mul(groups as u64)?;
        let per_centroid = (std::mem::size_of::<CentroidStats>() + 8 * (Category::COUNT + HIST_BINS)) as u64;
        cells.checked_mul(cells)?.checked_mul(8)?.checked_add(cells.checked_mul(per_centroid)?)
    }

    pub fn new(n_layers: usize, groups: usize, k: usize) -> CorpusStats {
        let c = CentroidStats { by_category: vec![0; Category::COUNT], histogram: vec![0; HIST_BINS], ..Default::default() };
        CorpusStats {
            n_layers,
            groups,
            k,
            documents: 0,
            tokens: 0,
            token_totals: HashMap::new(),
            category_totals: vec![0; Category::COUNT],
            centroids: vec![vec![c; groups]; n_layers],
            comembership: vec![0; n_layers * groups * n_layers * groups],
        }
    }

    pub fn comembership_index(&self, la: usize, ga: usize, lb: usize, gb: usize) -> usize {
        ((la * self.groups + ga) * self.n_layers + lb) * self.groups + gb
    }

    /// Adds the next document (its index is the number added before it).
    pub fn add(&mut self, doc: &DocRouting) {
        let d = self.documents;
        self.documents += 1;
        let t = doc.len();
        self.tokens += t as u64;
        for (&id, &c) in doc.ids.iter().zip(&doc.categories) {
            *self.token_totals.entry(id).or_default() += 1;
            self.category_totals[c.index()] += 1;
        }
        let k = doc.k;
        for (l, layer) in doc.layers.iter().enumerate() {
            let cs = &mut self.centroids[l];
            for i in 0..t {
                for s in 0..k {
                    let (g, m) = (layer.groups[i * k + s] as usize, layer.memberships[i * k + s]);
                    let c = &mut cs[g];
                    c.held += 1;
                    c.held_mass += m as f64;
                    c.histogram[hist_bin(m)] += 1;
                    if s == 0 {
                        c.members += 1;
                        c.by_category[doc.categories[i].index()] += 1;
                        *c.token_counts.entry(doc.ids[i]).or_default() += 1;
                        c.examples.push(Example { doc: d, pos: i as u32, membership: m });
                        // Sorted and cut back in batches: a bounded buffer without a heap per centroid.
                        if c.examples.len() >= 8 * TOP_EXAMPLES {
                            c.examples.sort_by(example_order);
                            c.examples.truncate(TOP_EXAMPLES);
                        }
                    }
                }
            }
        }
        for cs in &mut self.centroids {
            for c in cs {
                c.examples.sort_by(example_order);
                c.examples.truncate(TOP_EXAMPLES);
            }
        }
        // Co-membership: every pair of layers, per token (both orders, so a lookup reads one row).
        let (nl, kk) = (self.n_layers, self.groups);
        let mut tops = vec![0usize; nl];
        for i in 0..t {
            for (l, top) in tops.iter_mut().enumerate() {
                *top = doc.top(l, i);
            }
            for la in 0..nl {
                let base = (la * kk + tops[la]) * nl;
                for (lb, &gb) in tops.iter().enumerate() {
                    self.comembership[(base + lb) * kk + gb] += 1;
                }
            }
        }
    }

    /// Members of `(la, ga)` that are also members of `(lb, gb)`.
    pub fn comembers(&self, la: usize, ga: usize, lb: usize, gb: usize) -> u64 {
        self.comembership[self.comembership_index(la, ga, lb, gb)]
    }
}
