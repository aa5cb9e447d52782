//! What Focus adds to a frozen model: the adapter file format (`adapter`), each layer's router
//! (`router`: scores and memberships), Sinkhorn balancing (`sinkhorn`), and the hard mask rule
//! (`mask`: which pairs are local, share a group, or are pruned; `gate`: how a distant pair's
//! score is gated by its affinity); `identity`, the base model an adapter was made for;
//! `kmeans` and `pca`, the data-driven initialisations of the centroids and of W_g.

pub mod adapter;
pub mod gate;
pub mod identity;
pub mod kmeans;
pub mod mask;
pub mod pca;
pub mod router;
pub mod sinkhorn;
