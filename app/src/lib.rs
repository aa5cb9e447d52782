//! focus-lens as a library: the command line (`cli`) and the desktop GUI (`gui`), so that the
//! end-to-end tests under `tests/` can drive the GUI's real state.
//!
//! Beside them, what both use: `defaults` (the embedded defaults: sample text and adapter, the
//! evaluation suites' data, the default model's path), `sampling` (generation's prompt and
//! sampling loop), `training` (a training run as `train` and the Train view start it) and `index`
//! (the corpus index's SQLite file). `main.rs` is the binary: `cli::main`.

pub mod cli;
pub mod defaults;
pub mod gui;
pub mod index;
pub mod sampling;
pub mod training;
