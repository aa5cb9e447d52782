//! Generation: a model (and optionally a Focus adapter) fed one token at a time.
//!
//! Files: this one (`Generator`), `sampler` (the next token from the logits), `chat` (chat
//! templates and end-of-turn ids), `chat_process` (a template rendered in a child process, killed
//! past its time limit), `graph` (a GPU step captured as one CUDA graph); `tests` and
//! `tests_cuda` (the generator against the full forward, on the CPU and on a GPU).
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
//!
//! A cached step on a GPU reads its token and position from the device (`model::step`), so
//! that it does the same work at every position and replays as one CUDA graph (`graph`).
//! With causal Sinkhorn it routes its token on the device
//! (`attention::cuda::route`: scores, Sinkhorn row and top-k set go straight into the cache's
//! device mirror, where the decode kernel reads the query's set), so that no layer waits on a
//! copy to the host. Each layer also writes its row into one step record, which the side stream
//! copies to the host right after the last layer's routing (`route::RecordCopy`); the host fills
//! its copy of the routing (`layers()`, the reported groups, the bytes read) from it while the
//! device finishes the step, then reads the logits.

pub mod chat;
pub mod chat_process;
#[cfg(feature = "cuda")]
mod graph;
pub mod sampler;

use crate::focus::gate::GateFn;
use crate::attention::{LayerAttention, Mode};
use crate::error::{Error, Result};
use crate::focus::adapter::Adapter;
use crate::focus::mask;
use crate::focus::router::LayerRouting;
use crate::focus::sinkhorn::{sinkhorn, CausalSinkhorn};
use crate::model::block::{AttentionInputs, Norm};
use crate::model::decoder::{Decoder, LayerHook, RunEnd};
use crate::model::step::DeviceStep;
use crate::model::ForwardOptions;
use candle_core::Tensor;
use crate::attention::decode::{self, DecodeAttention, ReadBytes};
use crate::attention::kv_cache::{CachedRouting, LayerCache};
use serde::{Deserialize, Serialize};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

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
    /// Where a cached step's time went, when the generator times its parts (`set_split`).
    pub split: Option<StepSplit>,
}

/// A cached step's wall time in parts, each measured between device synchronisations (so an
/// instrumented step is slower than a plain one; the parts say where the time goes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct StepSplit {
    /// Routing the token in every routed layer (on a GPU: the routing kernels; on the CPU:
    /// scores and Sinkhorn).
    pub routing_s: f64,
    /// The attention over the caches (the decode kernels), every layer.
    pub attention_s: f64,
    /// Everything else: the blocks' projections and MLPs, norms, the cache appends, the logits
    /// (on the CPU also their copy to the host).
    pub rest_s: f64,
    /// After a GPU step, on the host: the step record's copy, the host's copy of the routing
    /// filled from it, the bytes read counted, and the logits' copy to the host (0 on the CPU,
    /// where the parts above hold it).
    #[serde(default)]
    pub host_s: f64,
    pub total_s: f64,
}

