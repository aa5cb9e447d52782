//! A corpus index: the routing of many texts, kept per token and layer, and reduced to
//! per-centroid statistics (the centroid dashboards).
//!
//! - `document`: one text through the model once; per token its id, byte range and category,
//!   and per layer its top-k groups with their memberships (`DocRouting`), with the byte form
//!   the store keeps;
//! - `stats`: the corpus statistics accumulated over documents (`CorpusStats`): per centroid its
//!   size, membership histogram, category and token counts, top examples, and the co-membership
//!   counts between layers;
//! - `label`: an automatic label for a centroid from those statistics, with its evidence.
//!
//! The store itself (a SQLite file) lives in the app crate (`focus_lens::index`), so that this
//! library keeps no database dependency.

pub mod document;
pub mod label;
pub mod stats;

pub use document::{route_document, DocRouting, IndexSettings, LayerTopK, RouteOptions};
pub use label::{auto_label, AutoLabel};
pub use stats::{CentroidStats, CorpusStats, Example, HIST_BINS, TOP_EXAMPLES};
