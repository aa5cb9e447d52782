//! Known answers for the categoriser, independent of any tokenizer: tokens are given as byte
//! ranges over the text.

use super::*;
use crate::focus::router::LayerRouting;

fn word(w: &str) -> Category {
    word_category(Lexicon::embedded(), w, false)
}

#[test]
fn closed_classes() {
    use Category::*;
    for (w, c) in [
        ("the", Determiner), ("a", Determiner), ("every", Determiner), ("of", Preposition), ("into", Preposition),
        ("upon", Preposition), ("he", Pronoun), ("himself", Pronoun), ("which", Pronoun), ("and", Conjunction),
        ("but", Conjunction), ("however", Conjunction), ("was", Verb), ("could", Verb), ("will", Verb),
        ("might", Verb), ("one", Number), ("twenty", Number), ("how", Adverb), ("where", Adverb),
    ] {
        assert_eq!(word(w), c, "{w}");
    }
}

#[test]
fn open_classes_irregular_and_inflected() {
    use Category::*;
    for (w, c) in [
        ("went", Verb), ("walked", Verb), ("houses", Noun), ("children", Noun), ("took", Verb), ("found", Verb),
        ("idle", Adjective), ("earliest", Adjective), ("naturally", Adverb), ("never", Adverb), ("amusement", Noun),
        ("contemplating", Verb), ("distressed", Adjective), ("faculties", Noun), ("better", Adjective),
    ] {
        assert_eq!(word(w), c, "{w}");
    }
}

#[test]
fn names_clitics_compounds_and_unknown_words() {
    use Category::*;
    let lex = Lexicon::embedded();
    // A capital inside a sentence makes a name; at a sentence start it does not.
    assert_eq!(word_category(lex, "March", false), Noun);
    assert_eq!(word_category(lex, "Then", true), Adverb);
    assert_eq!(word_category(lex, "Kellynch", true), Noun);
    assert_eq!(word_category(lex, "THE", true), Determiner);
    assert_eq!(word("Mary's"), Noun);
    assert_eq!(word("don't"), Verb);
    assert_eq!(word("won't"), Verb);
    assert_eq!(word("I'm"), Pronoun);
    assert_eq!(word("still-born"), Adjective);
    assert_eq!(word("glorpingly"), Adverb);
    assert_eq!(word("glorp"), Noun);
    assert_eq!(word("1,200"), Number);
    assert_eq!(word("twenty-nine"), Number);
}

/// Byte ranges of the given pieces, which must concatenate to `text`.
fn ranges(text: &str, pieces: &[&str]) -> Vec<(usize, usize)> {
    assert_eq!(pieces.concat(), text);
    let mut at = 0;
    pieces.iter().map(|p| { at += p.len(); (at - p.len(), at) }).collect()
}

#[test]
fn tokens_take_their_word_category_and_piece() {
    use Category::*;
    use Piece::*;
    let text = "The houses stood 1,200 yards.\n\nHe walked.";
    let pieces = ["The", " hous", "es", " stood", " ", "1", ",", "2", "0", "0", " yards", ".", "\n\n", "He", " walked", "."];
    let got = categorize_tokens(text, &ranges(text, &pieces), &[false; 16]);
    let want = [
        (Determiner, Whole), (Noun, First), (Noun, Continuation), (Verb, Whole), (Other, Whole), (Number, First),
        (Number, Continuation), (Number, Continuation), (Number, Continuation), (Number, Continuation), (Noun, Whole),
        (Punctuation, Whole), (Other, Whole), (Pronoun, Whole), (Verb, Whole), (Punctuation, Whole),
    ];
    let got: Vec<(Category, Piece)> = got.iter().map(|t| (t.category, t.piece)).collect();
    assert_eq!(got, want);
}

#[test]
fn specials_and_bad_ranges_are_other() {
    let text = "Hi there";
    let got = categorize_tokens(text, &[(0, 0), (0, 2), (2, 99), (5, 3)], &[true, true, false, false]);
    assert!(got.iter().all(|t| t.category == Category::Other && t.piece == Piece::Whole));
}

#[test]
fn exports_without_categories_still_load() {
    let t: crate::analysis::TokenInfo =
        serde_json::from_str(r#"{"id": 5, "text": " a", "start": 0, "end": 2, "segment": 0}"#).unwrap();
    assert_eq!((t.category, t.piece), (Category::Other, Piece::Whole));
}

#[test]
fn names_round_trip() {
    for c in Category::ALL {
        assert_eq!(Category::from_name(c.name()), Some(c));
        assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{}\"", c.name()));
        assert_eq!(Category::ALL[c.index()], c);
    }
}

