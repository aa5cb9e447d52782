//! Generation: a model (and optionally a Focus adapter) fed one token at a time.
//!
//! `Generator` keeps a KV cache per layer (`attention::kv_cache`) and runs each new token
//! through the decoder's one layer loop (`Decoder::run`), at its position; only its attention
//! differs: a layer hook attends over the cache with `attention::decode` (dense, soft, or hard
//! top-k that reads only the keys its mask keeps). A prompt of several tokens is prefilled by
//! one pass of `Decoder::run`, whose layer hook copies each layer's keys, values and routing
//! into the cache.
//!
//! Routing under generation. With causal Sinkhorn (`causal_sinkhorn = true`) a token's routing
//! never depends on later tokens, so the cache stays exact: each new token is routed from its
//! scores and the running per-group prefix log-sum-exps (`CausalSinkhorn`, O(iters x K) per
//! token and layer). With the paper's whole-sequence Sinkhorn every new token changes the
//! column sums, hence the routing of every earlier token, hence (in soft and top-k modes) which
//! pairs attended and every later hidden state: no cache can be exact. The generator then
//! recomputes the whole sequence for every new token (`Strategy::Recompute`: exact, O(T^2) per
//! token). Each recomputation refills the caches, so that in both strategies `layers()` holds
//! every token's routing as the last step saw it (the GUI draws it; `decode::selected_keys`
//! reads the newest token's keys from it). In dense mode routing does not change the output, so
//! the cache is used, and the newest token's reported groups are those whole-sequence Sinkhorn
//! gives it over the prefix.
//! `bench routing` measures how far the two Sinkhorn variants route real text apart.

pub mod chat;
pub mod chat_process;
pub mod sampler;

use crate::focus::gate::GateFn;
use crate::attention::{LayerAttention, Mode};
use crate::error::{Error, Result};
use crate::focus::adapter::Adapter;
use crate::focus::mask;
use crate::focus::router::LayerRouting;
use crate::focus::sinkhorn::{sinkhorn, CausalSinkhorn};
use crate::model::block::AttentionInputs;
use crate::model::decoder::{Decoder, LayerHook, RunEnd};
use crate::model::ForwardOptions;
use candle_core::Tensor;
use crate::attention::decode::{self, DecodeAttention, ReadBytes};
use crate::attention::kv_cache::{CachedRouting, LayerCache};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};

/// How the generator advances (see the module notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// KV cache: each token costs one step over the cache.
    KvCache,
    /// Whole-sequence Sinkhorn in soft or top-k mode: the whole sequence is rerun per token.
    Recompute,
}

/// What one fed token gives.
#[derive(Debug, Clone)]
pub struct Step {
    /// Next-token logits (vocab).
    pub logits: Vec<f32>,
    /// Per layer, the newest token's top-k groups in descending membership (empty without an
    /// adapter).
    pub groups: Vec<Vec<usize>>,
    /// Bytes its attention read from the caches (zero for a prefill or a recomputation).
    pub read: ReadBytes,
}

pub struct Generator<'a> {
    decoder: &'a Decoder,
    adapter: Option<&'a Adapter>,
    mode: Mode,
    strategy: Strategy,
    /// k of the top-k sets kept and reported.
    k: usize,
    layers: Vec<LayerCache>,
    ids: Vec<u32>,
    /// Checked before each step and between the layers of a pass (`Error::Cancelled`).
    cancel: Option<&'a AtomicBool>,
}

impl<'a> Generator<'a> {
    pub fn new(decoder: &'a Decoder, adapter: Option<&'a Adapter>, mode: Mode) -> Result<Self> {
        let k = match (mode, adapter) {
            (Mode::Dense, a) => a.map_or(0, |a| a.config.top_k),
            (Mode::Soft, Some(a)) => a.config.top_k,
            (Mode::TopK(k), Some(a)) => k.of(a.config.groups)?,
            (m, None) => return Err(Error::Invalid(format!("mode {m} needs an adapter"))),
        };
        let strategy = match adapter {
            Some(a) if !a.config.causal_sinkhorn && mode != Mode::Dense => Strategy::Recompute,
            _ => Strategy::KvCache,
        };
        let layers = empty_layers(decoder, adapter, k)?;
        let mut g = Generator { decoder, adapter, mode, strategy, k, layers, ids: Vec::new(), cancel: None };
        g.bucket_for_topk();
        Ok(g)
    }

