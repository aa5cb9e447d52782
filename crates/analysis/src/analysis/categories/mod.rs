//! Linguistic categories of tokens, and per-layer profiles of what each centroid's group holds.
//!
//! Each token gets one of eleven categories. Words are categorised as wholes: the text is cut into
//! words (`words`), each word is categorised once, out of context, by closed-class lists
//! (`closed`) and otherwise by WordNet 3.0 (`lexicon`), and every token takes the category of the
//! word its first non-space byte falls in, marked as the word's first piece or a continuation.
//! Tokens that are only whitespace, and special tokens, are `other`; tokens of punctuation or
//! symbols are `punctuation`. Capitalised words inside a sentence are names, hence nouns.
//! `category` holds the categories themselves. `profile` counts, per layer and centroid, the categories and tokens of its group; `tests`
//! holds this folder's unit tests.

mod category;
mod closed;
mod lexicon;
mod profile;
mod words;

pub use category::Category;
pub use lexicon::{Lexicon, Pos};
pub use profile::{best_layer, layer_profile, CentroidProfile, LayerProfile, TopToken, PURE};
pub use words::{word_category, word_category_after};

use serde::{Deserialize, Serialize};

/// Where a token sits in its word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Piece {
    /// The token covers the whole word (or is whitespace / special).
    #[default]
    Whole,
    /// The first of several tokens of one word.
    First,
    /// A later token of a word.
    Continuation,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenCategory {
    pub category: Category,
    pub piece: Piece,
    /// Byte range of the word in the text (the token's own range for whitespace and specials).
    pub word_start: usize,
    pub word_end: usize,
}

/// One word (or punctuation run) of a text with its category.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WordCategory {
    /// Byte range in the text.
    pub start: usize,
    pub end: usize,
    pub category: Category,
}

/// Cuts `text` into words, numbers and punctuation runs (whitespace left out) and categorises
/// each once.
pub fn categorize_words(text: &str) -> Vec<WordCategory> {
    let lex = Lexicon::embedded();
    let segs = words::segments(text);
    let mut out: Vec<WordCategory> = Vec::new();
    for (i, s) in segs.iter().enumerate() {
        use words::SegKind;
        let category = match s.kind {
            SegKind::Space => continue,
            SegKind::Punct => Category::Punctuation,
            SegKind::Number => Category::Number,
            SegKind::Word => {
                // The previous word, when only whitespace separates it from this one.
                let prev = out.last().filter(|w| {
                    let gap = &text[w.end..s.start];
                    gap.chars().all(char::is_whitespace)
                        && segs[..i].iter().rev().find(|g| g.kind != SegKind::Space).is_some_and(|g| g.kind == SegKind::Word)
                });
                let prev = prev.map(|w| (&text[w.start..w.end], w.category));
                words::word_category_after(lex, &text[s.start..s.end], words::sentence_initial(text, &segs, i), prev)
            }
        };
        out.push(WordCategory { start: s.start, end: s.end, category });
    }
    out
}

/// Categorises every token of `text`, given each token's byte range (as from
/// `Tokenizer::encode`) and whether it is a special token. Ranges outside the text, or empty, give
/// `other`.
pub fn categorize_tokens(text: &str, offsets: &[(usize, usize)], special: &[bool]) -> Vec<TokenCategory> {
    let words = categorize_words(text);
    let bytes = text.as_bytes();
    offsets
        .iter()
        .enumerate()
        .map(|(i, &(start, end))| {
            let other = TokenCategory { category: Category::Other, piece: Piece::Whole, word_start: start, word_end: end };
            if special.get(i).copied().unwrap_or(false) || start >= end || end > text.len() {
                return other;
            }
            // First byte of the token that is not ASCII whitespace (byte-level BPE glues a leading
            // space to words; a token may also start inside a multi-byte character).
            let Some(p) = (start..end).find(|&b| !bytes[b].is_ascii_whitespace()) else { return other };
            let w = words.partition_point(|w| w.end <= p);
            // No word holds p: it is non-ASCII whitespace (no-break space, ideographic space).
            let Some(word) = words.get(w).filter(|w| w.start <= p) else { return other };
            let piece = if p > word.start {
                Piece::Continuation
            } else if end >= word.end {
                Piece::Whole
            } else {
                Piece::First
            };
            TokenCategory { category: word.category, piece, word_start: word.start, word_end: word.end }
        })
        .collect()
}

#[cfg(test)]
mod tests;
