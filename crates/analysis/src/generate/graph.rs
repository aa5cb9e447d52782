//! A GPU generation step as one CUDA graph. A decode step of a small model is hundreds of
//! small kernels (projections, norms, RoPE, the cache append, routing, attention, the MLP, per
//! layer), and launching them one by one from the host costs more than running them. Captured
//! once and replayed, the step is one launch.
//!
//! What makes a step replayable: everything position-dependent is read on the device
//! (`model::step::DeviceStep`, written before each step), nothing inside the step uploads or
//! reads back, and no buffer the step touches moves between replays. The caches are reserved
//! before the step (`LayerCache::reserve_device`); when a cache grows (its capacity doubles)
//! the buffers move, and the generator captures again. The graph's key is the set of those
//! addresses.
//!
//! The cycle: a step over new buffers runs eagerly with candle's upload cache on
//! (`enable_cuda_graph_htod_cache`: the small uploads candle makes for kernel shapes are cached
//! by content, and under capture an upload that is not cached is an error, so an upload that
//! depends on the position cannot slip into a graph); the next step is captured and launched;
//! later steps replay it. The host's bookkeeping (cache lengths, its copy of the routing, the
//! bytes read) runs after every step alike (`Generator::commit_device_step`). Replayed and
//! eager steps run the same kernels with the same launch shapes, so their logits are equal.
//! A capture that fails turns graphs off for this generator (`GraphStats::fallback` says why)
//! and the step runs eagerly.

use super::{Generator, GraphStats, Strategy};
use crate::error::{Error, Result};
use candle_core::cuda_backend::cudarc::driver::{sys, CudaGraph, DevicePtr};
use candle_core::{DType, Device, Storage, Tensor};

/// The generator's graph and what it did.
pub(super) struct StepGraphs {
    /// Whether steps may be graphs (`Generator::set_graph`).
    pub on: bool,
    state: State,
    pub stats: GraphStats,
}

impl Default for StepGraphs {
    fn default() -> Self {
        StepGraphs { on: true, state: State::Cold, stats: GraphStats::default() }
    }
}

impl StepGraphs {
    /// Forgets the captured graph (the next step starts the cycle again).
    pub fn reset(&mut self) {
        self.state = State::Cold;
    }
}

enum State {
    /// The next step runs eagerly with the upload cache on.
    Cold,
    /// A step ran that way over these buffers: the next is captured.
    Warm(Vec<u64>),
    Ready(StepGraph),
}

struct StepGraph {
    exec: CudaGraph,
    /// The addresses of the buffers the graph reads and writes.
    key: Vec<u64>,
    /// The logits the graph writes (1, vocab).
    logits: Tensor,
    /// Whether the graph copies the step record to the host (`RecordCopy`).
    copied: bool,
}

// SAFETY: a CUDA graph may be launched from any thread in its context (cudarc binds the context
// before a launch); the generator owns the graph and launches it only after the previous step
// finished (its logits were read back), so no two threads use it at once.
unsafe impl Send for StepGraph {}

/// The device address of a tensor's first element.
fn address(t: &Tensor) -> Result<u64> {
    let (s, l) = t.storage_and_layout();
    let Storage::Cuda(c) = &*s else { return Err(Error::Invalid("graph key: a tensor is not on the CUDA device".into())) };
    let stream = c.device.cuda_stream();
    let base = match t.dtype() {
        DType::F32 => c.as_cuda_slice::<f32>()?.device_ptr(&stream).0,
        DType::F64 => c.as_cuda_slice::<f64>()?.device_ptr(&stream).0,
        DType::I64 => c.as_cuda_slice::<i64>()?.device_ptr(&stream).0,
        DType::U32 => c.as_cuda_slice::<u32>()?.device_ptr(&stream).0,
        dt => return Err(Error::Invalid(format!("graph key: unexpected dtype {dt:?}"))),
    };
    Ok(base + (l.start_offset() * t.dtype().size_in_bytes()) as u64)
}

fn driver(what: &str, e: impl std::fmt::Debug) -> Error {
    Error::Invalid(format!("CUDA graph: {what}: {e:?}"))
}

