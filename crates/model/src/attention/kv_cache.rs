//! What generation keeps of every earlier token, per layer: its keys and values (after RoPE,
//! per KV head), and with an adapter its routing: memberships, top-k set, the index of cached
//! keys by group (so that a top-k step finds the keys whose sets meet its own without reading
//! any other), and the causal Sinkhorn state that routes the next token in O(iters x K).
//!
//! On a GPU (`LayerCache::to_device`) the keys and values live in device memory (`DeviceKv`),
//! with a mirror of the top-k sets and memberships that the decode kernel reads, and of causal
//! Sinkhorn's running state. A generation step on the GPU routes its token there
//! (`attention::cuda::route`), ahead of the host's routing; the generator then fills the host's
//! copy (scores, memberships, sets, index by group, state) from one copy per step. Rows the
//! host routed (a prefill, or a cache moved to the device) go the other way (`sync_routing`).

use crate::error::{Error, Result};
use crate::focus::mask;
use crate::focus::sinkhorn::CausalSinkhorn;
use candle_core::{DType, Device, Tensor};

/// Query heads a device cache's decode kernel serves: it keeps one arrival count per head
/// (`DeviceKv::arrivals`).
pub const ARRIVALS: usize = 256;

/// One layer's cache.
#[derive(Debug, Clone)]
pub struct LayerCache {
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Per KV head, (n, D) row-major.
    /// (Empty when the cache is on a device.)
    pub k: Vec<Vec<f32>>,
    pub v: Vec<Vec<f32>>,
    pub routing: Option<CachedRouting>,
    pub device: Option<DeviceKv>,
    /// Top-k decode's second copy of the rows on the host, by top-k set (`Buckets`); `None`
    /// unless enabled (`enable_buckets`).
    pub buckets: Option<Buckets>,
}

/// The cached rows again, one bucket per top-k set: every token's key and value rows sit in the
/// bucket of its set, in position order. A top-k step reads the buckets whose set meets its
/// own, each a contiguous stream. Gathered from the position-ordered rows instead (about half
/// of them, scattered), the hardware prefetchers fetched nearly every row and the step cost
/// as much as dense's. The price is a second copy of the routed layers' keys and values.
#[derive(Debug, Clone, Default)]
pub struct Buckets {
    /// The bucket of each top-k set that has one.
    index: std::collections::HashMap<u64, usize>,
    pub lists: Vec<Bucket>,
    /// Tokens bucketed: positions 0..len.
    pub len: usize,
}

#[derive(Debug, Clone)]
pub struct Bucket {
    /// The top-k set of its tokens.
    pub mask: u64,
    /// Their positions, ascending.
    pub pos: Vec<u32>,
    /// Per KV head, their rows (pos.len(), D).
    pub k: Vec<Vec<f32>>,
    pub v: Vec<Vec<f32>>,
}

/// A layer's keys and values on a GPU, (Hkv, capacity, D) f32 with the first `len` rows of
/// each head filled (capacity doubles as it fills), and the routing the kernel reads: top-k
/// sets (capacity,) as i64 bit patterns and memberships (capacity, K), `routed` rows filled,
/// and causal Sinkhorn's running state (iters x K, f64) after those rows.
#[derive(Debug, Clone)]
pub struct DeviceKv {
    pub k: Tensor,
    pub v: Tensor,
    pub len: usize,
    pub masks: Option<Tensor>,
    pub memberships: Option<Tensor>,
    pub routed: usize,
    pub sinkhorn_state: Option<Tensor>,
    /// The decode kernel's per-head arrival counts (u32, ARRIVALS; zero between launches).
    pub arrivals: Tensor,
}

impl DeviceKv {
    fn capacity(&self) -> usize {
        self.k.dim(1).unwrap_or(0)
    }

    /// Room for `extra` more tokens (keys, values and routing rows), by doubling.
    fn reserve(&mut self, extra: usize) -> Result<()> {
        let need = self.len + extra;
        let cap = self.capacity();
        if need <= cap {
            return Ok(());
        }
        let cap2 = need.next_power_of_two().max(64).max(2 * cap);
        let grow = |t: &Tensor, filled: usize, dim: usize| -> Result<Tensor> {
            let mut shape = t.dims().to_vec();
            shape[dim] = cap2;
            let bigger = Tensor::zeros(shape, t.dtype(), t.device())?;
            if filled > 0 {
                bigger.slice_set(&t.narrow(dim, 0, filled)?.contiguous()?, dim, 0)?;
            }
            Ok(bigger)
        };
        self.k = grow(&self.k, self.len, 1)?;
        self.v = grow(&self.v, self.len, 1)?;
        self.masks = self.masks.as_ref().map(|m| grow(m, self.routed, 0)).transpose()?;
        self.memberships = self.memberships.as_ref().map(|m| grow(m, self.routed, 0)).transpose()?;
        Ok(())
    }
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
    /// The cached positions of each distinct top-k set, ascending: counting the keys a top-k
    /// step keeps takes one search per set instead of a pass over every position.
    pub by_set: std::collections::HashMap<u64, Vec<u32>>,
    /// Causal Sinkhorn's running state (absent for whole-sequence Sinkhorn).
    pub sinkhorn: Option<CausalSinkhorn>,
}

