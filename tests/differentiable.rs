//! The differentiable path (the foundation of router training): it computes the same function as
//! the inference path, and a loss on its logits gives gradients to the router parameters only.

#[path = "common/mod.rs"]
mod common;

use candle_core::{backprop::GradStore, Device, Tensor, Var};
use candle_nn::optim::{AdamW, Optimizer, ParamsAdamW};
use focus_core::adapter::Router;
use focus_core::model::{decoder::Decoder, ForwardOptions};
use focus_core::{Adapter, AdapterSpec, Gate, Mode, Model};

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
}

fn run(model: &Model, ids: &[u32], mode: Mode, adapter: Option<&Adapter>, differentiable: bool) -> Tensor {
    let mut o = ForwardOptions::new(mode, adapter);
    o.differentiable = differentiable;
    model.decoder.forward(ids, &o).unwrap().logits
}

/// Replaces the adapter's router tensors with trainable variables.
fn trainable(adapter: &mut Adapter) -> Vec<Var> {
    let mut vars = Vec::new();
    for r in adapter.layers.iter_mut() {
        let p = Var::from_tensor(&r.proj).unwrap();
        let c = Var::from_tensor(&r.centroids).unwrap();
        *r = Router { proj: p.as_tensor().clone(), centroids: c.as_tensor().clone() };
        vars.push(p);
        vars.push(c);
    }
    vars
}

fn base_weights(d: &Decoder) -> Vec<Tensor> {
    let mut w = vec![d.embed.clone(), d.lm_head.clone(), d.final_norm.weight.clone()];
    for b in &d.blocks {
        w.extend([b.q.w.clone(), b.k.w.clone(), b.v.w.clone(), b.o.w.clone(), b.attn_norm.weight.clone(), b.mlp_norm.weight.clone(), b.mlp.down.w.clone(), b.mlp.up_or_fc.w.clone()]);
    }
    w
}

fn check(model: &Model, ids: &[u32], window: usize, tol: f32) {
    for (gate, causal_sinkhorn) in [(Gate::Log, false), (Gate::Paper, false), (Gate::Log, true)] {
        let mut adapter = Adapter::random(model, &AdapterSpec { groups: 4, window, gate, causal_sinkhorn, ..Default::default() }, 3).unwrap();
        // Same function on both paths.
        for mode in [Mode::Dense, Mode::Soft] {
            let a = run(model, ids, mode, Some(&adapter), false);
            let b = run(model, ids, mode, Some(&adapter), true);
            let err = max_abs_diff(&a, &b);
            assert!(err <= tol, "{mode} {gate:?} causal {causal_sinkhorn}: differentiable path differs by {err}");
        }
        // Gradients reach every router parameter and nothing else; a step leaves the base bitwise unchanged.
        let vars = trainable(&mut adapter);
        let before: Vec<Vec<f32>> = base_weights(&model.decoder).iter().map(|w| w.flatten_all().unwrap().to_vec1().unwrap()).collect();
        let logits = run(model, ids, Mode::Soft, Some(&adapter), true);
        let targets = Tensor::from_slice(&ids[1..], ids.len() - 1, &Device::Cpu).unwrap();
        let loss = candle_nn::loss::cross_entropy(&logits.narrow(0, 0, ids.len() - 1).unwrap(), &targets).unwrap();
        let grads: GradStore = loss.backward().unwrap();
        for (i, v) in vars.iter().enumerate() {
            let g = grads.get(v.as_tensor()).unwrap_or_else(|| panic!("router parameter {i} got no gradient"));
            let g = g.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            assert!(g.iter().all(|x| x.is_finite()), "parameter {i}: non-finite gradient");
            assert!(g.iter().any(|&x| x != 0.0), "parameter {i}: zero gradient");
        }
        for (i, w) in base_weights(&model.decoder).iter().enumerate() {
            assert!(grads.get(w).is_none(), "base weight {i} received a gradient");
        }
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
    for name in ["llama", "gpt2", "qwen2"] {
        let model = Model::load(&common::fixture(&format!("hf_tiny/{name}")), &Device::Cpu).unwrap();
        let ids: Vec<u32> = (0..60).map(|i| (i * 37 % 500) as u32).collect();
        check(&model, &ids[..60.min(model.config().context)], 8, 1e-4);
    }
}

#[test]
fn real_model() {
    let model = Model::load(&common::model_path(), &Device::Cpu).unwrap();
    let text = std::fs::read_to_string(common::fixture("ppl_persuasion_60k.txt")).unwrap();
    let ids = model.tokenizer().unwrap().encode(&text, false).unwrap().ids[..160].to_vec();
    check(&model, &ids, 16, 2e-3);
}