impl Generator<'_> {
    /// Whether this generator's GPU steps can be graphs: cached steps on a CUDA device, every
    /// layer's cache on it and routed there (or not routed), no timing of parts.
    fn graph_applies(&self) -> bool {
        self.graph.on
            && !self.split
            && self.strategy == Strategy::KvCache
            && matches!(self.decoder.device, Device::Cuda(_))
            && self.layers.iter().all(|c| c.device.is_some() && (c.routing.is_none() || (super::routes_on_device(c) && self.record.is_some())))
    }

    /// The buffers a step reads and writes besides the weights: every cache's keys, values and
    /// routing mirror, the step record and the device step.
    fn buffer_key(&self) -> Result<Vec<u64>> {
        let mut key = Vec::new();
        for c in &self.layers {
            let kv = c.device.as_ref().ok_or_else(|| Error::Invalid("graph key: a cache on the host".into()))?;
            key.push(address(&kv.k)?);
            key.push(address(&kv.v)?);
            for t in [&kv.masks, &kv.memberships, &kv.sinkhorn_state].into_iter().flatten() {
                key.push(address(t)?);
            }
        }
        for t in [self.record.as_ref(), self.device_step.as_ref().map(|s| s.buf())].into_iter().flatten() {
            key.push(address(t)?);
        }
        Ok(key)
    }

    /// A GPU step by way of the graph, where it applies (after `DeviceStep::write`): its logits
    /// on the device (read after the record, `Generator::commit_device_step`) and whether the
    /// step copies its record to the host. `None`: run the step eagerly (graphs off or not
    /// applicable, or the capture failed).
    pub(super) fn graphed_step(&mut self, id: u32) -> Result<Option<(Tensor, bool)>> {
        if !self.graph_applies() {
            return Ok(None);
        }
        let Device::Cuda(cd) = &self.decoder.device else { return Ok(None) };
        let cd = cd.clone();
        let key = self.buffer_key()?;
        match std::mem::replace(&mut self.graph.state, State::Cold) {
            State::Ready(g) if g.key == key => {
                g.exec.launch().map_err(|e| driver("launch", e))?;
                let out = (g.logits.clone(), g.copied);
                self.graph.state = State::Ready(g);
                self.graph.stats.replays += 1;
                self.decoder.passes.add_one();
                Ok(Some(out))
            }
            State::Warm(k) if k == key => match self.capture(&cd, key, id) {
                Ok(g) => {
                    g.exec.launch().map_err(|e| driver("launch", e))?;
                    let out = (g.logits.clone(), g.copied);
                    self.graph.state = State::Ready(g);
                    self.graph.stats.captures += 1;
                    Ok(Some(out))
                }
                Err(e) => {
                    self.graph.on = false;
                    self.graph.stats.fallback = Some(e.to_string());
                    Ok(None)
                }
            },
            _ => {
                // The warm-up: eager, with the upload cache on.
                let _cache = cd.enable_cuda_graph_htod_cache();
                let (x, copied, _) = self.run_device_step(id)?;
                let logits = self.device_logits(&x)?;
                self.graph.state = State::Warm(key);
                Ok(Some((logits, copied)))
            }
        }
    }

    /// Captures the step (the device step already written) into a graph; nothing runs yet.
    fn capture(&mut self, cd: &candle_core::cuda_backend::CudaDevice, key: Vec<u64>, id: u32) -> Result<StepGraph> {
        let logits = Tensor::zeros((1, self.decoder.lm_head.dim(0)?), DType::F32, &self.decoder.device)?;
        let stream = cd.cuda_stream();
        let _cache = cd.enable_cuda_graph_htod_cache();
        stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).map_err(|e| driver("begin capture", e))?;
        // Every temporary of the step is allocated and freed inside the capture (graph memory
        // nodes); only `logits` outlives it.
        let body = self.run_device_step(id).and_then(|(x, copied, _)| {
            logits.slice_set(&self.device_logits(&x)?, 0, 0)?;
            Ok(copied)
        });
        let end = stream.end_capture(sys::CUgraphInstantiate_flags(0));
        let copied = body?;
        let exec = end.map_err(|e| driver("end capture", e))?.ok_or_else(|| Error::Invalid("CUDA graph: the capture recorded nothing".into()))?;
        Ok(StepGraph { exec, key, logits, copied })
    }
}
