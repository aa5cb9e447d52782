//! Hugging Face checkpoints (tests/fixtures/hf_tiny: tiny random-weight GPT-2, Llama, Qwen2,
//! Gemma 2 and OLMo-2 saved by transformers) against the logits transformers computed for them,
//! plus the Focus adapter modes on each family.

#[path = "common/mod.rs"]
mod common;
#[path = "common/gguf_builder.rs"]
mod gguf_builder;

use candle_core::{DType, Device, Tensor};
use focus_core::attention::LayerPlan;
use focus_core::model::config::Positions;
use focus_core::model::ForwardOptions;
use focus_core::focus::router::LayerRouting;
use focus_core::{Adapter, AdapterConfig, AdapterSpec, Gate, Mode, Model};
use std::path::{Path, PathBuf};

const FAMILIES: [&str; 5] = ["gpt2", "llama", "qwen2", "gemma2", "olmo2"];
const TOL: f32 = 1e-4;

fn tiny(name: &str) -> PathBuf {
    common::fixture("hf_tiny").join(name)
}

/// `input_ids` (as u32) and `logits` (T x vocab) of a fixture's reference.safetensors.
fn reference(dir: &Path) -> (Vec<u32>, Tensor) {
    let r = candle_core::safetensors::load(dir.join("reference.safetensors"), &Device::Cpu).unwrap();
    let ids = r["input_ids"].to_dtype(DType::I64).unwrap().flatten_all().unwrap().to_vec1::<i64>().unwrap();
    assert_eq!(ids.len(), 40);
    let ids: Vec<u32> = ids.into_iter().map(|i| u32::try_from(i).unwrap()).collect();
    let logits = r["logits"].squeeze(0).unwrap();
    assert_eq!(logits.dims(), &[40, 512]);
    (ids, logits)
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
    assert_eq!(a.dims(), b.dims(), "shapes differ");
    (a - b).unwrap().abs().unwrap().flatten_all().unwrap().max(0).unwrap().to_scalar::<f32>().unwrap()
}

fn all_finite(t: &Tensor) -> bool {
    t.flatten_all().unwrap().to_vec1::<f32>().unwrap().iter().all(|x| x.is_finite())
}

fn dense_logits(model: &Model, ids: &[u32]) -> Tensor {
    model.decoder.forward(ids, &ForwardOptions::new(Mode::Dense, None)).unwrap().logits
}

fn check_family(name: &str) {
    let dir = tiny(name);
    let model = Model::load(&dir, &Device::Cpu).unwrap_or_else(|e| panic!("{name}: load failed: {e}"));
    assert_eq!(model.format, "safetensors");
    assert_eq!(model.config().arch.to_string(), name);
    // The Gemma 2 and OLMo-2 fixtures have 4 layers (two local/global pairs for Gemma 2).
    let layers = if matches!(name, "gemma2" | "olmo2") { 4 } else { 2 };
    assert_eq!((model.config().n_layers, model.config().d_model, model.config().vocab), (layers, 64, 512));
    let (ids, want) = reference(&dir);
    // The reference varies far more than the tolerance, so matching it means something.
    let flat = want.flatten_all().unwrap();
    let spread = flat.max(0).unwrap().to_scalar::<f32>().unwrap() - flat.min(0).unwrap().to_scalar::<f32>().unwrap();
    eprintln!("{name}: reference logits span {spread}");
    assert!(spread > 1000.0 * TOL, "{name}: reference logits are nearly constant ({spread})");
    let got = dense_logits(&model, &ids);
    let err = max_abs_diff(&got, &want);
    eprintln!("{name}: max |logits - transformers| = {err:e}");
    assert!(err <= TOL, "{name}: logits differ from transformers by {err} (> {TOL})");
    // A prefix gives the prefix of the logits (causality), to the same tolerance.
    let pre = model.decoder.forward(&ids[..17], &ForwardOptions::new(Mode::Dense, None)).unwrap().logits;
    let err = max_abs_diff(&pre, &want.narrow(0, 0, 17).unwrap());
    assert!(err <= TOL, "{name}: prefix logits differ by {err}");
    // logits_from returns the tail rows only.
    let mut o = ForwardOptions::new(Mode::Dense, None);
    o.logits_from = 30;
    let tail = model.decoder.forward(&ids, &o).unwrap().logits;
    let err = max_abs_diff(&tail, &want.narrow(0, 30, 10).unwrap());
    assert!(err <= TOL, "{name}: logits_from rows differ by {err}");
}

