//! The eleven categories a token can get (`Category`), below every file that assigns them.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Category {
    Punctuation,
    Determiner,
    Preposition,
    Pronoun,
    /// Conjunctions and discourse connectives (however, therefore).
    Conjunction,
    /// Verbs, auxiliaries and modals included.
    Verb,
    Noun,
    Adjective,
    Adverb,
    Number,
    /// Whitespace, special tokens, interjections.
    #[default]
    Other,
}

impl Category {
    pub const ALL: [Category; 11] = [
        Category::Punctuation,
        Category::Determiner,
        Category::Preposition,
        Category::Pronoun,
        Category::Conjunction,
        Category::Verb,
        Category::Noun,
        Category::Adjective,
        Category::Adverb,
        Category::Number,
        Category::Other,
    ];
    pub const COUNT: usize = 11;

    /// Position in `ALL` (the column order of every per-category table).
    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Category::Punctuation => "punctuation",
            Category::Determiner => "determiner",
            Category::Preposition => "preposition",
            Category::Pronoun => "pronoun",
            Category::Conjunction => "conjunction",
            Category::Verb => "verb",
            Category::Noun => "noun",
            Category::Adjective => "adjective",
            Category::Adverb => "adverb",
            Category::Number => "number",
            Category::Other => "other",
        }
    }

    pub fn from_name(s: &str) -> Option<Category> {
        Category::ALL.into_iter().find(|c| c.name() == s)
    }
}

impl std::fmt::Display for Category {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
