//! `info`: what a model file holds (architecture, shape, tokenizer, fingerprint), as text or JSON.

use super::common::{print_json, ModelArgs};
use anyhow::Result;

#[derive(clap::Args)]
pub struct Args {
    /// The model (.gguf file or Hugging Face directory); default: SmolLM2-135M.
    pub model: Option<std::path::PathBuf>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let m = ModelArgs { model: a.model, device: "cpu".into() }.load()?;
    let c = m.config();
    if a.json {
        let tok = m.tokenizer.as_ref();
        return print_json(&serde_json::json!({
            "path": m.path, "format": m.format, "config": c, "fingerprint": m.fingerprint,
            "tokenizer_vocab": tok.map(|t| t.vocab_size()), "add_bos": tok.map(|t| t.add_bos()),
        }));
    }
    println!("path        {}", m.path.display());
    println!("format      {}", m.format);
    println!("name        {}", c.name);
    println!("arch        {}", c.arch);
    println!("layers      {}", c.n_layers);
    println!("d_model     {}", c.d_model);
    println!("heads       {} query / {} kv, head dim {}", c.n_heads, c.n_kv_heads, c.head_dim);
    println!("ffn         {} ({:?})", c.ffn_dim, c.mlp);
    println!("vocab       {}", c.vocab);
    println!("context     {}", c.context);
    println!("positions   {:?}", c.positions);
    println!("norm        {:?}, eps {}", c.norm, c.norm_eps);
    println!("tied        {}", c.tied_embeddings);
    println!("fingerprint {}", m.fingerprint);
    match &m.tokenizer {
        Some(t) => println!("tokenizer   {} tokens, add_bos {}", t.vocab_size(), t.add_bos()),
        None => println!("tokenizer   none"),
    }
    Ok(())
}
