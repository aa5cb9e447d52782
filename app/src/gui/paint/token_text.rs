//! The text a token shows, shared by the views that draw tokens and the jobs that build their
//! texts (a generation's stream): characters split over byte tokens shown once, blanks made
//! visible.

/// What a byte token that continues the character of the token before it shows (`pieces`):
/// nothing, so that the character is drawn once, across its tokens.
pub const CONTINUES: &str = "\0";

/// The text each token shows: its own text, except where a character is split over byte
/// tokens (the tokenizer gives every piece the whole character's span, which drew "ÜÜber"):
/// the bytes a token shares with the one before are shown by that one only, and a token with
/// nothing of its own is `CONTINUES`.
pub fn pieces(tokens: &[focus_core::analysis::TokenInfo]) -> Vec<&str> {
    let mut out = Vec::with_capacity(tokens.len());
    let mut seen_to = 0usize;
    for (i, t) in tokens.iter().enumerate() {
        let shared = if i > 0 && t.start < seen_to { seen_to - t.start } else { 0 };
        let piece = if shared == 0 {
            t.text.as_str()
        } else if shared >= t.text.len() {
            CONTINUES
        } else {
            t.text.get(shared..).unwrap_or(t.text.as_str())
        };
        out.push(piece);
        seen_to = seen_to.max(t.end);
    }
    out
}

/// What a token shows: newlines and tabs as visible marks, blanks as middle dots.
pub fn display_text(s: &str) -> String {
    if s == CONTINUES {
        return String::new();
    }
    if s.is_empty() {
        return "[]".into();
    }
    if s.trim().is_empty() {
        return s.chars().map(|c| if c == '\n' { '¶' } else if c == '\t' { '»' } else { '·' }).collect();
    }
    s.replace('\n', "¶").replace('\t', "»")
}
