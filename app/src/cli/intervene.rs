//! `intervene`: edit one layer's routing on a text (ablate a group, force a token into a group,
//! swap two groups: `focus_core::analysis::intervene`) and print the change in per-token loss
//! and in attention, against the same text run as it is.

use super::common::{count, progress, ModelArgs};
use anyhow::{bail, Context, Result};
use focus_core::analysis::compare::Comparison;
use focus_core::analysis::intervene::{intervene, Intervened, Intervention};
use focus_core::analysis::structure::shown_token;
use focus_core::Mode;
use std::path::PathBuf;

#[derive(clap::ValueEnum, Clone, Copy, PartialEq, Eq)]
pub enum InterveneMode {
    Soft,
    Topk,
}

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["ablate", "force", "swap"])))]
pub struct Args {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The Focus adapter directory whose routing is edited.
    #[arg(long)]
    pub adapter: PathBuf,
    /// The layer whose routing is edited (0-based); later layers route their own inputs.
    #[arg(long, value_parser = count::<0, 4096>)]
    pub layer: usize,
    /// Ablate group G (the router's index): its members (tokens whose top-k set holds G)
    /// attend locally only.
    #[arg(long, value_name = "G")]
    pub ablate: Option<usize>,
    /// Force token TOKEN_INDEX (0-based, as `tokenize` numbers them) into group G.
    #[arg(long, value_name = "TOKEN_INDEX:G", value_parser = pair)]
    pub force: Option<(usize, usize)>,
    /// Swap groups G1 and G2 on the query side: G1's members attend G2's distant members and the
    /// other way round.
    #[arg(long, value_name = "G1:G2", value_parser = pair)]
    pub swap: Option<(usize, usize)>,
    /// soft (soft gates) or topk (exact hard top-k).
    #[arg(long, value_enum, default_value = "topk")]
    pub mode: InterveneMode,
    /// k of the top-k sets (default: the adapter's top_k); 1..=K.
    #[arg(long, value_parser = count::<1, 64>)]
    pub k: Option<usize>,
    /// Run the text's first N tokens (capped at the model's context).
    #[arg(long, default_value_t = 1024, value_parser = count::<2, 1048576>)]
    pub max_tokens: usize,
    /// One JSON object on stdout instead of the tables.
    #[arg(long)]
    pub json: bool,
    pub file: PathBuf,
}

/// `A:B` as two whole numbers.
fn pair(s: &str) -> Result<(usize, usize), String> {
    let (a, b) = s.split_once(':').ok_or_else(|| format!("{s:?} is not of the form A:B (two whole numbers)"))?;
    let n = |x: &str| x.trim().parse::<usize>().map_err(|_| format!("{x:?} in {s:?} is not a whole number"));
    Ok((n(a)?, n(b)?))
}

pub fn run(a: Args) -> Result<()> {
    let what = match (a.ablate, a.force, a.swap) {
        (Some(group), None, None) => Intervention::Ablate { group },
        (None, Some((token, group)), None) => Intervention::Force { token, group },
        (None, None, Some((x, y))) => Intervention::Swap { a: x, b: y },
        _ => bail!("give exactly one of --ablate, --force, --swap"),
    };
    let text = focus_core::io::text::read_text(&a.file)?;
    let model = a.model.load()?;
    let adapter = focus_core::Adapter::load(&a.adapter, &model.identity(), model.device()).with_context(|| format!("adapter {}", a.adapter.display()))?;
    let mode = match a.mode {
        InterveneMode::Soft => Mode::Soft,
        InterveneMode::Topk => Mode::TopK(adapter.config.topk(a.k.unwrap_or(adapter.config.top_k))?),
    };
    let tok = model.tokenizer()?;
    let mut ids = tok.encode(&text, false)?.ids;
    ids.truncate(a.max_tokens.min(model.config().context));
    if ids.len() < 2 {
        bail!("{} has {} token(s): an intervention needs at least 2 (a loss needs a next token)", a.file.display(), ids.len());
    }
    let texts: Vec<String> = ids.iter().map(|&id| tok.token_text(id)).collect();
    let pb = progress(1, "intervene", a.json);
    let r = intervene(&model, &adapter, &ids, texts, mode, a.layer, what, None, |d, n| {
        pb.set_length(n as u64);
        pb.set_position(d as u64);
    })?;
    pb.finish_and_clear();
    if a.json {
        crate::outln!("{}", serde_json::to_string_pretty(&json(&r))?)?;
    } else {
        print_tables(&r)?;
    }
    Ok(())
}

