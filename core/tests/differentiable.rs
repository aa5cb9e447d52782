//! The differentiable path (the foundation of router training): it computes the same function as
//! the inference path, and a loss on its logits gives gradients to the router parameters only.

#[path = "../../tests/common/mod.rs"]
mod common;

use common::TestResult;
use candle_core::{backprop::GradStore, Device, Tensor, Var};
use candle_nn::optim::{AdamW, Optimizer, ParamsAdamW};
use focus_core::model::{decoder::Decoder, ForwardOptions};
use focus_core::train::{self, TrainOptions, TrainPath, Trainer};
use focus_core::{Adapter, AdapterSpec, Gate, Mode, Model};

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
}

/// The logits of `ids`: inference, or the training forward (the fused step where it applies).
fn run(model: &Model, ids: &[u32], mode: Mode, adapter: Option<&Adapter>, differentiable: bool) -> Tensor {
    let o = ForwardOptions::new(mode, adapter);
    if differentiable {
        return train::forward(&model.decoder, &[ids], &o, TrainPath::default()).unwrap();
    }
    model.decoder.forward(ids, &o).unwrap().logits
}

/// `train::forward` in its default form (the fused step where it applies).
fn train_forward(d: &Decoder, seqs: &[&[u32]], o: &ForwardOptions) -> focus_core::Result<Tensor> {
    train::forward(d, seqs, o, TrainPath::default())
}

/// The base's tensors. (Weights kept in their stored blocks are no tensors: read-only bytes of
/// the file's map, which no graph can give a gradient or an optimizer change.)
fn base_weights(d: &Decoder) -> Vec<Tensor> {
    let mut w = vec![d.final_norm.weight.clone()];
    for b in &d.blocks {
        let ws = [&b.q.w, &b.k.w, &b.v.w, &b.o.w, &b.mlp.down.w, &b.mlp.up_or_fc.w];
        w.extend(ws.into_iter().chain([&d.embed, &d.lm_head]).filter_map(|x| x.tensor().cloned()));
        let norms = [&b.attn_norm, &b.q_norm, &b.k_norm, &b.post_attn_norm, &b.mlp_norm, &b.post_mlp_norm];
        w.extend(norms.into_iter().flatten().map(|n| n.weight.clone()));
    }
    w
}

/// The next-token loss on `logits` of `ids` back-propagated: every router parameter gets a
/// finite, non-zero gradient and no base weight gets one. Returns the gradients.
fn router_only_gradients(model: &Model, ids: &[u32], logits: &Tensor, vars: &[Var], what: &str) -> GradStore {
    let targets = Tensor::from_slice(&ids[1..], ids.len() - 1, &Device::Cpu).unwrap();
    let loss = candle_nn::loss::cross_entropy(&logits.narrow(0, 0, ids.len() - 1).unwrap(), &targets).unwrap();
    let grads: GradStore = loss.backward().unwrap();
    for (i, v) in vars.iter().enumerate() {
        let g = grads.get(v.as_tensor()).unwrap_or_else(|| panic!("{what}: router parameter {i} got no gradient"));
        let g = g.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert!(g.iter().all(|x| x.is_finite()), "{what}: parameter {i}: non-finite gradient");
        assert!(g.iter().any(|&x| x != 0.0), "{what}: parameter {i}: zero gradient");
    }
    for (i, w) in base_weights(&model.decoder).iter().enumerate() {
        assert!(grads.get(w).is_none(), "{what}: base weight {i} received a gradient");
    }
    grads
}

fn check(model: &Model, ids: &[u32], window: usize, tol: f32) {
    for (gate, causal_sinkhorn) in [(Gate::Log, false), (Gate::Paper, false), (Gate::Log, true)] {
        let mut adapter = Adapter::random(&model.identity(), model.device(), &AdapterSpec { groups: 4, window, gate, causal_sinkhorn, ..Default::default() }, 3).unwrap();
        // Same function on both paths.
        for mode in [Mode::Dense, Mode::Soft] {
            let a = run(model, ids, mode, Some(&adapter), false);
            let b = run(model, ids, mode, Some(&adapter), true);
            let err = max_abs_diff(&a, &b);
            assert!(err <= tol, "{mode} {gate:?} causal {causal_sinkhorn}: differentiable path differs by {err}");
        }
        // Gradients reach every router parameter and nothing else; a step leaves the base bitwise unchanged.
        let vars = adapter.trainable_vars().unwrap();
        let before: Vec<Vec<f32>> = base_weights(&model.decoder).iter().map(|w| w.flatten_all().unwrap().to_vec1().unwrap()).collect();
        let logits = run(model, ids, Mode::Soft, Some(&adapter), true);
        let grads = router_only_gradients(model, ids, &logits, &vars, &format!("{gate:?} causal {causal_sinkhorn}"));
        let mut opt = AdamW::new(vars.clone(), ParamsAdamW { lr: 1e-2, ..Default::default() }).unwrap();
        let p0 = vars[0].as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap();
        opt.step(&grads).unwrap();
        assert_ne!(vars[0].as_tensor().flatten_all().unwrap().to_vec1::<f32>().unwrap(), p0, "the step moved no router weight");
        let after: Vec<Vec<f32>> = base_weights(&model.decoder).iter().map(|w| w.flatten_all().unwrap().to_vec1().unwrap()).collect();
        assert!(before == after, "a base weight changed");
    }
}

