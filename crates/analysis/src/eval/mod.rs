//! Scoring a model, dense or with Focus: perplexity in llama.cpp's convention (`ppl`), and the
//! zero-degradation suites, TruthfulQA multiple choice and a last-word cloze (`suites`).

pub mod ppl;
pub mod suites;
