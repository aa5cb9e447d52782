//! What an analysis keeps of its own model passes, so that the GUI's partners, attention grids
//! and compares of the analysed text need no new pass: per kept segment, every layer's queries
//! and keys (after RoPE) and routing (`partners::SequenceHeads`, f32, exactly what the pass
//! computed) and the residual stream after the last block (a compare's per-token losses).
//!
//! Memory is bounded by a byte budget the caller gives (`pass_bytes` says what one pass costs):
//! segments are kept in order while they fit. About 190 MB for a 2048-token segment of
//! SmolLM2-135M (30 layers x 12 heads x 2048 tokens x 64 dims x 4 bytes), 47 MB for 512 tokens.
//! The segments beyond it go to a scratch file when the caller gives one (`Scratch`: an
//! unnamed file, gone when the last pass that reads it is dropped; `SpilledPass::load` reads a
//! segment back whole, the same f32 values, in a fraction of a second), else are not kept
//! (their first look runs a pass).

use crate::analysis::partners::{Heads, SequenceHeads};
use crate::attention::Mode;
use crate::error::{Error, Result};
use crate::focus::router::LayerRouting;
use crate::model::block::AttentionInputs;
use crate::model::decoder::LayerHook;
use crate::model::ModelConfig;
use candle_core::Tensor;
use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// One kept pass: the sequence `tokens[start..start + tokens()]` run from position 0 in `mode`.
pub struct KeptPass {
    /// The first token's index in the analysed text.
    pub start: usize,
    pub mode: Mode,
    /// Whether the adapter routed with causal Sinkhorn (then a prefix of the pass is the pass of
    /// that prefix; with whole-sequence Sinkhorn it is not).
    pub causal: bool,
    pub heads: Arc<SequenceHeads>,
    /// The residual stream after the last block, (T, d_model), before the final norm.
    pub last: Tensor,
}

impl std::fmt::Debug for KeptPass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KeptPass {{ start: {}, tokens: {}, mode: {} }}", self.start, self.tokens(), self.mode)
    }
}

impl KeptPass {
    pub fn tokens(&self) -> usize {
        self.heads.tokens()
    }

    /// The bytes it holds.
    pub fn bytes(&self) -> usize {
        let heads: usize = self.heads.layers.iter().map(|(h, r)| h.bytes() + r.as_ref().map_or(0, |r| 4 * (r.scores.len() + r.memberships.len()))).sum();
        heads + self.last.elem_count() * self.last.dtype().size_in_bytes()
    }

    /// Can this pass stand for a run of `mode` over the first `n` tokens of its sequence
    /// (from position 0)? The same mode, and either the whole pass or, with causal routing, a
    /// prefix of it (whole-sequence Sinkhorn routes earlier tokens by later ones).
    pub fn serves(&self, mode: Mode, n: usize) -> bool {
        self.start == 0 && self.mode == mode && (n == self.tokens() || (self.causal && n <= self.tokens()))
    }
}

/// Bytes a kept pass of `t` tokens holds: queries and keys of every layer, each layer's routing
/// scores and memberships (`groups` per token), and the last residual.
pub fn pass_bytes(cfg: &ModelConfig, groups: usize, t: usize) -> usize {
    let per_layer = (cfg.n_heads + cfg.n_kv_heads) * cfg.head_dim + 2 * groups;
    4 * t * (cfg.n_layers * per_layer + cfg.d_model)
}

/// A layer hook that keeps what each layer sees (`KeptPass`'s heads), or nothing when `keep` is
/// off, and reports each layer as it starts (`progress(layer)`).
pub(crate) struct Keeper<'a> {
    pub keep: bool,
    pub layers: Vec<(Heads, Option<LayerRouting>)>,
    pub err: Option<Error>,
    pub progress: &'a mut (dyn FnMut(usize) + Send),
}

impl LayerHook for Keeper<'_> {
    fn inputs(&mut self, l: usize, inp: &AttentionInputs, routing: Option<&LayerRouting>) -> ControlFlow<()> {
        (self.progress)(l);
        if self.keep {
            match Heads::new(&inp.q, &inp.k) {
                // The routing vectors are not needed by partners, grids or compares.
                Ok(h) => self.layers.push((h, routing.map(|r| LayerRouting { t: r.t, groups: r.groups, scores: r.scores.clone(), memberships: r.memberships.clone(), vectors: None, d_g: r.d_g }))),
                Err(e) => {
                    self.err = Some(e);
                    return ControlFlow::Break(());
                }
            }
        }
        ControlFlow::Continue(())
    }
}

impl Keeper<'_> {
    /// The kept pass, once the pass has finished (`last`: its residual stream).
    pub fn finish(self, start: usize, mode: Mode, causal: bool, last: Tensor) -> Result<Option<KeptPass>> {
        if let Some(e) = self.err {
            return Err(e);
        }
        Ok(self.keep.then(|| KeptPass { start, mode, causal, heads: Arc::new(SequenceHeads { layers: self.layers }), last }))
    }
}

/// Where the kept passes beyond the memory budget go: a scratch file (the caller makes it, e.g.
/// an unnamed temporary file on disk) and a byte budget shared by every `Scratch` of the caller
/// (`pool`: the bytes their live files hold, at most `limit`; a file gives its bytes back when
/// it closes). A write that fails (a full disk) keeps nothing more, never an error.
pub struct Scratch {
    file: Mutex<(std::fs::File, u64)>,
    pool: Arc<AtomicU64>,
    limit: u64,
    /// The bytes this file took from the pool.
    taken: AtomicU64,
}

