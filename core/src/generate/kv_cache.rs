//! What generation keeps of every earlier token, per layer: its keys and values (after RoPE,
//! per KV head), and with an adapter its routing: memberships, top-k set, the index of cached
//! keys by group (so that a top-k step finds the keys whose sets meet its own without reading
//! any other), and the causal Sinkhorn state that routes the next token in O(iters x K).

use crate::focus::mask;
use crate::focus::sinkhorn::CausalSinkhorn;

/// One layer's cache.
#[derive(Debug, Clone)]
pub struct LayerCache {
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Per KV head, (n, D) row-major.
    pub k: Vec<Vec<f32>>,
    pub v: Vec<Vec<f32>>,
    pub routing: Option<CachedRouting>,
}

/// The routing of the cached tokens of one layer.
#[derive(Debug, Clone)]
pub struct CachedRouting {
    pub groups: usize,
    /// k of the top-k sets kept (the mode's k, else the adapter's top_k).
    pub k: usize,
    /// n x K raw scores: whole-sequence Sinkhorn re-balances all of them at every step.
    pub scores: Vec<f32>,
    /// n x K memberships, as the token was routed.
    pub memberships: Vec<f32>,
    /// Top-k set of each token (bitmask over groups).
    pub masks: Vec<u64>,
    /// `members[g]`: the cached positions whose top-k set holds g, ascending.
    pub members: Vec<Vec<u32>>,
    /// Causal Sinkhorn's running state (absent for whole-sequence Sinkhorn).
    pub sinkhorn: Option<CausalSinkhorn>,
}

impl CachedRouting {
    pub fn new(groups: usize, k: usize, sinkhorn: Option<CausalSinkhorn>) -> Self {
        CachedRouting { groups, k, scores: Vec::new(), memberships: Vec::new(), masks: Vec::new(), members: vec![Vec::new(); groups], sinkhorn }
    }

    /// Appends one routed token (its raw scores and memberships, K each).
    pub fn push(&mut self, scores: &[f32], memberships: &[f32]) {
        let pos = self.masks.len() as u32;
        let m = mask::topk_mask(memberships, self.k);
        mask::groups(m).for_each(|g| self.members[g].push(pos));
        self.masks.push(m);
        self.scores.extend_from_slice(scores);
        self.memberships.extend_from_slice(memberships);
    }

    pub fn row(&self, i: usize) -> &[f32] {
        &self.memberships[i * self.groups..(i + 1) * self.groups]
    }
}

impl LayerCache {
    pub fn new(kv_heads: usize, head_dim: usize, routing: Option<CachedRouting>) -> Self {
        LayerCache { kv_heads, head_dim, k: vec![Vec::new(); kv_heads], v: vec![Vec::new(); kv_heads], routing }
    }

    /// Cached tokens.
    pub fn len(&self) -> usize {
        self.k.first().map_or(0, |k| k.len() / self.head_dim.max(1))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends `t` tokens' keys and values, each (Hkv, t, D) row-major.
    pub fn push_kv(&mut self, k: &[f32], v: &[f32], t: usize) {
        let n = t * self.head_dim;
        for h in 0..self.kv_heads {
            self.k[h].extend_from_slice(&k[h * n..(h + 1) * n]);
            self.v[h].extend_from_slice(&v[h * n..(h + 1) * n]);
        }
    }

    /// Bytes of one cached token's key and value over all KV heads (f32).
    pub fn token_bytes(&self) -> u64 {
        (2 * self.kv_heads * self.head_dim * 4) as u64
    }
}
