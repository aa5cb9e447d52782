//! focus-lens as a library: the command line (`cli`) and the desktop GUI (`gui`), so that the
//! end-to-end tests under `tests/` can drive the GUI's real state.

pub mod cli;
pub mod defaults;
pub mod gui;
pub mod index;
pub mod sampling;
pub mod training;
