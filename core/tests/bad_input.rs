//! Inputs that are wrong in every way we could think of: each must give an `Err` whose message
//! says what is wrong, never a panic and never a huge allocation.

#[path = "../../tests/common/mod.rs"]
mod common;
#[path = "../../tests/common/gguf_builder.rs"]
mod gguf_builder;

use common::TestResult;
use common::inputs::{assert_has, edit_config, edit_tensor, err_msg, tiny_copy};
use gguf_builder::{put_str, GgufBuilder};

use candle_core::{Device, Tensor};
use focus_core::model::gguf::GgufFile;
use focus_core::model::ForwardOptions;
use focus_core::{Adapter, AdapterSpec, Mode, Model};
use rand::{rngs::StdRng, Rng, SeedableRng};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

fn load_err(path: &Path) -> String {
    err_msg(Model::load(path, &Device::Cpu))
}

// ---------------------------------------------------------------------------------------------
// GGUF files built by hand.

/// A small, well-formed GGUF file (not a runnable model: it has no tokenizer).
fn small_gguf() -> GgufBuilder {
    GgufBuilder::default()
        .kv_str("general.architecture", "llama")
        .kv_str("general.name", "tiny")
        .kv_u32("llama.block_count", 1)
        .kv_u32_array("some.array", 3, &[1, 2, 3])
        .tensor_f32("token_embd.weight", &[8, 4], &[0.5; 32])
        .tensor_f32("output_norm.weight", &[8], &[1.0; 8])
}

fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn the_handmade_gguf_is_valid() -> TestResult {
    // The baseline the corrupt variants below are made from parses.
    let tmp = tempfile::tempdir()?;
    let p = write_file(tmp.path(), "ok.gguf", &small_gguf().bytes());
    let g = GgufFile::open(&p)?;
    assert_eq!(g.str("general.architecture")?, "llama");
    assert_eq!(g.tensors["token_embd.weight"].shape, vec![4, 8]);
    assert_eq!(g.get("some.array").unwrap().as_array().unwrap().len(), 3);
    // As a model it is refused for what it lacks, not for its bytes.
    let e = load_err(&p);
    assert_has(&e, &["missing metadata key llama."]);
    Ok(())
}

#[test]
fn gguf_with_wrong_magic() {
    let tmp = tempfile::tempdir().unwrap();
    let mut b = small_gguf().bytes();
    b[..4].copy_from_slice(b"GGML");
    let e = load_err(&write_file(tmp.path(), "m.gguf", &b));
    assert_has(&e, &["m.gguf", "not a GGUF file", "wrong magic"]);
    // Too short to hold a magic at all, and an empty file.
    assert_has(&load_err(&write_file(tmp.path(), "short.gguf", b"GG")), &["wrong magic"]);
    assert_has(&load_err(&write_file(tmp.path(), "empty.gguf", b"")), &["wrong magic"]);
    // Text that is not a model.
    assert_has(&load_err(&write_file(tmp.path(), "t.gguf", b"hello, this is text\n")), &["wrong magic"]);
}

#[test]
fn gguf_with_unsupported_version() {
    let tmp = tempfile::tempdir().unwrap();
    let mut b = small_gguf().bytes();
    b[4..8].copy_from_slice(&99u32.to_le_bytes());
    assert_has(&load_err(&write_file(tmp.path(), "v.gguf", &b)), &["unsupported GGUF version 99"]);
}

#[test]
fn gguf_truncated_anywhere() {
    // Every prefix of a valid file is an error (the file has no optional tail).
    let tmp = tempfile::tempdir().unwrap();
    let full = small_gguf().bytes();
    for n in 0..full.len() {
        let p = write_file(tmp.path(), "cut.gguf", &full[..n]);
        let e = err_msg(GgufFile::open(&p));
        assert!(
            e.contains("truncated GGUF")
                || e.contains("wrong magic")
                || e.contains("cannot fit")
                || e.contains("are larger than the file"),
            "prefix of {n} bytes: {e}"
        );
    }
}