impl Scratch {
    pub fn new(file: std::fs::File, pool: Arc<AtomicU64>, limit: u64) -> Arc<Scratch> {
        Arc::new(Scratch { file: Mutex::new((file, 0)), pool, limit, taken: AtomicU64::new(0) })
    }

    /// Takes `bytes` from the pool if they fit its limit.
    fn reserve(&self, bytes: u64) -> bool {
        let ok = self.pool.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| (used + bytes <= self.limit).then_some(used + bytes)).is_ok();
        if ok {
            self.taken.fetch_add(bytes, Ordering::SeqCst);
        }
        ok
    }

    /// Writes `pass`'s heads and routing at the file's end: `None` when they do not fit the
    /// budget or the write fails.
    pub fn spill(self: &Arc<Self>, pass: &KeptPass) -> Option<SpilledPass> {
        let bytes = pass.heads.layers.iter().map(|(h, r)| h.bytes() + r.as_ref().map_or(0, |r| 4 * (r.scores.len() + r.memberships.len()))).sum::<usize>() as u64;
        if !self.reserve(bytes) {
            return None;
        }
        let mut f = self.file.lock().unwrap_or_else(|e| e.into_inner());
        if f.1 == u64::MAX {
            return None;
        }
        let offset = f.1;
        let mut layers = Vec::with_capacity(pass.heads.layers.len());
        let written = (|| -> std::io::Result<()> {
            f.0.seek(SeekFrom::Start(offset))?;
            let mut w = std::io::BufWriter::with_capacity(1 << 20, &mut f.0);
            for (h, r) in &pass.heads.layers {
                let (shape, q, k) = h.raw();
                w.write_all(f32_bytes(q))?;
                w.write_all(f32_bytes(k))?;
                if let Some(r) = r {
                    w.write_all(f32_bytes(&r.scores))?;
                    w.write_all(f32_bytes(&r.memberships))?;
                }
                layers.push((shape, r.as_ref().map(|r| (r.t, r.groups, r.d_g))));
            }
            w.flush()
        })();
        if written.is_err() {
            // Nothing more goes to this file (the space stays reserved until it closes).
            f.1 = u64::MAX;
            return None;
        }
        f.1 = offset + bytes;
        Some(SpilledPass { start: pass.start, mode: pass.mode, causal: pass.causal, scratch: self.clone(), offset, bytes, layers })
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        self.pool.fetch_sub(*self.taken.get_mut(), Ordering::SeqCst);
    }
}

/// A kept pass's heads and routing in a `Scratch` file (its last residual is not kept: only a
/// pass from position 0 serves a compare, and the first segment is kept in memory first).
pub struct SpilledPass {
    pub start: usize,
    pub mode: Mode,
    pub causal: bool,
    scratch: Arc<Scratch>,
    offset: u64,
    bytes: u64,
    /// Per layer: (H, Hkv, T, D) and the routing's (T, K, d_g).
    layers: Vec<([usize; 4], Option<(usize, usize, usize)>)>,
}

impl std::fmt::Debug for SpilledPass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SpilledPass {{ start: {}, tokens: {}, mode: {}, bytes: {} }}", self.start, self.tokens(), self.mode, self.bytes)
    }
}

impl SpilledPass {
    pub fn tokens(&self) -> usize {
        self.layers.first().map_or(0, |l| l.0[2])
    }

    /// The bytes it holds on disk.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Its heads, read back: exactly the values the pass computed.
    pub fn load(&self) -> Result<SequenceHeads> {
        let mut f = self.scratch.file.lock().unwrap_or_else(|e| e.into_inner());
        let io = |e: std::io::Error| Error::Invalid(format!("reading a kept pass back from its scratch file: {e}"));
        f.0.seek(SeekFrom::Start(self.offset)).map_err(io)?;
        let mut r = std::io::BufReader::with_capacity(1 << 20, &mut f.0);
        let mut layers = Vec::with_capacity(self.layers.len());
        for &(shape, routing) in &self.layers {
            let [h, hkv, t, d] = shape;
            let q = read_f32s(&mut r, h * t * d).map_err(io)?;
            let k = read_f32s(&mut r, hkv * t * d).map_err(io)?;
            let routing = match routing {
                Some((t, groups, d_g)) => {
                    let scores = read_f32s(&mut r, t * groups).map_err(io)?;
                    let memberships = read_f32s(&mut r, t * groups).map_err(io)?;
                    Some(LayerRouting { t, groups, scores, memberships, vectors: None, d_g })
                }
                None => None,
            };
            layers.push((Heads::from_raw(shape, q, k)?, routing));
        }
        Ok(SequenceHeads { layers })
    }
}

fn f32_bytes(v: &[f32]) -> &[u8] {
    // SAFETY: f32 has no padding; any byte view of initialised f32s is valid to read.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

fn read_f32s(r: &mut impl Read, n: usize) -> std::io::Result<Vec<f32>> {
    let mut v = vec![0f32; n];
    // SAFETY: every bit pattern is a valid f32, so the bytes may be written through a byte view.
    let b = unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, n * 4) };
    r.read_exact(b)?;
    Ok(v)
}
