//! `eval`: the zero-degradation suites (TruthfulQA multiple choice, last-word cloze, the
//! long-context cloze), base model vs Focus in one run, with paired per-item agreement. The
//! suites' data are built into the binary (`defaults`); `--truthfulqa`, `--cloze` and
//! `--long-cloze-text` read other files.

use super::common::{print_json, progress, FocusArgs, ModelArgs};
use anyhow::{Context, Result};
use focus_core::eval::suites::{self as eval, SuiteResult};
use focus_core::Mode;
use crate::defaults;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
pub enum Suite {
    TruthfulqaMc,
    Cloze,
    /// The long-context cloze: targets whose evidence is at least half of --long-ctx back.
    LongCloze,
    All,
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    #[command(flatten)]
    pub focus: FocusArgs,
    #[arg(long, value_enum, default_value = "all")]
    pub suite: Suite,
    /// BIG-bench TruthfulQA task_mc.json [default: assets/eval/truthfulqa/task_mc.json, built
    /// into the binary].
    #[arg(long)]
    pub truthfulqa: Option<PathBuf>,
    /// Cloze items (JSONL of context/target), built by scripts/make_cloze.py [default:
    /// assets/eval/cloze_persuasion.jsonl, built into the binary].
    #[arg(long)]
    pub cloze: Option<PathBuf>,
    /// Held-out texts the long-context cloze is built from (whole books, e.g. corpus/heldout/
    /// of scripts/fetch_corpus.py) [default: the first 60,000 bytes of held-out *Persuasion*,
    /// tests/fixtures/ppl_persuasion_60k.txt, built into the binary].
    #[arg(long, num_args = 1..)]
    pub long_cloze_text: Vec<PathBuf>,
    /// Tokens of each long-context cloze item (context and target), at most the model's
    /// context; the target's last earlier occurrence is at least half of it back.
    #[arg(long, default_value_t = 4096, value_parser = super::common::count::<512, 1048576>)]
    pub long_ctx: usize,
    /// Prepend the task's six-shot prefix to every TruthfulQA question (longer inputs, beyond
    /// the local window: Focus can change these scores).
    #[arg(long)]
    pub few_shot: bool,
    /// Only the first N items of each suite.
    #[arg(long, value_parser = super::common::count::<1, 1048576>)]
    pub limit: Option<usize>,
    /// Skip the base-model (dense) run that Focus is compared with.
    #[arg(long)]
    pub no_base: bool,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let model = a.model.load()?;
    let (adapter, mode) = a.focus.load(&model)?;
    // The window decides which items Focus cannot change; without an adapter nothing is pruned.
    let window = adapter.as_ref().map_or(usize::MAX - 1, |ad| ad.config.window);
    let limit = |n: usize| a.limit.unwrap_or(n).min(n);
    let mut modes = vec![mode];
    if mode != Mode::Dense && !a.no_base {
        modes.insert(0, Mode::Dense);
    }
    let mut results: Vec<SuiteResult> = Vec::new();
    if matches!(a.suite, Suite::TruthfulqaMc | Suite::All) {
        let (qs, task_prefix) = match &a.truthfulqa {
            Some(p) => eval::load_truthfulqa(p),
            None => eval::parse_truthfulqa(defaults::TRUTHFULQA_MC, Path::new(defaults::TRUTHFULQA_MC_NAME)),
        }
        .context("TruthfulQA")?;
        let qs = &qs[..limit(qs.len())];
        let prefix = if a.few_shot { task_prefix.as_str() } else { "" };
        for &m in &modes {
            let pb = progress(qs.len() as u64, &format!("truthfulqa {m}"), a.json);
            results.push(eval::truthfulqa(&model, qs, prefix, m, adapter.as_ref(), window, None, |d, _| pb.set_position(d as u64))?);
            pb.finish_and_clear();
        }
    }
    if matches!(a.suite, Suite::Cloze | Suite::All) {
        let items = match &a.cloze {
            Some(p) => eval::load_cloze(p),
            None => eval::parse_cloze(defaults::CLOZE, Path::new(defaults::CLOZE_NAME)),
        }
        .context("cloze")?;
        let items = &items[..limit(items.len())];
        for &m in &modes {
            let pb = progress(items.len() as u64, &format!("cloze {m}"), a.json);
            results.push(eval::cloze(&model, items, m, adapter.as_ref(), window, None, |d, _| pb.set_position(d as u64))?);
            pb.finish_and_clear();
        }
    }
    if matches!(a.suite, Suite::LongCloze | Suite::All) {
        if a.long_ctx > model.config().context {
            anyhow::bail!("--long-ctx {} exceeds the model's context, {}", a.long_ctx, model.config().context);
        }
        let tok = model.tokenizer()?;
        let spec = eval::LongCloze::new(a.long_ctx);
        let mut items = Vec::new();
        if a.long_cloze_text.is_empty() {
            items = eval::long_cloze_items(tok, defaults::LONG_CLOZE_TEXT, defaults::LONG_CLOZE_TEXT_NAME, spec)?;
        }
        for p in &a.long_cloze_text {
            let text = focus_core::io::text::read_text(p)?;
            let name = p.file_name().map_or_else(|| p.display().to_string(), |n| n.to_string_lossy().into_owned());
            items.extend(eval::long_cloze_items(tok, &text, &name, spec)?);
        }
        if items.is_empty() {
            anyhow::bail!("no long-context cloze item of {} tokens in the text: give longer held-out books (--long-cloze-text) or a shorter --long-ctx", a.long_ctx);
        }
        let items = &items[..limit(items.len())];
        for &m in &modes {
            let pb = progress(items.len() as u64, &format!("long-cloze {m}"), a.json);
            results.push(eval::long_cloze(&model, items, m, adapter.as_ref(), window, None, |d, _| pb.set_position(d as u64))?);
            pb.finish_and_clear();
        }
    }
    let comparisons = against_base(&results);
    if a.json {
        return print_json(&serde_json::json!({
            "model": model.path, "adapter": a.focus.adapter, "results": results, "comparisons": comparisons,
        }));
    }
    for r in &results {
        let (acc, score) = if r.suite.ends_with("cloze") { ("accuracy", "mean target log-lik") } else { ("MC1", "MC2") };
        crate::outln!(
            "{:<14} {:<8} {acc} {:.4} ± {:.4}  {score} {:.4} ± {:.4}  ({} items, {} within the window, max {} tokens, {:.1} s)",
            r.suite, r.mode, r.accuracy, r.accuracy_se, r.score, r.score_se, r.items, r.items_within_window, r.max_tokens, r.seconds
        )?;
    }
    for c in &comparisons {
        crate::outln!("{}", c["summary"].as_str().unwrap_or_default())?;
    }
    Ok(())
}

/// Focus vs base per suite: deltas, and on items within the window whether scores are identical.
fn against_base(results: &[SuiteResult]) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    for base in results.iter().filter(|r| r.mode == "dense") {
        for r in results.iter().filter(|r| r.suite == base.suite && r.mode != "dense") {
            let same = base.per_item.iter().zip(&r.per_item).filter(|(a, b)| a == b).count();
            out.push(serde_json::json!({
                "suite": r.suite, "mode": r.mode,
                "accuracy_delta": r.accuracy - base.accuracy, "score_delta": r.score - base.score,
                "identical_items": same, "items": r.items,
                "summary": format!(
                    "{}: {} vs dense: accuracy {:+.4}, score {:+.4}; {} of {} items scored identically ({} fit in the window)",
                    r.suite, r.mode, r.accuracy - base.accuracy, r.score - base.score, same, r.items, r.items_within_window
                ),
            }));
        }
    }
    out
}