fn real_model_prefix(dir: &Path, bytes: u64) -> PathBuf {
    let src = common::model_path();
    let len = std::fs::metadata(&src).unwrap().len();
    assert!(len > bytes, "the default model is only {len} bytes");
    let p = dir.join(format!("prefix-{bytes}.gguf"));
    let mut out = std::fs::File::create(&p).unwrap();
    std::io::copy(&mut std::io::Read::take(std::fs::File::open(&src).unwrap(), bytes), &mut out).unwrap();
    out.flush().unwrap();
    p
}

#[test]
fn real_model_truncated_to_1mb() {
    // 1 MB ends inside the metadata (the tokenizer's vocabulary and merges).
    let tmp = tempfile::tempdir().unwrap();
    let p = real_model_prefix(tmp.path(), 1 << 20);
    let e = load_err(&p);
    assert_has(&e, &["prefix-1048576.gguf", "truncated", "GGUF"]);
}

#[test]
fn real_model_truncated_to_50mb() {
    // 50 MB holds the whole header, but not every tensor's data.
    let tmp = tempfile::tempdir().unwrap();
    let p = real_model_prefix(tmp.path(), 50 << 20);
    let e = load_err(&p);
    assert_has(&e, &["prefix-52428800.gguf", "truncated GGUF: tensor", "data section"]);
}