#[test]
fn gpt2_matches_transformers() {
    check_family("gpt2");
}

#[test]
fn llama_matches_transformers() {
    check_family("llama");
}

#[test]
fn qwen2_matches_transformers() {
    check_family("qwen2");
}

#[test]
fn gemma2_matches_transformers() {
    check_family("gemma2");
}

#[test]
fn olmo2_matches_transformers() {
    check_family("olmo2");
}

/// Gemma 2's parts are read and each one matters: alternating sliding (window 8) and global
/// layers, both soft-caps, the score scale; OLMo-2's QK-norm is over the whole projection.
/// Changing any of them moves the logits away from transformers'.
#[test]
fn gemma2_and_olmo2_parts_are_used() {
    let g = Model::load(&tiny("gemma2"), &Device::Cpu).unwrap();
    let c = g.config();
    let kinds: Vec<bool> = (0..4).map(|l| c.is_sliding(l)).collect();
    assert_eq!(kinds, [true, false, true, false]);
    assert_eq!((c.layer_attention(0).window, c.attn_softcap, c.final_softcap), (Some(8), Some(5.0), Some(3.0)));
    assert!(c.post_norms && c.tied_embeddings && c.embed_scale == Some(8.0));
    assert_eq!(c.attn_scale, Some(0.25));
    let (ids, want) = reference(&tiny("gemma2"));
    for (what, edit) in [
        // The random weights keep attention logits far below the cap of 5 (dropping it moves
        // the logits by only 3e-6), so a cap that binds shows it is applied.
        ("an attention soft-cap of 0.05", Box::new(|c: &mut serde_json::Value| c["attn_logit_softcapping"] = 0.05.into()) as Box<dyn Fn(&mut serde_json::Value)>),
        ("no final soft-cap", Box::new(|c: &mut serde_json::Value| c["final_logit_softcapping"] = serde_json::Value::Null)),
        ("no sliding window", Box::new(|c: &mut serde_json::Value| c["sliding_window"] = 4096.into())),
        ("another query_pre_attn_scalar", Box::new(|c: &mut serde_json::Value| c["query_pre_attn_scalar"] = 64.into())),
    ] {
        let d = copy_with_config("gemma2", edit);
        let m = Model::load(d.path(), &Device::Cpu).unwrap();
        let err = max_abs_diff(&dense_logits(&m, &ids), &want);
        assert!(err > 1e-3, "gemma2 {what}: the logits did not move ({err})");
    }
    let o = Model::load(&tiny("olmo2"), &Device::Cpu).unwrap();
    let c = o.config();
    assert_eq!(c.qk_norm, Some(focus_core::model::config::QkNorm::Full));
    assert!(c.post_norms && o.decoder.blocks.iter().all(|b| b.attn_norm.is_none() && b.mlp_norm.is_none()));
    assert_eq!(o.decoder.blocks[0].q_norm.as_ref().unwrap().weight.dims(), &[64]);
    assert_eq!(o.decoder.blocks[0].k_norm.as_ref().unwrap().weight.dims(), &[32]);
}

/// Top-k on both layer kinds of Gemma 2 without attention soft-capping (so the exact CPU
/// kernel runs, composing the Focus mask with the sliding layers' window of 8): equal to dense
/// attention with the written-out Focus mask plus each layer's own window, for every k.
#[test]
fn gemma2_top_k_kernel_composes_with_the_sliding_window() {
    let d = copy_with_config("gemma2", |c| c["attn_logit_softcapping"] = serde_json::Value::Null);
    let model = Model::load(d.path(), &Device::Cpu).unwrap();
    let (ids, _) = reference(&tiny("gemma2"));
    let dev = Device::Cpu;
    for window in [2, 4, 12] {
        let a = Adapter::random(&model.identity(), model.device(), &AdapterSpec { window, groups: 4, ..Default::default() }, 2).unwrap();
        for k in 1..=4 {
            let opts = ForwardOptions::new(common::topk(k, 4), Some(&a));
            let fast = model.decoder.forward(&ids, &opts).unwrap();
            let masked = model
                .decoder
                .forward_with(&ids, &opts, |_, r| Ok(Some(LayerPlan::Masked(focus_core::focus::mask::topk_mask_bias(&r.unwrap().topk_masks(k), window, 0, &dev)?))))
                .unwrap();
            let err = max_abs_diff(&fast.logits, &masked.logits);
            assert!(err <= TOL, "w {window} topk({k}): fast kernel differs from masked reference by {err}");
        }
    }
}

