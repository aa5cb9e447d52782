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
//! bytes read) runs after every step alike (`commit_device_step` in mod.rs). Replayed and
//! eager steps run the same kernels with the same launch shapes, so their logits are equal.
//! A capture that fails turns graphs off for this generator (`Stepped::Failed` says why)
//! and the step runs eagerly.

use crate::error::{Error, Result};
use candle_core::cuda_backend::cudarc::driver::{sys, CudaGraph, DevicePtr};
use candle_core::cuda_backend::CudaDevice;
use candle_core::{DType, Device, Storage, Tensor};

/// The generator's graph.
pub(super) struct StepGraphs {
    /// Whether steps may be graphs (`Generator::set_graph`).
    pub on: bool,
    state: State,
}

/// What one step through `StepGraphs::step` did; each carries the step's logits (1, vocab) on
/// the device and whether the step copies its record to the host.
pub enum Stepped {
    /// Eagerly, with the upload cache on (the next step over these buffers is captured).
    Warmed(Tensor, bool),
    /// Captured and launched.
    Captured(Tensor, bool),
    /// Replayed from the graph (no pass of the decoder's own ran).
    Replayed(Tensor, bool),
    /// The capture failed (why): graphs are now off, run the step eagerly.
    Failed(String),
}

impl Default for StepGraphs {
    fn default() -> Self {
        StepGraphs { on: true, state: State::Cold }
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

/// The device address of a tensor's first element (for the graph's key).
pub(super) fn address(t: &Tensor) -> Result<u64> {
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

impl StepGraphs {
    /// One GPU step by way of the graph (after `DeviceStep::write`), over the buffers whose
    /// addresses are `key` (`Generator::buffer_key`), with `vocab` logits. `step` runs the step eagerly and gives its
    /// logits (1, vocab) on the device and whether it copies its record to the host; it is
    /// called for the warm-up and, under capture, once more.
    pub fn step(&mut self, cd: &CudaDevice, key: Vec<u64>, vocab: usize, mut step: impl FnMut() -> Result<(Tensor, bool)>) -> Result<Stepped> {
        match std::mem::replace(&mut self.state, State::Cold) {
            State::Ready(g) if g.key == key => {
                g.exec.launch().map_err(|e| driver("launch", e))?;
                let out = Stepped::Replayed(g.logits.clone(), g.copied);
                self.state = State::Ready(g);
                Ok(out)
            }
            State::Warm(k) if k == key => match capture(cd, key, vocab, &mut step) {
                Ok(g) => {
                    g.exec.launch().map_err(|e| driver("launch", e))?;
                    let out = Stepped::Captured(g.logits.clone(), g.copied);
                    self.state = State::Ready(g);
                    Ok(out)
                }
                Err(e) => {
                    self.on = false;
                    Ok(Stepped::Failed(e.to_string()))
                }
            },
            _ => {
                // The warm-up: eager, with the upload cache on.
                let _cache = cd.enable_cuda_graph_htod_cache();
                let (logits, copied) = step()?;
                self.state = State::Warm(key);
                Ok(Stepped::Warmed(logits, copied))
            }
        }
    }
}

/// Captures `step` (the device step already written) into a graph; nothing runs yet.
fn capture(cd: &CudaDevice, key: Vec<u64>, vocab: usize, step: &mut impl FnMut() -> Result<(Tensor, bool)>) -> Result<StepGraph> {
    let logits = Tensor::zeros((1, vocab), DType::F32, &Device::Cuda(cd.clone()))?;
    let stream = cd.cuda_stream();
    let _cache = cd.enable_cuda_graph_htod_cache();
    stream.begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL).map_err(|e| driver("begin capture", e))?;
    // Every temporary of the step is allocated and freed inside the capture (graph memory
    // nodes); only `logits` outlives it.
    let body = step().and_then(|(l, copied)| {
        logits.slice_set(&l, 0, 0)?;
        Ok(copied)
    });
    let end = stream.end_capture(sys::CUgraphInstantiate_flags(0));
    let copied = body?;
    let exec = end.map_err(|e| driver("end capture", e))?.ok_or_else(|| Error::Invalid("CUDA graph: the capture recorded nothing".into()))?;
    Ok(StepGraph { exec, key, logits, copied })
}
