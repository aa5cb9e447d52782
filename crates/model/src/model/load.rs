//! The one loader of every family (`family::FAMILIES`): a `ModelConfig` from a Hugging Face
//! `config.json` or a GGUF header, then the decoder's weights by the family's tensor names.

use super::block::{Block, Mlp, Norm};
use super::linear::{Linear, Weight};
use super::config::{MlpKind, ModelConfig, NormKind, Positions, QkNorm, RopeScaling, Sliding};
use super::decoder::Decoder;
use super::family::{AttnScale, Family, Flag, GgufFamily, HfFamily, HfWindow, Names, WindowLayers};
use super::gguf::{GgufFile, Value};
use super::hf::HfConfig;
use super::weights::WeightSource;
use crate::error::{Error, Result};
use candle_core::{DType, Device};

impl Flag {
    fn read(self, c: &HfConfig) -> bool {
        match self {
            Flag::Never => false,
            Flag::Always => true,
            Flag::Key(k, default) => c.bool_or(k, default),
        }
    }
}

/// The score scale of a model of `n_layers` layers, `d_model` wide with `n_heads` heads;
/// `key`: reads a config key (Hugging Face).
fn attn_scale(rule: AttnScale, n_layers: usize, d_model: usize, n_heads: usize, head_dim: usize, key: impl Fn(&str, f64) -> Result<f64>) -> Result<Option<f64>> {
    Ok(match rule {
        AttnScale::HeadDim => None,
        AttnScale::Key(k) => Some(1.0 / key(k, head_dim as f64)?.sqrt()),
        AttnScale::DModelOverHeadsAt(layers) => (n_layers == layers).then(|| (n_heads as f64 / d_model as f64).sqrt()),
    })
}

/// A Hugging Face `config.json` read as `fam` says.
pub fn config_from_hf(c: &HfConfig, fam: &Family, h: &HfFamily) -> Result<ModelConfig> {
    let a = &h.activation;
    let (key, act) = a.keys.iter().find_map(|k| c.json.get(*k).and_then(|v| v.as_str()).map(|v| (*k, v.to_string()))).unwrap_or((a.keys[0], a.default.to_string()));
    if !a.accepted.contains(&act.as_str()) {
        return Err(Error::Unsupported(format!(
            "{}: {} activation {act:?} in {key} (supported: {})",
            c.path.display(),
            fam.title,
            a.accepted.join(", ")
        )));
    }
    for &(flag, implemented, what) in h.fixed_flags {
        if c.bool_or(flag, implemented) != implemented {
            return Err(Error::Unsupported(format!("{}: {} {what} ({flag} = {})", c.path.display(), fam.title, !implemented)));
        }
    }
    let k = h.keys;
    let d_model = c.usize(k.d_model)?;
    let n_heads = c.usize(k.n_heads)?;
    let n_layers = c.usize(k.n_layers)?;
    let head_dim = match k.head_dim {
        Some(key) => c.opt_usize(key)?.unwrap_or(d_model / n_heads.max(1)),
        None => d_model / n_heads.max(1),
    };
    let rope = if h.learned_positions { None } else { Some(c.rope(10000.0)?) };
    let positions = match &rope {
        None => Positions::Learned,
        Some(r) => Positions::Rope { theta: r.theta, interleaved: false },
    };
    let mut cfg = ModelConfig {
        arch: fam.arch,
        name: c.name(),
        n_layers,
        d_model,
        n_heads,
        n_kv_heads: match k.n_kv_heads {
            Some(key) => c.opt_usize(key)?.unwrap_or(n_heads),
            None => n_heads,
        },
        head_dim,
        ffn_dim: match k.ffn_default_times_d {
            Some(times) => c.opt_usize(k.ffn)?.unwrap_or(times * d_model),
            None => c.usize(k.ffn)?,
        },
        vocab: c.usize(k.vocab)?,
        context: c.usize(k.context)?,
        norm: fam.norm,
        norm_eps: c.f64_or(k.eps.0, k.eps.1)?,
        mlp: fam.mlp,
        positions,
        qkv_bias: h.qkv_bias.read(c),
        tied_embeddings: h.tied_embeddings.read(c),
        embed_scale: fam.embed_scale_sqrt_d.then(|| (d_model as f64).sqrt()),
        qk_norm: fam.qk_norm,
        post_norms: fam.post_norms,
        attn_scale: attn_scale(h.attn_scale, n_layers, d_model, n_heads, head_dim, |key, d| c.f64_or(key, d))?,
        attn_softcap: h.attn_softcap.map(|key| softcap(c, key)).transpose()?.flatten(),
        final_softcap: h.final_softcap.map(|key| softcap(c, key)).transpose()?.flatten(),
        sliding: None,
        rope_scaling: rope.as_ref().and_then(|r| r.scaling.clone()),
    };
    if h.names.fused_qkv && d_model % n_heads.max(1) != 0 {
        return Err(Error::bad_file(&c.path, format!("{} {d_model} is not a multiple of {} {n_heads}", k.d_model, k.n_heads)));
    }
    let (on, rule) = match h.window {
        HfWindow::None => (false, WindowLayers::All),
        HfWindow::Gated(default, rule) => (c.bool_or("use_sliding_window", default), rule),
        HfWindow::Always(rule) => (true, rule),
    };
    if let Some(w) = c.opt_usize("sliding_window")?.filter(|_| on) {
        if w == 0 {
            return Err(Error::bad_file(&c.path, "sliding_window = 0: a window must hold at least 1 token (null turns it off)"));
        }
        let layers = match rule {
            WindowLayers::All => sliding_layers(c, n_layers, |_| true)?,
            WindowLayers::From(key, default) => {
                let from = c.opt_usize(key)?.unwrap_or(default);
                sliding_layers(c, n_layers, |l| l >= from)?
            }
            WindowLayers::Even => sliding_layers(c, n_layers, |l| l % 2 == 0)?,
            WindowLayers::AllButEvery(key, default) => {
                let p = c.opt_usize(key)?.unwrap_or(default).max(1);
                sliding_layers(c, n_layers, |l| (l + 1) % p != 0)?
            }
        };
        // The sliding layers' own RoPE base, when the family has one (Gemma 3).
        let rope_theta = h.local_rope_base.map(|d| rope.as_ref().and_then(|r| r.local_theta).unwrap_or(d));
        if layers.iter().any(|&x| x) {
            cfg.sliding = Some(Sliding { window: w, layers, rope_theta });
        }
    }
    cfg.validate().map_err(|e| Error::bad_file(&c.path, format!("invalid config: {e}")))?;
    Ok(cfg)
}