/// The tiny Qwen2 checkpoint written as a GGUF file of arch `qwen2` the way llama.cpp's converter
/// writes one (its tensor names, dimensions fastest first, Q and K rows not permuted: llama.cpp
/// runs qwen2 with the NEOX rope) gives transformers' logits. So the GGUF path reads the qwen2
/// header, the Q/K/V biases and the rope style right; a llama-style interleaved rope fails this.
#[test]
fn qwen2_gguf_matches_transformers() {
    let dir = tiny("qwen2");
    let st = candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu).unwrap();
    let tokens: Vec<String> = (0..512).map(|i| format!("t{i}")).collect();
    let tokens: Vec<&str> = tokens.iter().map(String::as_str).collect();
    let mut b = gguf_builder::GgufBuilder::default()
        .kv_str("general.architecture", "qwen2")
        .kv_str("general.name", "tiny qwen2")
        .kv_u32("qwen2.block_count", 2)
        .kv_u32("qwen2.context_length", 128)
        .kv_u32("qwen2.embedding_length", 64)
        .kv_u32("qwen2.feed_forward_length", 160)
        .kv_u32("qwen2.attention.head_count", 4)
        .kv_u32("qwen2.attention.head_count_kv", 2)
        .kv_f32("qwen2.rope.freq_base", 1e6)
        .kv_f32("qwen2.attention.layer_norm_rms_epsilon", 1e-6)
        .kv_str("tokenizer.ggml.model", "gpt2")
        .kv_str("tokenizer.ggml.pre", "qwen2")
        .kv_str_array("tokenizer.ggml.tokens", &tokens)
        .kv_str_array("tokenizer.ggml.merges", &[] as &[&str]);
    let gguf_name = |hf: &str| -> String {
        let top = [("model.embed_tokens.weight", "token_embd.weight"), ("model.norm.weight", "output_norm.weight"), ("lm_head.weight", "output.weight")];
        if let Some((_, g)) = top.iter().find(|(h, _)| *h == hf) {
            return g.to_string();
        }
        let rest = hf.strip_prefix("model.layers.").unwrap_or_else(|| panic!("unexpected tensor {hf}"));
        let (layer, part) = rest.split_once('.').unwrap();
        let parts = [
            ("input_layernorm", "attn_norm"),
            ("self_attn.q_proj", "attn_q"),
            ("self_attn.k_proj", "attn_k"),
            ("self_attn.v_proj", "attn_v"),
            ("self_attn.o_proj", "attn_output"),
            ("post_attention_layernorm", "ffn_norm"),
            ("mlp.gate_proj", "ffn_gate"),
            ("mlp.up_proj", "ffn_up"),
            ("mlp.down_proj", "ffn_down"),
        ];
        let (stem, kind) = part.rsplit_once('.').unwrap();
        let g = parts.iter().find(|(h, _)| *h == stem).unwrap_or_else(|| panic!("unexpected tensor {hf}")).1;
        format!("blk.{layer}.{g}.{kind}")
    };
    let mut names: Vec<&String> = st.keys().collect();
    names.sort();
    for hf in names {
        let t = &st[hf];
        let ne: Vec<u64> = t.dims().iter().rev().map(|&d| d as u64).collect();
        b = b.tensor_f32(&gguf_name(hf), &ne, &t.flatten_all().unwrap().to_vec1::<f32>().unwrap());
    }
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("tiny-qwen2.gguf");
    std::fs::write(&path, b.bytes()).unwrap();

    let model = Model::load(&path, &Device::Cpu).unwrap();
    assert_eq!((model.format, model.config().arch.to_string()), ("gguf", "qwen2".to_string()));
    assert!(model.config().qkv_bias);
    assert_eq!(model.config().positions, Positions::Rope { theta: 1e6, interleaved: false });
    let (ids, want) = reference(&dir);
    let err = max_abs_diff(&dense_logits(&model, &ids), &want);
    eprintln!("qwen2 GGUF: max |logits - transformers| = {err:e}");
    assert!(err <= TOL, "qwen2 GGUF: logits differ from transformers by {err} (> {TOL})");
}