    /// Cached top-k steps on the CPU read bucketed rows (`kv_cache::Buckets`).
    fn bucket_for_topk(&mut self) {
        if self.strategy == Strategy::KvCache && matches!(self.mode, Mode::TopK(_)) {
            self.layers.iter_mut().for_each(LayerCache::enable_buckets);
        }
    }

    /// Stops the generator when `cancel` is set: a step not yet begun, or a prefill or
    /// recomputation between its layers, returns `Error::Cancelled`.
    pub fn set_cancel(&mut self, cancel: &'a AtomicBool) {
        self.cancel = Some(cancel);
    }

    /// A generator whose caches already hold `ids` (the decode benchmark builds them).
    pub fn with_cache(decoder: &'a Decoder, adapter: Option<&'a Adapter>, mode: Mode, layers: Vec<LayerCache>, ids: Vec<u32>) -> Result<Self> {
        let mut g = Self::new(decoder, adapter, mode)?;
        if g.strategy != Strategy::KvCache || layers.len() != g.layers.len() || layers.iter().any(|l| l.len() != ids.len()) {
            return Err(Error::Invalid("a prebuilt cache needs one layer cache per layer, each of the sequence's length, and a cached strategy".into()));
        }
        g.layers = layers.into_iter().map(|l| l.to_device(&decoder.device)).collect::<Result<_>>()?;
        g.ids = ids;
        g.bucket_for_topk();
        Ok(g)
    }

    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The tokens fed so far.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    pub fn layers(&self) -> &[LayerCache] {
        &self.layers
    }

