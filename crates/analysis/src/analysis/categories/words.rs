//! Cutting a text into words, and giving each word a category out of context.
//!
//! A word is a run of letters and digits, with internal apostrophes (don't, Mary's) and internal
//! hyphens between letters (still-born) kept inside it; a number is a run of digits with internal
//! `,` or `.` between digits (1,200; 3.5), optionally followed by an ordinal suffix (15th).
//! Every other non-space character run is one punctuation "word" (symbols included: `$`, `%`).

use super::closed::closed_class;
use super::lexicon::{Lexicon, Pos};
use super::category::Category;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegKind {
    Space,
    Word,
    Number,
    Punct,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    pub kind: SegKind,
    pub start: usize,
    pub end: usize,
}

fn is_apostrophe(c: char) -> bool {
    c == '\'' || c == '\u{2019}'
}

/// Combining diacritics (decomposed "é"): they stay inside a word.
fn is_combining(c: char) -> bool {
    ('\u{300}'..='\u{36f}').contains(&c)
}

/// Splits `text` into consecutive segments covering every byte.
pub fn segments(text: &str) -> Vec<Segment> {
    let at = |b: usize| text.get(b..).and_then(|s| s.chars().next());
    let mut out = Vec::new();
    let mut b = 0;
    while let Some(c) = at(b) {
        let start = b;
        let kind = if c.is_whitespace() {
            while let Some(c) = at(b).filter(|c| c.is_whitespace()) {
                b += c.len_utf8();
            }
            SegKind::Space
        } else if c.is_ascii_digit() {
            while let Some(c) = at(b) {
                // ',' and '.' are one byte, so b + 1 is the next character.
                let joins = b > start && (c == ',' || c == '.') && at(b + 1).is_some_and(|d| d.is_ascii_digit());
                if c.is_ascii_digit() || joins {
                    b += c.len_utf8();
                } else {
                    break;
                }
            }
            // Ordinal or unit suffix glued to the digits (15th, 2nd) stays in the number.
            while let Some(c) = at(b).filter(|c| c.is_alphabetic()) {
                b += c.len_utf8();
            }
            SegKind::Number
        } else if c.is_alphanumeric() {
            let mut prev = c;
            while let Some(c) = at(b) {
                let inner = (is_apostrophe(c) || c == '-')
                    && (prev.is_alphanumeric() || is_combining(prev))
                    && at(b + c.len_utf8()).is_some_and(char::is_alphabetic);
                if c.is_alphanumeric() || inner || is_combining(c) {
                    b += c.len_utf8();
                    prev = c;
                } else {
                    break;
                }
            }
            SegKind::Word
        } else {
            while let Some(c) = at(b).filter(|c| !c.is_whitespace() && !c.is_alphanumeric()) {
                b += c.len_utf8();
            }
            SegKind::Punct
        };
        out.push(Segment { kind, start, end: b });
    }
    out
}

/// Whether the word starting segment `i` begins a sentence: first word of the text, or after
/// sentence-final or opening punctuation, or after a blank line (headings, paragraphs).
pub fn sentence_initial(text: &str, segs: &[Segment], i: usize) -> bool {
    for s in segs[..i].iter().rev() {
        let t = &text[s.start..s.end];
        match s.kind {
            SegKind::Space if t.matches('\n').count() >= 2 => return true,
            SegKind::Space => continue,
            SegKind::Punct => return t.chars().any(|c| ".!?\"\u{201c}\u{2018}(:;".contains(c)) && !t.ends_with(','),
            _ => return false,
        }
    }
    true
}

/// The category of one word (a `Word` or `Number` segment's text), out of context. `initial`: the
/// word begins a sentence, so a capital letter says nothing about it being a name.
pub fn word_category(lex: &Lexicon, word: &str, initial: bool) -> Category {
    word_category_after(lex, word, initial, None)
}

/// Possessive pronouns, which are followed by a noun phrase (his hope, their work).
const POSSESSIVES: &[&str] = &["my", "your", "his", "her", "its", "our", "their", "thy"];
/// Words after which a noun/verb-ambiguous word is a verb (to hope, must rest, did work).
const BEFORE_VERB: &[&str] =
    &["to", "will", "would", "shall", "should", "can", "could", "may", "might", "must", "do", "does", "did"];

/// `word_category` with one word of left context: `prev` is the word just before (only whitespace
/// between) with its category. It settles the commonest out-of-context error, noun/verb
/// ambiguity of open-class words: after a determiner or possessive a word that WordNet allows as a noun
/// (or, for a participle in -ed/-en, as an adjective) is read so; after `to`, a modal or `do`,
/// a word that can be a verb is a verb.
pub fn word_category_after(lex: &Lexicon, word: &str, initial: bool, prev: Option<(&str, Category)>) -> Category {
    let c = word_category_alone(lex, word, initial);
    let Some((pw, pc)) = prev else { return c };
    let pw = pw.to_lowercase();
    let lower = word.to_lowercase();
    let mut cs = word.chars();
    let name = !initial && cs.next().is_some_and(char::is_uppercase) && cs.any(char::is_lowercase);
    if name || closed_class(&lower).is_some() {
        return c;
    }
    let key = if lex.knows(&lower) { lower.clone() } else { american(&lower).unwrap_or(lower.clone()) };
    let can = |p: Pos| lex.has_reading(&key, p);
    let nominal_left = pc == Category::Determiner || POSSESSIVES.contains(&pw.as_str());
    match c {
        Category::Verb if nominal_left => {
            let participle = lower.ends_with("ed") || lower.ends_with("en");
            if participle && can(Pos::Adj) {
                Category::Adjective
            } else if can(Pos::Noun) {
                Category::Noun
            } else if can(Pos::Adj) {
                Category::Adjective
            } else {
                c
            }
        }
        Category::Noun if BEFORE_VERB.contains(&pw.as_str()) && can(Pos::Verb) => Category::Verb,
        _ => c,
    }
}

