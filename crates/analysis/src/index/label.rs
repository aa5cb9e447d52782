//! An automatic label for a centroid, read off its corpus statistics, with the figures it rests on.
//!
//! The rules, first match wins (members = tokens whose largest membership is the group; lift = a
//! share among the members over the same share in the whole corpus):
//! 1. no members: "empty";
//! 2. one token is at least half of the members: that token, e.g. `' of'`;
//! 3. one category is at least `PURE` (60%) of the members, as in the category profiles: that
//!    category, e.g. "punctuation";
//! 4. a category holding at least 20% of the members is over-represented at least 1.5 times:
//!    "CATEGORY-leaning";
//! 5. otherwise "mixed: " and the three most frequent members.
//!
//! The evidence always gives the members' share of the layer, the top category against its base
//! rate, and the most over-represented tokens (at least `MIN_LIFT_COUNT` members).

use super::stats::{CentroidStats, CorpusStats};
use crate::analysis::categories::{Category, PURE};
use serde::{Deserialize, Serialize};

/// Share of the members one token needs to name the centroid.
pub const TOKEN_LABEL_SHARE: f64 = 0.5;
/// Share and lift a category needs for "CATEGORY-leaning".
pub const LEANING_SHARE: f64 = 0.2;
pub const LEANING_LIFT: f64 = 1.5;
/// Members a token needs before its lift is listed (rarer tokens have noisy lifts).
pub const MIN_LIFT_COUNT: u64 = 5;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AutoLabel {
    pub label: String,
    /// Which rule made the label: "empty", "token", "category", "leaning" or "mixed".
    pub rule: String,
    /// One line per figure the label rests on.
    pub evidence: Vec<String>,
}