/// Per-layer attention kinds: `layer_types` ("sliding_attention" / "full_attention",
/// transformers >= 4.53) when present, else `default(l)` (true = sliding).
fn sliding_layers(c: &HfConfig, n_layers: usize, default: impl Fn(usize) -> bool) -> Result<Vec<bool>> {
    match c.json.get("layer_types").filter(|v| !v.is_null()) {
        None => Ok((0..n_layers).map(default).collect()),
        Some(v) => {
            let a = v.as_array().ok_or_else(|| c.err("layer_types", "not a list"))?;
            if a.len() != n_layers {
                return Err(c.err("layer_types", &format!("{} entries for {n_layers} layers", a.len())));
            }
            a.iter()
                .map(|t| match t.as_str() {
                    Some("sliding_attention") => Ok(true),
                    Some("full_attention") => Ok(false),
                    _ => Err(c.err("layer_types", &format!("{t} is not sliding_attention or full_attention"))),
                })
                .collect()
        }
    }
}

/// A soft-cap value: absent, null or 0 means none.
fn softcap(c: &HfConfig, key: &str) -> Result<Option<f64>> {
    Ok(Some(c.f64_or(key, 0.0)?).filter(|&x| x != 0.0))
}

/// A GGUF header read as `fam` says (every key under `<arch>.`).
pub fn config_from_gguf(g: &GgufFile, fam: &Family, gf: &GgufFamily) -> Result<ModelConfig> {
    let key = |k: &str| format!("{}.{k}", gf.arch);
    let n = |k: &str| -> Result<usize> { Ok(g.u64(&key(k))? as usize) };
    let opt_n = |k: &str| g.get(&key(k)).and_then(Value::as_u64).map(|v| v as usize);
    let opt_f = |k: &str| -> Result<Option<f64>> { if g.get(&key(k)).is_some() { Ok(Some(g.f64(&key(k))?)) } else { Ok(None) } };
    let d_model = n("embedding_length")?;
    let n_heads = n("attention.head_count")?;
    let n_layers = n("block_count")?;
    let head_dim = opt_n(gf.head_dim_key).unwrap_or(d_model / n_heads.max(1));
    if let Some(v) = opt_n("attention.value_length") {
        if v != head_dim {
            return Err(Error::Unsupported(format!("{}: key length {head_dim} != value length {v}", g.path.display())));
        }
    }
    // A window of 0 (or none) means every layer is global, as in llama.cpp.
    let rope_theta = opt_f("rope.freq_base")?.unwrap_or(10000.0);
    let sliding = match (&gf.sliding, opt_n("attention.sliding_window")) {
        (Some(s), Some(w)) if w > 0 => {
            let layers = match g.get(&key("attention.sliding_window_pattern")) {
                // Per layer: true = sliding.
                Some(Value::Array(a)) => a.iter().map(|v| v.as_bool().unwrap_or(false)).collect::<Vec<bool>>(),
                other => {
                    let p = other.and_then(Value::as_u64).map_or(s.default_pattern, |p| p as usize);
                    // llama.cpp's set_swa_pattern: layer l slides unless it is the last of each p.
                    (0..n_layers).map(|l| p == 0 || l % p < p - 1).collect()
                }
            };
            Some(Sliding { window: w, layers, rope_theta: opt_f("rope.freq_base_swa")?.or(s.default_rope_base) })
        }
        _ => None,
    };
    let names = &gf.names;
    let vocab = g.info(&format!("{}.weight", names.embed))?.shape.first().copied().unwrap_or(0);
    let cfg = ModelConfig {
        arch: fam.arch,
        name: g.get("general.name").and_then(Value::as_str).unwrap_or(gf.arch).to_string(),
        n_layers,
        d_model,
        n_heads,
        n_kv_heads: opt_n("attention.head_count_kv").unwrap_or(n_heads),
        head_dim,
        ffn_dim: n("feed_forward_length")?,
        vocab,
        context: n("context_length")?,
        norm: fam.norm,
        norm_eps: g.f64(&key(gf.eps_key))?,
        mlp: fam.mlp,
        positions: if gf.learned_positions { Positions::Learned } else { Positions::Rope { theta: rope_theta, interleaved: gf.interleaved_rope } },
        qkv_bias: gf.qkv_bias,
        tied_embeddings: !g.tensors.contains_key(&format!("{}.weight", names.lm_head)),
        embed_scale: fam.embed_scale_sqrt_d.then(|| (d_model as f64).sqrt()),
        qk_norm: fam.qk_norm,
        post_norms: fam.post_norms,
        attn_scale: attn_scale(gf.attn_scale, n_layers, d_model, n_heads, head_dim, |_, d| Ok(d))?,
        attn_softcap: match gf.attn_softcap {
            Some(k) => opt_f(k)?.filter(|&c| c > 0.0),
            None => None,
        },
        final_softcap: match gf.final_softcap {
            Some(k) => opt_f(k)?.filter(|&c| c > 0.0),
            None => None,
        },
        sliding,
        rope_scaling: if gf.learned_positions { None } else { gguf_rope_scaling(g, gf.arch, n("context_length")?)? },
    };
    cfg.validate().map_err(|e| Error::bad_file(&g.path, format!("invalid model header: {e}")))?;
    Ok(cfg)
}