fn word_category_alone(lex: &Lexicon, word: &str, initial: bool) -> Category {
    if word.chars().next().is_some_and(|c| c.is_ascii_digit()) {
        return Category::Number;
    }
    // Clitics: the word takes the category of its host (don't -> do, Mary's -> Mary, I'm -> I).
    if let Some(a) = word.rfind(is_apostrophe) {
        let (host, clitic) = (&word[..a], &word[a..]);
        let clitic = clitic.chars().skip(1).collect::<String>().to_lowercase();
        let host = match clitic.as_str() {
            "t" if host.ends_with(['n', 'N']) => {
                let h = &host[..host.len() - 1];
                if h.is_empty() { host } else { h }
            }
            _ => host,
        };
        if !host.is_empty() && ["s", "t", "m", "re", "ve", "ll", "d"].contains(&clitic.as_str()) {
            return word_category(lex, host, initial);
        }
    }
    let lower = word.to_lowercase();
    let mut cs = word.chars();
    let titlecase = cs.next().is_some_and(char::is_uppercase) && cs.any(char::is_lowercase);
    if let Some(c) = closed_class(&lower) {
        return c;
    }
    // Compound numbers (twenty-nine): WordNet lists them as nouns.
    if lower.contains('-') && lower.split('-').all(|p| closed_class(p) == Some(Category::Number)) {
        return Category::Number;
    }
    // A capitalised word inside a sentence is a name (Walter, Kellynch, March).
    if titlecase && !initial {
        return Category::Noun;
    }
    if let Some(p) = lex.pos(&lower).or_else(|| american(&lower).and_then(|a| lex.pos(&a))) {
        return pos_category(p);
    }
    // Hyphenated compounds not in WordNet: try them closed up (still-born -> stillborn), else
    // they take the category of their head, the last part.
    if let Some((_, head)) = lower.rsplit_once('-') {
        if let Some(p) = lex.pos(&lower.replace('-', "")) {
            return pos_category(p);
        }
        return word_category(lex, head, initial);
    }
    if titlecase {
        return Category::Noun;
    }
    guess(lex, &lower)
}

/// The American spelling WordNet uses for a British one (favourite, colour, realise, centre),
/// when the word has one of those endings.
fn american(w: &str) -> Option<String> {
    const RULES: &[(&str, &str)] = &[
        ("our", "or"), ("ours", "ors"), ("ourite", "orite"), ("ourable", "orable"), ("oured", "ored"),
        ("ise", "ize"), ("ised", "ized"), ("ising", "izing"), ("isation", "ization"), ("yse", "yze"),
        ("tre", "ter"), ("tres", "ters"), ("ence", "ense"),
    ];
    RULES.iter().find_map(|(b, a)| w.strip_suffix(b).filter(|s| s.len() >= 2).map(|s| format!("{s}{a}")))
}

fn pos_category(p: Pos) -> Category {
    match p {
        Pos::Noun => Category::Noun,
        Pos::Verb => Category::Verb,
        Pos::Adj => Category::Adjective,
        Pos::Adv => Category::Adverb,
    }
}

/// Words WordNet does not know: adverbs in -ly from a known adjective, then derivational
/// suffixes, else noun (the open class that takes most new words and names).
fn guess(lex: &Lexicon, w: &str) -> Category {
    if let Some(stem) = w.strip_suffix("ly") {
        if lex.is_adjective(stem) || stem.strip_suffix('i').is_some_and(|s| lex.is_adjective(&format!("{s}y"))) {
            return Category::Adverb;
        }
    }
    const ADJ: &[&str] = &["ous", "ful", "ive", "able", "ible", "al", "ic", "less", "ish"];
    if w.ends_with("ly") {
        Category::Adverb
    } else if w.ends_with("ing") || w.ends_with("ed") {
        Category::Verb
    } else if ADJ.iter().any(|s| w.ends_with(s)) {
        Category::Adjective
    } else {
        Category::Noun
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(t: &str) -> Vec<(&str, SegKind)> {
        segments(t).iter().map(|s| (&t[s.start..s.end], s.kind)).collect()
    }

    #[test]
    fn segments_cover_text_and_keep_words_whole() {
        use SegKind::*;
        let t = "Mary's still-born son--\"1,200 houses,\" 15th; 3.5%  é";
        let s = texts(t);
        assert_eq!(
            s,
            vec![
                ("Mary's", Word), (" ", Space), ("still-born", Word), (" ", Space), ("son", Word), ("--\"", Punct),
                ("1,200", Number), (" ", Space), ("houses", Word), (",\"", Punct), (" ", Space), ("15th", Number),
                (";", Punct), (" ", Space), ("3.5", Number), ("%", Punct), ("  ", Space), ("é", Word)
            ]
        );
        assert_eq!(texts("1, 1760"), vec![("1", Number), (",", Punct), (" ", Space), ("1760", Number)]);
        assert_eq!(texts("'tis it'"), vec![("'", Punct), ("tis", Word), (" ", Space), ("it", Word), ("'", Punct)]);
    }

    #[test]
    fn sentence_starts() {
        let t = "He said. The end, Then\n\nChapter";
        let s = segments(t);
        let idx = |w: &str| s.iter().position(|g| &t[g.start..g.end] == w).unwrap();
        assert!(sentence_initial(t, &s, idx("He")));
        assert!(sentence_initial(t, &s, idx("The")));
        assert!(!sentence_initial(t, &s, idx("Then")));
        assert!(sentence_initial(t, &s, idx("Chapter")));
    }
}