impl CachedRouting {
    pub fn new(groups: usize, k: usize, sinkhorn: Option<CausalSinkhorn>) -> Self {
        CachedRouting { groups, k, scores: Vec::new(), memberships: Vec::new(), masks: Vec::new(), members: vec![Vec::new(); groups], by_set: Default::default(), sinkhorn }
    }

    /// Appends one routed token (its raw scores and memberships, K each).
    pub fn push(&mut self, scores: &[f32], memberships: &[f32]) {
        let pos = self.masks.len() as u32;
        let m = mask::topk_mask(memberships, self.k);
        mask::groups(m).for_each(|g| self.members[g].push(pos));
        self.by_set.entry(m).or_default().push(pos);
        self.masks.push(m);
        self.scores.extend_from_slice(scores);
        self.memberships.extend_from_slice(memberships);
    }

    pub fn row(&self, i: usize) -> &[f32] {
        &self.memberships[i * self.groups..(i + 1) * self.groups]
    }

    /// How many positions in `range` have a top-k set that meets `set`.
    pub fn count_sharing(&self, set: u64, range: std::ops::Range<usize>) -> usize {
        if range.is_empty() {
            return 0;
        }
        // Many distinct sets (a large K): one pass over the range is cheaper.
        if self.by_set.len() * 32 > range.len() {
            return self.masks[range].iter().filter(|&&m| mask::share_group(set, m)).count();
        }
        let (a, b) = (range.start as u32, range.end as u32);
        self.by_set.iter().filter(|(&m, _)| mask::share_group(set, m)).map(|(_, pos)| below_from_back(pos, b) - below_from_front(pos, a)).sum()
    }
}

/// How many of the ascending `pos` are below `b`, searched from the back: a step's range ends
/// a window before the newest token, so few positions lie past it (a galloping search, then a
/// binary one: O(log) of the positions skipped, where a plain binary search over a set's
/// thousands of positions cost a GPU step ~0.1 ms of host time at 8K).
fn below_from_back(pos: &[u32], b: u32) -> usize {
    let n = pos.len();
    let mut step = 1;
    while step <= n && pos[n - step] >= b {
        step *= 2;
    }
    let lo = n.saturating_sub(step);
    let hi = n - step / 2;
    lo + pos[lo..hi].partition_point(|&j| j < b)
}

/// How many of the ascending `pos` are below `a`, searched from the front (a range starts at
/// the sinks, before few positions).
fn below_from_front(pos: &[u32], a: u32) -> usize {
    let n = pos.len();
    let mut step = 1;
    while step <= n && pos[step - 1] < a {
        step *= 2;
    }
    let lo = step / 2;
    let hi = step.min(n);
    lo + pos[lo..hi].partition_point(|&j| j < a)
}

/// Causal Sinkhorn's state on `device` (one unused value when it has none: zero iterations).
fn state_tensor(st: &CausalSinkhorn, device: &Device) -> Result<Tensor> {
    let mut v = st.state().to_vec();
    if v.is_empty() {
        v.push(0.0);
    }
    let n = v.len();
    Ok(Tensor::from_vec(v, n, device)?)
}

impl LayerCache {
    pub fn new(kv_heads: usize, head_dim: usize, routing: Option<CachedRouting>) -> Self {
        LayerCache { kv_heads, head_dim, k: vec![Vec::new(); kv_heads], v: vec![Vec::new(); kv_heads], routing, device: None, buckets: None }
    }