#[test]
fn families_load_their_own_layout() {
    let gpt2 = Model::load(&tiny("gpt2"), &Device::Cpu).unwrap();
    assert_eq!(gpt2.config().positions, Positions::Learned);
    assert!(gpt2.decoder.pos_embed.is_some());
    let llama = Model::load(&tiny("llama"), &Device::Cpu).unwrap();
    let c = llama.config();
    assert_eq!((c.n_heads, c.n_kv_heads, c.head_dim), (4, 2, 16));
    assert!(c.tied_embeddings && !c.qkv_bias);
    assert_eq!(c.positions, Positions::Rope { theta: 10000.0, interleaved: false });
    let qwen = Model::load(&tiny("qwen2"), &Device::Cpu).unwrap();
    let c = qwen.config();
    assert!(!c.tied_embeddings && c.qkv_bias);
    assert_eq!(c.positions, Positions::Rope { theta: 1e6, interleaved: false });
    assert!(qwen.tokenizer.is_none(), "the fixtures ship no tokenizer");
    assert!(qwen.tokenizer().is_err());
}

/// A copy of a fixture whose config.json is rewritten by `edit`.
fn copy_with_config(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> tempfile::TempDir {
    let src = tiny(name);
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(src.join("model.safetensors"), tmp.path().join("model.safetensors")).unwrap();
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(src.join("config.json")).unwrap()).unwrap();
    edit(&mut cfg);
    std::fs::write(tmp.path().join("config.json"), serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
    tmp
}

#[test]
fn top_level_rope_theta_reads_like_rope_parameters() {
    for name in ["llama", "qwen2"] {
        let orig = Model::load(&tiny(name), &Device::Cpu).unwrap();
        let theta = match orig.config().positions {
            Positions::Rope { theta, .. } => theta,
            p => panic!("{name}: {p:?}"),
        };
        // Older configs: a top-level rope_theta and no rope_parameters.
        let old = copy_with_config(name, |c| {
            let obj = c.as_object_mut().unwrap();
            let p = obj.remove("rope_parameters").expect("fixture has rope_parameters");
            obj.insert("rope_theta".into(), p["rope_theta"].clone());
        });
        let m = Model::load(old.path(), &Device::Cpu).unwrap();
        assert_eq!(m.config().positions, orig.config().positions, "{name}");
        let (ids, want) = reference(&tiny(name));
        let err = max_abs_diff(&dense_logits(&m, &ids), &want);
        assert!(err <= TOL, "{name} with top-level rope_theta: logits differ by {err}");
        // The value is really read (not a coincidence with the default): a different theta
        // changes the config and the logits.
        let other = copy_with_config(name, |c| {
            let obj = c.as_object_mut().unwrap();
            obj.remove("rope_parameters");
            obj.insert("rope_theta".into(), serde_json::json!(theta * 7.0));
        });
        let m = Model::load(other.path(), &Device::Cpu).unwrap();
        assert_eq!(m.config().positions, Positions::Rope { theta: theta * 7.0, interleaved: false });
        assert!(max_abs_diff(&dense_logits(&m, &ids), &want) > 1e-3, "{name}: theta had no effect");
    }
}

/// The soft gate of FOCUS-METHOD section 1, computed entry by entry: a_ij = g_i . g_j; distant
/// pairs (i - j > w) get + ln(a_ij + eps) (log gate) or x sigmoid(lambda a_ij) (paper gate).
fn soft_reference(r: &LayerRouting, cfg: &AdapterConfig, dev: &Device) -> LayerPlan {
    let (t, k) = (r.t, r.groups);
    let mut v = vec![0f32; t * t];
    for i in 0..t {
        for j in 0..=i {
            let a: f64 = (0..k).map(|g| r.memberships[i * k + g] as f64 * r.memberships[j * k + g] as f64).sum();
            let local = i - j <= cfg.window;
            v[i * t + j] = match cfg.gate {
                Gate::Log => if local { 0.0 } else { (a + cfg.log_eps).ln() as f32 },
                Gate::Paper => if local { 1.0 } else { (1.0 / (1.0 + (-cfg.lambda * a).exp())) as f32 },
            };
        }
    }
    let m = Tensor::from_vec(v, (t, t), dev).unwrap();
    match cfg.gate {
        Gate::Log => LayerPlan::Masked(m),
        Gate::Paper => LayerPlan::SoftFactor(m),
    }
}

fn spec() -> AdapterSpec {
    AdapterSpec { window: 4, groups: 4, ..Default::default() }
}

fn check_adapter_modes(name: &str) {
    let dir = tiny(name);
    let model = Model::load(&dir, &Device::Cpu).unwrap();
    let dev = model.decoder.device.clone();
    let adapter = Adapter::random(&model.identity(), model.device(), &spec(), 1).unwrap();
    let window = adapter.config.window;
    let (ids, reference_logits) = reference(&dir);
    let dense = dense_logits(&model, &ids);

    // Dense mode with an adapter attached is still the base model, and routing is reported.
    let out = model.decoder.forward(&ids, &ForwardOptions::new(Mode::Dense, Some(&adapter))).unwrap();
    assert!(max_abs_diff(&out.logits, &reference_logits) <= TOL);
    assert_eq!(out.routing.len(), model.config().n_layers);
    for r in &out.routing {
        assert_eq!((r.t, r.groups), (40, 4));
        for i in 0..r.t {
            let s: f32 = r.row(i).iter().sum();
            assert!((s - 1.0).abs() < 1e-4, "{name}: membership row {i} sums to {s}");
        }
    }

    let soft = model.decoder.forward(&ids, &ForwardOptions::new(Mode::Soft, Some(&adapter))).unwrap().logits;
    assert_eq!(soft.dims(), &[40, 512]);
    assert!(all_finite(&soft), "{name}: soft logits are not finite");
    // The first window+1 positions see only local pairs: exactly the dense logits there.
    let n = window + 1;
    assert!(max_abs_diff(&soft.narrow(0, 0, n).unwrap(), &dense.narrow(0, 0, n).unwrap()) <= 1e-5);
    assert!(max_abs_diff(&soft, &dense) > 1e-6, "{name}: soft gates changed nothing");

    // The masked reference path itself: an all-zero mask is dense attention.
    let opts = ForwardOptions::new(Mode::Dense, Some(&adapter));
    let zero = model
        .decoder
        .forward_with(&ids, &opts, |_, _| Ok(Some(LayerPlan::Masked(Tensor::zeros((40, 40), DType::F32, &dev)?))))
        .unwrap();
    assert!(max_abs_diff(&zero.logits, &dense) <= TOL, "{name}: masked path with no mask is not dense");

    // Soft mode against the gate written out from FOCUS-METHOD section 1, for both gates.
    for gate in [Gate::Log, Gate::Paper] {
        let a = Adapter::random(&model.identity(), model.device(), &AdapterSpec { gate, ..spec() }, 1).unwrap();
        let opts = ForwardOptions::new(Mode::Soft, Some(&a));
        let soft = model.decoder.forward(&ids, &opts).unwrap().logits;
        let reference = model
            .decoder
            .forward_with(&ids, &opts, |_, r| Ok(Some(soft_reference(r.unwrap(), &a.config, &dev))))
            .unwrap()
            .logits;
        let err = max_abs_diff(&soft, &reference);
        assert!(err <= TOL, "{name}: soft mode ({gate:?} gate) differs from the written-out gate by {err}");
    }

    for k in 1..=4 {
        let opts = ForwardOptions::new(common::topk(k, adapter.config.groups), Some(&adapter));
        let fast = model.decoder.forward(&ids, &opts).unwrap_or_else(|e| panic!("{name} topk({k}): {e}"));
        assert_eq!(fast.logits.dims(), &[40, 512]);
        assert!(all_finite(&fast.logits), "{name} topk({k}): logits are not finite");
        // The explicit reference: dense attention with the top-k mask as an additive bias.
        let masked = model
            .decoder
            .forward_with(&ids, &opts, |_, routing| {
                let routing = routing.expect("routing is computed when an adapter is attached");
                Ok(Some(LayerPlan::Masked(focus_core::focus::mask::topk_mask_bias(&routing.topk_masks(k), window, 0, &dev)?)))
            })
            .unwrap();
        let err = max_abs_diff(&fast.logits, &masked.logits);
        eprintln!("{name} topk({k}): max |fast - masked dense| = {err:e}");
        assert!(err <= TOL, "{name} topk({k}): fast kernel differs from masked dense by {err}");
        // The same routing was used for both.
        assert_eq!(fast.routing[0].topk_masks(k), masked.routing[0].topk_masks(k));
        if k == 4 {
            // Every token holds every group: the mask is the full causal mask.
            assert!(max_abs_diff(&fast.logits, &dense) <= TOL, "{name}: topk(K) is not dense");
        }
        if k == 1 {
            // One group each of four, window 4 over 40 tokens: many distant pairs are pruned.
            let masks = fast.routing[1].topk_masks(1);
            let pruned = (0..40usize).flat_map(|i| (0..i).map(move |j| (i, j))).filter(|&(i, j)| i - j > window && masks[i] & masks[j] == 0).count();
            assert!(pruned > 0, "{name}: top-1 pruned no pair");
            assert!(max_abs_diff(&fast.logits, &dense) > 1e-6, "{name}: top-1 mask changed nothing");
        }
    }
    // k outside 1..=K is refused.
    for k in [0, 5] {
        let e = adapter.config.topk(k).err().expect("k out of range");
        assert!(e.to_string().contains("1..=4"), "{e}");
    }
}

#[test]
fn adapter_modes_gpt2() {
    check_adapter_modes("gpt2");
}

#[test]
fn adapter_modes_llama() {
    check_adapter_modes("llama");
}

#[test]
fn adapter_modes_qwen2() {
    check_adapter_modes("qwen2");
}

#[test]
fn adapter_modes_gemma2() {
    check_adapter_modes("gemma2");
}

#[test]
fn adapter_modes_olmo2() {
    check_adapter_modes("olmo2");
}

#[test]
fn adapter_round_trips_on_a_tiny_model() {
    for name in FAMILIES {
        let model = Model::load(&tiny(name), &Device::Cpu).unwrap();
        let a = Adapter::random(&model.identity(), model.device(), &spec(), 1).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        a.save(tmp.path()).unwrap();
        let b = Adapter::load(tmp.path(), &model.identity(), model.device()).unwrap();
        assert_eq!(b.config.groups, 4);
        assert_eq!(b.config.base_model, model.identity());
        for (x, y) in a.layers.iter().zip(&b.layers) {
            assert_eq!(max_abs_diff(&x.proj, &y.proj), 0.0);
            assert_eq!(max_abs_diff(&x.centroids, &y.centroids), 0.0);
        }
    }
}

/// Adds (or replaces) tensors in a directory's model.safetensors.
fn put_tensors(dir: &Path, tensors: &[(&str, Tensor)]) {
    let p = dir.join("model.safetensors");
    let mut ts = candle_core::safetensors::load(&p, &Device::Cpu).unwrap();
    for (name, t) in tensors {
        ts.insert(name.to_string(), t.clone());
    }
    candle_core::safetensors::save(&ts, &p).unwrap();
}

fn filled(n: usize, v: f32) -> Tensor {
    Tensor::full(v, n, &Device::Cpu).unwrap()
}

#[test]
fn llama_projection_biases_are_used() {
    // Llama's attention_bias puts a bias on q, k, v and o; mlp_bias on gate, up and down.
    let (ids, want) = reference(&tiny("llama"));
    let with_biases = |o_value: f32, down_value: f32| {
        let d = copy_with_config("llama", |c| {
            c["attention_bias"] = true.into();
            c["mlp_bias"] = true.into();
        });
        let mut ts = Vec::new();
        for l in 0..2 {
            let p = format!("model.layers.{l}");
            ts.push((format!("{p}.self_attn.q_proj.bias"), filled(64, 0.0)));
            ts.push((format!("{p}.self_attn.k_proj.bias"), filled(32, 0.0)));
            ts.push((format!("{p}.self_attn.v_proj.bias"), filled(32, 0.0)));
            ts.push((format!("{p}.self_attn.o_proj.bias"), filled(64, if l == 1 { o_value } else { 0.0 })));
            ts.push((format!("{p}.mlp.gate_proj.bias"), filled(160, 0.0)));
            ts.push((format!("{p}.mlp.up_proj.bias"), filled(160, 0.0)));
            ts.push((format!("{p}.mlp.down_proj.bias"), filled(64, if l == 0 { down_value } else { 0.0 })));
        }
        let refs: Vec<(&str, Tensor)> = ts.iter().map(|(n, t)| (n.as_str(), t.clone())).collect();
        put_tensors(d.path(), &refs);
        let m = Model::load(d.path(), &Device::Cpu).unwrap();
        assert!(m.config().qkv_bias);
        max_abs_diff(&dense_logits(&m, &ids), &want)
    };
    // Zero biases change nothing...
    assert!(with_biases(0.0, 0.0) <= TOL);
    // ...and non-zero ones are applied (an ignored bias would leave the reference logits).
    assert!(with_biases(0.5, 0.0) > 1e-3, "o_proj bias ignored");
    assert!(with_biases(0.0, 0.5) > 1e-3, "down_proj bias ignored");
    // attention_bias without the bias tensors is a broken checkpoint.
    let d = copy_with_config("llama", |c| c["attention_bias"] = true.into());
    let e = Model::load(d.path(), &Device::Cpu).err().expect("missing q bias");
    assert!(e.to_string().contains("missing tensor model.layers.0.self_attn.q_proj.bias"), "{e}");
}

#[test]
fn sliding_window_runs_on_every_layer() {
    let (ids, want) = reference(&tiny("llama"));
    // Mistral is Llama with a sliding window on every layer (issue 49: run it, do not cap the
    // context): exact up to the window, and inputs past it run (tests/fixtures/hf_tiny/mistral
    // checks them against transformers, core/tests/families.rs).
    let d = copy_with_config("llama", |c| {
        c["model_type"] = "mistral".into();
        c["sliding_window"] = 32.into();
    });
    let m = Model::load(d.path(), &Device::Cpu).unwrap();
    assert_eq!(m.config().context, 128);
    assert!((0..m.config().n_layers).all(|l| m.config().layer_attention(l).window == Some(32)));
    let got = dense_logits(&m, &ids);
    assert!(max_abs_diff(&got.narrow(0, 0, 32).unwrap(), &want.narrow(0, 0, 32).unwrap()) <= TOL);
    assert!(max_abs_diff(&got, &want) > TOL, "40 tokens cross the window of 32");
    // No window: the full context.
    let d = copy_with_config("llama", |c| {
        c["model_type"] = "mistral".into();
        c["sliding_window"] = serde_json::Value::Null;
    });
    let m = Model::load(d.path(), &Device::Cpu).unwrap();
    assert_eq!(m.config().context, 128);
    assert!(m.config().sliding.is_none());
    assert!(max_abs_diff(&dense_logits(&m, &ids), &want) <= TOL);
    // Qwen2 uses its window only when use_sliding_window is set, on the layers from
    // max_window_layers on (transformers' layer_types).
    for (use_it, from, sliding) in [(true, 1, vec![false, true]), (true, 28, vec![false, false]), (false, 0, vec![false, false])] {
        let d = copy_with_config("qwen2", |c| {
            c["use_sliding_window"] = use_it.into();
            c["sliding_window"] = 16.into();
            c["max_window_layers"] = from.into();
            c.as_object_mut().unwrap().remove("layer_types");
        });
        let m = Model::load(d.path(), &Device::Cpu).unwrap();
        assert_eq!(m.config().context, 128);
        assert_eq!((0..2).map(|l| m.config().is_sliding(l)).collect::<Vec<_>>(), sliding, "use {use_it} from {from}");
    }
}

/// Checkpoints as they ship: bf16 and f16 weights load (widened to f32) and give exactly the
/// logits of the same rounded weights stored as f32, close to transformers' f32 logits; a
/// sharded checkpoint (model.safetensors.index.json) loads the files its index names and
/// matches transformers to 1e-4.
#[test]
fn half_precision_and_sharded_checkpoints_load_and_match() {
    let (ids, want) = reference(&tiny("llama"));
    let ts = candle_core::safetensors::load(tiny("llama").join("model.safetensors"), &Device::Cpu).unwrap();
    let write = |tensors: &std::collections::HashMap<String, Tensor>| {
        let d = copy_with_config("llama", |_| {});
        candle_core::safetensors::save(tensors, d.path().join("model.safetensors")).unwrap();
        d
    };
    for dt in [DType::BF16, DType::F16] {
        let half: std::collections::HashMap<String, Tensor> = ts.iter().map(|(k, v)| (k.clone(), v.to_dtype(dt).unwrap())).collect();
        let widened: std::collections::HashMap<String, Tensor> = half.iter().map(|(k, v)| (k.clone(), v.to_dtype(DType::F32).unwrap())).collect();
        let (h, w) = (write(&half), write(&widened));
        let got = dense_logits(&Model::load(h.path(), &Device::Cpu).unwrap(), &ids);
        let exact = dense_logits(&Model::load(w.path(), &Device::Cpu).unwrap(), &ids);
        assert!(max_abs_diff(&got, &exact) <= 1e-6, "{dt:?}: differs from the same weights in f32");
        let err = max_abs_diff(&got, &want);
        eprintln!("{dt:?} weights: max |logits - transformers (f32)| = {err:e}");
        assert!(err <= 5e-2, "{dt:?}: {err}");
    }
    // Two shards and their index; a stray file the index does not name is not read.
    let d = copy_with_config("llama", |_| {});
    std::fs::remove_file(d.path().join("model.safetensors")).unwrap();
    let mut names: Vec<&String> = ts.keys().collect();
    names.sort();
    let (a, b) = names.split_at(names.len() / 2);
    let mut map = serde_json::Map::new();
    for (part, file) in [(a, "model-00001-of-00002.safetensors"), (b, "model-00002-of-00002.safetensors")] {
        let shard: std::collections::HashMap<String, Tensor> = part.iter().map(|n| ((*n).clone(), ts[*n].clone())).collect();
        candle_core::safetensors::save(&shard, d.path().join(file)).unwrap();
        part.iter().for_each(|n| {
            map.insert((*n).clone(), file.into());
        });
    }
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": map});
    std::fs::write(d.path().join("model.safetensors.index.json"), index.to_string()).unwrap();
    candle_core::safetensors::save(&ts, d.path().join("stray-copy.safetensors")).unwrap();
    let err = max_abs_diff(&dense_logits(&Model::load(d.path(), &Device::Cpu).unwrap(), &ids), &want);
    assert!(err <= TOL, "sharded: {err}");
    // An index that puts a tensor in the wrong shard is refused.
    let mut bad = index.clone();
    bad["weight_map"][a[0].as_str()] = "model-00002-of-00002.safetensors".into();
    std::fs::write(d.path().join("model.safetensors.index.json"), bad.to_string()).unwrap();
    let e = Model::load(d.path(), &Device::Cpu).err().expect("wrong shard");
    assert!(e.to_string().contains("where the index puts it"), "{e}");
}

/// `--model ORG/NAME` finds a repo in a Hugging Face hub cache laid out as the hub lays it out
/// (blobs, snapshots/<commit>/ of links to them, refs/main), via HF_HUB_CACHE or HF_HOME, offline.
#[test]
fn hub_cache_repo_ids_resolve_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let hub = tmp.path().join("home/hub");
    let repo = hub.join("models--tiny-org--tiny-llama");
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let snap = repo.join("snapshots").join(commit);
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::create_dir_all(repo.join("blobs")).unwrap();
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), commit).unwrap();
    for (i, f) in ["config.json", "model.safetensors"].iter().enumerate() {
        let blob = repo.join("blobs").join(format!("blob{i}"));
        std::fs::copy(tiny("llama").join(f), &blob).unwrap();
        std::os::unix::fs::symlink(format!("../../blobs/blob{i}"), snap.join(f)).unwrap();
    }
    let info = |var: &str, val: &Path, id: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_focus-lens"))
            .args(["info", "--json", id])
            .env_remove("HF_HUB_CACHE")
            .env_remove("HF_HOME")
            .env(var, val)
            .output()
            .unwrap()
    };
    for (var, val) in [("HF_HUB_CACHE", hub.clone()), ("HF_HOME", tmp.path().join("home"))] {
        let o = info(var, &val, "tiny-org/tiny-llama");
        assert!(o.status.success(), "{var}: {}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(v["config"]["arch"], "llama");
        assert!(v["path"].as_str().unwrap().ends_with(commit), "{}", v["path"]);
    }
    let o = info("HF_HUB_CACHE", &hub, "tiny-org/absent");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("not in the Hugging Face cache"), "{}", String::from_utf8_lossy(&o.stderr));
    // The model loaded from the cache is the fixture.
    let (ids, want) = reference(&tiny("llama"));
    let m = Model::load(&snap, &Device::Cpu).unwrap();
    assert!(max_abs_diff(&dense_logits(&m, &ids), &want) <= TOL);
}
