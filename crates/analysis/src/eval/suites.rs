//! Zero-degradation evaluation: TruthfulQA multiple choice scored by log-likelihood, a
//! LAMBADA-style last-word cloze over held-out books, and a long-context cloze whose evidence lies
//! thousands of tokens back (`long_cloze_items`). All run the same forward pass in any mode, so
//! base and Focus scores are directly comparable (and identical where every input fits in the
//! local window: then Focus prunes nothing).

use crate::focus::adapter::Adapter;
use crate::attention::Mode;
use crate::error::{Error, Result};
use crate::model::{decoder::Decoder, ForwardOptions, Model};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::atomic::AtomicBool;

/// One multiple-choice question: every choice is scored as a continuation of the prompt.
#[derive(Debug, Clone)]
pub struct McQuestion {
    pub question: String,
    pub choices: Vec<String>,
    pub correct: Vec<bool>,
}

/// The largest suite file read (the built-in ones are under 1 MiB): through the guarded reader,
/// so a FIFO is refused instead of blocking and `/dev/zero` instead of filling memory.
pub const MAX_SUITE_BYTES: u64 = 64 << 20;

/// Reads BIG-bench's `truthful_qa/task_mc.json`: examples of `input` and `target_scores`
/// (choice -> 1 for a true answer, 0 for a false one).
/// Also returns the task's few-shot prefix (six solved questions), used with `few_shot`.
pub fn load_truthfulqa(path: &Path) -> Result<(Vec<McQuestion>, String)> {
    parse_truthfulqa(&crate::io::read_capped_string(path, MAX_SUITE_BYTES, "TruthfulQA file")?, path)
}

/// `load_truthfulqa` of a file's text (e.g. one embedded in a binary); `path` names it in errors.
pub fn parse_truthfulqa(text: &str, path: &Path) -> Result<(Vec<McQuestion>, String)> {
    #[derive(Deserialize)]
    struct Task {
        examples: Vec<Example>,
        #[serde(default)]
        task_prefix: String,
    }
    #[derive(Deserialize)]
    struct Example {
        input: String,
        target_scores: serde_json::Map<String, serde_json::Value>,
    }
    let task: Task = serde_json::from_str(text).map_err(|e| Error::bad_file(path, format!("not a BIG-bench task_mc.json: {e}")))?;
    let mut out = Vec::with_capacity(task.examples.len());
    for (i, ex) in task.examples.into_iter().enumerate() {
        let mut choices = Vec::new();
        let mut correct = Vec::new();
        for (choice, score) in ex.target_scores {
            let s = score.as_f64().ok_or_else(|| Error::bad_file(path, format!("example {i}: score of {choice:?} is not a number")))?;
            choices.push(choice);
            correct.push(s > 0.5);
        }
        if choices.len() < 2 || !correct.iter().any(|&c| c) {
            return Err(Error::bad_file(path, format!("example {i}: needs at least two choices and one true answer")));
        }
        out.push(McQuestion { question: ex.input, choices, correct });
    }
    Ok((out, task.task_prefix))
}

/// One cloze item: predict `target` (a single word) after `context`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClozeItem {
    pub context: String,
    pub target: String,
    #[serde(default)]
    pub source: String,
    /// Long-context items: how many tokens before the target its last earlier occurrence
    /// starts (`long_cloze_items`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distance: Option<usize>,
}

/// Words a cloze target is never (`scripts/make_cloze.py`'s list): function words and the most
/// common verbs, which any context predicts.
const STOPWORDS: &str = "a about above after again against all am an and any are as at be because been before being \
below between both but by could did do does doing down during each few for from further had has have \
having he her here hers herself him himself his how i if in into is it its itself just me more most my \
myself no nor not now of off on once only or other our ours ourselves out over own same she should so \
some such than that the their theirs them themselves then there these they this those through to too \
under until up very was we were what when where which while who whom why will with would you your yours \
yourself yourselves shall must might upon said every very much well";

/// The last window a long-context cloze target's evidence is never in: attention within it is
/// local under any Focus adapter shipped (w = 128).
pub const LONG_CLOZE_NEAR: usize = 128;

/// A long-context cloze target occurs at most this many times in its whole text (in any case):
/// a rare word, which its earlier occurrence, not the language, makes predictable.
pub const LONG_CLOZE_MAX_COUNT: usize = 4;

/// How the long-context cloze is built from a text (`long_cloze_items`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LongCloze {
    /// Tokens of an item, context and target (at most the model's context).
    pub context: usize,
    /// The target's most recent earlier occurrence starts at least this many tokens before it
    /// (and at least `LONG_CLOZE_NEAR`).
    pub min_distance: usize,
    /// Targets at least this many tokens apart, so that items share little text.
    pub spacing: usize,
}