/// A figure, or null where there is none (the last position has no loss).
fn fin(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

fn json(r: &Intervened) -> serde_json::Value {
    let c = &r.comparison;
    let per_token: Vec<_> = (0..c.tokens())
        .map(|i| {
            serde_json::json!({
                "index": i,
                "token": c.texts[i],
                "loss_before": fin(c.loss_b[i] as f64),
                "loss_after": fin(c.loss_a[i] as f64),
                "delta": fin(c.delta(i) as f64),
                "edited": r.edited.binary_search(&i).is_ok(),
            })
        })
        .collect();
    let per_layer: Vec<_> = c
        .layer_rows(0)
        .iter()
        .map(|l| {
            serde_json::json!({
                "layer": l.layer,
                "tokens_changed": l.changed,
                "pruned_mass_before": l.pruned_b,
                "pruned_mass_after": l.pruned_a,
                "delta_loss_changed": fin(l.delta_changed),
                "delta_loss_unchanged": fin(l.delta_unchanged),
            })
        })
        .collect();
    serde_json::json!({
        "intervention": r.intervention,
        "layer": r.layer,
        "mode": r.mode.name(),
        "k": r.k,
        "tokens": c.tokens(),
        "edited_tokens": r.edited,
        "pairs_at_layer": r.pairs,
        "mean_loss_before": fin(Comparison::mean_loss(&c.loss_b)),
        "mean_loss_after": fin(Comparison::mean_loss(&c.loss_a)),
        "mean_delta": fin(mean_delta(c)),
        "delta": "loss after - loss before, next-token NLL in nats at each position; > 0 where the intervention hurts",
        "per_token": per_token,
        "per_layer": per_layer,
        "per_layer_note": "tokens_changed: tokens whose top-k set (at the intervened layer: query set) differs from the original run's; pruned_mass_*: mean dense attention weight the mask drops (topk mode); delta_loss_*: mean delta of the tokens whose sets change (stay) in the layer",
    })
}

fn mean_delta(c: &Comparison) -> f64 {
    let d: Vec<f64> = (0..c.tokens()).map(|i| c.delta(i) as f64).filter(|x| x.is_finite()).collect();
    d.iter().sum::<f64>() / d.len().max(1) as f64
}

fn print_tables(r: &Intervened) -> Result<()> {
    let c = &r.comparison;
    let p = &r.pairs;
    crate::outln!("{} at layer {} ({} mode, top-{} sets), {} tokens; {} token(s) edited at the layer", r.intervention, r.layer, r.mode.name(), r.k, c.tokens(), r.edited.len())?;
    crate::outln!("layer {}: pairs kept {} before, {} after, of {} causal; {} queries attend a different set of keys", r.layer, p.kept_before, p.kept_after, p.causal, p.queries_changed)?;
    crate::outln!(
        "mean loss {:.4} before, {:.4} after: mean delta {:+.4} nats over {} predictions",
        Comparison::mean_loss(&c.loss_b),
        Comparison::mean_loss(&c.loss_a),
        mean_delta(c),
        c.tokens() - 1
    )?;
    crate::outln!("\nlayer  tokens_changed  pruned_before  pruned_after  delta_changed  delta_unchanged")?;
    let o = |x: Option<f64>| x.map(|v| format!("{v:.4}")).unwrap_or_else(|| "-".into());
    let f = |x: f64| if x.is_finite() { format!("{x:+.4}") } else { "-".into() };
    for l in c.layer_rows(0) {
        crate::outln!("{:>5}  {:>14}  {:>13}  {:>12}  {:>13}  {:>15}", l.layer, l.changed, o(l.pruned_b), o(l.pruned_a), f(l.delta_changed), f(l.delta_unchanged))?;
    }
    crate::outln!("\nindex  edited  loss_before  loss_after    delta  token")?;
    for i in 0..c.tokens() {
        let e = if r.edited.binary_search(&i).is_ok() { "*" } else { "" };
        let v = |x: f32| if x.is_finite() { format!("{x:.4}") } else { "-".into() };
        crate::outln!("{i:>5}  {e:>6}  {:>11}  {:>10}  {:>7}  {}", v(c.loss_b[i]), v(c.loss_a[i]), if c.delta(i).is_finite() { format!("{:+.4}", c.delta(i)) } else { "-".into() }, shown_token(&c.texts[i]))?;
    }
    Ok(())
}