#[test]
fn gguf_with_absurd_tensor_count() {
    let tmp = tempfile::tempdir().unwrap();
    let mut b = small_gguf().bytes();
    b[8..16].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    let e = load_err(&write_file(tmp.path(), "n.gguf", &b));
    assert_has(&e, &["corrupt GGUF", "tensor count 9223372036854775807 cannot fit"]);
    // A count that does not overflow but still cannot fit (a naive reader would reserve GBs).
    b[8..16].copy_from_slice(&(1u64 << 28).to_le_bytes());
    let e = load_err(&write_file(tmp.path(), "n2.gguf", &b));
    assert_has(&e, &["tensor count 268435456 cannot fit"]);
    // And the metadata count.
    let mut b = small_gguf().bytes();
    b[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    assert_has(&load_err(&write_file(tmp.path(), "kv.gguf", &b)), &["metadata count", "cannot fit"]);
}

#[test]
fn gguf_with_absurd_metadata_lengths() {
    let tmp = tempfile::tempdir().unwrap();
    // An array that claims 2^61 elements.
    let b = GgufBuilder::default().kv_str("general.architecture", "llama").kv_u32_array("huge", 1 << 61, &[7, 8]).bytes();
    let e = load_err(&write_file(tmp.path(), "arr.gguf", &b));
    assert_has(&e, &["corrupt GGUF", "array count 2305843009213693952 cannot fit"]);
    // u64::MAX elements (multiplying by the element size overflows).
    let b = GgufBuilder::default().kv_u32_array("huge", u64::MAX, &[]).bytes();
    assert_has(&load_err(&write_file(tmp.path(), "arr2.gguf", &b)), &["array count", "cannot fit"]);
    // A key whose length is absurd.
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.extend((u64::MAX - 3).to_le_bytes());
    b.extend(b"general.architecture and more bytes");
    assert_has(&load_err(&write_file(tmp.path(), "key.gguf", &b)), &["string length count", "cannot fit"]);
    // An unknown value type.
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    put_str(&mut b, "k");
    b.extend(77u32.to_le_bytes());
    b.extend([0u8; 16]);
    assert_has(&load_err(&write_file(tmp.path(), "ty.gguf", &b)), &["unknown metadata value type 77"]);
}

#[test]
fn gguf_with_absurd_tensor_dimensions() {
    let tmp = tempfile::tempdir().unwrap();
    let case = |name: &str, ne: &[u64]| {
        let b = small_gguf().tensor_f32("big.weight", ne, &[1.0; 4]).bytes();
        load_err(&write_file(tmp.path(), name, &b))
    };
    // 2^80 elements: the product overflows u64.
    assert_has(&case("overflow.gguf", &[1 << 40, 1 << 40]), &["tensor big.weight", "larger than the file"]);
    // 2^62 elements in one dimension.
    assert_has(&case("one.gguf", &[u64::MAX / 4]), &["tensor big.weight", "larger than the file"]);
    // 2^36 elements: fits in u64 and passes no size check except the file's.
    let e = case("mid.gguf", &[1 << 18, 1 << 18]);
    assert!(e.contains("larger than the file") || e.contains("truncated GGUF: tensor big.weight"), "{e}");
    // A zero dimension.
    assert_has(&case("zero.gguf", &[4, 0]), &["tensor big.weight has a zero dimension"]);
    // 1000 dimensions.
    let mut g = small_gguf();
    put_str(&mut g.infos, "many.dims");
    g.infos.extend(1000u32.to_le_bytes());
    g.infos.extend([1u8; 64]);
    g.n_tensors += 1;
    assert_has(&load_err(&write_file(tmp.path(), "dims.gguf", &g.bytes())), &["tensor many.dims has 1000 dimensions"]);
    // An offset past the end of the data.
    let mut g = small_gguf();
    put_str(&mut g.infos, "far.weight");
    g.infos.extend(1u32.to_le_bytes());
    g.infos.extend(4u64.to_le_bytes());
    g.infos.extend(0u32.to_le_bytes());
    g.infos.extend((u64::MAX - 8).to_le_bytes());
    g.n_tensors += 1;
    assert_has(&load_err(&write_file(tmp.path(), "off.gguf", &g.bytes())), &["truncated GGUF: tensor far.weight"]);
    // An unknown tensor type.
    let mut g = small_gguf();
    put_str(&mut g.infos, "odd.weight");
    g.infos.extend(1u32.to_le_bytes());
    g.infos.extend(4u64.to_le_bytes());
    g.infos.extend(1234u32.to_le_bytes());
    g.infos.extend(0u64.to_le_bytes());
    g.n_tensors += 1;
    assert_has(&load_err(&write_file(tmp.path(), "type.gguf", &g.bytes())), &["tensor odd.weight has unsupported type 1234"]);
}

#[test]
fn gguf_with_absurd_hyper_parameters() {
    // Well-formed bytes describing an impossible model: refused before any weight is built.
    let tmp = tempfile::tempdir().unwrap();
    let model = |layers: u64, heads: u32| {
        GgufBuilder::default()
            .kv_str("general.architecture", "llama")
            .kv_u64("llama.block_count", layers)
            .kv_u32("llama.embedding_length", 8)
            .kv_u32("llama.attention.head_count", heads)
            .kv_u32("llama.feed_forward_length", 16)
            .kv_u32("llama.context_length", 64)
            .kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5)
            .tensor_f32("token_embd.weight", &[8, 4], &[0.5; 32])
            .bytes()
    };
    let e = load_err(&write_file(tmp.path(), "layers.gguf", &model(1 << 40, 2)));
    assert_has(&e, &["invalid model header", "n_layers = 1099511627776 is outside"]);
    let e = load_err(&write_file(tmp.path(), "heads.gguf", &model(1, 0)));
    assert_has(&e, &["invalid model header", "n_heads = 0"]);
    // Another architecture.
    let b = GgufBuilder::default().kv_str("general.architecture", "mamba").bytes();
    assert_has(&load_err(&write_file(tmp.path(), "arch.gguf", &b)), &["unsupported model", "\"mamba\""]);
}

#[test]
fn gguf_random_corruption_never_panics() {
    let tmp = tempfile::tempdir().unwrap();
    let full = small_gguf().bytes();
    let mut rng = StdRng::seed_from_u64(7);
    let mut errors = 0;
    for n in 0..400 {
        let mut b = full.clone();
        for _ in 0..rng.gen_range(1..4) {
            let i = rng.gen_range(0..b.len());
            b[i] = rng.gen();
        }
        let p = write_file(tmp.path(), "flip.gguf", &b);
        // The file has no tokenizer, so even an intact-looking one ends in an error.
        let r = std::panic::catch_unwind(|| Model::load(&p, &Device::Cpu).map(|_| ()));
        match r {
            Err(_) => panic!("iteration {n}: Model::load panicked"),
            Ok(Ok(())) => panic!("iteration {n}: loaded a model without a tokenizer"),
            Ok(Err(e)) => {
                assert!(!e.to_string().is_empty());
                errors += 1;
            }
        }
    }
    assert_eq!(errors, 400);
}