impl LongCloze {
    /// Items of `context` tokens whose evidence is in the context's first half: at least
    /// context / 2 tokens back (2,048 at 4,096).
    pub fn new(context: usize) -> LongCloze {
        LongCloze { context, min_distance: (context / 2).max(LONG_CLOZE_NEAR), spacing: 64 }
    }
}

/// The long-context cloze items of a text, deterministic: a target is a rare word (at most
/// `LONG_CLOZE_MAX_COUNT` times in the text) of at least four ASCII letters, not a stopword, not
/// preceded by punctuation, that occurred before (spelled the same) with its most recent earlier
/// occurrence at least `min_distance` tokens back and inside
/// the item, so it is not in the last `LONG_CLOZE_NEAR` tokens and only distant attention can
/// find it; an item is the text of the `context` tokens (less the target's own and a few of
/// slack, from a word boundary) up to just before that later occurrence, which is the target.
/// Targets without a full context before them, or closer than `spacing` tokens to the last
/// pick, are skipped. `source` names the text in the items.
pub fn long_cloze_items(tok: &crate::model::tokenizer::Tokenizer, text: &str, source: &str, spec: LongCloze) -> Result<Vec<ClozeItem>> {
    let stop: std::collections::HashSet<&str> = STOPWORDS.split_whitespace().collect();
    let min_distance = spec.min_distance.max(LONG_CLOZE_NEAR);
    // Room for the target's tokens and for the context cut at a word boundary, tokenised alone.
    const SLACK: usize = 16;
    if spec.context <= min_distance + SLACK {
        return Err(Error::Invalid(format!("a long-context cloze of {} tokens cannot hold evidence {min_distance} tokens back", spec.context)));
    }
    let offsets = tok.encode(text, false)?.offsets;
    // The token holding byte `b` (the first that ends after it).
    let token_at = |b: usize| offsets.partition_point(|o| o.1 <= b);
    let mut words = Vec::new();
    let mut start = None;
    for (i, c) in text.char_indices().chain([(text.len(), ' ')]) {
        match (c.is_whitespace(), start) {
            (true, Some(s)) => {
                words.push((s, i));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    let mut last: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    // Occurrences of each word in the whole text, in any case: a target is rare in its text.
    let key = |w: &str| w.trim_matches(|c: char| !c.is_alphanumeric()).to_lowercase();
    let mut count: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    for &(s, e) in &words {
        *count.entry(key(&text[s..e])).or_default() += 1;
    }
    let (mut items, mut picked) = (Vec::new(), None::<usize>);
    for (n, &(s, e)) in words.iter().enumerate() {
        let raw = &text[s..e];
        let word = raw.trim_matches(|c: char| !c.is_alphanumeric());
        let t = token_at(s);
        let before = last.insert(word, t);
        let candidate = count[&key(raw)] <= LONG_CLOZE_MAX_COUNT
            && word.len() >= 4 && word.chars().all(|c| c.is_ascii_alphabetic()) && raw.starts_with(word) && !stop.contains(word.to_lowercase().as_str());
        let (Some(tj), true) = (before, candidate) else { continue };
        if t < tj + min_distance || picked.is_some_and(|p| t < p + spec.spacing) {
            continue;
        }
        let target_tokens = tok.encode_continuation(&format!(" {word}"))?.len();
        let Some(budget) = spec.context.checked_sub(target_tokens + SLACK) else { continue };
        if t < budget || tj < t - budget {
            // No full context before the target, or its evidence outside the item.
            continue;
        }
        // The first word that starts at or after the budget's first token.
        let first = words[..n].partition_point(|&(ws, _)| token_at(ws) < t - budget);
        if first >= n || token_at(words[first].0) > tj {
            continue;
        }
        items.push(ClozeItem { context: text[words[first].0..s].trim_end().to_string(), target: word.to_string(), source: source.to_string(), distance: Some(t - tj) });
        picked = Some(t);
    }
    Ok(items)
}

/// Reads a JSONL file of `ClozeItem`s.
pub fn load_cloze(path: &Path) -> Result<Vec<ClozeItem>> {
    parse_cloze(&crate::io::read_capped_string(path, MAX_SUITE_BYTES, "cloze file")?, path)
}

/// `load_cloze` of a file's text (e.g. one embedded in a binary); `path` names it in errors.
pub fn parse_cloze(text: &str, path: &Path) -> Result<Vec<ClozeItem>> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let item: ClozeItem = serde_json::from_str(line).map_err(|e| Error::bad_file(path, format!("line {}: {e}", n + 1)))?;
        if item.target.trim().is_empty() || item.target.contains(char::is_whitespace) {
            return Err(Error::bad_file(path, format!("line {}: the target must be one word", n + 1)));
        }
        out.push(item);
    }
    if out.is_empty() {
        return Err(Error::bad_file(path, "no cloze items"));
    }
    Ok(out)
}

/// How the model scores one continuation.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Continuation {
    /// Sum of log-probabilities of the continuation's tokens (nats).
    pub logprob: f64,
    pub tokens: usize,
    /// Every continuation token is the argmax at its position (greedy decoding would produce it).
    pub greedy: bool,
    /// Length of prompt + continuation in tokens.
    pub total_tokens: usize,
}

