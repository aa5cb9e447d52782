//! The training forward: the logits of a batch of sequences through the frozen model with
//! its routers, differentiable with respect to the routers. It runs one of two forms of the
//! same function (`TrainPath`):
//! - the fused step (the default): its own layer loop below, per layer one fused norm, one
//!   Q/K/V matmul, the router, fused Sinkhorn, one fused RoPE + gated attention op
//!   (`attention::SoftAttention`) and the block's fused rest (`block.rs`), with the frozen
//!   weights in bf16 on CUDA (`weights.rs`) and no T x T tensor;
//! - the composed ops: `Decoder::forward_differentiable`, the inference layer loop with
//!   candle's ops (f32, explicit T x T scores and gates), which the shapes the fused kernels
//!   do not take use.
//! tests/differentiable.rs checks that both compute what inference computes.

use super::attention::{SoftAttention, CUDA_HEAD_DIMS, CUDA_MAX_GROUPS, MAX_HARD_GROUPS};
use super::block;
use super::sinkhorn::sinkhorn_fused;
use super::weights::TrainWeights;
use crate::attention::Mode;
use crate::error::{Error, Result};
use crate::focus::gate::GateFn;
use crate::focus::mask;
use crate::model::block::Pass;
use crate::model::config::MlpKind;
use crate::model::decoder::{Decoder, ForwardOptions};
use super::ops::{cross_entropy_capped, seeded};
use candle_core::{DType, Device, Tensor, Var};
use std::sync::atomic::Ordering;

/// Which form of the training step runs (both compute the same function).
#[derive(Clone, Copy)]
pub struct TrainPath<'a> {
    /// The fused step; else the composed ops. The straight-through objective with more than 16
    /// groups (its top-k sets are 16-bit masks) and, on CUDA, the shapes the kernels do not take
    /// (head dims other than 64, 128 and 256, more than 16 groups) always run composed.
    pub fused: bool,
    /// Sinkhorn as one op each way (`sinkhorn::sinkhorn_fused`), in either form.
    pub fused_sinkhorn: bool,
    /// The frozen weights as the fused step reads them (`TrainWeights::new`); built for the
    /// call, in `TrainWeights::default_dtype`, when absent.
    pub weights: Option<&'a TrainWeights>,
}

impl Default for TrainPath<'_> {
    fn default() -> Self {
        TrainPath { fused: true, fused_sinkhorn: true, weights: None }
    }
}

/// The training forward (dense or soft mode) of several sequences of one length as one
/// batched graph: one backward pass per step, and B times fewer (larger) kernel launches on a
/// GPU. Each sequence is routed and balanced on its own, exactly as `Decoder::forward` with
/// `differentiable` set. Returns the logits (B*T, vocab), sequence after sequence (in the
/// fused step's compute dtype: bf16 on CUDA).
pub fn forward(dec: &Decoder, seqs: &[&[u32]], opts: &ForwardOptions, path: TrainPath) -> Result<Tensor> {
    let mut opts = ForwardOptions { differentiable: true, ..*opts };
    if path.fused_sinkhorn {
        opts.balance = sinkhorn_fused;
    }
    if !takes_fused(dec, &opts, path) {
        return dec.forward_differentiable(seqs, &opts);
    }
    let owned;
    let tw = match path.weights {
        Some(tw) => tw,
        None => {
            owned = TrainWeights::new(dec, TrainWeights::default_dtype(&dec.device))?;
            &owned
        }
    };
    fused(dec, seqs, &opts, tw)
}

/// Whether the fused step runs. Its attention op applies a layer's sliding window and
/// soft-capping (Gemma 2) as the composed ops do, so only the objective and, on CUDA, the
/// kernels' shapes decide.
pub(crate) fn takes_fused(dec: &Decoder, opts: &ForwardOptions, path: TrainPath) -> bool {
    let cfg = &dec.config;
    let groups = opts.adapter.map_or(0, |a| a.config.groups);
    let kernels_take_it = match &dec.device {
        Device::Cpu => true,
        _ => CUDA_HEAD_DIMS.contains(&cfg.head_dim) && groups <= CUDA_MAX_GROUPS,
    };
    let hard_ok = opts.straight_through.is_none() || groups <= MAX_HARD_GROUPS;
    path.fused && hard_ok && kernels_take_it
}