// ---------------------------------------------------------------------------------------------
// Hugging Face directories.

fn tiny(name: &str) -> PathBuf {
    common::fixture("hf_tiny").join(name)
}

#[test]
fn hf_copy_loads() -> TestResult {
    // The baseline of the cases below.
    let d = tiny_copy("llama");
    Model::load(d.path(), &Device::Cpu)?;
    // A rewrite that keeps every value keeps the model loadable.
    edit_tensor(d.path(), "model.norm.weight", |_| {});
    Model::load(d.path(), &Device::Cpu)?;
    Ok(())
}

#[test]
fn hf_truncated_safetensors() -> TestResult {
    let d = tiny_copy("llama");
    let p = d.path().join("model.safetensors");
    let full = std::fs::read(&p)?;
    for n in [0, 5, 8, 100, full.len() / 2, full.len() - 1] {
        std::fs::write(&p, &full[..n])?;
        let e = load_err(d.path());
        assert_has(&e, &["model.safetensors", "invalid safetensors file"]);
    }
    Ok(())
}

#[test]
fn hf_corrupt_safetensors() -> TestResult {
    let d = tiny_copy("llama");
    let p = d.path().join("model.safetensors");
    let full = std::fs::read(&p)?;
    // A header length of 2^63.
    let mut b = full.clone();
    b[..8].copy_from_slice(&(1u64 << 63).to_le_bytes());
    std::fs::write(&p, &b)?;
    assert_has(&load_err(d.path()), &["model.safetensors", "invalid safetensors file"]);
    // A header that is not JSON.
    let mut b = full.clone();
    b[8..40].copy_from_slice(&[0xAB; 32]);
    std::fs::write(&p, &b)?;
    assert_has(&load_err(d.path()), &["model.safetensors", "invalid safetensors file"]);
    // Random bytes.
    let mut rng = StdRng::seed_from_u64(3);
    let junk: Vec<u8> = (0..4096).map(|_| rng.gen()).collect();
    std::fs::write(&p, &junk)?;
    assert_has(&load_err(d.path()), &["model.safetensors", "invalid safetensors file"]);
    // No weights at all.
    std::fs::remove_file(&p)?;
    assert_has(&load_err(d.path()), &["no *.safetensors file"]);
    Ok(())
}

#[test]
fn hf_nan_weight() {
    let d = tiny_copy("llama");
    edit_tensor(d.path(), "model.layers.1.mlp.down_proj.weight", |v| v[5] = f32::NAN);
    let e = load_err(d.path());
    assert_has(&e, &["tensor model.layers.1.mlp.down_proj.weight", "non-finite", "NaN", "element 5"]);
    let d = tiny_copy("qwen2");
    edit_tensor(d.path(), "model.layers.0.self_attn.k_proj.bias", |v| v[3] = f32::INFINITY);
    assert_has(&load_err(d.path()), &["tensor model.layers.0.self_attn.k_proj.bias", "non-finite", "inf"]);
}

#[test]
fn hf_missing_or_misshapen_tensor() -> TestResult {
    let d = tiny_copy("llama");
    let p = d.path().join("model.safetensors");
    let mut ts = candle_core::safetensors::load(&p, &Device::Cpu)?;
    ts.remove("model.layers.1.self_attn.v_proj.weight").unwrap();
    candle_core::safetensors::save(&ts, &p)?;
    assert_has(&load_err(d.path()), &["missing tensor model.layers.1.self_attn.v_proj.weight"]);
    // A config that disagrees with the tensors.
    let d = tiny_copy("qwen2");
    edit_config(d.path(), |c| {
        c.insert("intermediate_size".into(), 96.into());
    });
    assert_has(&load_err(d.path()), &["model.layers.0.mlp.gate_proj.weight has shape [160, 64]", "[96, 64]"]);
    Ok(())
}

