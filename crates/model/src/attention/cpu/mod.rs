//! The CPU attention kernels, f32, multi-threaded (rayon) and vectorised with a run-time choice
//! of AVX-512 or AVX2+FMA (multiversion): `dense` (tiled causal flash attention, and the tiles
//! the Focus kernel is built from), `focus` (exact hard top-k Focus attention), `decode` (one
//! new token over a KV cache), `simd` (a vectorisable exp, a dot product, and the fused causal
//! softmax the soft path uses).

pub mod decode;
pub mod dense;
pub mod focus;
pub mod simd;

/// The layout every CPU kernel takes: q is (heads, t, d), k and v are (kv_heads, t, d),
/// row-major; heads is a multiple of kv_heads (GQA).
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub heads: usize,
    pub kv_heads: usize,
    pub t: usize,
    pub d: usize,
}