#[test]
fn tiny_models() {
    // gemma2: soft-capping and sliding windows; olmo2: QK-norm over the whole projection and
    // post-norms only (both through the fused step). Gemma 2's sliding layers keep 8 keys, so a
    // Focus window below 7 leaves them distant pairs to gate.
    for name in ["llama", "gpt2", "qwen2", "gemma2", "olmo2"] {
        let w = if name == "gemma2" { 3 } else { 8 };
        let model = Model::load(&common::fixture(&format!("hf_tiny/{name}")), &Device::Cpu).unwrap();
        let ids: Vec<u32> = (0..60).map(|i| (i * 37 % 500) as u32).collect();
        check(&model, &ids[..60.min(model.config().context)], w, 1e-4);
    }
}

/// Gemma 2's soft-capped attention, with its sliding layers, trains through the fused step:
/// the trainer runs it fused, with the logits of the composed ops and of inference and the
/// composed ops' router gradients, for both gates, at the checkpoint's cap (5) and at one near
/// the tiny model's scores (0.05), where the check sees the cap: without it the logits move
/// 50 times the tolerance (and without its derivative the gradients 3 times).
#[test]
fn soft_capped_attention_trains_through_the_fused_step() {
    let mut model = Model::load(&common::fixture("hf_tiny/gemma2"), &Device::Cpu).unwrap();
    assert!(model.decoder.blocks.iter().all(|b| b.attn.softcap == Some(5.0)), "the fixture soft-caps every layer");
    let ids: Vec<u32> = (0..60).map(|i| (i * 37 % 500) as u32).collect();
    let spec = |gate| AdapterSpec { groups: 4, window: 3, gate, ..Default::default() };
    let opts: TrainOptions = serde_json::from_str(r#"{"steps": 1, "seq_len": 60, "batch": 1, "lr": 0.01, "weight_decay": 0.0, "seed": 3, "eval_every": 0, "eval_seqs": 1, "checkpoint_every": 0}"#).unwrap();
    assert!(Trainer::new(&model, &spec(Gate::Log), opts).unwrap().runs_fused(), "Gemma 2 trains through the composed ops");
    let composed_path = TrainPath { fused: false, ..TrainPath::default() };
    for cap in [5.0, 0.05] {
        for b in model.decoder.blocks.iter_mut() {
            b.attn.softcap = Some(cap);
        }
        let mut capped = Vec::new();
        for gate in [Gate::Log, Gate::Paper] {
            let what = format!("cap {cap} {gate:?}");
            let mut adapter = Adapter::random(&model.identity(), model.device(), &spec(gate), 3).unwrap();
            let vars = adapter.trainable_vars().unwrap();
            let o = ForwardOptions::new(Mode::Soft, Some(&adapter));
            let inference = model.decoder.forward(&ids, &o).unwrap().logits;
            let fused = train_forward(&model.decoder, &[&ids], &o).unwrap();
            let composed = train::forward(&model.decoder, &[&ids], &o, composed_path).unwrap();
            let (ef, ei) = (max_abs_diff(&fused, &composed), max_abs_diff(&fused, &inference));
            assert!(ef <= 1e-4 && ei <= 1e-4, "{what}: fused vs composed {ef}, fused vs inference {ei}");
            let gf = router_only_gradients(&model, &ids, &fused, &vars, &format!("{what} fused"));
            let gc = router_only_gradients(&model, &ids, &composed, &vars, &format!("{what} composed"));
            for (i, v) in vars.iter().enumerate() {
                let (a, b) = (gf.get(v.as_tensor()).unwrap(), gc.get(v.as_tensor()).unwrap());
                let scale = b.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap();
                let err = max_abs_diff(a, b) / scale;
                assert!(err <= 1e-3, "{what}: parameter {i}: fused gradient differs by {err} (relative)");
            }
            capped.push((adapter, fused));
        }
        if cap < 1.0 {
            for b in model.decoder.blocks.iter_mut() {
                b.attn.softcap = None;
            }
            for (adapter, fused) in &capped {
                let uncapped = model.decoder.forward(&ids, &ForwardOptions::new(Mode::Soft, Some(adapter))).unwrap().logits;
                let d = max_abs_diff(fused, &uncapped);
                assert!(d > 5e-3, "cap {cap} {:?}: the soft-cap leaves the logits as they were ({d})", adapter.config.gate);
            }
        }
    }
}

#[test]
fn real_model() -> TestResult {
    let model = Model::load(&common::model_path(), &Device::Cpu)?;
    let text = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt"))?;
    let ids = model.tokenizer()?.encode(&text, false)?.ids[..160].to_vec();
    check(&model, &ids, 16, 2e-3);
    Ok(())
}

/// The batched training forward computes, sequence by sequence, what the single-sequence
/// differentiable forward computes, and its mean loss has the same gradient as the mean of the
/// per-sequence losses (the trainer's step before batching).
fn check_batched(model: &Model, seqs: &[&[u32]], window: usize, tol: f32) {
    for (gate, causal_sinkhorn) in [(Gate::Log, false), (Gate::Paper, false), (Gate::Log, true)] {
        let mut adapter = Adapter::random(&model.identity(), model.device(), &AdapterSpec { groups: 4, window, gate, causal_sinkhorn, ..Default::default() }, 5).unwrap();
        let vars = adapter.trainable_vars().unwrap();
        let mut o = ForwardOptions::new(Mode::Soft, Some(&adapter));
        o.differentiable = true;
        let batched = train_forward(&model.decoder, seqs, &o).unwrap();
        let t = seqs[0].len();
        let mut summed: Vec<Option<Tensor>> = vec![None; vars.len()];
        for (i, s) in seqs.iter().enumerate() {
            let single = run(model, s, Mode::Soft, Some(&adapter), true);
            let err = max_abs_diff(&batched.narrow(0, i * t, t).unwrap(), &single);
            assert!(err <= tol, "{gate:?} causal {causal_sinkhorn}: sequence {i} differs by {err}");
            let targets = Tensor::from_slice(&s[1..], t - 1, &Device::Cpu).unwrap();
            let loss = candle_nn::loss::cross_entropy(&single.narrow(0, 0, t - 1).unwrap(), &targets).unwrap();
            let g = (loss / seqs.len() as f64).unwrap().backward().unwrap();
            for (acc, v) in summed.iter_mut().zip(&vars) {
                let gi = g.get(v.as_tensor()).unwrap().clone();
                *acc = Some(match acc.take() { None => gi, Some(a) => (a + gi).unwrap() });
            }
        }
        // The batched loss over the same targets (each sequence's last position has none).
        let rows: Vec<Tensor> = (0..seqs.len()).map(|i| batched.narrow(0, i * t, t - 1).unwrap()).collect();
        let targets: Vec<u32> = seqs.iter().flat_map(|s| s[1..].iter().copied()).collect();
        let n = targets.len();
        let loss = candle_nn::loss::cross_entropy(&Tensor::cat(&rows, 0).unwrap(), &Tensor::from_vec(targets, n, &Device::Cpu).unwrap()).unwrap();
        let g = loss.backward().unwrap();
        for (i, (v, want)) in vars.iter().zip(&summed).enumerate() {
            let got = g.get(v.as_tensor()).unwrap();
            let want = want.as_ref().unwrap();
            let scale = want.abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap().max(1e-6);
            let err = max_abs_diff(got, want) / scale;
            assert!(err <= 1e-3, "{gate:?} causal {causal_sinkhorn}: parameter {i} gradient differs by {err} (relative)");
        }
    }
    assert!(train_forward(&model.decoder, &[&seqs[0][..4], &seqs[1][..5]], &ForwardOptions::new(Mode::Dense, None)).is_err());
}

#[test]
fn batched_training_forward_tiny_models() {
    // gemma2: soft-capping and sliding windows; olmo2: QK-norm over the whole projection and
    // post-norms only (both through the fused step). Gemma 2's sliding layers keep 8 keys, so a
    // Focus window below 7 leaves them distant pairs to gate.
    for name in ["llama", "gpt2", "qwen2", "gemma2", "olmo2"] {
        let w = if name == "gemma2" { 3 } else { 8 };
        let model = Model::load(&common::fixture(&format!("hf_tiny/{name}")), &Device::Cpu).unwrap();
        let ids: Vec<u32> = (0..90).map(|i| (i * 37 % 500) as u32).collect();
        check_batched(&model, &[&ids[..30], &ids[30..60], &ids[60..90]], w, 1e-4);
    }
}

#[test]
fn batched_training_forward_real_model() -> TestResult {
    let model = Model::load(&common::model_path(), &Device::Cpu)?;
    let text = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt"))?;
    let ids = model.tokenizer()?.encode(&text, false)?.ids[..192].to_vec();
    check_batched(&model, &[&ids[..96], &ids[96..]], 16, 2e-3);
    Ok(())
}

/// Straight-through training (`--straight-through k`): the training forward computes exactly what
/// hard top-k inference computes, and the routers still get (finite, non-zero) gradients while
/// the base gets none; for either gate. The fused step (its `hard` attention) and the composed
/// ops (`attention::soft::straight_through_plan`) give the routers the same gradients.
#[test]
fn straight_through_forward_is_hard_topk_inference() -> TestResult {
    // gemma2: soft-capping and sliding windows; olmo2: QK-norm over the whole projection and
    // post-norms only. Gemma 2's sliding layers keep 8 keys, so a Focus window below 7 leaves
    // them distant pairs to gate.
    for name in ["llama", "gpt2", "qwen2", "gemma2", "olmo2"] {
        let w = if name == "gemma2" { 3 } else { 8 };
        let model = Model::load(&common::fixture(&format!("hf_tiny/{name}")), &Device::Cpu)?;
        let ids: Vec<u32> = (0..60).map(|i| (i * 37 % 500) as u32).collect();
        let mut adapter = Adapter::random(&model.identity(), model.device(), &AdapterSpec { groups: 4, window: w, ..Default::default() }, 11)?;
        let vars = adapter.trainable_vars().unwrap();
        for k in [1, 2] {
            let mut o = ForwardOptions::new(Mode::Soft, Some(&adapter));
            o.differentiable = true;
            o.straight_through = Some(adapter.config.topk(k)?);
            let st = train_forward(&model.decoder, &[&ids], &o)?;
            let hard = run(&model, &ids, common::topk(k, 4), Some(&adapter), false);
            let soft = run(&model, &ids, Mode::Soft, Some(&adapter), false);
            let err = max_abs_diff(&st, &hard);
            assert!(err <= 1e-4, "{name} k={k}: straight-through forward differs from top-k inference by {err}");
            assert!(max_abs_diff(&st, &soft) > 1e-2, "{name} k={k}: the forward should not be the soft one");
            let fused = router_only_gradients(&model, &ids, &st, &vars, &format!("{name} k={k}"));
            let composed_logits = train::forward(&model.decoder, &[&ids], &o, TrainPath { fused: false, ..Default::default() })?;
            assert!(max_abs_diff(&composed_logits, &st) <= 1e-4, "{name} k={k}: fused and composed straight-through forwards differ");
            let composed = router_only_gradients(&model, &ids, &composed_logits, &vars, &format!("{name} k={k} composed"));
            for (i, v) in vars.iter().enumerate() {
                let (f, c) = (fused.get(v.as_tensor()).unwrap(), composed.get(v.as_tensor()).unwrap());
                let scale = c.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?.max(1e-6);
                let err = max_abs_diff(f, c) / scale;
                assert!(err <= 1e-3, "{name} k={k}: router parameter {i}: fused straight-through gradient differs from the composed one by {err} (relative)");
            }
        }
        // The forward uses no gate: a paper-gate adapter trains through the same hard mask.
        let paper = Adapter::random(&model.identity(), model.device(), &AdapterSpec { groups: 4, window: w, gate: Gate::Paper, ..Default::default() }, 11)?;
        let mut o = ForwardOptions::new(Mode::Soft, Some(&paper));
        o.differentiable = true;
        o.straight_through = Some(paper.config.topk(2)?);
        let st = train_forward(&model.decoder, &[&ids], &o)?;
        let err = max_abs_diff(&st, &run(&model, &ids, common::topk(2, 4), Some(&paper), false));
        assert!(err <= 1e-4, "{name} paper gate: straight-through forward differs from top-k inference by {err}");
        assert!(paper.config.topk(5).is_err(), "k > K");
    }
    Ok(())
}