/// What the CUDA graph of a generator's GPU steps did (`graph`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GraphStats {
    /// Steps captured (each launched once as it was captured).
    pub captures: usize,
    /// Steps replayed from a captured graph.
    pub replays: usize,
    /// Why graphs were turned off, when a capture failed (the steps then ran eagerly).
    pub fallback: Option<String>,
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
    /// Whether cached steps time their parts (`StepSplit`).
    split: bool,
    /// On a GPU: the step record the routing kernels write (f64, one slice per layer), made at
    /// the first step that routes on the device.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    record: Option<candle_core::Tensor>,
    /// On a GPU: the step's token and position on the device, made at the first step.
    device_step: Option<DeviceStep>,
    /// On a GPU: the step captured as a CUDA graph, and whether to use one (`graph`).
    #[cfg(feature = "cuda")]
    graph: graph::StepGraphs,
    #[cfg(feature = "cuda")]
    graph_stats: GraphStats,
    /// On a GPU: the stream the routing kernels run on beside the layers' Q/K/V products,
    /// made at the first step that routes on the device.
    #[cfg(feature = "cuda")]
    side: Option<crate::attention::cuda::route::SideStream>,
    /// On a GPU with a side stream: the step record's copy to the host, made there after the
    /// last layer's routing (`route::RecordCopy`).
    #[cfg(feature = "cuda")]
    record_copy: Option<crate::attention::cuda::route::RecordCopy>,
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
        let mut g = Generator { decoder, adapter, mode, strategy, k, layers, ids: Vec::new(), cancel: None, split: false, record: None, device_step: None, #[cfg(feature = "cuda")] graph: Default::default(), #[cfg(feature = "cuda")] graph_stats: Default::default(), #[cfg(feature = "cuda")] side: None, #[cfg(feature = "cuda")] record_copy: None };
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

    /// Makes cached steps time their parts (`Step::split`), with a device synchronisation
    /// around each part: for measuring, not for generating. (Timed steps are never CUDA graphs.)
    pub fn set_split(&mut self, on: bool) {
        self.split = on;
    }

    /// Whether GPU steps may replay as one CUDA graph (`graph`; on by default). Off, every step
    /// launches its kernels one by one (`bench decode --graph` compares the two).
    pub fn set_graph(&mut self, on: bool) {
        #[cfg(feature = "cuda")]
        {
            self.graph.on = on;
            self.graph.reset();
        }
        let _ = on;
    }

    /// What the CUDA graph of GPU steps did so far (all zero on the CPU).
    pub fn graph_stats(&self) -> GraphStats {
        #[cfg(feature = "cuda")]
        return self.graph_stats.clone();
        #[cfg(not(feature = "cuda"))]
        GraphStats::default()
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
            rayon::scope(|_| self.step_on_host(id))
        } else {
            self.step_on_device(id)
        }
    }

    fn step_on_host(&mut self, id: u32) -> Result<Step> {
        let dec = self.decoder;
        let p = self.ids.len();
        let t0 = Instant::now();
        // Not cancellable inside: a step stopped between layers would leave the caches of
        // its first layers one token ahead of the rest.
        let opts = ForwardOptions { start: p, ..ForwardOptions::new(self.mode, self.adapter) };
        let mut over_cache = OverCache::new(self, None, None);
        let RunEnd::Finished { x, .. } = dec.run(&[&[id]], &opts, &mut over_cache)? else {
            return Err(Error::Invalid("the decode step stopped early".into()));
        };
        let (read, mut split) = (over_cache.read, over_cache.split);
        let logits = dec.host_logits(&x)?;
        if let Some(s) = split.as_mut() {
            s.total_s = t0.elapsed().as_secs_f64();
            s.rest_s = (s.total_s - s.routing_s - s.attention_s).max(0.0);
        }
        self.ids.push(id);
        Ok(Step { logits, groups: self.newest_groups(), read, split })
    }

    /// A step on a GPU. The token and its position go to the device first (`DeviceStep`); the
    /// step then writes its cache rows and routing there and attends without any host value of
    /// the position, and the host's counts (cache lengths, its copy of the routing, the bytes
    /// read) follow, before its logits are read (`commit_device_step`). So the same step replays as one
    /// CUDA graph (`graph`) where the generator can capture it.
    fn step_on_device(&mut self, id: u32) -> Result<Step> {
        let dec = self.decoder;
        let p = self.ids.len();
        if self.split {
            dec.device.synchronize()?;
        }
        let t0 = Instant::now();
        // Room for the token in every cache, before anything of the step runs (a captured
        // step holds the buffers' addresses: see `graph`).
        for c in &mut self.layers {
            c.reserve_device(1)?;
        }
        let record = self.device_record()?;
        // Made outside any capture (a graph holds the stream it forked to).
        #[cfg(feature = "cuda")]
        if record.is_some() && self.side.is_none() {
            self.side = Some(crate::attention::cuda::route::SideStream::new(&dec.device)?);
        }
        #[cfg(feature = "cuda")]
        if let (Some(r), None) = (record.as_ref(), self.record_copy.as_ref()) {
            self.record_copy = Some(crate::attention::cuda::route::RecordCopy::new(&dec.device, r.elem_count())?);
        }
        if self.device_step.is_none() {
            self.device_step = Some(DeviceStep::new(&dec.config, &dec.device)?);
        }
        self.device_step.as_ref().expect("made above").write(id, p)?;
        #[cfg(feature = "cuda")]
        let graphed = self.graphed_step(id)?;
        #[cfg(not(feature = "cuda"))]
        let graphed: Option<(Tensor, bool)> = None;
        // The logits stay on the device until the host has taken the step's routing (the
        // record, copied on the side stream, arrives before them).
        let ((logits, copied), mut split) = match graphed {
            Some(l) => (l, None),
            None => {
                let (x, copied, split) = self.run_device_step(id)?;
                ((self.device_logits(&x)?, copied), split)
            }
        };
        let t1 = Instant::now();
        let read = self.commit_device_step(record.as_ref(), copied)?;
        let logits = Decoder::checked_on_host(&logits)?;
        if let Some(s) = split.as_mut() {
            s.host_s = t1.elapsed().as_secs_f64();
            s.total_s = t0.elapsed().as_secs_f64();
            s.rest_s = (s.total_s - s.routing_s - s.attention_s - s.host_s).max(0.0);
        }
        self.ids.push(id);
        Ok(Step { logits, groups: self.newest_groups(), read, split })
    }

    /// Whether this generator's GPU steps can be graphs: cached steps on a CUDA device, every
    /// layer's cache on it and routed there (or not routed), no timing of parts.
    #[cfg(feature = "cuda")]
    fn graph_applies(&self) -> bool {
        self.graph.on
            && !self.split
            && self.strategy == Strategy::KvCache
            && matches!(self.decoder.device, candle_core::Device::Cuda(_))
            && self.layers.iter().all(|c| c.device.is_some() && (c.routing.is_none() || (routes_on_device(c) && self.record.is_some())))
    }

    /// The buffers a step reads and writes besides the weights: every cache's keys, values and
    /// routing mirror, the step record and the device step.
    #[cfg(feature = "cuda")]
    fn buffer_key(&self) -> Result<Vec<u64>> {
        let mut key = Vec::new();
        for c in &self.layers {
            let kv = c.device.as_ref().ok_or_else(|| Error::Invalid("graph key: a cache on the host".into()))?;
            key.push(graph::address(&kv.k)?);
            key.push(graph::address(&kv.v)?);
            for t in [&kv.masks, &kv.memberships, &kv.sinkhorn_state].into_iter().flatten() {
                key.push(graph::address(t)?);
            }
        }
        for t in [self.record.as_ref(), self.device_step.as_ref().map(|s| s.buf())].into_iter().flatten() {
            key.push(graph::address(t)?);
        }
        Ok(key)
    }

    /// A GPU step by way of the graph, where it applies (after `DeviceStep::write`): its logits
    /// on the device (read after the record, `commit_device_step`) and whether the step copies
    /// its record to the host. `None`: run the step eagerly (graphs off or not applicable, or
    /// the capture failed).
    #[cfg(feature = "cuda")]
    fn graphed_step(&mut self, id: u32) -> Result<Option<(Tensor, bool)>> {
        if !self.graph_applies() {
            return Ok(None);
        }
        let candle_core::Device::Cuda(cd) = &self.decoder.device else { return Ok(None) };
        let cd = cd.clone();
        let key = self.buffer_key()?;
        let vocab = self.decoder.config.vocab;
        let mut graphs = std::mem::take(&mut self.graph);
        let stepped = graphs.step(&cd, key, vocab, || {
            let (x, copied, _) = self.run_device_step(id)?;
            Ok((self.device_logits(&x)?, copied))
        });
        self.graph = graphs;
        Ok(match stepped? {
            graph::Stepped::Warmed(l, c) => Some((l, c)),
            graph::Stepped::Captured(l, c) => {
                self.graph_stats.captures += 1;
                Some((l, c))
            }
            graph::Stepped::Replayed(l, c) => {
                self.graph_stats.replays += 1;
                self.decoder.passes.add_one();
                Some((l, c))
            }
            graph::Stepped::Failed(why) => {
                self.graph_stats.fallback = Some(why);
                None
            }
        })
    }

    /// The layer loop of a GPU step at the position the device step holds; returns the last
    /// block's output, whether the step record is on its way to the host (`RecordCopy`, after
    /// the last layer's routing on the side stream) and, when timing, the split so far.
    /// Nothing host-side changes: the step can run eagerly or under capture (`graph`).
    fn run_device_step(&mut self, id: u32) -> Result<(Tensor, bool, Option<StepSplit>)> {
        let dec = self.decoder;
        let step = self.device_step.as_ref().ok_or_else(|| Error::Invalid("a GPU step without its device step".into()))?;
        let opts = ForwardOptions { start: self.ids.len(), device_step: Some(step), ..ForwardOptions::new(self.mode, self.adapter) };
        let record = self.record.clone();
        let (how, k, split) = (self.how(), self.k, self.split);
        let mut over_cache = OverCache {
            layers: &mut self.layers,
            adapter: self.adapter,
            how,
            heads: dec.config.n_heads,
            read: ReadBytes::default(),
            record: record.as_ref(),
            k,
            step: Some(step),
            split: split.then(StepSplit::default),
            // Timed steps route on candle's stream, so that each part's time is its own.
            #[cfg(feature = "cuda")]
            side: if split { None } else { self.side.as_ref() },
            #[cfg(feature = "cuda")]
            routing_on_side: None,
        };
        // `id` is checked on the host; the pass reads the device step's copy.
        let RunEnd::Finished { x, .. } = dec.run(&[&[id]], &opts, &mut over_cache)? else {
            return Err(Error::Invalid("the decode step stopped early".into()));
        };
        let split = over_cache.split;
        #[cfg(feature = "cuda")]
        if let (false, Some(side), Some(rc), Some(rec)) = (self.split, self.side.as_ref(), self.record_copy.as_ref(), record.as_ref()) {
            if self.layers.iter().any(routes_on_device) {
                rc.enqueue(side, rec)?;
                return Ok((x, true, split));
            }
        }
        Ok((x, false, split))
    }

    /// The step's logits (1, vocab) f32 on the device from the last block's output `x`; then
    /// candle's stream waits for the side stream's work (a capture must join every stream it
    /// forked; the record's copy is the side's last work).
    fn device_logits(&self, x: &Tensor) -> Result<Tensor> {
        let l = self.decoder.logits_unchecked(x)?.to_dtype(candle_core::DType::F32)?;
        #[cfg(feature = "cuda")]
        if let Some(side) = &self.side {
            side.join()?;
        }
        Ok(l)
    }

    /// After a GPU step (run or replayed), before its logits are read: every cache counts the
    /// token, the layers routed on the device get their rows into the host's copy of the
    /// routing from the step record (one copy for all layers: scores, memberships, top-k set,
    /// Sinkhorn state; `copied`: it is coming through `RecordCopy`, while the device still runs
    /// the last layer and the logits), and the bytes each layer's attention read are counted
    /// from the host's copy.
    fn commit_device_step(&mut self, record: Option<&Tensor>, copied: bool) -> Result<ReadBytes> {
        for c in &mut self.layers {
            c.commit_step()?;
        }
        let rec = match record {
            #[cfg(feature = "cuda")]
            Some(_) if copied => Some(self.record_copy.as_ref().ok_or_else(|| Error::Invalid("a record copy without its buffer".into()))?.wait()?.to_vec()),
            Some(r) if self.layers.iter().any(routes_on_device) => Some(r.to_vec1::<f64>()?),
            _ => None,
        };
        #[cfg(not(feature = "cuda"))]
        let _ = copied;
        let how = self.how();
        let mut read = ReadBytes::default();
        for l in 0..self.layers.len() {
            if let (Some(rec), true) = (&rec, routes_on_device(&self.layers[l])) {
                self.fill_host_routing(l, rec)?;
            }
            let cache = &self.layers[l];
            let how = if cache.routing.is_some() { how } else { DecodeAttention::Dense };
            read.add(decode::device_read_bytes(cache, how, &self.decoder.blocks[l].attn)?);
        }
        Ok(read)
    }

    /// The step record for routing on the device: on a GPU with causal Sinkhorn, one slice of
    /// `record_len` values per layer; `None` where steps route on the host.
    fn device_record(&mut self) -> Result<Option<candle_core::Tensor>> {
        #[cfg(feature = "cuda")]
        if let (Some(a), candle_core::Device::Cuda(_)) = (self.adapter, &self.decoder.device) {
            if a.config.causal_sinkhorn && self.record.is_none() {
                let n = self.layers.len() * crate::attention::cuda::route::record_len(a.config.groups, a.config.sinkhorn_iters);
                self.record = Some(candle_core::Tensor::zeros(n, candle_core::DType::F64, &self.decoder.device)?);
            }
            return Ok(self.record.clone());
        }
        Ok(None)
    }

    /// Layer `l`'s newest row, routed on the device, into the host's copy of its routing, from
    /// the step record `rec` (the whole record on the host).
    fn fill_host_routing(&mut self, l: usize, rec: &[f64]) -> Result<()> {
        let a = self.adapter.ok_or_else(|| Error::Invalid("device routing without an adapter".into()))?;
        let (kk, iters) = (a.config.groups, a.config.sinkhorn_iters);
        let len = (2 + iters) * kk;
        let row = &rec[l * len..(l + 1) * len];
        let scores: Vec<f32> = row[..kk].iter().map(|&x| x as f32).collect();
        let memb: Vec<f32> = row[kk..2 * kk].iter().map(|&x| x as f32).collect();
        a.check_memberships(l, &memb)?;
        let cache = &mut self.layers[l];
        let r = cache.routing.as_mut().ok_or_else(|| Error::Invalid(format!("layer {l} routed on the device has no routing")))?;
        r.push(&scores, &memb);
        if let Some(st) = r.sinkhorn.as_mut() {
            st.set_state(&row[2 * kk..]);
        }
        if let Some(kv) = cache.device.as_mut() {
            kv.routed = kv.len;
        }
        Ok(())
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
        let logits = self.decoder.host_logits(&x.narrow(0, ids.len() - 1, 1)?)?;
        self.ids.extend_from_slice(ids);
        Ok(Step { logits, groups: self.newest_groups(), read: ReadBytes::default(), split: None })
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

/// Whether a cache's newest token is routed on the device in a GPU step: it is on a GPU and
/// keeps routing with causal Sinkhorn's state (the generator then has a step record).
fn routes_on_device(c: &LayerCache) -> bool {
    c.device.is_some() && c.routing.as_ref().is_some_and(|r| r.sinkhorn.is_some())
}

/// A cached step's hook: each layer's new key and value into its cache, the new token routed
/// incrementally (causal Sinkhorn's running state, or the newest row of the prefix's
/// whole-sequence Sinkhorn in dense mode), and its attention over the cache
/// (`attention::decode`). In a GPU step (`step`) the rows go in at the device step's position
/// and the routing runs on the device when it can (causal Sinkhorn, a step record); the host's
/// counts follow after the step (`Generator::commit_device_step`).
struct OverCache<'c> {
    layers: &'c mut [LayerCache],
    adapter: Option<&'c Adapter>,
    how: DecodeAttention,
    heads: usize,
    /// Bytes read from the caches, summed over the layers counted so far (host steps).
    read: ReadBytes,
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    record: Option<&'c Tensor>,
    /// k of the top-k sets.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    k: usize,
    /// A GPU step: the token's id and position on the device.
    step: Option<&'c DeviceStep>,
    split: Option<StepSplit>,
    /// A GPU step's side stream for the routing kernels (`normed`), and the layer routed there
    /// whose outputs the attention has yet to wait for, with its input kept alive until then.
    #[cfg(feature = "cuda")]
    side: Option<&'c crate::attention::cuda::route::SideStream>,
    #[cfg(feature = "cuda")]
    routing_on_side: Option<(usize, Tensor)>,
}