#[test]
fn hf_unsupported_model_type() {
    let d = tiny_copy("llama");
    edit_config(d.path(), |c| {
        c.insert("model_type".into(), "mamba".into());
    });
    assert_has(&load_err(d.path()), &["unsupported model", "model_type \"mamba\"", "supported: gpt2, llama, mistral, qwen2"]);
    edit_config(d.path(), |c| {
        c.remove("model_type");
    });
    assert_has(&load_err(d.path()), &["unsupported model", "model_type \"\""]);
}

#[test]
fn hf_gpt2_attention_variants() {
    // Scalings the decoder does not implement are refused, not run wrongly.
    for (key, value) in [("scale_attn_by_inverse_layer_idx", true), ("scale_attn_weights", false)] {
        let d = tiny_copy("gpt2");
        edit_config(d.path(), |c| {
            c.insert(key.into(), value.into());
        });
        assert_has(&load_err(d.path()), &["unsupported model", "GPT-2 attention scaling"]);
    }
    let d = tiny_copy("gpt2");
    edit_config(d.path(), |c| {
        c.insert("activation_function".into(), "relu".into());
    });
    assert_has(&load_err(d.path()), &["unsupported model", "GPT-2 activation \"relu\""]);
}

#[test]
fn hf_tensor_in_two_files() -> TestResult {
    // A stray second checkpoint in the directory: refuse rather than mix the two.
    let d = tiny_copy("llama");
    let src = candle_core::safetensors::load(d.path().join("model.safetensors"), &Device::Cpu)?;
    let one: HashMap<String, Tensor> = src.into_iter().filter(|(n, _)| n == "model.norm.weight").collect();
    candle_core::safetensors::save(&one, d.path().join("extra.safetensors"))?;
    assert_has(&load_err(d.path()), &["tensor model.norm.weight is in both", "extra.safetensors", "model.safetensors"]);
    // Shards with distinct tensors are one checkpoint.
    let d = tiny_copy("llama");
    let p = d.path().join("model.safetensors");
    let all = candle_core::safetensors::load(&p, &Device::Cpu)?;
    let (a, b): (Vec<_>, Vec<_>) = all.into_iter().partition(|(n, _)| n.contains("layers.0."));
    std::fs::remove_file(&p)?;
    candle_core::safetensors::save(&a.into_iter().collect::<HashMap<_, _>>(), d.path().join("model-00001-of-00002.safetensors"))?;
    candle_core::safetensors::save(&b.into_iter().collect::<HashMap<_, _>>(), d.path().join("model-00002-of-00002.safetensors"))?;
    Model::load(d.path(), &Device::Cpu)?;
    Ok(())
}

