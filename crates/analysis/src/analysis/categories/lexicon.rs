//! The open-class lexicon: WordNet 3.0 lemmas with their parts of speech ranked by frequency in
//! WordNet's semantically tagged corpora, plus its irregular forms (`*.exc`) and the regular
//! inflection rules of WordNet's own `morphy` (with doubled final consonants added). The table
//! `crates/analysis/data/wordnet-pos.txt` is derived by `scripts/gen-lexicon.py` and embedded in the binary,
//! so categorising needs no file or network at run time.

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::sync::OnceLock;

/// WordNet's four open-class parts of speech.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pos {
    Noun = 0,
    Verb = 1,
    Adj = 2,
    Adv = 3,
}

impl Pos {
    fn from_letter(c: char) -> Option<Pos> {
        match c {
            'n' => Some(Pos::Noun),
            'v' => Some(Pos::Verb),
            'a' => Some(Pos::Adj),
            'r' => Some(Pos::Adv),
            _ => None,
        }
    }
}

/// Per part of speech: `None` when the lemma does not have it, else its tagged frequency.
type Entry = [Option<u32>; 4];

pub struct Lexicon {
    lemmas: HashMap<String, Entry>,
    /// Irregular form -> (part of speech, base lemma).
    exceptions: HashMap<String, Vec<(Pos, String)>>,
}

static EMBEDDED: &str = include_str!("../../../data/wordnet-pos.txt");

/// Regular inflections (suffix, replacement), from WordNet's morphy(7WN), per part of speech.
const NOUN_RULES: &[(&str, &str)] =
    &[("s", ""), ("ses", "s"), ("xes", "x"), ("zes", "z"), ("ches", "ch"), ("shes", "sh"), ("men", "man"), ("ies", "y")];
const VERB_RULES: &[(&str, &str)] =
    &[("s", ""), ("ies", "y"), ("es", "e"), ("es", ""), ("ed", "e"), ("ed", ""), ("ing", "e"), ("ing", "")];
const ADJ_RULES: &[(&str, &str)] = &[("er", ""), ("est", ""), ("er", "e"), ("est", "e"), ("ier", "y"), ("iest", "y")];