/// The fused step's layer loop.
fn fused(dec: &Decoder, seqs: &[&[u32]], opts: &ForwardOptions, tw: &TrainWeights) -> Result<Tensor> {
    dec.check(seqs, opts)?;
    let (b, t) = (seqs.len(), seqs[0].len());
    let pass = Pass::new(&dec.config, b, t, true, &dec.device)?;
    let mut x = dec.embed_at(seqs, 0)?;
    for l in 0..dec.blocks.len() {
        let (y, g) = layer(dec, l, &x, (b, t), opts, tw, &pass)?;
        if let (Some(m), Some(g)) = (opts.memberships, g) {
            m.lock().expect("memberships collector").push(g);
        }
        x = y;
    }
    head(dec, &x, tw)
}

/// Layer `l` of the fused step on the f32 residual stream `x` ((B*T, d_model)): its output,
/// and the memberships (B, T, K) where the adapter routes the layer.
fn layer(dec: &Decoder, l: usize, x: &Tensor, (b, t): (usize, usize), opts: &ForwardOptions, tw: &TrainWeights, pass: &Pass) -> Result<(Tensor, Option<Tensor>)> {
    if opts.cancel.is_some_and(|c| c.load(Ordering::Relaxed)) {
        return Err(Error::Cancelled);
    }
    let (cfg, blk, tb) = (&dec.config, &dec.blocks[l], &tw.blocks[l]);
    let (h, qkv) = block::attention_inputs(blk, x, tb, cfg)?;
    // The adapter, where it routes this layer (`RouterLayers`).
    let routed = opts.adapter.filter(|a| a.config.router_layers.routes(cfg.is_sliding(l)));
    let (gate, hard, g, window, sink) = match routed {
        Some(a) if opts.mode == Mode::Soft && !mask::all_local(t, a.config.window) => {
            let g = a.route_tensor(l, &h, b, opts.sinkhorn_grad, opts.balance)?;
            match opts.straight_through {
                // The hard top-k mask forward, the log gate's gradient back, whatever the
                // adapter's gate (`attention::soft::straight_through_plan`).
                Some(k) => (GateFn::Log { eps: a.config.log_eps as f32 }, Some(k.of(a.config.groups)?), Some(g), a.config.window, a.config.sink),
                None => (GateFn::of(&a.config), None, Some(g), a.config.window, a.config.sink),
            }
        }
        _ => (GateFn::None, None, None, 0, 0),
    };
    let span = blk.attn.span(t);
    let attn = SoftAttention { b, t, heads: cfg.n_heads, kv_heads: cfg.n_kv_heads, head_dim: cfg.head_dim, rope: pass.rope(&blk.attn), gate, window, sink, span, softcap: blk.attn.softcap.map(|c| c as f32), hard };
    let y = block::finish(blk, x, &attn.forward(&qkv, g.as_ref())?, tb)?;
    Ok((y, g))
}

/// The logits of the final residual stream rows `x`.
fn head(dec: &Decoder, x: &Tensor, tw: &TrainWeights) -> Result<Tensor> {
    dec.softcap_logits(head_uncapped(dec, x, tw)?)
}

/// The logits before the final soft-cap (the training loss applies the cap inside the
/// cross-entropy op, `ops::cross_entropy_capped`).
fn head_uncapped(dec: &Decoder, x: &Tensor, tw: &TrainWeights) -> Result<Tensor> {
    tw.lm_head.forward(&block::final_norm(&dec.final_norm, x)?, tw.dtype)
}

/// Rows of logits the recomputing step scores at a time: 2^28 logits a chunk (Llama 3's
/// 128,256-token vocabulary: 2,092 rows, 0.5 GB in bf16, its gradient as much), so that the
/// head's memory does not grow with batch x length (4 x 2,048 tokens of Llama 3 would be
/// 2.1 GB of bf16 logits and 4.2 GB in f32). Fewer rows left the cross-entropy kernels (a
/// block a row) too few blocks: 512-row chunks took 4x the time a row on an H100.
fn head_rows(vocab: usize) -> usize {
    ((1usize << 28) / vocab.max(1)).clamp(64, 8192)
}