/// A token's text as a label shows it: quoted, with line breaks and tabs escaped.
pub fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('\'');
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if is_unprintable(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// Characters a terminal acts on instead of showing: C0 and C1 controls (ESC starts the
/// sequences that move the cursor, retitle the window, ...), DEL, and the bidirectional
/// overrides and isolates, which reorder what follows them.
pub fn is_unprintable(c: char) -> bool {
    c.is_control() || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Text from a corpus or an index (a document's name, an example's context, a label) as one
/// line that is safe to print: newlines and tabs become spaces, any other character a terminal
/// would act on (`is_unprintable`) a visible `\u{1b}`.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\r' | '\t' => out.push(' '),
            c if is_unprintable(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// (share among the members, share in the corpus, lift) of category `c`.
pub fn category_lift(c: &CentroidStats, corpus: &CorpusStats, cat: usize) -> (f64, f64, f64) {
    let share = c.by_category[cat] as f64 / c.members.max(1) as f64;
    let base = corpus.category_totals[cat] as f64 / corpus.tokens.max(1) as f64;
    (share, base, if base > 0.0 { share / base } else { 0.0 })
}

/// (share among the members, share in the corpus, lift) of token `id`.
pub fn token_lift(c: &CentroidStats, corpus: &CorpusStats, id: u32) -> (f64, f64, f64) {
    let share = c.token_counts.get(&id).copied().unwrap_or(0) as f64 / c.members.max(1) as f64;
    let base = corpus.token_totals.get(&id).copied().unwrap_or(0) as f64 / corpus.tokens.max(1) as f64;
    (share, base, if base > 0.0 { share / base } else { 0.0 })
}

/// The members' tokens, most frequent first (ties: lower id).
pub fn top_tokens(c: &CentroidStats) -> Vec<(u32, u64)> {
    let mut v: Vec<(u32, u64)> = c.token_counts.iter().map(|(&i, &n)| (i, n)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

/// Tokens with at least `MIN_LIFT_COUNT` members, highest lift first (ties: more members).
pub fn lifted_tokens(c: &CentroidStats, corpus: &CorpusStats) -> Vec<(u32, u64, f64)> {
    let mut v: Vec<(u32, u64, f64)> =
        c.token_counts.iter().filter(|(_, &n)| n >= MIN_LIFT_COUNT).map(|(&i, &n)| (i, n, token_lift(c, corpus, i).2)).collect();
    v.sort_by(|a, b| b.2.total_cmp(&a.2).then(b.1.cmp(&a.1)).then(a.0.cmp(&b.0)));
    v
}

/// The label of centroid `group` at `layer`; `text(id)` gives a token's text.
pub fn auto_label(corpus: &CorpusStats, layer: usize, group: usize, text: impl Fn(u32) -> String) -> AutoLabel {
    let c = &corpus.centroids[layer][group];
    if c.members == 0 {
        return AutoLabel { label: "empty".into(), rule: "empty".into(), evidence: vec!["no token has this group as its largest membership".into()] };
    }
    let layer_tokens: u64 = corpus.centroids[layer].iter().map(|c| c.members).sum();
    let mut evidence = vec![format!("{} members, {:.1}% of the layer's tokens", c.members, 100.0 * c.members as f64 / layer_tokens.max(1) as f64)];
    let mut cats: Vec<usize> = (0..Category::COUNT).collect();
    cats.sort_by(|&a, &b| c.by_category[b].cmp(&c.by_category[a])); // stable: ties keep ALL order
    let top_cat = cats[0];
    let (cshare, cbase, clift) = category_lift(c, corpus, top_cat);
    let name = Category::ALL[top_cat].name();
    evidence.push(format!("{name}: {:.0}% of members vs {:.0}% of the corpus (lift {clift:.1})", 100.0 * cshare, 100.0 * cbase));
    let tops = top_tokens(c);
    let (first, n1) = tops[0];
    let (tshare, tbase, tlift) = token_lift(c, corpus, first);
    evidence.push(format!("most frequent: {} {:.0}% of members vs {:.2}% of the corpus (lift {tlift:.1})", quoted(&text(first)), 100.0 * tshare, 100.0 * tbase));
    let lifted: Vec<String> = lifted_tokens(c, corpus).iter().take(3).map(|&(i, n, l)| format!("{} x{n} (lift {l:.1})", quoted(&text(i)))).collect();
    if !lifted.is_empty() {
        evidence.push(format!("over-represented: {}", lifted.join(", ")));
    }
    let (label, rule) = if n1 as f64 >= TOKEN_LABEL_SHARE * c.members as f64 {
        (quoted(&text(first)), "token")
    } else if cshare >= PURE {
        (name.to_string(), "category")
    } else if let Some(&lean) = cats.iter().find(|&&x| {
        let (s, _, l) = category_lift(c, corpus, x);
        s >= LEANING_SHARE && l >= LEANING_LIFT
    }) {
        let (s, b, l) = category_lift(c, corpus, lean);
        if lean != top_cat {
            evidence.push(format!("{}: {:.0}% of members vs {:.0}% of the corpus (lift {l:.1})", Category::ALL[lean].name(), 100.0 * s, 100.0 * b));
        }
        (format!("{}-leaning", Category::ALL[lean].name()), "leaning")
    } else {
        let names: Vec<String> = tops.iter().take(3).map(|&(i, _)| quoted(&text(i))).collect();
        (format!("mixed: {}", names.join(" ")), "mixed")
    };
    AutoLabel { label, rule: rule.into(), evidence }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A corpus's control sequences are shown, never sent to the terminal (issue 51: `centroids`
    /// printed them raw): ESC, BEL, C1 codes and the bidirectional overrides become `\u{..}`.
    #[test]
    fn control_characters_are_shown_not_sent() {
        let hostile = "a\u{1b}[31mred\u{1b}]0;title\u{7} \u{9b}2J \u{202e}evil\u{2066}\u{7f}";
        for s in [quoted(hostile), printable(hostile)] {
            assert!(!s.chars().any(is_unprintable), "{s:?}");
            assert!(s.contains("\\u{1b}[31mred") && s.contains("\\u{7}") && s.contains("\\u{9b}") && s.contains("\\u{202e}") && s.contains("\\u{7f}"), "{s}");
        }
        assert_eq!(quoted(" of\n"), "' of\\n'");
        assert_eq!(printable("a\nb\tc"), "a b c");
        assert_eq!(printable("naïve 東京"), "naïve 東京");
    }
}