#[test]
fn hf_bad_config() -> TestResult {
    let d = tiny_copy("llama");
    let cfg = d.path().join("config.json");
    std::fs::write(&cfg, b"{ \"model_type\": \"llama\", ")?;
    assert_has(&load_err(d.path()), &["config.json", "invalid JSON"]);
    std::fs::write(&cfg, b"[1, 2]")?;
    assert_has(&load_err(d.path()), &["config.json", "not a JSON object"]);
    std::fs::remove_file(&cfg)?;
    assert_has(&load_err(d.path()), &["cannot read", "config.json"]);
    // Absurd or missing sizes.
    let d = tiny_copy("llama");
    edit_config(d.path(), |c| {
        c.insert("num_hidden_layers".into(), serde_json::json!(1u64 << 40));
    });
    assert_has(&load_err(d.path()), &["invalid config", "n_layers = 1099511627776 is outside"]);
    let d = tiny_copy("llama");
    edit_config(d.path(), |c| {
        c.remove("hidden_size");
    });
    assert_has(&load_err(d.path()), &["key \"hidden_size\": missing"]);
    let d = tiny_copy("llama");
    edit_config(d.path(), |c| {
        c.insert("num_attention_heads".into(), (-4).into());
    });
    assert_has(&load_err(d.path()), &["key \"num_attention_heads\": not a non-negative integer"]);
    // A RoPE scaling we do not implement.
    let d = tiny_copy("llama");
    edit_config(d.path(), |c| {
        c.insert("rope_parameters".into(), serde_json::json!({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}));
    });
    assert_has(&load_err(d.path()), &["unsupported model", "RoPE type \"dynamic\""]);
    // A path that does not exist.
    assert_has(&load_err(&d.path().join("nope")), &["cannot read", "nope"]);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Adapters.

fn small_spec() -> AdapterSpec {
    AdapterSpec { window: 4, groups: 4, ..Default::default() }
}

fn tiny_model(name: &str) -> Model {
    Model::load(&tiny(name), &Device::Cpu).unwrap()
}

/// An adapter made for the tiny llama, saved to a temporary directory.
fn saved_llama_adapter() -> (Model, tempfile::TempDir) {
    let m = tiny_model("llama");
    let a = Adapter::random(&m.identity(), m.device(), &small_spec(), 1).unwrap();
    let d = tempfile::tempdir().unwrap();
    a.save(d.path()).unwrap();
    Adapter::load(d.path(), &m.identity(), m.device()).expect("the baseline adapter loads");
    (m, d)
}

fn adapter_err(dir: &Path, model: &Model) -> String {
    err_msg(Adapter::load(dir, &model.identity(), model.device()))
}

#[test]
fn adapter_for_another_model() -> TestResult {
    let (_, d) = saved_llama_adapter();
    let qwen = tiny_model("qwen2");
    let e = adapter_err(d.path(), &qwen);
    assert_has(&e, &["adapter does not fit the model", "base_model.arch", "adapter has llama", "model has qwen2"]);
    // Same architecture and shapes, other weights: the fingerprint tells them apart.
    let other = tiny_copy("llama");
    edit_tensor(other.path(), "model.norm.weight", |v| v.iter_mut().for_each(|x| *x *= 2.0));
    let m2 = Model::load(other.path(), &Device::Cpu)?;
    let e = adapter_err(d.path(), &m2);
    assert_has(&e, &["adapter does not fit the model", "base_model.fingerprint"]);
    // Same architecture, other depth.
    let cfg_path = d.path().join("adapter_config.json");
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&cfg_path)?)?;
    cfg["base_model"]["n_layers"] = 3.into();
    std::fs::write(&cfg_path, cfg.to_string())?;
    assert_has(&adapter_err(d.path(), &tiny_model("llama")), &["base_model.n_layers", "adapter has 3, model has 2"]);
    Ok(())
}

fn edit_adapter_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let p = dir.join("adapter_config.json");
    let mut cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    edit(&mut cfg);
    std::fs::write(&p, serde_json::to_string_pretty(&cfg).unwrap()).unwrap();
}

#[test]
fn adapter_config_disagrees_with_tensors() {
    let (m, d) = saved_llama_adapter();
    edit_adapter_config(d.path(), |c| c["groups"] = 5.into());
    let e = adapter_err(d.path(), &m);
    assert_has(&e, &["tensor layers.0.centroids shape", "[4, 16]", "[5, 16]"]);
    let (m, d) = saved_llama_adapter();
    edit_adapter_config(d.path(), |c| c["d_g"] = 8.into());
    assert_has(&adapter_err(d.path(), &m), &["tensor layers.0.proj shape", "[64, 16]", "[64, 8]"]);
    // Values outside their ranges.
    let (m, d) = saved_llama_adapter();
    edit_adapter_config(d.path(), |c| c["groups"] = 0.into());
    assert_has(&adapter_err(d.path(), &m), &["invalid adapter", "groups (K) = 0"]);
    let (m, d) = saved_llama_adapter();
    edit_adapter_config(d.path(), |c| c["top_k"] = 9.into());
    assert_has(&adapter_err(d.path(), &m), &["invalid adapter", "top_k = 9"]);
    let (m, d) = saved_llama_adapter();
    edit_adapter_config(d.path(), |c| c["tau"] = (-1.0).into());
    assert_has(&adapter_err(d.path(), &m), &["invalid adapter", "tau = -1"]);
    let (m, d) = saved_llama_adapter();
    edit_adapter_config(d.path(), |c| c["format"] = "peft".into());
    assert_has(&adapter_err(d.path(), &m), &["invalid adapter", "format is \"peft\""]);
    // Not an adapter config at all.
    let (m, d) = saved_llama_adapter();
    std::fs::write(d.path().join("adapter_config.json"), b"{\"groups\": 4}").unwrap();
    assert_has(&adapter_err(d.path(), &m), &["adapter_config.json", "invalid adapter config"]);
}

