//! How far whole-sequence and causal Sinkhorn route the same text apart (`focus-lens bench
//! routing`). Generation can cache only causal routing (see `generate`), so this is what an
//! adapter trained with whole-sequence Sinkhorn would change if run causally. Both variants
//! balance the same scores: those of a dense pass, whose hidden states do not depend on
//! routing. Per layer: the share of tokens whose top-k set differs, whose top group differs,
//! the mean |membership difference|, and the share of causal pairs each mask keeps.

use crate::attention::Mode;
use crate::error::{Error, Result};
use crate::focus::adapter::Adapter;
use crate::focus::mask::{pair_stats, topk_mask};
use crate::focus::sinkhorn::sinkhorn;
use crate::model::{ForwardOptions, Model};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RoutingDiffRow {
    pub layer: usize,
    pub tokens: usize,
    /// Share of tokens whose top-k set differs between the variants.
    pub changed_topk: f64,
    /// Share of tokens whose largest group differs.
    pub changed_top1: f64,
    /// Mean over tokens and groups of |whole - causal| membership.
    pub mean_abs_diff: f64,
    /// Share of causal pairs kept by the top-k mask, whole-sequence vs causal routing.
    pub retained_whole: f64,
    pub retained_causal: f64,
}

/// `ids` in consecutive segments of at most `segment` tokens (each from position 0), top-k sets
/// of size `k`.
pub fn routing_difference(model: &Model, adapter: &Adapter, ids: &[u32], segment: usize, k: usize) -> Result<Vec<RoutingDiffRow>> {
    let c = &adapter.config;
    if ids.is_empty() || segment == 0 {
        return Err(Error::Invalid("routing difference needs tokens and a positive segment length".into()));
    }
    if k == 0 || k > c.groups {
        return Err(Error::Invalid(format!("k = {k} must be in 1..={}", c.groups)));
    }
    let n_layers = model.config().n_layers;
    let mut rows: Vec<RoutingDiffRow> = (0..n_layers).map(|layer| RoutingDiffRow { layer, ..Default::default() }).collect();
    // Pair counts summed over segments, for the retained shares.
    let mut pairs = vec![(0u64, 0u64, 0u64); n_layers];
    for seg in ids.chunks(segment.min(model.config().context)) {
        let out = model.decoder.forward(seg, &ForwardOptions { logits_from: seg.len() - 1, ..ForwardOptions::new(Mode::Dense, Some(adapter)) })?;
        let t = seg.len();
        for (l, r) in out.routing.iter().enumerate() {
            let whole = sinkhorn(&r.scores, t, c.groups, c.tau, c.sinkhorn_iters, false);
            let causal = sinkhorn(&r.scores, t, c.groups, c.tau, c.sinkhorn_iters, true);
            let (mut mw, mut mc) = (Vec::with_capacity(t), Vec::with_capacity(t));
            let row = &mut rows[l];
            for i in 0..t {
                let (a, b) = (&whole[i * c.groups..(i + 1) * c.groups], &causal[i * c.groups..(i + 1) * c.groups]);
                let (sa, sb) = (topk_mask(a, k), topk_mask(b, k));
                row.changed_topk += (sa != sb) as u8 as f64;
                row.changed_top1 += (topk_mask(a, 1) != topk_mask(b, 1)) as u8 as f64;
                row.mean_abs_diff += a.iter().zip(b).map(|(x, y)| (x - y).abs() as f64).sum::<f64>() / c.groups as f64;
                mw.push(sa);
                mc.push(sb);
            }
            row.tokens += t;
            let (pw, pc) = (pair_stats(&mw, c.window, c.sink), pair_stats(&mc, c.window, c.sink));
            pairs[l].0 += pw.causal;
            pairs[l].1 += pw.kept();
            pairs[l].2 += pc.kept();
        }
    }
    for (row, (causal, kw, kc)) in rows.iter_mut().zip(pairs) {
        let n = row.tokens.max(1) as f64;
        row.changed_topk /= n;
        row.changed_top1 /= n;
        row.mean_abs_diff /= n;
        row.retained_whole = kw as f64 / causal.max(1) as f64;
        row.retained_causal = kc as f64 / causal.max(1) as f64;
    }
    Ok(rows)
}
