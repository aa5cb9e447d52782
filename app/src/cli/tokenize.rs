//! `tokenize`: a text's token ids and pieces under the model's tokenizer, as text or JSON.

use super::common::{print_json, ModelArgs};
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Print {"ids": [...], "count": N}.
    #[arg(long)]
    pub json: bool,
    /// Parse special-token strings such as <|im_start|> as special tokens (default: plain text).
    #[arg(long)]
    pub parse_special: bool,
    pub file: PathBuf,
}

pub fn run(a: Args) -> Result<()> {
    let text = focus_core::io::text::read_text(&a.file)?;
    let m = a.model.load()?;
    let enc = m.tokenizer()?.encode(&text, a.parse_special)?;
    if a.json {
        return print_json(&serde_json::json!({ "ids": enc.ids, "count": enc.ids.len() }));
    }
    let ids: Vec<String> = enc.ids.iter().map(|i| i.to_string()).collect();
    crate::outln!("{}", ids.join(" "))?;
    eprintln!("{} tokens", enc.ids.len());
    Ok(())
}