/// The auxiliary objective of one routed layer, given its memberships (B, T, K) and the number
/// of layers the adapter routes: a scalar added to the loss (the trainer's sharpening and
/// balance terms, each a mean over routed layers, so a sum of per-layer parts); `None`: none.
pub type LayerTerm<'a> = &'a dyn Fn(&Tensor, usize) -> Result<Option<Tensor>>;

/// What a training step differentiates: the mean next-token loss over `targets` ((B*T,) u32),
/// plus each routed layer's `term`, with respect to `vars`.
pub struct Objective<'a> {
    pub targets: &'a Tensor,
    pub term: LayerTerm<'a>,
    pub vars: &'a [Var],
}

/// The fused step's mean next-token loss and the gradient of every variable of `obj` (None
/// where one gets none), a layer at a time, with activation memory bounded: the forward keeps
/// each layer's input (B*T x d_model f32) and the graphs of the last `keep` layers only; the
/// loss is scored `head_rows` rows at a time; the backward runs layer by layer, last first,
/// recomputing the forward of each layer whose graph was not kept, and differentiates it
/// against the gradient of its output. `keep` = the layer count is the whole graph (no
/// recomputation), 0 recomputes every layer (one more forward's work): the same function and
/// gradients either way (tests below). Needs the fused step (`takes_fused`).
pub fn layer_gradients(dec: &Decoder, seqs: &[&[u32]], opts: &ForwardOptions, tw: &TrainWeights, obj: &Objective, keep: usize) -> Result<(Tensor, Vec<Option<Tensor>>)> {
    layer_gradients_in(dec, seqs, opts, tw, obj, keep, head_rows(dec.config.vocab))
}

/// `layer_gradients` with the head scored `rows` rows at a time.
pub(super) fn layer_gradients_in(dec: &Decoder, seqs: &[&[u32]], opts: &ForwardOptions, tw: &TrainWeights, obj: &Objective, keep: usize, rows: usize) -> Result<(Tensor, Vec<Option<Tensor>>)> {
    let opts = ForwardOptions { differentiable: true, memberships: None, ..*opts };
    dec.check(seqs, &opts)?;
    let (b, t) = (seqs.len(), seqs[0].len());
    let (n, layers) = (b * t, dec.blocks.len());
    if obj.targets.dims() != [n] {
        return Err(Error::Invalid(format!("training step: {} targets for {n} positions", obj.targets.elem_count())));
    }
    let pass = Pass::new(&dec.config, b, t, true, &dec.device)?;
    // The forward: each layer's input, detached; a kept layer's input as a variable, with its
    // output's graph.
    let first_kept = layers - keep.min(layers);
    let mut inputs = vec![dec.embed_at(seqs, 0)?.detach()];
    let mut kept = Vec::new();
    let mut routed = 0;
    for l in 0..layers {
        let (y, g) = if l >= first_kept {
            let xv = Var::from_tensor(&inputs[l])?;
            let (y, g) = layer(dec, l, xv.as_tensor(), (b, t), &opts, tw, &pass)?;
            kept.push((xv, y.clone(), g.clone()));
            (y, g)
        } else {
            layer(dec, l, &inputs[l], (b, t), &opts, tw, &pass)?
        };
        routed += g.is_some() as usize;
        inputs.push(y.detach());
    }
    let mut grads: Vec<Option<Tensor>> = vec![None; obj.vars.len()];
    let mut add = |store: &candle_core::backprop::GradStore| -> Result<()> {
        for (acc, v) in grads.iter_mut().zip(obj.vars) {
            if let Some(g) = store.get(v.as_tensor()) {
                *acc = Some(match acc.take() {
                    Some(a) => (a + g)?,
                    None => g.detach(),
                });
            }
        }
        Ok(())
    };
    // The head, in row chunks: the mean loss and its gradient with respect to the last layer's
    // output.
    let x = inputs.pop().expect("the final residual stream");
    let (mut loss, mut dx) = (Tensor::zeros((), DType::F32, &dec.device)?, Vec::new());
    for r0 in (0..n).step_by(rows.max(1)) {
        let m = rows.min(n - r0);
        let xv = Var::from_tensor(&x.narrow(0, r0, m)?)?;
        let ce = cross_entropy_capped(&head_uncapped(dec, xv.as_tensor(), tw)?, &obj.targets.narrow(0, r0, m)?, dec.config.final_softcap)?;
        let part = (ce.to_dtype(DType::F32)?.sum_all()? / n as f64)?;
        let store = part.backward()?;
        dx.push(store.get(xv.as_tensor()).map(|g| g.detach()).ok_or_else(|| Error::Invalid("training step: the head gave no gradient".into()))?);
        loss = (loss + part.detach())?;
    }
    drop(x);
    let mut dy = Tensor::cat(&dx, 0)?;
    drop(dx);
    // The backward, a layer at a time: y = layer(x) (kept, or recomputed with its graph), then
    // d/dx of <y, dy> (+ the layer's auxiliary term) is dx, and the routers' gradients.
    for l in (0..layers).rev() {
        let x = inputs.pop().expect("a layer's input");
        let (xv, y, g) = if l >= first_kept {
            kept.pop().expect("a kept layer")
        } else {
            let xv = Var::from_tensor(&x)?;
            let (y, g) = layer(dec, l, xv.as_tensor(), (b, t), &opts, tw, &pass)?;
            (xv, y, g)
        };
        drop(x);
        let mut o = seeded(&y, &dy)?;
        if let Some(g) = &g {
            if let Some(extra) = (obj.term)(g, routed)? {
                o = (o + extra.to_dtype(DType::F32)?)?;
            }
        }
        let store = o.backward()?;
        add(&store)?;
        if l > 0 {
            dy = store.get(xv.as_tensor()).map(|g| g.detach()).ok_or_else(|| Error::Invalid(format!("training step: layer {l} gave its input no gradient")))?;
        }
    }
    Ok((loss, grads))
}