#[test]
fn adapter_missing_files() -> TestResult {
    let (m, d) = saved_llama_adapter();
    std::fs::remove_file(d.path().join("adapter_model.safetensors"))?;
    assert_has(&adapter_err(d.path(), &m), &["cannot read", "adapter_model.safetensors"]);
    let (m, d) = saved_llama_adapter();
    std::fs::remove_file(d.path().join("adapter_config.json"))?;
    assert_has(&adapter_err(d.path(), &m), &["cannot read", "adapter_config.json"]);
    // A directory that does not exist.
    assert_has(&adapter_err(&d.path().join("missing"), &m), &["cannot read"]);
    // Truncated weights.
    let (m, d) = saved_llama_adapter();
    let p = d.path().join("adapter_model.safetensors");
    let b = std::fs::read(&p)?;
    std::fs::write(&p, &b[..b.len() / 2])?;
    assert_has(&adapter_err(d.path(), &m), &["adapter_model.safetensors", "invalid safetensors file"]);
    Ok(())
}

fn edit_adapter_tensor(dir: &Path, edit: impl FnOnce(&mut HashMap<String, Tensor>)) {
    let p = dir.join("adapter_model.safetensors");
    let mut ts = candle_core::safetensors::load(&p, &Device::Cpu).unwrap();
    edit(&mut ts);
    candle_core::safetensors::save(&ts, &p).unwrap();
}

#[test]
fn adapter_nan_centroid() {
    let (m, d) = saved_llama_adapter();
    edit_adapter_tensor(d.path(), |ts| {
        let mut v = ts["layers.1.centroids"].flatten_all().unwrap().to_vec1::<f32>().unwrap();
        v[2] = f32::NAN;
        ts.insert("layers.1.centroids".into(), Tensor::from_vec(v, (4, 16), &Device::Cpu).unwrap());
    });
    assert_has(&adapter_err(d.path(), &m), &["invalid adapter", "tensor layers.1.centroids", "NaN"]);
    // A missing tensor, and an extra one.
    let (m, d) = saved_llama_adapter();
    edit_adapter_tensor(d.path(), |ts| {
        ts.remove("layers.1.proj");
    });
    assert_has(&adapter_err(d.path(), &m), &["number of router tensors", "adapter has 3, model has 4"]);
    let (m, d) = saved_llama_adapter();
    edit_adapter_tensor(d.path(), |ts| {
        let c = ts.remove("layers.1.proj").unwrap();
        ts.insert("layers.1.projection".into(), c);
    });
    assert_has(&adapter_err(d.path(), &m), &["missing tensor layers.1.proj"]);
    // Another dtype.
    let (m, d) = saved_llama_adapter();
    edit_adapter_tensor(d.path(), |ts| {
        let c = ts["layers.0.proj"].to_dtype(candle_core::DType::F16).unwrap();
        ts.insert("layers.0.proj".into(), c);
    });
    assert_has(&adapter_err(d.path(), &m), &["tensor layers.0.proj is F16, expected F32"]);
}

// ---------------------------------------------------------------------------------------------
// Text files.

fn text_err(p: &Path) -> String {
    err_msg(focus_core::io::text::read_text(p))
}

