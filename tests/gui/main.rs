//! The desktop app driven headlessly through egui_kittest, on its real state: the real default
//! model (SmolLM2-135M; Gemma 3 270M in `gemma3`) and the embedded sample adapter, a few hundred
//! tokens per analysis. One test binary (the app and egui are linked once), a module per view
//! over one harness:
//! - `harness`: the app in a window of a given size, stepped until its work ends; clicking,
//!   typing, the File window's path field, the shapes a frame painted
//! - `end_to_end`: the whole app once, as a user meets it
//! - `window`: legend, status line and errors, glossary, tabs at small sizes, the preview
//! - `files`: the File window, system dialogs, sessions, hostile files
//! - `inputs`: models, adapters and the settings that persist
//! - `tokens`: the token view and the token x layer strip
//! - `partners`: a token's partners and attention grid
//! - `compare`, `mask`, `categories`, `speed`, `balance`, `head`: those views
//! - `export`: PNG, statistics, the tidy CSV and Arrow IPC
//! - `jobs`: time left, the analyses kept on disk, the heavy views' timings (ignored)
//! - `long_segment`: one 8,192-token segment (the model's context): partners, mask, head view
//! - `generate`, `train`, `intervene`, `centroids`: the Generate and Train views, the Intervene
//!   window, the Centroids view
//! - `gemma3`: the app on Gemma 3 270M
//! - `provenance`: export sets as plain files with a manifest, fingerprints in every export and session
//! - `states`: the states a user gets into, each one the app means (issue 50)
//! - `identity`: one number and colour per group on every surface (issue 50)
//!
//! No test here sets an environment variable or other process-wide state, so they share one
//! process.

#[path = "../common/mod.rs"]
mod common;
mod harness;

mod balance;
mod categories;
mod centroids;
mod compare;
mod end_to_end;
mod export;
mod files;
mod gemma3;
mod generate;
mod head;
mod identity;
mod inputs;
mod intervene;
mod jobs;
mod long_segment;
mod mask;
mod partners;
mod provenance;
mod speed;
mod states;
mod tokens;
mod train;
mod window;