#[test]
fn profile_counts_purity_and_labels() {
    use Category::*;
    // 5 tokens, 3 groups: group 0 gets 3 punctuation tokens, group 1 a noun and a verb, group 2 none.
    let m = [
        [0.8, 0.1, 0.1], [0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.3, 0.4, 0.3f32],
    ];
    let r = LayerRouting { t: 5, groups: 3, scores: vec![0.0; 15], memberships: m.concat(), vectors: None, d_g: 1 };
    let ids = [1, 1, 2, 3, 4];
    let texts: Vec<String> = [",", ",", ".", " cat", " ran"].iter().map(|s| s.to_string()).collect();
    let cats = [Punctuation, Punctuation, Punctuation, Noun, Verb];
    let p = layer_profile(7, &r, &ids, &texts, &cats).unwrap();
    assert_eq!(p.layer, 7);
    let c0 = &p.centroids[0];
    assert_eq!((c0.tokens, c0.purity, c0.top_category), (3, Some(1.0), Some(Punctuation)));
    assert_eq!(c0.label, "punctuation 100%");
    assert_eq!(c0.top_tokens[0], TopToken { id: 1, text: ",".into(), count: 2, share: 2.0 / 3.0 });
    let c1 = &p.centroids[1];
    assert_eq!((c1.tokens, c1.purity, c1.top_category), (2, Some(0.5), Some(Verb)));
    assert_eq!(c1.label, "mixed: verb 50% / noun 50%");
    assert_eq!(p.centroids[2].label, "empty");
    assert_eq!(p.centroids[2].purity, None);
    // Mass sums to the token count per category.
    let punct_mass: f64 = p.centroids.iter().map(|c| c.mass_by_category[Punctuation.index()]).sum();
    assert!((punct_mass - 3.0).abs() < 1e-6);
    // Token-weighted purity: (3 x 1.0 + 2 x 0.5) / 5; the empty group weighs nothing.
    assert!((p.purity() - 0.8).abs() < 1e-12);
    let mut q = p.clone();
    q.layer = 8;
    q.centroids[0].purity = Some(0.9);
    assert_eq!(best_layer(&[q.clone(), p.clone()]).map(|b| b.0), Some(7));
    assert_eq!(best_layer(&[p.clone(), p.clone()]).map(|b| b.0), Some(7), "the first of equals");
    assert_eq!(best_layer(&[]), None);
    // Wrong lengths are an error, not a panic.
    assert!(layer_profile(0, &r, &ids[..4], &texts, &cats).is_err());
}

#[test]
fn left_context_settles_noun_verb_ambiguity() {
    use Category::*;
    let cats = |t: &str| categorize_words(t).into_iter().map(|w| (t[w.start..w.end].to_string(), w.category)).collect::<Vec<_>>();
    let find = |t: &str, w: &str| cats(t).into_iter().find(|(x, _)| x == w).unwrap().1;
    // Out of context both read as verbs (WordNet's tagged counts favour the verb).
    assert_eq!(word("hope"), Verb);
    assert_eq!(find("He had much hope.", "hope"), Noun);
    assert_eq!(find("They must rest now.", "rest"), Verb);
    assert_eq!(find("the limited remnant", "limited"), Adjective);
    // Closed-class words are never re-read (This was -> was stays a verb).
    assert_eq!(find("This was the page.", "was"), Verb);
    // Names stay names (bath is also a verb).
    assert_eq!(find("They went to Bath.", "Bath"), Noun);
    // Punctuation between the words cuts the context.
    assert_eq!(find("much, hope", "hope"), Verb);
}

#[test]
fn odd_text_never_panics_and_covers_every_word() {
    assert_eq!(categorize_words("e\u{301}te").len(), 1, "a combining accent splits a word");
    use rand::{rngs::StdRng, Rng, SeedableRng};
    let alphabet: Vec<char> = "aZ'’-., \n\t0123456789éǅ🙂\u{a0}\u{301}N\"(;:Tn".chars().collect();
    let mut rng = StdRng::seed_from_u64(9);
    for fixed in ["", " ", "n't", "'t", "N'T", "'", "’s", "1,", ",1", "-a", "a-", "a--b", "\u{a0}", "e\u{301}te"] {
        let _ = categorize_words(fixed);
        let n = fixed.len();
        let _ = categorize_tokens(fixed, &[(0, n), (0, 1), (1, n)], &[false; 3]);
    }
    for _ in 0..300 {
        let text: String = (0..rng.gen_range(0..40)).map(|_| alphabet[rng.gen_range(0..alphabet.len())]).collect();
        let words = categorize_words(&text);
        // Words are ordered, disjoint and on character boundaries; only whitespace lies between.
        let mut at = 0;
        for w in &words {
            assert!(w.start >= at && w.end > w.start && text.is_char_boundary(w.start) && text.is_char_boundary(w.end));
            assert!(text[at..w.start].chars().all(char::is_whitespace), "{text:?}");
            at = w.end;
        }
        assert!(text[at..].chars().all(char::is_whitespace));
        // Arbitrary byte ranges, inside characters too.
        let offs: Vec<(usize, usize)> = (0..10).map(|_| (rng.gen_range(0..=text.len() + 2), rng.gen_range(0..=text.len() + 2))).collect();
        assert_eq!(categorize_tokens(&text, &offs, &[]).len(), 10);
    }
}