impl Lexicon {
    /// The lexicon built into the library (parsed once, on first use).
    pub fn embedded() -> &'static Lexicon {
        static LEX: OnceLock<Lexicon> = OnceLock::new();
        LEX.get_or_init(|| Lexicon::parse(EMBEDDED).expect("the embedded lexicon is well formed (tested)"))
    }

    /// Parses the format written by `scripts/gen-lexicon.py`.
    pub fn parse(text: &str) -> Result<Lexicon> {
        let bad = |n: usize, why: &str| Error::Invalid(format!("lexicon line {}: {why}", n + 1));
        let mut lemmas = HashMap::new();
        let mut exceptions: HashMap<String, Vec<(Pos, String)>> = HashMap::new();
        let mut section = "";
        for (n, line) in text.lines().enumerate() {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(s) = line.strip_prefix('%') {
                section = if s == "lemmas" || s == "exceptions" { s } else { return Err(bad(n, "unknown section")) };
                continue;
            }
            let fields: Vec<&str> = line.split('\t').collect();
            match (section, fields.as_slice()) {
                ("lemmas", [lemma, spec]) => {
                    let mut e: Entry = [None; 4];
                    let mut cur: Option<Pos> = None;
                    let mut num = String::new();
                    for c in spec.chars().chain(std::iter::once(' ')) {
                        if c.is_ascii_digit() {
                            num.push(c);
                            continue;
                        }
                        if let Some(p) = cur.take() {
                            e[p as usize] = Some(if num.is_empty() { 0 } else { num.parse().map_err(|_| bad(n, "bad count"))? });
                            num.clear();
                        }
                        if c != ' ' {
                            cur = Some(Pos::from_letter(c).ok_or_else(|| bad(n, "bad part of speech"))?);
                        }
                    }
                    lemmas.insert(lemma.to_string(), e);
                }
                ("exceptions", [form, pos, base]) => {
                    let p = pos.chars().next().and_then(Pos::from_letter).ok_or_else(|| bad(n, "bad part of speech"))?;
                    exceptions.entry(form.to_string()).or_default().push((p, base.to_string()));
                }
                _ => return Err(bad(n, "unexpected line")),
            }
        }
        if lemmas.is_empty() {
            return Err(Error::Invalid("lexicon has no lemmas".into()));
        }
        Ok(Lexicon { lemmas, exceptions })
    }

    pub fn len(&self) -> usize {
        self.lemmas.len()
    }

    pub fn is_empty(&self) -> bool {
        self.lemmas.is_empty()
    }

    /// Whether `word` (lower case) is a lemma or an inflected form of one.
    pub fn knows(&self, word: &str) -> bool {
        self.scores(word).iter().any(Option::is_some)
    }

    /// The most likely part of speech of a lower-case word form, or None when the lexicon does
    /// not know it. Each part of speech gets the best tagged frequency (+1, so that untagged
    /// lemmas still count) among the ways the form can be read: as a lemma itself, as a listed
    /// irregular form, or as a regular inflection of a lemma of that part of speech. Ties go to
    /// noun, verb, adjective, adverb in that order.
    pub fn pos(&self, word: &str) -> Option<Pos> {
        let s = self.scores(word);
        let mut best: Option<(Pos, u64)> = None;
        for p in [Pos::Noun, Pos::Verb, Pos::Adj, Pos::Adv] {
            if let Some(v) = s[p as usize] {
                if best.is_none_or(|(_, b)| v > b) {
                    best = Some((p, v));
                }
            }
        }
        best.map(|(p, _)| p)
    }

    /// Whether the word form can be read as part of speech `p` (a lemma of it, or an irregular or
    /// regular inflection of one).
    pub fn has_reading(&self, word: &str, p: Pos) -> bool {
        self.scores(word)[p as usize].is_some()
    }

    /// The word as a base of another part of speech: an adverb in -ly from a known adjective.
    pub fn is_adjective(&self, word: &str) -> bool {
        self.lemmas.get(word).is_some_and(|e| e[Pos::Adj as usize].is_some())
    }

    fn scores(&self, word: &str) -> [Option<u64>; 4] {
        let mut s: [Option<u64>; 4] = [None; 4];
        let mut offer = |p: Pos, base: &str| {
            if let Some(Some(c)) = self.lemmas.get(base).map(|e| e[p as usize]) {
                let v = c as u64 + 1;
                let slot = &mut s[p as usize];
                *slot = Some(slot.map_or(v, |o| o.max(v)));
            }
        };
        for p in [Pos::Noun, Pos::Verb, Pos::Adj, Pos::Adv] {
            offer(p, word);
        }
        if let Some(ex) = self.exceptions.get(word) {
            for (p, base) in ex {
                offer(*p, base);
            }
        }
        for (p, rules) in [(Pos::Noun, NOUN_RULES), (Pos::Verb, VERB_RULES), (Pos::Adj, ADJ_RULES)] {
            for (suffix, repl) in rules {
                if let Some(stem) = word.strip_suffix(suffix) {
                    if stem.len() < 2 {
                        continue;
                    }
                    offer(p, &format!("{stem}{repl}"));
                    // Doubled final consonant: stopping -> stop, bigger -> big.
                    let b = stem.as_bytes();
                    if repl.is_empty() && b.len() >= 3 && b[b.len() - 1] == b[b.len() - 2] && !b"aeiou".contains(&b[b.len() - 1]) {
                        offer(p, &stem[..stem.len() - 1]);
                    }
                }
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_table_parses_and_is_large() {
        let lex = Lexicon::embedded();
        assert!(lex.len() > 80_000, "{}", lex.len());
    }

    #[test]
    fn ranks_by_tagged_frequency_and_inflections() {
        let lex = Lexicon::embedded();
        assert_eq!(lex.pos("house"), Some(Pos::Noun));
        assert_eq!(lex.pos("houses"), Some(Pos::Noun));
        assert_eq!(lex.pos("walked"), Some(Pos::Verb));
        assert_eq!(lex.pos("went"), Some(Pos::Verb));
        assert_eq!(lex.pos("children"), Some(Pos::Noun));
        assert_eq!(lex.pos("stopping"), Some(Pos::Verb));
        assert_eq!(lex.pos("happier"), Some(Pos::Adj));
        assert_eq!(lex.pos("quickly"), Some(Pos::Adv));
        assert_eq!(lex.pos("xqzv"), None);
    }

    #[test]
    fn malformed_tables_are_errors() {
        assert!(Lexicon::parse("").is_err());
        assert!(Lexicon::parse("%lemmas\nfoo\tq\n").is_err());
        assert!(Lexicon::parse("%lemmas\nfoo\n").is_err());
        assert!(Lexicon::parse("%nope\n").is_err());
        let l = Lexicon::parse("%lemmas\nfoo\tn3v\n%exceptions\nfeet\tn\tfoo\n").unwrap();
        assert_eq!(l.pos("feet"), Some(Pos::Noun));
        assert_eq!(l.pos("foo"), Some(Pos::Noun));
    }
}