/// Bytes a layer's graph holds for the backward of `tokens` positions in the fused step (the
/// f32 residual stream and norms, the projections' outputs in the compute dtype `dtype`, the
/// attention's inputs and output), by count of the step's ops; how many layers' graphs fit
/// (`Recompute::Auto`) is read against it.
pub fn layer_graph_bytes(cfg: &crate::model::ModelConfig, tokens: usize, dtype: DType) -> u64 {
    let c = dtype.size_in_bytes() as u64;
    let (d, f) = (cfg.d_model as u64, cfg.ffn_dim as u64);
    let qkv = ((cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim) as u64;
    let o = (cfg.n_heads * cfg.head_dim) as u64;
    // Six f32 copies of the stream (input, norm, attention output projected, sum, MLP norm,
    // MLP output), two more with Gemma 2's post-norms, the norms' casts, Q/K/V and its rotated
    // copy, the attention output, and the MLP's: SwiGLU's and GeGLU's [gate; up] and the
    // activation in the compute dtype (one op each way); GELU composed in f32 (fc's output and
    // its gelu).
    let post = if cfg.post_norms { 2 * 4 * d } else { 0 };
    let mlp = match cfg.mlp {
        MlpKind::SwiGlu | MlpKind::GeGlu => c * 3 * f,
        MlpKind::GeluTanh => 4 * 2 * f,
    };
    tokens as u64 * (4 * 6 * d + post + c * (2 * d + 2 * qkv + o) + mlp)
}

/// Bytes the head's chunk of `head_rows` rows holds at its peak: the logits and their gradient
/// in the compute dtype, and as much again for the kernels' and the pool's slack (the final
/// soft-cap is computed inside the cross-entropy op).
pub fn head_chunk_bytes(cfg: &crate::model::ModelConfig, dtype: DType) -> u64 {
    (head_rows(cfg.vocab) * cfg.vocab) as u64 * dtype.size_in_bytes() as u64 * 4
}

#[cfg(test)]
mod tests {
    //! Attention sinks [ours] through the whole training forward: the fused step (CPU) computes
    //! what the composed ops and soft inference compute, with the same router gradients, for
    //! s = 0, 1 and 4 on a window small enough that the first tokens are distant.
    use super::*;
    use crate::focus::adapter::{Adapter, AdapterSpec, Gate};
    use crate::model::Model;
    use candle_core::Var;

    fn fixture(arch: &str) -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/hf_tiny").join(arch)
    }

    fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
    }

    /// The next-token loss's gradient with respect to each router variable.
    fn router_grads(logits: &Tensor, ids: &[u32], vars: &[Var]) -> Vec<Tensor> {
        let targets = Tensor::from_slice(&ids[1..], ids.len() - 1, &Device::Cpu).unwrap();
        let loss = candle_nn::loss::cross_entropy(&logits.narrow(0, 0, ids.len() - 1).unwrap(), &targets).unwrap();
        let g = loss.backward().unwrap();
        vars.iter().map(|v| g.get(v.as_tensor()).expect("every router parameter gets a gradient").clone()).collect()
    }

    /// The fused step, the composed ops and soft inference on `ids` with a random adapter of
    /// `spec`: the same logits and the same router gradients. Returns the composed logits.
    fn paths_agree(model: &Model, ids: &[u32], spec: &AdapterSpec, what: &str) -> Tensor {
        let mut adapter = Adapter::random(&model.identity(), &Device::Cpu, spec, 3).unwrap();
        let vars = adapter.trainable_vars().unwrap();
        let o = ForwardOptions::new(Mode::Soft, Some(&adapter));
        let inference = model.decoder.forward(ids, &o).unwrap().logits;
        let fused = forward(&model.decoder, &[ids], &o, TrainPath::default()).unwrap();
        let composed = forward(&model.decoder, &[ids], &o, TrainPath { fused: false, ..TrainPath::default() }).unwrap();
        assert!(takes_fused(&model.decoder, &ForwardOptions { differentiable: true, ..o }, TrainPath::default()), "{what}: the fused step runs");
        let (ef, ec) = (max_abs_diff(&fused, &composed), max_abs_diff(&inference, &composed));
        assert!(ef <= 1e-4 && ec <= 1e-4, "{what}: fused vs composed {ef}, inference vs composed {ec}");
        let (gf, gc) = (router_grads(&fused, ids, &vars), router_grads(&composed, ids, &vars));
        for (i, (a, b)) in gf.iter().zip(&gc).enumerate() {
            let scale = b.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
            assert!(scale > 0.0, "{what}: parameter {i}: zero gradient");
            let err = max_abs_diff(a, b) / scale;
            assert!(err <= 1e-3, "{what}: parameter {i}: gradient differs by {err} (relative)");
        }
        composed
    }

    #[test]
    fn fused_step_with_sinks_equals_the_composed_ops_and_inference() {
        for arch in ["llama", "gpt2"] {
            let model = Model::load(&fixture(arch), &Device::Cpu).unwrap();
            let ids: Vec<u32> = (0..48).map(|i| (i * 37 % 500) as u32).collect();
            for gate in [Gate::Log, Gate::Paper] {
                let mut logits_by_sink = Vec::new();
                for sink in [0, 1, 4] {
                    let spec = AdapterSpec { groups: 4, window: 4, sink, gate, lambda: 4.0, ..Default::default() };
                    logits_by_sink.push(paths_agree(&model, &ids, &spec, &format!("{arch} {gate:?} sink {sink}")));
                }
                // The sink changes the function (the checks above would pass with it ignored
                // on every path).
                for s in 1..3 {
                    let d = max_abs_diff(&logits_by_sink[0], &logits_by_sink[s]);
                    assert!(d > 1e-4, "{arch} {gate:?}: sink {} gives the logits of sink 0 ({d})", [0, 1, 4][s]);
                }
            }
        }
    }

    /// A sliding window of the model's own (as Gemma 2/3's local layers), shorter than the
    /// sequence on every other layer, through the fused step: the same function and router
    /// gradients as the composed ops and inference, with and without sinks.
    #[test]
    fn fused_step_with_a_sliding_window_equals_the_composed_ops_and_inference() {
        let mut model = Model::load(&fixture("llama"), &Device::Cpu).unwrap();
        let ids: Vec<u32> = (0..48).map(|i| (i * 37 % 500) as u32).collect();
        let spec = |sink| AdapterSpec { groups: 4, window: 4, sink, gate: Gate::Log, ..Default::default() };
        let global = paths_agree(&model, &ids, &spec(0), "no sliding window");
        for (l, b) in model.decoder.blocks.iter_mut().enumerate() {
            if l % 2 == 0 {
                b.attn.window = Some(12);
            }
        }
        for sink in [0, 4] {
            let slid = paths_agree(&model, &ids, &spec(sink), &format!("sliding window 12, sink {sink}"));
            if sink == 0 {
                let d = max_abs_diff(&global, &slid);
                assert!(d > 1e-4, "the sliding window leaves the logits as they were ({d})");
            }
        }
    }
}
