//! `info`: what a model file holds (architecture, shape, tokenizer, fingerprint) and what an
//! analysis of N tokens will need in memory beside what is available, as text or JSON; with
//! `--device cuda` also what it will need in the GPU's memory. Reads the header only (no
//! weight, no device opened), so it answers for models too large to open, and for a GPU in a
//! build without CUDA.

use super::common::{memory_table, print_json, ModelArgs};
use anyhow::{bail, Result};
use focus_core::model::memory::{self, ModelHeader};

#[derive(clap::Args)]
pub struct Args {
    /// The model (.gguf file or Hugging Face directory); default: SmolLM2-135M.
    pub model: Option<std::path::PathBuf>,
    /// The memory estimate is for `analyze` over this many tokens.
    #[arg(long, default_value_t = focus_core::analysis::DEFAULT_SEGMENT, value_parser = super::common::count::<1, 16777216>)]
    pub tokens: usize,
    /// The adapter whose routing the analysis keeps (its groups and d_g); default: the shipped
    /// adapters' shape (8 groups, d_g 16).
    #[arg(long)]
    pub adapter: Option<std::path::PathBuf>,
    #[arg(long)]
    pub json: bool,
    /// cpu, or cuda: also the device memory `analyze --device cuda` will need (estimated from
    /// the header; no device is opened, so any build states it).
    #[arg(long, default_value = "cpu")]
    pub device: String,
}

pub fn run(a: Args) -> Result<()> {
    let m = ModelHeader::open(&ModelArgs { model: a.model, device: "cpu".into(), products: "exact".into() }.path()?)?;
    let c = &m.config;
    let (workload, what) = super::common::analysis_workload(a.adapter.as_deref(), a.tokens, a.tokens.min(focus_core::analysis::DEFAULT_SEGMENT), 2, false, 0)?;
    let est = m.estimate(&workload);
    let avail = memory::available();
    let on_gpu = match a.device.as_str() {
        "cpu" => false,
        "cuda" => true,
        other => bail!("unknown device {other:?} (cpu or cuda)"),
    };
    let dev_est = on_gpu.then(|| m.device_estimate(&workload));
    if a.json {
        let tok = m.tokenizer.as_ref();
        let layers: Vec<serde_json::Value> = (0..c.n_layers)
            .map(|l| {
                let a = c.layer_attention(l);
                serde_json::json!({"layer": l, "kind": if a.window.is_some() { "sliding" } else { "global" }, "window": a.window, "rope_theta": a.rope_theta})
            })
            .collect();
        let mut v = serde_json::json!({
            "path": m.path, "format": m.format, "config": c, "fingerprint": m.fingerprint,
            "tokenizer_vocab": tok.map(|t| t.vocab_size()), "add_bos": tok.map(|t| t.add_bos()),
            "layers": layers,
            "file_bytes": m.file_bytes,
            "memory": {"tokens": a.tokens, "workload": what, "estimate": est, "total": est.total(), "available": avail.as_ref().map(|x| x.bytes), "available_source": avail.as_ref().map(|x| x.source.clone())},
        });
        if let Some(d) = dev_est {
            v["device_memory"] = serde_json::json!({"device": a.device, "tokens": a.tokens, "workload": what, "estimate": d, "total": d.total()});
        }
        return print_json(&v);
    }
    crate::outln!("path        {}", m.path.display())?;
    crate::outln!("format      {}", m.format)?;
    crate::outln!("name        {}", c.name)?;
    crate::outln!("arch        {}", c.arch)?;
    crate::outln!("layers      {}", c.n_layers)?;
    crate::outln!("d_model     {}", c.d_model)?;
    crate::outln!("heads       {} query / {} kv, head dim {}", c.n_heads, c.n_kv_heads, c.head_dim)?;
    crate::outln!("ffn         {} ({:?})", c.ffn_dim, c.mlp)?;
    crate::outln!("vocab       {}", c.vocab)?;
    crate::outln!("context     {}", c.context)?;
    crate::outln!("positions   {:?}", c.positions)?;
    crate::outln!("norm        {:?}, eps {}", c.norm, c.norm_eps)?;
    crate::outln!("tied        {}", c.tied_embeddings)?;
    let mut extras = Vec::new();
    if let Some(s) = c.embed_scale {
        extras.push(format!("embeddings x {s:.4}"));
    }
    if let Some(q) = c.qk_norm {
        extras.push(format!("QK-norm ({q:?})"));
    }
    if c.post_norms {
        extras.push("post-norms".into());
    }
    if let Some(s) = c.attn_scale {
        extras.push(format!("attention scale {s}"));
    }
    if let Some(s) = c.attn_softcap {
        extras.push(format!("attention soft-cap {s}"));
    }
    if let Some(s) = c.final_softcap {
        extras.push(format!("final soft-cap {s}"));
    }
    if !extras.is_empty() {
        crate::outln!("extras      {}", extras.join(", "))?;
    }
    // Interleaved sliding-window (S) and global (G) layers, e.g. SSSSSG SSSSSG SSSSSG.
    if let Some(s) = &c.sliding {
        let marks: String = (0..c.n_layers).map(|l| if c.is_sliding(l) { 'S' } else { 'G' }).collect();
        let global: Vec<String> = (0..c.n_layers).filter(|&l| !c.is_sliding(l)).map(|l| l.to_string()).collect();
        let theta = c.layer_attention(s.layers.iter().position(|&x| x).unwrap_or(0)).rope_theta;
        let theta = theta.map_or("none".to_string(), |t| t.to_string());
        crate::outln!("layers      {marks} (S: sliding window {}, RoPE base {theta}; G: global: {})", s.window, global.join(" "))?;
    }
    crate::outln!("fingerprint {}", m.fingerprint)?;
    match &m.tokenizer {
        Some(t) => crate::outln!("tokenizer   {} tokens, add_bos {}", t.vocab_size(), t.add_bos())?,
        None => crate::outln!("tokenizer   none")?,
    }
    crate::outln!("file        {}", memory::human(m.file_bytes))?;
    crate::outln!("memory      {what}:")?;
    memory_table(&est, avail.as_ref())?;
    if let Some(d) = dev_est {
        crate::outln!("device      {}, {what}:", a.device)?;
        for (name, bytes, note) in d.rows() {
            crate::outln!("  {name:<12} {:>10}  {note}", memory::human(bytes))?;
        }
        crate::outln!("  {:<12} {:>10}  ({} MiB, as nvidia-smi counts)", "total", memory::human(d.total()), d.total() >> 20)?;
        crate::outln!("  available    not read: info opens no device")?;
    }
    Ok(())
}