    /// The same cache on `device`: unchanged on the CPU; on a GPU its keys, values and routing
    /// mirror move to device memory.
    pub fn to_device(mut self, device: &Device) -> Result<Self> {
        if matches!(device, Device::Cpu) || self.device.is_some() {
            return Ok(self);
        }
        let (n, hkv, d) = (self.len(), self.kv_heads, self.head_dim);
        let cap = n.next_power_of_two().max(64);
        let zeros = |dims: &[usize], dt: DType| Tensor::zeros(dims, dt, device);
        let groups = self.routing.as_ref().map(|r| r.groups);
        let mut kv = DeviceKv {
            k: zeros(&[hkv, cap, d], DType::F32)?,
            v: zeros(&[hkv, cap, d], DType::F32)?,
            len: 0,
            masks: groups.map(|_| zeros(&[cap], DType::I64)).transpose()?,
            memberships: groups.map(|g| zeros(&[cap, g], DType::F32)).transpose()?,
            routed: 0,
            sinkhorn_state: match self.routing.as_ref().and_then(|r| r.sinkhorn.as_ref()) {
                Some(st) => Some(state_tensor(st, device)?),
                None => None,
            },
            arrivals: zeros(&[ARRIVALS], DType::U32)?,
        };
        if n > 0 {
            let host = |x: &[Vec<f32>]| Tensor::from_vec(x.concat(), (hkv, n, d), device);
            kv.k.slice_set(&host(&self.k)?, 1, 0)?;
            kv.v.slice_set(&host(&self.v)?, 1, 0)?;
            kv.len = n;
        }
        self.k.iter_mut().chain(self.v.iter_mut()).for_each(|x| *x = Vec::new());
        self.device = Some(kv);
        self.sync_routing()?;
        Ok(self)
    }

    /// Keeps a bucketed copy of the rows for top-k decode (`Buckets`), from now on; a host
    /// cache with routing only (elsewhere it does nothing).
    pub fn enable_buckets(&mut self) {
        if self.device.is_none() && self.routing.is_some() && self.buckets.is_none() {
            self.buckets = Some(Buckets::default());
            self.sync_buckets();
        }
    }

    /// Whether the buckets hold every cached token.
    pub fn buckets_current(&self) -> bool {
        self.buckets.as_ref().is_some_and(|b| b.len == self.len())
    }

    /// Appends to their buckets the tokens that have both rows and routing and are not yet in one.
    fn sync_buckets(&mut self) {
        let (Some(b), Some(r)) = (self.buckets.as_mut(), self.routing.as_ref()) else { return };
        let (hkv, d) = (self.kv_heads, self.head_dim);
        let n = self.k.first().map_or(0, |k| k.len() / d.max(1)).min(r.masks.len());
        for p in b.len..n {
            let m = r.masks[p];
            let at = *b.index.entry(m).or_insert_with(|| {
                b.lists.push(Bucket { mask: m, pos: Vec::new(), k: vec![Vec::new(); hkv], v: vec![Vec::new(); hkv] });
                b.lists.len() - 1
            });
            let bucket = &mut b.lists[at];
            bucket.pos.push(p as u32);
            for h in 0..hkv {
                bucket.k[h].extend_from_slice(&self.k[h][p * d..(p + 1) * d]);
                bucket.v[h].extend_from_slice(&self.v[h][p * d..(p + 1) * d]);
            }
        }
        b.len = b.len.max(n);
    }

    /// Brings the copies of the routing up to date: on the host the buckets (`Buckets`); on a
    /// device, the routing rows the host has decided and the device lacks (the decode kernel
    /// reads the newest token's row), and with them the host's Sinkhorn state. Runs after
    /// routing a token on the host and before attending. (Rows the device routed, ahead of the
    /// host, come back through `CachedRouting::push` and `CausalSinkhorn::set_state`.)
    pub fn sync_routing(&mut self) -> Result<()> {
        self.sync_buckets();
        let (Some(kv), Some(r)) = (self.device.as_mut(), self.routing.as_ref()) else { return Ok(()) };
        let (from, to) = (kv.routed, r.masks.len());
        if to <= from {
            return Ok(());
        }
        let dev = kv.k.device().clone();
        let masks: Vec<i64> = r.masks[from..to].iter().map(|&m| m as i64).collect();
        if let Some(m) = &kv.masks {
            m.slice_set(&Tensor::from_vec(masks, to - from, &dev)?, 0, from)?;
        }
        if let Some(m) = &kv.memberships {
            let g = r.groups;
            m.slice_set(&Tensor::from_slice(&r.memberships[from * g..to * g], (to - from, g), &dev)?, 0, from)?;
        }
        if let (Some(st), Some(d)) = (r.sinkhorn.as_ref(), kv.sinkhorn_state.as_ref()) {
            // In place: a captured decode step holds the state's address.
            d.slice_set(&state_tensor(st, &dev)?, 0, 0)?;
        }
        kv.routed = to;
        Ok(())
    }