/// A GGUF's RoPE scaling as llama.cpp reads it: `rope_freqs.weight` (per-frequency divisors,
/// which llama.cpp's converter writes for Llama 3.1's `llama3`), else `rope.scaling.type`
/// (`none`, `linear`, `yarn`) with `rope.scaling.factor` and, for YaRN,
/// `rope.scaling.original_context_length` (default the context), `yarn_beta_fast` / `_slow`
/// (32, 1) and `rope.scaling.attn_factor`. llama.cpp's YaRN scales cos and sin by
/// 0.1 ln(factor) + 1 times that attn_factor (src/llama-context.cpp).
fn gguf_rope_scaling(g: &GgufFile, arch: &str, context: usize) -> Result<Option<RopeScaling>> {
    let key = |k: &str| format!("{arch}.rope.scaling.{k}");
    let opt_f = |k: &str| -> Result<Option<f64>> { if g.get(&key(k)).is_some() { Ok(Some(g.f64(&key(k))?)) } else { Ok(None) } };
    if g.tensors.contains_key("rope_freqs.weight") {
        let t = g.qtensor("rope_freqs.weight", &Device::Cpu)?.dequantize(&Device::Cpu)?;
        return Ok(Some(RopeScaling::Divisors { divisors: t.flatten_all()?.to_vec1::<f32>()? }));
    }
    let factor = opt_f("factor")?.filter(|&f| f != 0.0 && f != 1.0);
    let ty = g.get(&key("type")).and_then(Value::as_str).unwrap_or(if factor.is_some() { "linear" } else { "none" });
    Ok(match (ty, factor) {
        ("none", _) | (_, None) => None,
        ("linear", Some(factor)) => Some(RopeScaling::Linear { factor }),
        ("yarn", Some(factor)) => {
            let original_context = g.get(&key("original_context_length")).and_then(Value::as_u64).map_or(context, |v| v as usize);
            let mscale = if factor <= 1.0 { 1.0 } else { 0.1 * factor.ln() + 1.0 };
            Some(RopeScaling::Yarn {
                factor,
                original_context,
                beta_fast: opt_f("yarn_beta_fast")?.unwrap_or(32.0),
                beta_slow: opt_f("yarn_beta_slow")?.unwrap_or(1.0),
                attention_factor: mscale * opt_f("attn_factor")?.unwrap_or(1.0),
            })
        }
        (other, _) => return Err(Error::Unsupported(format!("{}: RoPE scaling type {other:?} in {} (supported: none, linear, yarn, and rope_freqs)", g.path.display(), key("type")))),
    })
}