    /// Feeds tokens (a prompt, or the token just sampled); returns the step of the last one.
    /// Into an empty cache several tokens are prefilled by one pass; otherwise one step each.
    pub fn feed(&mut self, ids: &[u32]) -> Result<Step> {
        let cfg = &self.decoder.config;
        if ids.is_empty() {
            return Err(Error::Invalid("nothing to feed: zero tokens".into()));
        }
        if self.ids.len() + ids.len() > cfg.context {
            return Err(Error::Invalid(format!("{} tokens exceed the model's context of {} tokens", self.ids.len() + ids.len(), cfg.context)));
        }
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= cfg.vocab) {
            return Err(Error::Invalid(format!("token id {bad} is outside the vocabulary ({})", cfg.vocab)));
        }
        if self.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
            return Err(Error::Cancelled);
        }
        match self.strategy {
            Strategy::Recompute => self.recompute(ids),
            Strategy::KvCache if self.ids.is_empty() && ids.len() > 1 => self.prefill(ids),
            Strategy::KvCache => {
                let mut last = None;
                for &id in ids {
                    last = Some(self.step(id)?);
                }
                Ok(last.expect("at least one token"))
            }
        }
    }

    /// How a cached step's routed layers attend.
    fn how(&self) -> DecodeAttention {
        let (window, sink) = self.adapter.map_or((0, 0), |a| (a.config.window, a.config.sink));
        match (self.mode, self.adapter) {
            (Mode::TopK(_), Some(_)) => DecodeAttention::TopK { window, sink },
            (Mode::Soft, Some(a)) => DecodeAttention::Soft { gate: GateFn::of(&a.config), window, sink },
            _ => DecodeAttention::Dense,
        }
    }

    /// Per layer, the newest cached token's top-k groups.
    fn newest_groups(&self) -> Vec<Vec<usize>> {
        self.layers.iter().filter_map(|l| l.routing.as_ref()).map(|r| mask::top_k_indices(r.row(r.masks.len() - 1), self.k)).collect()
    }

    /// One token at position `ids.len()` through the decoder's layer loop (`Decoder::run`),
    /// each layer attending over its cache (`OverCache`). On the CPU the whole step, logits
    /// included, runs on a worker of the thread pool that runs its products (see
    /// `Decoder::run`); a GPU step stays on the calling thread, where its CUDA context is.
    fn step(&mut self, id: u32) -> Result<Step> {
        if self.decoder.device.is_cpu() {
            rayon::scope(|_| self.step_in_pool(id))
        } else {
            self.step_in_pool(id)
        }
    }

    fn step_in_pool(&mut self, id: u32) -> Result<Step> {
        let dec = self.decoder;
        let p = self.ids.len();
        // Not cancellable inside: a step stopped between layers would leave the caches of
        // its first layers one token ahead of the rest.
        let opts = ForwardOptions { start: p, ..ForwardOptions::new(self.mode, self.adapter) };
        let how = self.how();
        let mut over_cache = OverCache { layers: &mut self.layers, adapter: self.adapter, how, heads: dec.config.n_heads, read: ReadBytes::default() };
        let RunEnd::Finished { x, .. } = dec.run(&[&[id]], &opts, &mut over_cache)? else {
            return Err(Error::Invalid("the decode step stopped early".into()));
        };
        let read = over_cache.read;
        let logits = dec.logits(&x)?.flatten_all()?.to_vec1::<f32>()?;
        self.ids.push(id);
        Ok(Step { logits, groups: self.newest_groups(), read })
    }

    /// The prompt through one pass of the decoder; its layer hook fills the caches.
    fn prefill(&mut self, ids: &[u32]) -> Result<Step> {
        let opts = ForwardOptions { cancel: self.cancel, ..ForwardOptions::new(self.mode, self.adapter) };
        let mut fill = Fill { layers: &mut self.layers, err: None };
        let end = self.decoder.run(&[ids], &opts, &mut fill)?;
        if let Some(e) = fill.err {
            return Err(e);
        }
        let RunEnd::Finished { x, .. } = end else { return Err(Error::Invalid("the prefill pass stopped early".into())) };
        let logits = self.decoder.logits(&x.narrow(0, ids.len() - 1, 1)?)?.flatten_all()?.to_vec1::<f32>()?;
        self.ids.extend_from_slice(ids);
        Ok(Step { logits, groups: self.newest_groups(), read: ReadBytes::default() })
    }

    /// The whole sequence again (whole-sequence Sinkhorn in soft or top-k mode), `ids` appended:
    /// one prefill into fresh caches. A failed pass leaves the generator as it was.
    fn recompute(&mut self, ids: &[u32]) -> Result<Step> {
        let all: Vec<u32> = self.ids.iter().chain(ids).copied().collect();
        let before = std::mem::replace(&mut self.layers, empty_layers(self.decoder, self.adapter, self.k)?);
        let fed = std::mem::take(&mut self.ids);
        self.prefill(&all).inspect_err(|_| {
            self.layers = before;
            self.ids = fed;
        })
    }
}

/// One empty cache per layer, on the decoder's device; layers the adapter leaves unrouted
/// (`router_layers`) attend densely and keep no routing.
fn empty_layers(decoder: &Decoder, adapter: Option<&Adapter>, k: usize) -> Result<Vec<LayerCache>> {
    let cfg = &decoder.config;
    (0..cfg.n_layers)
        .map(|l| {
            let routing = adapter.filter(|a| a.config.router_layers.routes(cfg.is_sliding(l))).map(|a| {
                let c = &a.config;
                CachedRouting::new(c.groups, k, c.causal_sinkhorn.then(|| CausalSinkhorn::new(c.groups, c.tau, c.sinkhorn_iters)))
            });
            LayerCache::new(cfg.n_kv_heads, cfg.head_dim, routing).to_device(&decoder.device)
        })
        .collect()
}

