//! What an analysis keeps of its own model passes, so that the GUI's partners, attention grids
//! and compares of the analysed text need no new pass: per kept segment, every layer's queries
//! and keys (after RoPE) and routing (`partners::SequenceHeads`, f32, exactly what the pass
//! computed) and the residual stream after the last block (a compare's per-token losses).
//!
//! Memory is bounded by a byte budget the caller gives (`pass_bytes` says what one pass costs):
//! segments are kept in order while they fit, the rest are not kept (their first look runs a
//! pass, as before). About 190 MB for a 2048-token segment of SmolLM2-135M (30 layers x 12 heads
//! x 2048 tokens x 64 dims x 4 bytes), 47 MB for 512 tokens.

use crate::analysis::partners::{Heads, SequenceHeads};
use crate::attention::Mode;
use crate::error::{Error, Result};
use crate::focus::router::LayerRouting;
use crate::model::block::AttentionInputs;
use crate::model::decoder::LayerHook;
use crate::model::ModelConfig;
use candle_core::Tensor;
use std::ops::ControlFlow;
use std::sync::Arc;

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
