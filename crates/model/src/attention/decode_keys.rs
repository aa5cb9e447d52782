//! What a decode step of the newest token is, below the dispatcher (`decode`) and the kernels
//! (`cpu::decode`, `cuda::decode`) that all read it: how it attends (`DecodeAttention`), the
//! cached keys it keeps (`selected_keys`, the mask's row by the cache's index) and the bytes it
//! reads (`ReadBytes`; `device_read_bytes`, the count of a step on a GPU).

use super::kv_cache::LayerCache;
use super::LayerAttention;
use crate::error::{Error, Result};
use crate::focus::gate::GateFn;
use crate::focus::mask;
use serde::{Deserialize, Serialize};

/// How the newest token attends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DecodeAttention {
    Dense,
    /// Hard top-k with local window w and the first `sink` tokens always kept [ours] (the
    /// cache's top-k sets decide the other distant keys).
    TopK { window: usize, sink: usize },
    /// Soft gates on distant keys (sink keys [ours] are not gated, as local ones).
    Soft { gate: GateFn, window: usize, sink: usize },
}

/// Bytes one decode step reads from the caches (summed over the layers it covers).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadBytes {
    /// Key and value rows read (f32).
    pub kv: u64,
    /// Routing data read to choose or gate keys: index entries and top-k sets (top-k),
    /// memberships (soft).
    pub index: u64,
    /// What dense attention reads: every cached key and value row.
    pub dense: u64,
}

impl ReadBytes {
    pub fn add(&mut self, o: ReadBytes) {
        self.kv += o.kv;
        self.index += o.index;
        self.dense += o.dense;
    }
    /// (kv + index) / dense.
    pub fn fraction(&self) -> f64 {
        if self.dense == 0 { 1.0 } else { (self.kv + self.index) as f64 / self.dense as f64 }
    }
}

/// The cached positions the newest token (position n - 1) attends, and the routing bytes read
/// to find them.
pub fn selected_keys(cache: &LayerCache, how: DecodeAttention) -> Result<(Vec<u32>, u64)> {
    let n = cache.len();
    if n == 0 {
        return Err(Error::Invalid("decode attention over an empty cache".into()));
    }
    let i = n - 1;
    let (window, sink) = match how {
        DecodeAttention::TopK { window, sink } if !mask::all_local(n, window) => (window, sink),
        DecodeAttention::Soft { .. } => {
            let r = cache.routing.as_ref().ok_or_else(|| Error::Invalid("soft decode needs cached routing".into()))?;
            return Ok(((0..n as u32).collect(), (n * r.groups * 4) as u64));
        }
        _ => return Ok(((0..n as u32).collect(), 0)),
    };
    let r = cache.routing.as_ref().ok_or_else(|| Error::Invalid("top-k decode needs cached routing".into()))?;
    let mi = r.masks[i];
    // A distant key is kept when its top-k set meets the query's: the union of the query's
    // groups' member lists, marked in a bitmap over the distant positions and read back in
    // position order. A key in several of the groups is taken once (the mask's row is a set),
    // and in ascending order the rows stream as dense's do, instead of jumping back for every
    // group (an in-order union without sorting, which cost 3-4 ms of an 8K step).
    let distant = i - window;
    let mut bits = vec![0u64; distant.div_ceil(64)];
    let mut index = 0u64;
    for g in mask::groups(mi) {
        let list = &r.members[g];
        let end = list.partition_point(|&j| (j as usize) < distant);
        // One position read per index entry used.
        index += 4 * end as u64;
        for &j in &list[..end] {
            bits[j as usize / 64] |= 1 << (j % 64);
        }
    }
    // Sink keys [ours]: always kept, found by position (no index read).
    for j in mask::sink_keys(i, window, sink) {
        bits[j / 64] |= 1 << (j % 64);
    }
    let mut keys = Vec::with_capacity(bits.iter().map(|w| w.count_ones() as usize).sum::<usize>() + window + 1);
    for (w, &word) in bits.iter().enumerate() {
        let mut m = word;
        while m != 0 {
            keys.push((w * 64) as u32 + m.trailing_zeros());
            m &= m - 1;
        }
    }
    keys.extend(distant as u32..=i as u32);
    Ok((keys, index))
}

/// The bytes a step of the newest token (position n - 1) over a cache on a GPU reads, from the
/// host's copy of the routing (which must hold that token's row): the kernel finds the kept
/// distant keys by testing each one's top-k set (8 bytes, counted as index bytes) rather than
/// through the host's index by group; the kept keys' rows are the only rows it reads.
pub fn device_read_bytes(cache: &LayerCache, how: DecodeAttention, own: &LayerAttention) -> Result<ReadBytes> {
    let n = cache.len();
    if n == 0 {
        return Err(Error::Invalid("decode attention over an empty cache".into()));
    }
    let i = n - 1;
    let from = own.window.map_or(0, |w| n.saturating_sub(w));
    let tb = cache.token_bytes();
    let dense = (n - from) as u64 * tb;
    let (kept, index) = match (how, cache.routing.as_ref()) {
        (DecodeAttention::TopK { window, sink }, Some(r)) => {
            let mi = *r.masks.get(i).ok_or_else(|| Error::Invalid("decode read count: the host's routing lacks the newest token".into()))?;
            let lo = (i.saturating_sub(window)).max(from);
            // Kept distant keys (from..lo): the sinks [ours], and those sharing a group.
            let sinks = sink.min(lo).saturating_sub(from);
            let shared = r.count_sharing(mi, sink.max(from).min(lo)..lo);
            (n - lo + sinks + shared, (lo - from) as u64 * 8)
        }
        (DecodeAttention::Soft { .. }, Some(r)) => (n - from, ((n - from) * r.groups * 4) as u64),
        (DecodeAttention::Dense, _) => (n - from, 0),
        _ => return Err(Error::Invalid("top-k and soft decode need cached routing".into())),
    };
    Ok(ReadBytes { kv: kept as u64 * tb, index, dense })
}