impl<'c> OverCache<'c> {
    fn new(g: &'c mut Generator<'_>, record: Option<&'c Tensor>, step: Option<&'c DeviceStep>) -> Self {
        let (how, heads, k, split) = (g.how(), g.decoder.config.n_heads, g.k, g.split.then(StepSplit::default));
        OverCache { layers: &mut g.layers, adapter: g.adapter, how, heads, read: ReadBytes::default(), record, k, step, split, #[cfg(feature = "cuda")] side: None, #[cfg(feature = "cuda")] routing_on_side: None }
    }

    /// `f`'s time added to one part of the split, between device synchronisations.
    fn timed<T>(&mut self, part: fn(&mut StepSplit) -> &mut f64, dev: &candle_core::Device, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        if self.split.is_none() {
            return f(self);
        }
        dev.synchronize()?;
        let t0 = Instant::now();
        let out = f(self)?;
        dev.synchronize()?;
        if let Some(s) = self.split.as_mut() {
            *part(s) += t0.elapsed().as_secs_f64();
        }
        Ok(out)
    }

    /// Routes layer `l`'s newest token on the device (a GPU step with causal Sinkhorn): its
    /// memberships, top-k set and Sinkhorn state into the cache's device mirror, its record
    /// into the step record. False when the layer does not route there.
    /// `side`: run the kernel on this stream (the caller joins it before the attention).
    #[cfg(feature = "cuda")]
    fn route_on_device(&mut self, l: usize, a: &Adapter, h: &Tensor, norm: Option<&Norm>, side: Option<&crate::attention::cuda::route::SideStream>) -> Result<bool> {
        if let (Some(rec), Some(step), true) = (self.record, self.step, routes_on_device(&self.layers[l])) {
            use crate::attention::cuda::route::{record_len, route_newest_on, RouteParams, RouteTarget};
            let cache = &self.layers[l];
            let (Some(kv), Some(st)) = (cache.device.as_ref(), cache.routing.as_ref().and_then(|r| r.sinkhorn.as_ref())) else { return Ok(false) };
            let (Some(memb), Some(masks), Some(state)) = (kv.memberships.as_ref(), kv.masks.as_ref(), kv.sinkhorn_state.as_ref()) else {
                return Err(Error::Invalid(format!("layer {l}: the device cache has no routing mirror")));
            };
            if kv.routed != kv.len {
                return Err(Error::Invalid(format!("layer {l}: the device routing holds {} rows before token {}", kv.routed, kv.len)));
            }
            let c = &a.config;
            let router = &a.layers[l];
            let params = RouteParams {
                proj: &router.proj,
                centroids: &router.centroids,
                input_scale: router.input_scale.as_ref(),
                cosine: c.score == crate::focus::adapter::Score::Cosine,
                tau: st.tau(),
                iters: st.iters(),
                k: self.k,
                // The kernel applies an RMS norm (`Block::prenorm_in_kernels` passes no other).
                norm: match norm {
                    Some(n) if n.kind != crate::model::config::NormKind::Rms => return Err(Error::Invalid(format!("layer {l}: the routing kernel applies RMS norms only"))),
                    n => n.map(|n| (&n.weight, n.eps as f32)),
                },
            };
            let len = record_len(c.groups, c.sinkhorn_iters);
            route_newest_on(h, params, RouteTarget { run: state, memberships: memb, masks, step: step.buf(), record: rec, record_at: l * len }, side)?;
            return Ok(true);
        }
        Ok(false)
    }

    #[cfg(not(feature = "cuda"))]
    fn route_on_device(&mut self, _l: usize, _a: &Adapter, _h: &Tensor, _norm: Option<&Norm>, _side: Option<&()>) -> Result<bool> {
        Ok(false)
    }

    /// Routes layer `l`'s newest token on the host (its scores read back from the device on a
    /// GPU) and brings the device's copy up to date.
    fn route(&mut self, l: usize, a: &Adapter, inp: &AttentionInputs) -> Result<()> {
        let cache = &mut self.layers[l];
        let Some(r) = cache.routing.as_mut() else { return Ok(()) };
        let (_, scores) = a.scores(l, &inp.normed()?)?;
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
        cache.sync_routing()
    }
}

impl LayerHook for OverCache<'_> {
    /// A GPU step with a side stream starts the layer's routing kernel there, beside the Q/K/V
    /// products; `attend` waits for it before the attention reads the token's set.
    fn normed(&mut self, l: usize, h: &Tensor, norm: Option<&Norm>) -> Result<()> {
        #[cfg(feature = "cuda")]
        if let (Some(a), Some(side)) = (self.adapter, self.side) {
            if self.route_on_device(l, a, h, norm, Some(side))? {
                self.routing_on_side = Some((l, h.clone()));
            }
        }
        let _ = (l, h, norm);
        Ok(())
    }

