//! Per-layer centroid profiles: which categories and tokens each centroid's group holds.
//!
//! A token belongs to the group of its largest membership (ties to the lower index, as in the
//! top-k mask). Per centroid we count tokens by category (and also sum membership mass by
//! category, which counts every token fractionally in every group), take the purity (share of its
//! top category), its most frequent tokens, and a label.

use super::Category;
use crate::error::{Error, Result};
use crate::focus::mask::top_k_indices;
use crate::focus::router::LayerRouting;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Purity at or above which a centroid is labelled by its top category alone.
pub const PURE: f64 = 0.6;
/// Tokens listed per centroid.
pub const TOP_TOKENS: usize = 10;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopToken {
    pub id: u32,
    pub text: String,
    pub count: usize,
    /// count / the centroid's token count.
    pub share: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CentroidProfile {
    pub group: usize,
    /// Tokens whose largest membership is this group.
    pub tokens: usize,
    /// Those tokens per category, in `Category::ALL` order.
    pub by_category: Vec<usize>,
    /// Membership mass per category over all tokens, in `Category::ALL` order.
    pub mass_by_category: Vec<f64>,
    /// The category with most tokens (ties to the earlier category); None for an empty group.
    pub top_category: Option<Category>,
    /// Share of the top category among the group's tokens, in [1/11, 1]; None for an empty group.
    pub purity: Option<f64>,
    pub top_tokens: Vec<TopToken>,
    /// "punctuation 96%", "mixed: noun 40% / verb 30%", or "empty".
    pub label: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerProfile {
    pub layer: usize,
    /// Column names of the per-category vectors.
    pub categories: Vec<Category>,
    pub centroids: Vec<CentroidProfile>,
}

/// The layer of highest token-weighted purity (the first of equals), with that purity.
pub fn best_layer<'a>(profiles: impl IntoIterator<Item = &'a LayerProfile>) -> Option<(usize, f64)> {
    profiles.into_iter().filter(|p| p.centroids.iter().any(|c| c.tokens > 0)).map(|p| (p.layer, p.purity())).fold(None, |best, (l, u)| match best {
        Some((_, b)) if b >= u => best,
        _ => Some((l, u)),
    })
}

/// The profile of one layer. `ids`, `texts` and `cats` are per token and as long as the routing.
pub fn layer_profile(
    layer: usize,
    routing: &LayerRouting,
    ids: &[u32],
    texts: &[String],
    cats: &[Category],
) -> Result<LayerProfile> {
    let (t, k) = (routing.t, routing.groups);
    if ids.len() != t || texts.len() != t || cats.len() != t || routing.memberships.len() != t * k || k == 0 {
        return Err(Error::Invalid(format!(
            "layer {layer}: profile needs one id, text and category per routed token ({t} tokens x {k} groups), got {} ids, {} texts, {} categories, {} memberships",
            ids.len(),
            texts.len(),
            cats.len(),
            routing.memberships.len()
        )));
    }
    let nc = Category::COUNT;
    let mut counts = vec![vec![0usize; nc]; k];
    let mut mass = vec![vec![0f64; nc]; k];
    let mut tokens: Vec<HashMap<u32, (usize, usize)>> = vec![HashMap::new(); k]; // id -> (count, first index)
    for i in 0..t {
        let row = routing.row(i);
        let g = top_k_indices(row, 1)[0];
        let c = cats[i].index();
        counts[g][c] += 1;
        for (gg, &m) in row.iter().enumerate() {
            mass[gg][c] += m as f64;
        }
        tokens[g].entry(ids[i]).or_insert((0, i)).0 += 1;
    }
    let centroids = (0..k)
        .map(|g| {
            let n: usize = counts[g].iter().sum();
            let mut order: Vec<usize> = (0..nc).collect();
            order.sort_by(|&a, &b| counts[g][b].cmp(&counts[g][a])); // stable: ties keep ALL order
            let share = |c: usize| counts[g][c] as f64 / n as f64;
            let (top_category, purity, label) = if n == 0 {
                (None, None, "empty".to_string())
            } else {
                let (c1, c2) = (order[0], order[1]);
                let p = share(c1);
                let label = if p >= PURE || counts[g][c2] == 0 {
                    format!("{} {:.0}%", Category::ALL[c1], 100.0 * p)
                } else {
                    format!("mixed: {} {:.0}% / {} {:.0}%", Category::ALL[c1], 100.0 * p, Category::ALL[c2], 100.0 * share(c2))
                };
                (Some(Category::ALL[c1]), Some(p), label)
            };
            let mut top: Vec<(u32, usize, usize)> = tokens[g].iter().map(|(&id, &(c, first))| (id, c, first)).collect();
            // Most frequent first; ties by first appearance, so the order is deterministic.
            top.sort_by(|a, b| b.1.cmp(&a.1).then(a.2.cmp(&b.2)));
            let top_tokens = top
                .into_iter()
                .take(TOP_TOKENS)
                .map(|(id, count, first)| TopToken { id, text: texts[first].clone(), count, share: count as f64 / n as f64 })
                .collect();
            CentroidProfile {
                group: g,
                tokens: n,
                by_category: counts[g].clone(),
                mass_by_category: mass[g].clone(),
                top_category,
                purity,
                top_tokens,
                label,
            }
        })
        .collect();
    Ok(LayerProfile { layer, categories: Category::ALL.to_vec(), centroids })
}

impl LayerProfile {
    /// Token-weighted purity: the share of the layer's tokens that are in their group's top
    /// category (the figure the untrained adapter scores about 0.32 on prose).
    pub fn purity(&self) -> f64 {
        let total: usize = self.centroids.iter().map(|c| c.tokens).sum();
        let top: f64 = self.centroids.iter().map(|c| c.tokens as f64 * c.purity.unwrap_or(0.0)).sum();
        top / total.max(1) as f64
    }

    /// Centroids holding at least `min_tokens` tokens whose purity is at least `threshold`.
    pub fn pure_centroids(&self, threshold: f64, min_tokens: usize) -> usize {
        self.centroids.iter().filter(|c| c.tokens >= min_tokens && c.purity.is_some_and(|p| p >= threshold)).count()
    }
}