/// A cached step's hook: each layer's new key and value into its cache, the new token routed
/// incrementally (causal Sinkhorn's running state, or the newest row of the prefix's
/// whole-sequence Sinkhorn in dense mode), and its attention over the cache
/// (`attention::decode`).
struct OverCache<'c> {
    layers: &'c mut [LayerCache],
    adapter: Option<&'c Adapter>,
    how: DecodeAttention,
    heads: usize,
    /// Bytes read from the caches, summed over the layers.
    read: ReadBytes,
}

impl LayerHook for OverCache<'_> {
    fn attend(&mut self, l: usize, inp: &AttentionInputs, own: &LayerAttention) -> Result<Option<Tensor>> {
        let cache = &mut self.layers[l];
        cache.push(&inp.k, &inp.v)?;
        if let (Some(a), Some(r)) = (self.adapter, cache.routing.as_mut()) {
            let (_, scores) = a.scores(l, &inp.h)?;
            let m = match r.sinkhorn.as_mut() {
                Some(state) => state.push(&scores),
                None => {
                    // Whole-sequence Sinkhorn (dense mode): the newest row of the prefix's.
                    let (n, kk, c) = (r.masks.len() + 1, r.groups, &a.config);
                    let mut all = r.scores.clone();
                    all.extend_from_slice(&scores);
                    sinkhorn(&all, n, kk, c.tau, c.sinkhorn_iters, false)[(n - 1) * kk..].to_vec()
                }
            };
            a.check_memberships(l, &m)?;
            r.push(&scores, &m);
            cache.sync_routing()?;
        }
        let how = if cache.routing.is_some() { self.how } else { DecodeAttention::Dense };
        let (o, read) = decode::attend(&inp.q, self.heads, cache, how, own)?;
        self.read.add(read);
        Ok(Some(o))
    }
}

/// The prefill's hook: each layer's keys, values and routing into its cache.
struct Fill<'c> {
    layers: &'c mut [LayerCache],
    err: Option<Error>,
}

impl Fill<'_> {
    fn fill(&mut self, l: usize, inp: &AttentionInputs, routing: Option<&LayerRouting>) -> Result<()> {
        let cache = &mut self.layers[l];
        let t = inp.k.dim(2)?;
        cache.push(&inp.k, &inp.v)?;
        if let (Some(r), Some(lr)) = (cache.routing.as_mut(), routing) {
            let kk = lr.groups;
            for i in 0..t {
                let s = &lr.scores[i * kk..(i + 1) * kk];
                // Causal: the state must also advance; it gives the pass's memberships exactly.
                let m = match r.sinkhorn.as_mut() {
                    Some(state) => state.push(s),
                    None => lr.row(i).to_vec(),
                };
                r.push(s, &m);
            }
        }
        cache.sync_routing()?;
        Ok(())
    }
}

impl LayerHook for Fill<'_> {
    fn inputs(&mut self, l: usize, inp: &AttentionInputs, routing: Option<&LayerRouting>) -> ControlFlow<()> {
        match self.fill(l, inp, routing) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                self.err = Some(e);
                ControlFlow::Break(())
            }
        }
    }
}

#[cfg(all(test, feature = "cuda"))]
mod tests {
    use super::*;
    use crate::focus::mask::TopK;
    use crate::focus::adapter::AdapterSpec;
    use crate::model::Model;
    use candle_core::Device;