/// The fused projection `fused` split by rows into parts of `sizes` rows (Phi-3's qkv_proj and
/// gate_up_proj, GPT-2's c_attn): each part is the fused weight's rows (and bias) as a Linear
/// (stored blocks stay shared, not copied).
fn split_rows<const N: usize>(fused: Linear, sizes: [usize; N]) -> Result<[Linear; N]> {
    let mut at = 0;
    let mut parts = Vec::with_capacity(N);
    for n in sizes {
        parts.push(fused.rows(at, n)?);
        at += n;
    }
    parts.try_into().map_err(|_| Error::Invalid(format!("a fused projection split into {N} parts")))
}

/// Builds the decoder of `cfg` from `src` by `names` (`pre_norms`: the family's blocks
/// normalise their inputs), calling `progress(bytes read, bytes in all)` after each tensor;
/// weight matrices off the CPU are tensors of `dense`.
pub fn load_weights(cfg: ModelConfig, src: &WeightSource, names: &Names, pre_norms: bool, dev: &Device, dense: DType, progress: &(dyn Fn(u64, u64) + Sync)) -> Result<Decoder> {
    let (d, hd) = (cfg.d_model, cfg.head_dim);
    let prefix = names.optional_prefix.filter(|p| src.has(&format!("{p}{}.weight", names.embed))).unwrap_or("");
    let (total, done) = (src.total_bytes(), std::cell::Cell::new(0u64));
    let read = |name: &str| {
        done.set(done.get() + src.stored_bytes(name));
        progress(done.get(), total);
    };
    let get = |name: &str, shape: &[usize]| {
        let name = format!("{prefix}{name}");
        let t = src.tensor(&name, shape, dev)?;
        read(&name);
        Ok::<_, Error>(t)
    };
    // A weight matrix: in its stored form on the CPU (`WeightSource::matrix`).
    let matrix = |name: &str, rows: usize, cols: usize| {
        let name = format!("{prefix}{name}");
        let w = src.matrix(&name, rows, cols, dev, dense)?;
        read(&name);
        Ok::<_, Error>(w)
    };
    let norm_of = |stem: &str, n: usize| -> Result<Norm> {
        let w = get(&format!("{stem}.weight"), &[n])?;
        let weight = if names.norm_offset != 0.0 { (w + names.norm_offset)? } else { w };
        let bias = match cfg.norm {
            NormKind::Layer => Some(get(&format!("{stem}.bias"), &[n])?),
            NormKind::Rms => None,
        };
        Ok(Norm { kind: cfg.norm, weight, bias, eps: cfg.norm_eps })
    };
    let block_norm = |l: usize, part: &str, n: usize| norm_of(&names.block(l, part), n);
    // `bias`: the bias is required. Other projections use one when the checkpoint has it.
    let lin = |l: usize, part: &str, out: usize, inp: usize, bias: bool| -> Result<Linear> {
        let base = names.block(l, part);
        let bias_name = format!("{base}.bias");
        let b = if bias || names.all_biases || src.has(&format!("{prefix}{bias_name}")) { Some(get(&bias_name, &[out])?) } else { None };
        let name = format!("{base}.weight");
        if names.conv1d {
            // Conv1D weight (in, out) -> Linear (out, in): a transposed f32 copy (GPT-2 from
            // Hugging Face; its GGUF stores (out, in) blocks).
            return Ok(Linear { w: Weight::Dense(get(&name, &[inp, out])?.t()?.contiguous()?), b });
        }
        Ok(Linear { w: matrix(&name, out, inp)?, b })
    };
    let (nq, nkv) = (cfg.n_heads * hd, cfg.n_kv_heads * hd);
    // QK-norm weights: one head's width (shared by the heads) or the whole projection's.
    let qk = |l: usize, part: &str, full: usize| -> Result<Option<Norm>> {
        Ok(match cfg.qk_norm {
            None => None,
            Some(QkNorm::PerHead) => Some(block_norm(l, part, hd)?),
            Some(QkNorm::Full) => Some(block_norm(l, part, full)?),
        })
    };
    let opt = |present: bool, l: usize, part: &str| -> Result<Option<Norm>> { if present { Ok(Some(block_norm(l, part, d)?)) } else { Ok(None) } };
    let mut blocks = Vec::with_capacity(cfg.n_layers);
    for l in 0..cfg.n_layers {
        let (q, k, v) = if names.fused_qkv {
            // One (q + 2 kv, d) projection, split by rows.
            let [q, k, v] = split_rows(lin(l, "qkv", nq + 2 * nkv, d, cfg.qkv_bias)?, [nq, nkv, nkv])?;
            (q, k, v)
        } else {
            (lin(l, "q", nq, d, cfg.qkv_bias)?, lin(l, "k", nkv, d, cfg.qkv_bias)?, lin(l, "v", nkv, d, cfg.qkv_bias)?)
        };
        let gated = !matches!(cfg.mlp, MlpKind::GeluTanh);
        let (gate, up) = if gated && names.fused_gate_up {
            let [gate, up] = split_rows(lin(l, "gate_up", 2 * cfg.ffn_dim, d, false)?, [cfg.ffn_dim, cfg.ffn_dim])?;
            (Some(gate), up)
        } else {
            (if gated { Some(lin(l, "gate", cfg.ffn_dim, d, false)?) } else { None }, lin(l, "up", cfg.ffn_dim, d, false)?)
        };
        blocks.push(Block {
            attn_norm: opt(pre_norms, l, "attn_norm")?,
            q,
            k,
            v,
            q_norm: qk(l, "q_norm", nq)?,
            k_norm: qk(l, "k_norm", nkv)?,
            o: lin(l, "o", d, nq, false)?,
            post_attn_norm: opt(cfg.post_norms, l, "post_attn_norm")?,
            mlp_norm: opt(pre_norms, l, "mlp_norm")?,
            mlp: Mlp {
                kind: cfg.mlp,
                gate,
                up_or_fc: up,
                down: lin(l, "down", d, cfg.ffn_dim, false)?,
            },
            post_mlp_norm: opt(cfg.post_norms, l, "post_mlp_norm")?,
            attn: cfg.layer_attention(l),
        });
    }
    // As llama.cpp: a checkpoint with blocks beyond its layer count is refused, not truncated.
    let extra = format!("{prefix}{}", names.block(cfg.n_layers, ""));
    if let Some(name) = src.names().into_iter().find(|n| n.starts_with(&extra)) {
        return Err(Error::Unsupported(format!("the model says it has {} layers but holds tensor {name}: the layer count disagrees with the weights", cfg.n_layers)));
    }
    let embed_name = format!("{}.weight", names.embed);
    let lm_name = format!("{}.weight", names.lm_head);
    let embed = matrix(&embed_name, cfg.vocab, d)?;
    // Tied: the same tensor or blocks, not a copy.
    let lm_head = if cfg.tied_embeddings { embed.clone() } else { matrix(&lm_name, cfg.vocab, d)? };
    let pos_embed = match names.pos_embed {
        Some(p) => Some(get(&format!("{p}.weight"), &[cfg.context, d])?),
        None => None,
    };
    let final_norm = norm_of(names.final_norm, d)?;
    // Tensors the decoder does not use (a vision tower, say) count as read.
    progress(total, total);
    Ok(Decoder { final_norm, embed, pos_embed, blocks, lm_head, device: dev.clone(), config: cfg, passes: Default::default() })
}