    /// A GPU step's pre-norms run inside the Q/K/V products and the routing kernels.
    fn prenorm(&self) -> bool {
        self.step.is_some()
    }

    fn attend(&mut self, l: usize, inp: &AttentionInputs, own: &LayerAttention) -> Result<Option<Tensor>> {
        let dev = inp.q.device().clone();
        match self.step {
            Some(step) => self.layers[l].append_step(&inp.k, &inp.v, step.buf())?,
            None => self.layers[l].push(&inp.k, &inp.v)?,
        }
        #[cfg(feature = "cuda")]
        let routed_on_side = match (self.routing_on_side.take(), self.side) {
            (Some((rl, _h)), Some(side)) if rl == l => {
                side.join()?;
                true
            }
            (Some((rl, _)), _) => return Err(Error::Invalid(format!("layer {l}: layer {rl}'s routing on the side stream was never waited for"))),
            _ => false,
        };
        #[cfg(not(feature = "cuda"))]
        let routed_on_side = false;
        if let (Some(a), false) = (self.adapter, routed_on_side) {
            self.timed(|s| &mut s.routing_s, &dev, |me| if me.route_on_device(l, a, &inp.h, inp.h_norm.as_ref(), None)? { Ok(()) } else { me.route(l, a, inp) })?;
        }
        let how = if self.layers[l].routing.is_some() { self.how } else { DecodeAttention::Dense };
        let heads = self.heads;
        let o = self.timed(|s| &mut s.attention_s, &dev, |me| {
            let cache = &me.layers[l];
            match me.step {
                // The bytes are counted after the step, from the host's copy.
                Some(step) => decode::attend_step(&inp.q, heads, cache, how, own, step.buf()),
                None => {
                    let (o, read) = decode::attend(&inp.q, heads, cache, how, own)?;
                    me.read.add(read);
                    Ok(o)
                }
            }
        })?;
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

#[cfg(test)]
mod tests;
#[cfg(all(test, feature = "cuda"))]
mod tests_cuda;