    /// Cached tokens.
    pub fn len(&self) -> usize {
        match &self.device {
            Some(kv) => kv.len,
            None => self.k.first().map_or(0, |k| k.len() / self.head_dim.max(1)),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends the keys and values of a pass's tokens, each (1, Hkv, t, D) (as
    /// `Block::attention_inputs` gives them), wherever the cache lives.
    pub fn push(&mut self, k: &Tensor, v: &Tensor) -> Result<()> {
        let (hkv, d) = (self.kv_heads, self.head_dim);
        let t = k.elem_count() / (hkv * d).max(1);
        if k.elem_count() != hkv * t * d || v.elem_count() != k.elem_count() {
            return Err(Error::Invalid(format!("cache push: keys {:?} and values {:?} for {hkv} KV heads of {d}", k.dims(), v.dims())));
        }
        match self.device.as_mut() {
            Some(kv) => {
                kv.reserve(t)?;
                let rows = |x: &Tensor| -> Result<Tensor> { Ok(x.reshape((hkv, t, d))?.to_dtype(DType::F32)?.contiguous()?) };
                kv.k.slice_set(&rows(k)?, 1, kv.len)?;
                kv.v.slice_set(&rows(v)?, 1, kv.len)?;
                kv.len += t;
            }
            None => self.push_kv(&k.flatten_all()?.to_vec1::<f32>()?, &v.flatten_all()?.to_vec1::<f32>()?, t),
        }
        Ok(())
    }

    /// Room on the device for `extra` more tokens (doubling the capacity when full). A GPU
    /// generation step reserves before it runs: inside, nothing may allocate a cache buffer (a
    /// captured step holds their addresses). Nothing to do for a host cache.
    pub fn reserve_device(&mut self, extra: usize) -> Result<()> {
        match self.device.as_mut() {
            Some(kv) => kv.reserve(extra),
            None => Ok(()),
        }
    }

    /// The device capacity in tokens (0 for a host cache).
    pub fn device_capacity(&self) -> usize {
        self.device.as_ref().map_or(0, DeviceKv::capacity)
    }

    /// A GPU generation step's key and value rows, each (1, Hkv, 1, D), written at the position
    /// `step` holds ([token id, position], u32 on the device) by a kernel; the cache's length
    /// advances when the step ends (`commit_step`). Room must be reserved (`reserve_device`).
    pub fn append_step(&mut self, k: &Tensor, v: &Tensor, step: &Tensor) -> Result<()> {
        let kv = self.device.as_ref().ok_or_else(|| Error::Invalid("append_step: the cache is on the host".into()))?;
        if kv.len >= kv.capacity() {
            return Err(Error::Invalid(format!("append_step: no room reserved after {} tokens", kv.len)));
        }
        #[cfg(feature = "cuda")]
        return crate::attention::cuda::decode::append_rows(&kv.k, &kv.v, k, v, step);
        #[cfg(not(feature = "cuda"))]
        {
            let _ = (k, v, step);
            Err(Error::Invalid("a cache on a device needs a build with the cuda feature".into()))
        }
    }

    /// After a GPU generation step: its token counts as cached (`append_step` wrote its rows).
    pub fn commit_step(&mut self) -> Result<()> {
        let kv = self.device.as_mut().ok_or_else(|| Error::Invalid("commit_step: the cache is on the host".into()))?;
        kv.len += 1;
        Ok(())
    }

    /// Appends `t` tokens' keys and values, each (Hkv, t, D) row-major, to a host cache.
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Counting the positions whose set meets a query's, by set and galloping searches, equals
    /// a pass over every position, for ranges at the ends, in the middle, empty and whole.
    #[test]
    fn count_sharing_equals_a_pass_over_the_positions() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(4);
        for n in [0usize, 1, 5, 300, 2000] {
            let mut r = CachedRouting::new(8, 2, None);
            for _ in 0..n {
                let m: Vec<f32> = (0..8).map(|_| rng.gen::<f32>()).collect();
                r.push(&m, &m);
            }
            for _ in 0..50 {
                let set = (1u64 << rng.gen_range(0..8)) | (1u64 << rng.gen_range(0..8));
                let a = rng.gen_range(0..=n);
                let b = [a, n, n.saturating_sub(128).max(a), rng.gen_range(a..=n)][rng.gen_range(0..4)];
                let want = r.masks[a..b].iter().filter(|&&m| mask::share_group(set, m)).count();
                assert_eq!(r.count_sharing(set, a..b), want, "n {n}, {a}..{b}");
            }
        }
    }
}