/// Scores `prompt` followed by `continuation`, each tokenized on its own (the continuation
/// carries its own leading space), so the split between them is exact. The prompt starts with
/// the tokenizer's BOS where the model wants one; the continuation does not.
pub fn score_continuation(model: &Model, prompt: &str, continuation: &str, mode: Mode, adapter: Option<&Adapter>) -> Result<Continuation> {
    let tok = model.tokenizer()?;
    let p = tok.encode(prompt, false)?.ids;
    // (Without the BOS its own encoding would start with: scored mid-text it costs ~30 nats.)
    let c = tok.encode_continuation(continuation)?;
    if p.is_empty() || c.is_empty() {
        return Err(Error::BadText("empty prompt or continuation".into()));
    }
    let ids: Vec<u32> = p.iter().chain(&c).copied().collect();
    if ids.len() > model.config().context {
        return Err(Error::BadText(format!("{} tokens exceed the model's context {}", ids.len(), model.config().context)));
    }
    let mut o = ForwardOptions::new(mode, adapter);
    // Rows p-1 .. end-2 predict the continuation's tokens.
    o.logits_from = p.len() - 1;
    let out = model.decoder.forward(&ids, &o)?;
    let logits = out.logits.narrow(0, 0, c.len())?;
    let nll = Decoder::nll(&logits, &c)?;
    let argmax = logits.argmax(candle_core::D::Minus1)?.to_vec1::<u32>()?;
    Ok(Continuation {
        logprob: -nll.iter().map(|&x| x as f64).sum::<f64>(),
        tokens: c.len(),
        greedy: argmax == c,
        total_tokens: ids.len(),
    })
}

