//! What Focus adds to a frozen model: the adapter file format (`adapter`), each layer's router
//! (`router`: scores and memberships), Sinkhorn balancing (`sinkhorn`), and the hard mask rule
//! (`mask`: which pairs are local, share a group, or are pruned).

pub mod adapter;
pub mod mask;
pub mod router;
pub mod sinkhorn;