#[test]
fn text_files_that_are_not_text() -> TestResult {
    let tmp = tempfile::tempdir()?;
    let d = tmp.path();
    assert_has(&text_err(&write_file(d, "empty.txt", b"")), &["empty.txt", "is empty"]);
    assert_has(&text_err(&write_file(d, "ws.txt", b" \n\t\r\n  \n")), &["ws.txt", "only whitespace"]);
    assert_has(&text_err(&write_file(d, "bin.txt", b"abc\0def")), &["bin.txt", "binary", "NUL byte at offset 3"]);
    assert_has(&text_err(&write_file(d, "latin1.txt", b"caf\xe9 au lait\n")), &["latin1.txt", "not valid UTF-8", "offset 3", "line 1"]);
    assert_has(&text_err(d), &["is a directory"]);
    assert_has(&text_err(&d.join("missing.txt")), &["cannot read", "missing.txt"]);
    // One byte over the limit, as a sparse file (instant, and no disk used).
    let big = d.join("big.txt");
    std::fs::File::create(&big)?.set_len(focus_core::io::text::MAX_TEXT_BYTES + 1)?;
    assert_has(&text_err(&big), &["big.txt", "refused"]);
    // The baseline: real text is read as it is.
    assert_eq!(focus_core::io::text::read_text(&write_file(d, "ok.txt", "héllo\n".as_bytes()))?, "héllo\n");
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Sequences the model cannot run.

#[test]
fn forward_longer_than_the_context() {
    let m = tiny_model("llama");
    let ctx = m.config().context;
    assert_eq!(ctx, 128);
    let opts = ForwardOptions::new(Mode::Dense, None);
    m.decoder.forward(&vec![1u32; ctx], &opts).expect("exactly the context runs");
    let e = err_msg(m.decoder.forward(&vec![1u32; ctx + 1], &opts));
    assert_has(&e, &["129 tokens exceed the model's context of 128 tokens"]);
    assert_has(&err_msg(m.decoder.forward(&[], &opts)), &["zero tokens"]);
    assert_has(&err_msg(m.decoder.forward(&[1, 2, 512], &opts)), &["token id 512 is outside the vocabulary (512)"]);
    // A Focus mode without an adapter.
    assert_has(&err_msg(m.decoder.forward(&[1, 2, 3], &ForwardOptions::new(common::topk(2, 8), None))), &["needs an adapter"]);
    // Learned positions (GPT-2) too.
    let g = tiny_model("gpt2");
    assert_has(&err_msg(g.decoder.forward(&vec![1u32; 129], &opts)), &["exceed the model's context"]);
}

#[test]
fn ppl_text_shorter_than_ctx() {
    let m = tiny_model("qwen2");
    let ids: Vec<u32> = (0..100).collect();
    let e = err_msg(focus_core::eval::ppl::perplexity(&m, &ids, 128, Mode::Dense, None, None, |_, _| {}));
    assert_has(&e, &["the text has 100 tokens", "needs at least 128"]);
    let e = err_msg(focus_core::eval::ppl::perplexity(&m, &[], 64, Mode::Dense, None, None, |_, _| {}));
    assert_has(&e, &["the text has 0 tokens"]);
    // ctx beyond the model's context, and too small.
    let e = err_msg(focus_core::eval::ppl::perplexity(&m, &ids, 256, Mode::Dense, None, None, |_, _| {}));
    assert_has(&e, &["ctx 256 must be in 4..=128"]);
    let e = err_msg(focus_core::eval::ppl::perplexity(&m, &ids, 2, Mode::Dense, None, None, |_, _| {}));
    assert_has(&e, &["ctx 2 must be in"]);
    // The baseline: enough tokens gives a finite perplexity.
    let r = focus_core::eval::ppl::perplexity(&m, &ids, 64, Mode::Dense, None, None, |_, _| {}).unwrap();
    assert_eq!((r.chunks, r.scored_tokens), (1, 31));
    assert!(r.ppl.is_finite() && r.ppl > 1.0);
}