/// Per-question result of the multiple-choice suite.
#[derive(Debug, Clone, Serialize)]
pub struct McScore {
    pub logprobs: Vec<f64>,
    /// The highest-likelihood choice is a true answer.
    pub mc1: bool,
    /// Normalised probability mass on the true answers.
    pub mc2: f64,
    /// Longest prompt + choice in tokens.
    pub max_tokens: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct SuiteResult {
    pub suite: String,
    pub mode: String,
    pub items: usize,
    /// TruthfulQA: MC1 accuracy; cloze: last-word accuracy (greedy).
    pub accuracy: f64,
    /// The accuracy's standard error over the items, sqrt(p (1 - p) / n).
    pub accuracy_se: f64,
    /// TruthfulQA: mean MC2; cloze: mean target log-likelihood (nats per word).
    pub score: f64,
    /// The score's standard error over the items (sample standard deviation / sqrt(n)).
    pub score_se: f64,
    /// Items whose every input fits in the local window (Focus prunes nothing there).
    pub items_within_window: usize,
    pub max_tokens: usize,
    pub seconds: f64,
    /// Per item: MC1 / cloze hit and the log-likelihood(s), for paired comparisons.
    pub per_item: Vec<serde_json::Value>,
}

/// Standard errors of a mean of 0/1 hits and of a mean of scores over the items.
fn standard_errors(hits: &[bool], scores: &[f64]) -> (f64, f64) {
    let n = hits.len().max(1) as f64;
    let p = hits.iter().filter(|&&h| h).count() as f64 / n;
    let m = scores.iter().sum::<f64>() / scores.len().max(1) as f64;
    let var = if scores.len() > 1 { scores.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (scores.len() - 1) as f64 } else { 0.0 };
    ((p * (1.0 - p) / n).sqrt(), (var / scores.len().max(1) as f64).sqrt())
}

fn check_cancel(cancel: Option<&AtomicBool>) -> Result<()> {
    if cancel.is_some_and(|c| c.load(std::sync::atomic::Ordering::Relaxed)) {
        return Err(Error::Cancelled);
    }
    Ok(())
}

/// TruthfulQA MC: prompt `Q: {question}\nA:` (after `prefix`, e.g. the task's six-shot
/// prefix, when not empty), each choice scored as ` {choice}` by summed log-likelihood
/// (BIG-bench's multiple-choice scoring).
pub fn truthfulqa(
    model: &Model,
    questions: &[McQuestion],
    prefix: &str,
    mode: Mode,
    adapter: Option<&Adapter>,
    window: usize,
    cancel: Option<&AtomicBool>,
    mut progress: impl FnMut(usize, usize),
) -> Result<SuiteResult> {
    let t0 = std::time::Instant::now();
    let mut scores = Vec::with_capacity(questions.len());
    for (i, q) in questions.iter().enumerate() {
        check_cancel(cancel)?;
        let prompt = if prefix.is_empty() { format!("Q: {}\nA:", q.question.trim()) } else { format!("{prefix}\nQ: {}\nA:", q.question.trim()) };
        let mut lps = Vec::with_capacity(q.choices.len());
        let mut max_tokens = 0;
        for c in &q.choices {
            let s = score_continuation(model, &prompt, &format!(" {}", c.trim()), mode, adapter)?;
            lps.push(s.logprob);
            max_tokens = max_tokens.max(s.total_tokens);
        }
        // First maximum wins ties, so the choice is deterministic.
        let best = (0..lps.len()).fold(0, |b, j| if lps[j] > lps[b] { j } else { b });
        let m = lps.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let total: f64 = lps.iter().map(|l| (l - m).exp()).sum();
        let right: f64 = lps.iter().zip(&q.correct).filter(|(_, &c)| c).map(|(l, _)| (l - m).exp()).sum();
        scores.push(McScore { logprobs: lps, mc1: q.correct[best], mc2: right / total, max_tokens });
        progress(i + 1, questions.len());
    }
    let n = scores.len().max(1) as f64;
    let (accuracy_se, score_se) = standard_errors(&scores.iter().map(|s| s.mc1).collect::<Vec<_>>(), &scores.iter().map(|s| s.mc2).collect::<Vec<_>>());
    Ok(SuiteResult {
        suite: if prefix.is_empty() { "truthfulqa-mc".into() } else { "truthfulqa-mc-6shot".into() },
        mode: mode.to_string(),
        items: scores.len(),
        accuracy: scores.iter().filter(|s| s.mc1).count() as f64 / n,
        accuracy_se,
        score: scores.iter().map(|s| s.mc2).sum::<f64>() / n,
        score_se,
        items_within_window: scores.iter().filter(|s| s.max_tokens <= window + 1).count(),
        max_tokens: scores.iter().map(|s| s.max_tokens).max().unwrap_or(0),
        seconds: t0.elapsed().as_secs_f64(),
        per_item: scores.iter().map(|s| serde_json::json!({"mc1": s.mc1, "mc2": s.mc2, "logprobs": s.logprobs})).collect(),
    })
}

/// Last-word cloze: a hit when greedy decoding reproduces every token of ` {target}`.
pub fn cloze(model: &Model, items: &[ClozeItem], mode: Mode, adapter: Option<&Adapter>, window: usize, cancel: Option<&AtomicBool>, progress: impl FnMut(usize, usize)) -> Result<SuiteResult> {
    cloze_suite("cloze", model, items, mode, adapter, window, cancel, progress)
}

/// The long-context cloze (`long_cloze_items`), scored as the last-word cloze.
pub fn long_cloze(model: &Model, items: &[ClozeItem], mode: Mode, adapter: Option<&Adapter>, window: usize, cancel: Option<&AtomicBool>, progress: impl FnMut(usize, usize)) -> Result<SuiteResult> {
    cloze_suite("long-cloze", model, items, mode, adapter, window, cancel, progress)
}

#[allow(clippy::too_many_arguments)]
fn cloze_suite(
    suite: &str,
    model: &Model,
    items: &[ClozeItem],
    mode: Mode,
    adapter: Option<&Adapter>,
    window: usize,
    cancel: Option<&AtomicBool>,
    mut progress: impl FnMut(usize, usize),
) -> Result<SuiteResult> {
    let t0 = std::time::Instant::now();
    let mut per = Vec::with_capacity(items.len());
    for (i, it) in items.iter().enumerate() {
        check_cancel(cancel)?;
        per.push(score_continuation(model, it.context.trim_end(), &format!(" {}", it.target), mode, adapter)?);
        progress(i + 1, items.len());
    }
    let n = per.len().max(1) as f64;
    let (accuracy_se, score_se) = standard_errors(&per.iter().map(|s| s.greedy).collect::<Vec<_>>(), &per.iter().map(|s| s.logprob).collect::<Vec<_>>());
    Ok(SuiteResult {
        suite: suite.into(),
        mode: mode.to_string(),
        items: per.len(),
        accuracy: per.iter().filter(|s| s.greedy).count() as f64 / n,
        accuracy_se,
        score: per.iter().map(|s| s.logprob).sum::<f64>() / n,
        score_se,
        items_within_window: per.iter().filter(|s| s.total_tokens <= window + 1).count(),
        max_tokens: per.iter().map(|s| s.total_tokens).max().unwrap_or(0),
        seconds: t0.elapsed().as_secs_f64(),
        per_item: per.iter().map(|s| serde_json::json!({"hit": s.greedy, "logprob": s.logprob})).collect(),
    })
}
