//! One error type for the library. Every variant names the file or field at fault, so a CLI can
//! print it as one line and a GUI can show it without a backtrace.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },

    /// A model, adapter or tensor file whose bytes do not form a valid file of its kind.
    #[error("{path}: {detail}")]
    BadFile { path: PathBuf, detail: String },

    /// A well-formed file describing something we cannot run (unknown architecture, missing tensor).
    #[error("unsupported model: {0}")]
    Unsupported(String),

    /// An adapter that does not fit the base model; `field` names the first mismatch.
    #[error("adapter does not fit the model: {field}: adapter has {adapter}, model has {model}")]
    AdapterMismatch { field: String, adapter: String, model: String },

    #[error("invalid adapter: {0}")]
    BadAdapter(String),

    /// Text input problems (empty, not UTF-8, binary).
    #[error("{0}")]
    BadText(String),

    #[error("invalid argument: {0}")]
    Invalid(String),

    #[error("cancelled")]
    Cancelled,

    #[error("tokenizer: {0}")]
    Tokenizer(String),

    #[error(transparent)]
    Candle(#[from] candle_core::Error),

    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
    pub fn bad_file(path: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        Error::BadFile { path: path.into(), detail: detail.into() }
    }
}
