//! The corpus index's store and its use, shared by the CLI (`focus-lens index`, `focus-lens
//! centroids`) and the GUI's Centroids view; no GUI code here. The routing and statistics are
//! `focus_core::index`'s; this module keeps them in a SQLite file (`store`), builds it from a
//! folder with progress, cancel and resume (`build`), writes the per-centroid summaries
//! (`summary`) answers the dashboard's queries (`query`) and times them (`bench`).

pub mod bench;
pub mod build;
pub mod query;
pub mod store;
pub mod summary;

pub use build::{build_index, BuildReport, BuildRequest, Progress};
pub use query::{CentroidDetail, CentroidRow, Index, SearchHit};
