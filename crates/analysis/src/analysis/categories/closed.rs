//! Closed word classes: short finite lists, written from the standard descriptive grammars of
//! English (Quirk et al., *A Comprehensive Grammar of the English Language*, 1985; Huddleston &
//! Pullum, *The Cambridge Grammar of the English Language*, 2002) and the Universal Dependencies
//! English guidelines (universaldependencies.org/en/pos). A word listed in more than one class
//! takes the class of its commonest use in running prose, since categorisation is out of context:
//! * possessives (my, his, her, its, their...) are pronouns, as in UD (`her` is then a pronoun in
//!   both of its uses);
//! * `that` is a conjunction (its commonest use in book prose is the complementiser); `this`,
//!   `these`, `those` are determiners;
//! * words that are both prepositions and subordinators (after, before, since, until, till) or
//!   particles (up, down, out, off, over) are prepositions; `as` is a conjunction, `to` a
//!   preposition (UD would call the infinitive marker a particle; we have no such class);
//! * `there` is an adverb (locative and existential alike), `so` an adverb;
//! * discourse connectives (however, therefore, moreover...) join the conjunctions, as the class is
//!   "conjunction/connective";
//! * auxiliaries and modals (be, have, do, will, can...) are verbs (class "verb", auxiliaries
//!   included); this matters because WordNet alone reads `will`, `can`, `might` as nouns;
//! * cardinal number words are numbers; ordinals (first, second) are adjectives, as in UD.

use super::category::Category;

pub const DETERMINERS: &[&str] = &[
    "a", "an", "the", "this", "these", "those", "each", "every", "either", "neither", "some", "any", "no", "all", "both",
    "half", "several", "many", "much", "few", "fewer", "less", "more", "most", "such", "another", "enough", "whatever",
    "whichever",
];

pub const PREPOSITIONS: &[&str] = &[
    "aboard", "about", "above", "across", "after", "against", "along", "alongside", "amid", "amidst", "among",
    "amongst", "around", "at", "atop", "before", "behind", "below", "beneath", "beside", "besides", "between",
    "betwixt", "beyond", "by", "concerning", "despite", "down", "during", "except", "for", "from", "in", "inside",
    "into", "like", "near", "of", "off", "on", "onto", "out", "outside", "over", "past", "per", "regarding", "round",
    "since", "through", "throughout", "till", "to", "toward", "towards", "under", "underneath", "unlike", "until",
    "unto", "up", "upon", "via", "with", "within", "without", "ere",
];

pub const PRONOUNS: &[&str] = &[
    "i", "me", "my", "mine", "myself", "you", "your", "yours", "yourself", "yourselves", "he", "him", "his", "himself",
    "she", "her", "hers", "herself", "it", "its", "itself", "we", "us", "our", "ours", "ourselves", "they", "them",
    "their", "theirs", "themselves", "oneself", "who", "whom", "whose", "which", "what", "whoever", "whomever",
    "someone", "somebody", "something", "anyone", "anybody", "anything", "everyone", "everybody", "everything",
    "nobody", "nothing", "none", "thee", "thou", "thy", "thine", "ye", "thyself",
];

pub const CONJUNCTIONS: &[&str] = &[
    // coordinators
    "and", "or", "but", "nor", "yet",
    // subordinators
    "that", "because", "although", "though", "while", "whilst", "whereas", "if", "unless", "whether", "as", "than",
    "lest", "whereupon", "wherever", "whenever",
    // connectives (conjunctive adverbs)
    "however", "therefore", "moreover", "furthermore", "nevertheless", "nonetheless", "thus", "hence",
    "consequently", "accordingly", "meanwhile", "otherwise", "notwithstanding",
];

pub const AUXILIARIES: &[&str] = &[
    "be", "am", "is", "are", "was", "were", "been", "being", "have", "has", "had", "having", "do", "does", "did",
    "will", "would", "shall", "should", "can", "could", "may", "might", "must", "ought", "wo", "ca", "sha", "ai",
    "hast", "hath", "doth", "dost", "wilt", "shalt", "art", "wert",
];

/// Wh-adverbs (interrogative and relative): closed, and WordNet lacks most of them (it reads
/// `how` as a noun).
pub const ADVERBS: &[&str] =
    &["how", "when", "where", "why", "whence", "whither", "wherein", "whereby", "hither", "thither"];

/// Cardinal number words (ordinals are adjectives).
pub const NUMBERS: &[&str] = &[
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty", "thirty", "forty",
    "fifty", "sixty", "seventy", "eighty", "ninety", "hundred", "thousand", "million", "billion", "trillion",
];

/// Interjections and discourse particles, UD's INTJ: no class of ours, so "other".
pub const INTERJECTIONS: &[&str] =
    &["oh", "ah", "alas", "ha", "hey", "hello", "yes", "nay", "yea", "o", "hm", "hmm", "um", "uh", "wow", "ugh", "oops", "eh", "pooh"];

/// The closed class of a lower-case word, if it has one.
pub fn closed_class(w: &str) -> Option<Category> {
    let lists: [(&[&str], Category); 8] = [
        (AUXILIARIES, Category::Verb),
        (PRONOUNS, Category::Pronoun),
        (DETERMINERS, Category::Determiner),
        (CONJUNCTIONS, Category::Conjunction),
        (PREPOSITIONS, Category::Preposition),
        (NUMBERS, Category::Number),
        (ADVERBS, Category::Adverb),
        (INTERJECTIONS, Category::Other),
    ];
    lists.iter().find(|(l, _)| l.contains(&w)).map(|&(_, c)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_word_is_listed_in_two_classes() {
        let all = [AUXILIARIES, PRONOUNS, DETERMINERS, CONJUNCTIONS, PREPOSITIONS, NUMBERS, ADVERBS, INTERJECTIONS];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                for w in a.iter() {
                    assert!(!b.contains(w), "{w} is in two closed classes");
                }
            }
        }
    }
}
