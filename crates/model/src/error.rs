//! One error type for the library. Every variant names the file or field at fault, so a CLI can
//! print it as one line and a GUI can show it without a backtrace.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The OS message is printed once: it is this error's text, not also its `source`, so a
    /// caller that prints the error chain does not repeat it.
    #[error("cannot read {path}: {err}")]
    Io { path: PathBuf, err: std::io::Error },

    #[error("cannot write {path}: {err}")]
    Write { path: PathBuf, err: std::io::Error },

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

    /// A computation that produced NaN or infinity; the text names the likely cause.
    #[error("{0}")]
    NonFinite(String),

    #[error("cancelled")]
    Cancelled,

    /// A run refused before it starts because its memory estimate exceeds what is available
    /// (`model::memory::check_fits`); the text names both figures.
    #[error("not enough memory: {0}")]
    OutOfMemory(String),

    #[error("tokenizer: {0}")]
    Tokenizer(String),

    #[error(transparent)]
    Candle(#[from] candle_core::Error),

    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn io(path: impl Into<PathBuf>, err: std::io::Error) -> Self {
        Error::Io { path: path.into(), err }
    }
    pub fn write(path: impl Into<PathBuf>, err: std::io::Error) -> Self {
        Error::Write { path: path.into(), err }
    }
    pub fn bad_file(path: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        Error::BadFile { path: path.into(), detail: detail.into() }
    }
}

thread_local! {
    static CONTAINED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f`, turning a panic inside it (a dependency's bug, e.g. the tokenizers crate on a
/// hostile tokenizer.json) into `Error::Unsupported` naming `what`. The panic message is kept
/// for the error instead of being printed: the default hook is silenced on this thread only.
pub fn contain<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !CONTAINED.with(|c| c.get()) {
                prev(info)
            }
        }));
    });
    let was = CONTAINED.with(|c| c.replace(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    CONTAINED.with(|c| c.set(was));
    r.unwrap_or_else(|p| {
        let msg = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_else(|| "unknown panic".into());
        Err(Error::Unsupported(format!("{what} failed inside a dependency: {msg}")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contained_panics_become_errors() {
        let e = contain("encoding", || -> Result<()> { panic!("boom") }).unwrap_err().to_string();
        assert!(e.contains("encoding failed") && e.contains("boom"), "{e}");
        assert_eq!(contain("x", || Ok(3)).unwrap(), 3);
    }
}
