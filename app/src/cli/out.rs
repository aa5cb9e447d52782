//! The one writer of every command's stdout (`out!`, `outln!`). A failed write is a
//! `StdoutError`: `main` ends quietly on a closed pipe (`focus-lens info --json | head -c 10`)
//! and prints one error line for anything else (`> /dev/full`: no space left on device),
//! instead of `println!`'s panic.

use std::io::Write;

/// Writing to stdout failed.
#[derive(Debug)]
pub struct StdoutError(pub std::io::Error);

impl std::fmt::Display for StdoutError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot write to stdout: {}", self.0)
    }
}

impl std::error::Error for StdoutError {}

/// Writes to stdout and flushes, so that a failure surfaces here and not at exit.
pub fn print(args: std::fmt::Arguments) -> anyhow::Result<()> {
    let mut o = std::io::stdout().lock();
    o.write_fmt(args).and_then(|()| o.flush()).map_err(|e| StdoutError(e).into())
}

/// Whether `e` is a write to a stdout whose reader has gone (EPIPE): not an error to report.
pub fn is_closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<StdoutError>().is_some_and(|s| s.0.kind() == std::io::ErrorKind::BrokenPipe))
}

/// `print!` through `cli::out::print`: evaluates to `anyhow::Result<()>`.
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => { $crate::cli::out::print(format_args!($($t)*)) };
}

/// `println!` through `cli::out::print`: evaluates to `anyhow::Result<()>`.
#[macro_export]
macro_rules! outln {
    () => { $crate::cli::out::print(format_args!("\n")) };
    ($($t:tt)*) => { $crate::cli::out::print(format_args!("{}\n", format_args!($($t)*))) };
}