    /// The tiny checkpoints of tests/fixtures (run from the repository root or the crate's).
    fn fixture(arch: &str) -> std::path::PathBuf {
        let here = std::path::Path::new("tests/fixtures/hf_tiny").join(arch);
        if here.exists() { here } else { std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hf_tiny").join(arch) }
    }

    /// Generation with the cache on the GPU gives the CPU's full-forward logits, for every
    /// architecture (sliding layers and soft-caps in Gemma 2) and every mode.
    #[test]
    fn gpu_decode_equals_the_cpu_forward() {
        let gpu = Device::new_cuda(0).expect("a CUDA device");
        for arch in ["gpt2", "llama", "qwen2", "gemma2", "olmo2"] {
            let (cpu_m, gpu_m) = (Model::load(&fixture(arch), &Device::Cpu).unwrap(), Model::load(&fixture(arch), &gpu).unwrap());
            let ids: Vec<u32> = (0..100u32).map(|i| (i * 37 + 11) % cpu_m.config().vocab as u32).collect();
            // Sinks [ours]: none, the first token, the first four.
            for sink in [0, 1, 4] {
            let spec = AdapterSpec { groups: 4, window: 8, sink, causal_sinkhorn: true, ..Default::default() };
            let (ac, ag) = (Adapter::random(&cpu_m.identity(), &Device::Cpu, &spec, 2).unwrap(), Adapter::random(&gpu_m.identity(), &gpu, &spec, 2).unwrap());
            for (mode, routed) in [(Mode::Dense, false), (Mode::TopK(TopK::new(1, 4).unwrap()), true), (Mode::TopK(TopK::new(2, 4).unwrap()), true), (Mode::Soft, true)] {
                let full = cpu_m.decoder.forward(&ids, &ForwardOptions::new(mode, routed.then_some(&ac))).unwrap().logits.to_vec2::<f32>().unwrap();
                let mut g = Generator::new(&gpu_m.decoder, routed.then_some(&ag), mode).unwrap();
                assert!(g.layers()[0].device.is_some(), "the cache is on the GPU");
                g.feed(&ids[..30]).unwrap();
                for (p, &id) in ids.iter().enumerate().skip(30) {
                    let s = g.feed(&[id]).unwrap();
                    let scale = full[p].iter().fold(1f32, |a, x| a.max(x.abs()));
                    let err = s.logits.iter().zip(&full[p]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max) / scale;
                    assert!(err <= 1e-4, "{arch} {mode} sink {sink} position {p}: relative logit difference {err}");
                }
            }
            }
        }
    }
}

#[cfg(test)]
mod cpu_tests {
    use super::*;
    use crate::focus::adapter::AdapterSpec;
    use crate::focus::mask::TopK;
    use crate::model::Model;
    use candle_core::Device;

    /// Attention sinks [ours]: a cached step on the CPU (top-k through the bucketed rows, soft
    /// through the gates) gives the full forward's logits row, for s = 0, 1 and 4 with a window
    /// small enough that the first tokens are distant.
    #[test]
    fn cpu_decode_with_sinks_equals_the_full_forward() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/hf_tiny");
        for arch in ["llama", "gpt2"] {
            let m = Model::load(&dir.join(arch), &Device::Cpu).unwrap();
            let ids: Vec<u32> = (0..64u32).map(|i| (i * 37 + 11) % m.config().vocab as u32).collect();
            for sink in [0, 1, 4] {
                let spec = AdapterSpec { groups: 4, window: 4, sink, causal_sinkhorn: true, ..Default::default() };
                let a = Adapter::random(&m.identity(), &Device::Cpu, &spec, 2).unwrap();
                for mode in [Mode::TopK(TopK::new(1, 4).unwrap()), Mode::TopK(TopK::new(2, 4).unwrap()), Mode::Soft] {
                    let full = m.decoder.forward(&ids, &ForwardOptions::new(mode, Some(&a))).unwrap().logits.to_vec2::<f32>().unwrap();
                    let mut g = Generator::new(&m.decoder, Some(&a), mode).unwrap();
                    assert_eq!(g.strategy(), Strategy::KvCache);
                    g.feed(&ids[..20]).unwrap();
                    for (p, &id) in ids.iter().enumerate().skip(20) {
                        let s = g.feed(&[id]).unwrap();
                        let scale = full[p].iter().fold(1f32, |a, x| a.max(x.abs()));
                        let err = s.logits.iter().zip(&full[p]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max) / scale;
                        assert!(err <= 1e-4, "{arch} {mode} sink {sink} position {p}: relative logit difference {err}");
                    }
                }
            }
        }
    }
}
