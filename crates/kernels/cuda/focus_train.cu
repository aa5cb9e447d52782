// Training kernels (compiled to PTX by crates/kernels/build.rs under the `cuda` feature, module
// `focus_train`): the soft-gated causal attention of the training step, forward and backward,
// with RoPE applied on the way in; fused Sinkhorn forward and backward; and the small fused ops
// of the step (RMSNorm, SwiGLU, cross-entropy). The host side is crates/train/src/train/attention.rs,
// crates/train/src/train/sinkhorn.rs and crates/train/src/train/ops.rs; each op there has a plain
// CPU implementation of the same function that the tests compare these kernels with.
//
// Attention layout, head dim D in {64, 128, 256}. qkv (B*T, (H + 2*HKV) * D): per token the H
// query heads, then the HKV key heads, then the HKV value heads (the concatenated Q/K/V
// projection). rope_split rotates q and k and writes q (B, H, T, D), k and v (B, HKV, T, D) in
// bf16; the output is (B*T, H*D). memberships g (B, T, K) f32, K <= KM (8 or 16). Query head h
// reads kv head h / (H / HKV).
//
// The score of a causal pair (i, j), j <= i, i - j < span, in natural-log units:
//   s_ij = u_ij + (distant ? log(a_ij + eps) : 0)      log gate   (GATE_LOG)
//   s_ij = u_ij * (distant ? sigmoid(lambda a_ij) : 1) paper gate (GATE_PAPER)
//   s_ij = u_ij                                        no gate    (GATE_NONE, dense)
//   s_ij = u_ij if (distant ? m_i & m_j : 1) else -inf  straight-through (GATE_HARD)
// with u_ij = q_i . k_j / sqrt(D), a_ij = g_i . g_j and distant = i - j > window and j >= sink
// (the first `sink` tokens are attention sinks [ours], ungated like local pairs). The `_cap`
// kernels soft-cap u first (Gemma 2: u <- c tanh(u / c), before gate and mask, as the composed
// path does): a template parameter, so that the others compile exactly as without it, and built
// as a module of their own (focus_train_cap.cu, this file with FOCUS_TRAIN_CAP defined: only
// those entry points), so that only a soft-capped model pays for JIT-compiling them. `span` is the
// model's own sliding window (Gemma 2/3's local layers; INT_MAX on global layers): pairs with
// i - j >= span do not exist, sinks included, as in the composed path. GATE_HARD trains through
// the hard top-k mask (attention::soft::straight_through_plan): m_i is token i's top-k groups as
// a bit mask (`topk_bits`, from the f32 memberships, as inference chooses them), a distant pair is
// kept where the two meet, ungated, and the backward is the log gate's (dA = dS / (a + eps) on
// kept pairs); its kernels are a module of their own too (focus_train_hard.cu: the `_hard` entry
// points), JIT-compiled only for a straight-through run. The gate is computed
// inside each tile from g: no T x T tensor exists. The kernels work in log2 units
// (s2 = s * log2 e) as flash-attention 2 does.
//
// The gate's work per pair, which every head repeats, is kept off the SIMT pipes (at Llama 3
// 8B's shape it had been as much as the pair's two tensor-core products, and the three kernels
// took 10.5 ms a layer; now 5.3): the affinities a_ij of a tile are an mma of the memberships
// (`affinity`, bf16 split hi + lo, ~16 bits), the backward's dg += dA g likewise (`dg_mma`);
// the log gate multiplies the probability by a + eps instead of adding log(a + eps) to the
// score (the running max is the ungated scores'), so no pair takes a logarithm, nor in the
// backward a division (dA = exp2(x - lse) dP'); and a warp decides per tile whether all its
// pairs are gated, all ungated, or mixed (`tile_class`), so that only mixed tiles test
// positions pair by pair.
//
// Backward (flash-attention 2 with two kernels, no atomics): with P = softmax(s), dP = dO V^T,
// D_i = dO_i . O_i and dS = P (dP - D):
//   attn_bwd_dq    (one block per query tile): dQ = dU K / sqrt(D), and dg_i += sum_j dA_ij g_j;
//   attn_bwd_dkdv  (one block per key tile):   dK = dU^T Q / sqrt(D), dV = P^T dO, and
//                                              dg_j += sum_i dA_ij g_i;
// where dU = dS (log gate) or dS * f (paper gate, f the gate factor), dA = dS / (a + eps) (log)
// or dS * u * lambda f (1 - f) (paper) on distant pairs, 0 on local ones; soft-capped, u is the
// capped score and dU is multiplied by 1 - tanh^2(u_raw / c), tanh recomputed from the raw score
// (lse is the capped scores'). Each kernel writes
// per-head partials; attn_bwd_finish sums dK, dV over the query heads of each kv head, undoes
// RoPE and writes d(qkv); attn_dg_reduce sums dg over heads and the two kernels.
//
// Tiles: 64 queries (or keys) per block, 4 warps of 16 rows, mma.sync m16n8k16 bf16 with f32
// accumulators, the streamed tiles (BN rows) double-buffered in dynamic shared memory with
// cp.async (the fragment helpers of focus_common.cuh, shared with focus_attention.cu). Per head
// dim (`Cfg`), so that registers hold at d = 256 what they hold at d = 64:
//   D = 64:  BN 64; the 16-row A operands (q, dO; k, v) in registers; dK and dV in one block.
//            smem 45 KB (as before the other head dims existed).
//   D = 128: BN 32; A operands read from smem with ldmatrix; dK and dV by two blocks of each
//            key tile (part 0: dV, part 1: dK and dg; the first recomputes S, 1.25x the
//            work, as both accumulators would need 2 x D/2 registers). smem 55-72 KB.
//   D = 256: as 128; smem 103-137 KB (the output accumulator alone is D/2 = 128 registers).

#include "focus_common.cuh"  // cp.async, mma, ldmatrix, ex2, pack_bf16, quad reductions

#define BT 64  // rows (queries or keys) per block
#define GATE_NONE 0
#define GATE_LOG 1
#define GATE_PAPER 2
#define GATE_HARD 3

// The attention-only modules (focus_train_cap.cu, focus_train_hard.cu) hold their entry points
// and nothing else.
#if defined(FOCUS_TRAIN_CAP) || defined(FOCUS_TRAIN_HARD)
#define FOCUS_TRAIN_ATTN_ONLY
#endif

typedef __nv_bfloat16 bf16;

template <int HD>
struct Cfg;
template <>
struct Cfg<64> {
    static constexpr int BN = 64, PARTS = 1;
    static constexpr bool AREG = true;
};
template <>
struct Cfg<128> {
    static constexpr int BN = 32, PARTS = 2;
    static constexpr bool AREG = false;
};
template <>
struct Cfg<256> {
    static constexpr int BN = 32, PARTS = 2;
    static constexpr bool AREG = false;
};

// Padded smem row (bf16): rows (D + 8) * 2 bytes apart, so ldmatrix's 8 rows hit distinct banks.
template <int HD>
__host__ __device__ constexpr int lds() { return HD + 8; }

extern __shared__ __align__(16) unsigned char dyn_smem[];

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(bf16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ bf16 from_f<bf16>(float x) { return __float2bfloat16(x); }

// The A operand (16 rows x D, bf16) of a warp: its m16n8k16 fragments for k-steps ks = 0..D/16-1.
// In registers (loaded once from global memory, zero past `rows`): D = 64.
template <int HD, bool REG>
struct AOp;
template <int HD>
struct AOp<HD, true> {
    uint32_t f[HD / 16][4];
    // Rows row0 + g and row0 + g + 8 of the row-major (rows, D) matrix at `base`; `smem` unused.
    __device__ __forceinline__ void init(const bf16* base, const bf16*, int row0, int rows, int lane) {
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int r = row0 + g + half * 8;
            const bool ok = r < rows;
            const uint32_t* src = reinterpret_cast<const uint32_t*>(base + (size_t)(ok ? r : 0) * HD);
#pragma unroll
            for (int ks = 0; ks < HD / 16; ++ks) {
                f[ks][half] = ok ? src[(ks * 16 + 2 * t) / 2] : 0u;
                f[ks][2 + half] = ok ? src[(ks * 16 + 8 + 2 * t) / 2] : 0u;
            }
        }
    }
    __device__ __forceinline__ void get(int ks, uint32_t (&a)[4]) const {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[e] = f[ks][e];
    }
};
// In shared memory (the warp's 16 rows of a tile the block loaded, zero past `rows`), read with
// ldmatrix at each use: D = 128, 256, where registers cannot hold it beside the accumulators.
template <int HD>
struct AOp<HD, false> {
    const bf16* s;
    // `smem`: the warp's first row.
    __device__ __forceinline__ void init(const bf16*, const bf16* smem, int, int, int lane) {
        s = smem + (lane & 15) * lds<HD>() + (lane >> 4) * 8;
    }
    __device__ __forceinline__ void get(int ks, uint32_t (&a)[4]) const { ldmatrix_x4(a, s + ks * 16); }
};

// C (16 x BN, BN/8 n8 tiles) += A (16 x D) B^T where B's BN rows are in smem (row-major, padded):
// the S = Q K^T pattern (B rows are the n index).
template <int HD, int BN, typename A>
__device__ __forceinline__ void mma_abt(float (&c)[BN / 8][4], const A& a, const bf16* bs, int lane) {
#pragma unroll
    for (int kp = 0; kp < HD / 32; ++kp) {
        uint32_t a0[4], a1[4];
        a.get(2 * kp, a0);
        a.get(2 * kp + 1, a1);
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) {
            uint32_t b[4];
            ldmatrix_x4(b, bs + (nt * 8 + (lane & 7)) * lds<HD>() + kp * 32 + (lane >> 3) * 8);
            mma_bf16(c[nt], a0, b[0], b[1]);
            mma_bf16(c[nt], a1, b[2], b[3]);
        }
    }
}

// C (16 x D) += P (16 x BN, f32 accumulators in C layout, rounded to bf16) B where B's BN rows
// (the k index) are in smem: the O += P V pattern.
template <int HD, int BN>
__device__ __forceinline__ void mma_pb(float (&c)[HD / 8][4], const float (&p)[BN / 8][4], const bf16* bs, int lane) {
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
        uint32_t pa[4];
        pa[0] = pack_bf16(p[2 * kk][0], p[2 * kk][1]);
        pa[1] = pack_bf16(p[2 * kk][2], p[2 * kk][3]);
        pa[2] = pack_bf16(p[2 * kk + 1][0], p[2 * kk + 1][1]);
        pa[3] = pack_bf16(p[2 * kk + 1][2], p[2 * kk + 1][3]);
#pragma unroll
        for (int dp = 0; dp < HD / 16; ++dp) {
            uint32_t b[4];
            const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            const int col = (2 * dp + (lane >> 4)) * 8;
            ldmatrix_x4_trans(b, bs + key * lds<HD>() + col);
            mma_bf16(c[2 * dp], pa, b[0], b[1]);
            mma_bf16(c[2 * dp + 1], pa, b[2], b[3]);
        }
    }
}

template <int N>
__device__ __forceinline__ void zero(float (&c)[N][4]) {
#pragma unroll
    for (int nt = 0; nt < N; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) c[nt][e] = 0.f;
}

// Loads rows [r0, r0 + ROWS) of a row-major (rows, D) bf16 matrix into smem (zero past `rows`).
template <int HD, int ROWS>
__device__ __forceinline__ void tile_async(bf16* dst, const bf16* src, int r0, int rows, int tid) {
    constexpr int CH = HD / 8;  // 16-byte chunks per row
#pragma unroll
    for (int it = 0; it < ROWS * CH / 128; ++it) {
        const int row = tid / CH + it * (128 / CH), ch = tid % CH;
        const bool ok = r0 + row < rows;
        cp_async16(dst + row * lds<HD>() + ch * 8, src + (size_t)(ok ? r0 + row : 0) * HD + ch * 8, ok);
    }
}

// Memberships of rows [r0, r0 + ROWS) into smem, KM per row (zero past `rows` and past K), as
// two bf16 arrays of ROWS * KM: hi = rn(x), then lo = rn(x - hi). Products of memberships on the
// bf16 tensor cores as hi*hi + lo*hi + hi*lo keep about 16 bits (lo*lo, 2^-16 relative, dropped).
template <int KM, int ROWS>
__device__ __forceinline__ void g_tile(bf16* dst, const float* g, int r0, int rows, int K, int tid) {
    for (int n = tid; n < ROWS * KM; n += 128) {
        const int r = n / KM, k = n % KM;
        const float x = (r0 + r < rows && k < K) ? g[(size_t)(r0 + r) * K + k] : 0.f;
        const bf16 hi = __float2bfloat16_rn(x);
        dst[n] = hi;
        dst[ROWS * KM + n] = __float2bfloat16_rn(x - __bfloat162float(hi));
    }
}

// x0, x1 split as g_tile splits: their hi halves in one register, their lo halves in another.
__device__ __forceinline__ void split2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
    hi = *reinterpret_cast<const uint32_t*>(&h);
    lo = pack_bf16(x0 - __low2float(h), x1 - __high2float(h));
}

// The memberships of this thread's two rows (rp: rows g and g + 8 of the warp's 16) as the A
// operand of `affinity`: per 8 memberships (ks), k = [hi of the 8 | lo of the 8].
template <int KM>
__device__ __forceinline__ void g_rows(uint32_t (&ga)[KM / 8][4], const float* gb, const int (&rp)[2], int T, int K,
                                       int t) {
#pragma unroll
    for (int ks = 0; ks < KM / 8; ++ks)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int r = rp[half], c = ks * 8 + 2 * t;
            const float x0 = (r < T && c < K) ? gb[(size_t)r * K + c] : 0.f;
            const float x1 = (r < T && c + 1 < K) ? gb[(size_t)r * K + c + 1] : 0.f;
            split2(x0, x1, ga[ks][half], ga[ks][2 + half]);
        }
}

// The affinities a_ij = g_i . g_j of a tile (16 rows x BN columns, the C layout of the scores) on
// the tensor cores: per n8 tile and 8 memberships, [hi|lo]_rows [hi;hi]_cols + [hi|lo]_rows
// [lo;0]_cols. `gcol`: the columns' g_tile (hi, then lo).
template <int KM, int BN>
__device__ __forceinline__ void affinity(float (&a)[BN / 8][4], const uint32_t (&ga)[KM / 8][4], const bf16* gcol,
                                         int lane) {
    const int g = lane >> 2, t = lane & 3;
    const uint32_t* hi = reinterpret_cast<const uint32_t*>(gcol);
    const uint32_t* lo = reinterpret_cast<const uint32_t*>(gcol + BN * KM);
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
#pragma unroll
        for (int e = 0; e < 4; ++e) a[nt][e] = 0.f;
#pragma unroll
        for (int ks = 0; ks < KM / 8; ++ks) {
            const int w = ((nt * 8 + g) * KM + ks * 8 + 2 * t) / 2;
            mma_bf16(a[nt], ga[ks], hi[w], hi[w]);
            mma_bf16(a[nt], ga[ks], lo[w], 0u);
        }
    }
}

// dG (the warp's 16 rows x KM, C layout: row g, columns n2*8 + 2t, +1; row g + 8 likewise) +=
// dA (16 x BN, the scores' C layout) G (the tile's BN rows of memberships, `gcol` as g_tile
// wrote it), on the tensor cores with dA and G split hi/lo (hi*hi + lo*hi + hi*lo).
template <int KM, int BN>
__device__ __forceinline__ void dg_mma(float (&dg)[KM / 8][4], const float (&da)[BN / 8][4], const bf16* gcol,
                                       int lane) {
    const int g = lane >> 2, t = lane & 3;
    const unsigned short* hi = reinterpret_cast<const unsigned short*>(gcol);
    const unsigned short* lo = hi + BN * KM;
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
        uint32_t ah[4], al[4];
        split2(da[2 * kk][0], da[2 * kk][1], ah[0], al[0]);
        split2(da[2 * kk][2], da[2 * kk][3], ah[1], al[1]);
        split2(da[2 * kk + 1][0], da[2 * kk + 1][1], ah[2], al[2]);
        split2(da[2 * kk + 1][2], da[2 * kk + 1][3], ah[3], al[3]);
        const int r = kk * 16 + 2 * t;
#pragma unroll
        for (int n2 = 0; n2 < KM / 8; ++n2) {
            const int c = n2 * 8 + g;
            const uint32_t bh0 = hi[r * KM + c] | ((uint32_t)hi[(r + 1) * KM + c] << 16);
            const uint32_t bh1 = hi[(r + 8) * KM + c] | ((uint32_t)hi[(r + 9) * KM + c] << 16);
            const uint32_t bl0 = lo[r * KM + c] | ((uint32_t)lo[(r + 1) * KM + c] << 16);
            const uint32_t bl1 = lo[(r + 8) * KM + c] | ((uint32_t)lo[(r + 9) * KM + c] << 16);
            mma_bf16(dg[n2], ah, bh0, bh1);
            mma_bf16(dg[n2], al, bh0, bh1);
            mma_bf16(dg[n2], ah, bl0, bl1);
        }
    }
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.f / (1.f + __expf(-x)); }

// Whether the causal pair (query qp, key kp) is gated: distant (qp - kp > window) and not an
// attention sink (kp >= sink) [ours]; local and sink pairs are never gated.
__device__ __forceinline__ bool gated_pair(int qp, int kp, int window, int sink) {
    return qp - kp > window && kp >= sink;
}

// tanh (MUFU, max relative error 2^-11: below the bf16 rounding of q and k).
__device__ __forceinline__ float tanh_fast(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// What a warp's tile (its 16 rows from r0, columns c0..c0 + BN - 1) needs, decided once a tile:
// at 2,048 tokens and a window of 128 most tiles are wholly distant, and they skip the per-pair
// position tests (about as many instructions as the rest of a pair's work).
#define TILE_GENERAL 0  // pairs of several kinds, or masked ones: tested pair by pair
#define TILE_GATED 1    // every pair causal, inside the model's span, columns < T, and gated
#define TILE_LOCAL 2    // every pair causal, inside the span, columns < T, and ungated (local or sink)
template <bool ROWS_ARE_QUERIES, int BN>
__device__ __forceinline__ int tile_class(int r0, int c0, int T, int window, int sink, int span) {
    const int rl = r0 + 15, cl = c0 + BN - 1;
    const int qmin = ROWS_ARE_QUERIES ? r0 : c0, qmax = ROWS_ARE_QUERIES ? rl : cl;
    const int kmin = ROWS_ARE_QUERIES ? c0 : r0, kmax = ROWS_ARE_QUERIES ? cl : rl;
    if (cl >= T || kmax > qmin || qmax - kmin >= span) return TILE_GENERAL;
    if (qmin - kmax > window && kmin >= sink) return TILE_GATED;
    if (qmax - kmin <= window || kmax < sink) return TILE_LOCAL;
    return TILE_GENERAL;
}

// Scores of one tile after soft-cap, gate and mask, in log2 units, for this thread's two rows at
// positions rp[0..1] and columns c0 + nt*8 + 2t + (e&1). `ROWS_ARE_QUERIES`: the rows are the
// queries (forward, dq) or the keys (dkdv, whose tile is S^T). Masked: future pairs, pairs outside
// the sliding window (qp - kp >= span) and columns >= T. `CAP`: u <- cap tanh(u / cap) first
// (cap_log2 = cap * log2 e), tanh(u / cap) left in `th` for the backward.
// `a` holds the tile's affinities (`affinity`; not read on a TILE_LOCAL tile). The log gate is
// applied as a factor of the probability, exp2(x) (a + eps) = exp2(x + log2(a + eps)): `a` is
// left holding that factor (1 on ungated pairs) and `s` the ungated score, so that no pair takes
// a logarithm, nor in the backward a division (dA = dS / (a + eps) = exp2(x - lse) dP'). The paper
// gate multiplies the score by sigmoid(lambda a) here and leaves `a` as it was. GATE_HARD masks
// the gated pairs whose rows' and columns' top-k bits (mr; tkb, the sequence's) do not meet, and
// leaves `a` holding 1 / (a + eps) on the pairs it keeps, 0 on those it prunes (pair_bwd's dA).
template <int GATE, bool CAP, bool ROWS_ARE_QUERIES, int BN>
__device__ __forceinline__ void gate_tile(float (&s)[BN / 8][4], float (&a)[BN / 8][4], int cls, const int (&rp)[2],
                                          int c0, int T, int window, int sink, int span, float scale_log2,
                                          float gparam, float cap_log2, float (&th)[BN / 8][4], int t,
                                          const unsigned (&mr)[2], const unsigned short* __restrict__ tkb) {
    const float inv_cap = CAP ? 1.f / cap_log2 : 0.f;
    auto score = [&](int nt, int e) {
        float x = s[nt][e] * scale_log2;
        if constexpr (CAP) {
            th[nt][e] = tanh_fast(x * inv_cap);
            x = cap_log2 * th[nt][e];
        }
        return x;
    };
    auto gate = [&](int nt, int e, float x) {
        if (GATE == GATE_LOG) a[nt][e] += gparam;
        else if (GATE == GATE_PAPER) x *= sigmoidf_(gparam * a[nt][e]);
        else if (GATE == GATE_HARD) {  // the column is < T here (a gated pair)
            const bool keep = (mr[e >> 1] & tkb[c0 + nt * 8 + 2 * t + (e & 1)]) != 0;
            a[nt][e] = keep ? 1.f / (a[nt][e] + gparam) : 0.f;
            if (!keep) x = -INFINITY;
        }
        return x;
    };
    if (GATE != GATE_NONE && cls == TILE_GATED) {
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) s[nt][e] = gate(nt, e, score(nt, e));
    } else if (cls != TILE_GENERAL) {
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                s[nt][e] = score(nt, e);
                if (GATE == GATE_LOG) a[nt][e] = 1.f;
            }
    } else {
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int half = e >> 1, cp = c0 + nt * 8 + 2 * t + (e & 1);
                const int qp = ROWS_ARE_QUERIES ? rp[half] : cp;
                const int kp = ROWS_ARE_QUERIES ? cp : rp[half];
                float x = score(nt, e);
                const bool gated = GATE != GATE_NONE && gated_pair(qp, kp, window, sink);
                if (kp > qp || cp >= T || qp - kp >= span) x = -INFINITY;
                else if (gated) x = gate(nt, e, x);
                if (GATE == GATE_LOG && !gated) a[nt][e] = 1.f;
                s[nt][e] = x;
            }
    }
}

// The backward of one pair. x2 = s - lse (log2 units; s the score gate_tile left), dpd = dP - D,
// `a` what gate_tile left (the log gate's factor, the paper gate's affinity), `raw` u (paper) or
// tanh(u / cap) (soft-capped). Returns dU, the gradient of u = q.k / sqrt(D); `a` becomes dA, the
// gradient of the affinity, on gated pairs and 0 elsewhere (dg_mma's operand).
template <int GATE, bool CAP>
__device__ __forceinline__ float pair_bwd(float x2, float dpd, float& a, bool gated, float raw, float softcap,
                                          float gparam) {
    const float ex = ex2(x2);
    float du = ex * dpd;  // dS = P (dP - D)
    if (GATE == GATE_LOG) {
        du *= a;                     // P = exp2(x - lse) (a + eps)
        a = gated ? ex * dpd : 0.f;  // dA = dS / (a + eps)
    } else if (GATE == GATE_PAPER) {
        float da = 0.f;
        if (gated) {
            const float f = sigmoidf_(gparam * a);
            da = du * (CAP ? softcap * raw : raw) * gparam * f * (1.f - f);
            du *= f;
        }
        a = da;
    } else if (GATE == GATE_HARD) {
        a = gated ? du * a : 0.f;  // dA = dS / (a + eps) on kept pairs (a: 1 / (a + eps) or 0)
    }
    if constexpr (CAP) du *= 1.f - raw * raw;
    return du;
}

// Writes one of this thread's rows of dg (half: row g or g + 8) from dg_mma's accumulators.
template <int KM>
__device__ __forceinline__ void dg_store(float* row, const float (&dga)[KM / 8][4], int half, int K, int t) {
#pragma unroll
    for (int n2 = 0; n2 < KM / 8; ++n2) {
        const int c = n2 * 8 + 2 * t;
        if (c < K) row[c] = dga[n2][2 * half];
        if (c + 1 < K) row[c + 1] = dga[n2][2 * half + 1];
    }
}

// ---------------------------------------------------------------------------------------------
// RoPE + layout: qkv (B*T, NH*D), NH = H + 2*HKV -> q (B,H,T,D), k, v (B,HKV,T,D) bf16.
// cos/sin (T, D/2) or null (no rotation). One thread per (token, head, rotation pair).

template <typename TI>
__device__ void rope_split(const TI* __restrict__ qkv, const float* __restrict__ cs, const float* __restrict__ sn,
                           bf16* __restrict__ qr, bf16* __restrict__ kr, bf16* __restrict__ vr, int B, int T, int H,
                           int HKV, int HD, int interleaved) {
    const int NH = H + 2 * HKV, P = HD / 2;
    const long n = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= (long)B * T * NH * P) return;
    const int p = (int)(n % P);
    const int hh = (int)((n / P) % NH);
    const long row = n / ((long)P * NH);
    const int b = (int)(row / T), tt = (int)(row % T);
    const int d0 = interleaved ? 2 * p : p, d1 = interleaved ? 2 * p + 1 : p + P;
    const TI* src = qkv + (size_t)row * NH * HD + (size_t)hh * HD;
    float x0 = to_f(src[d0]), x1 = to_f(src[d1]);
    if (cs != nullptr && hh < H + HKV) {
        const float c = cs[(size_t)tt * P + p], s = sn[(size_t)tt * P + p];
        const float y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
        x0 = y0;
        x1 = y1;
    }
    bf16* dst;
    if (hh < H) dst = qr + (((size_t)b * H + hh) * T + tt) * HD;
    else if (hh < H + HKV) dst = kr + (((size_t)b * HKV + (hh - H)) * T + tt) * HD;
    else dst = vr + (((size_t)b * HKV + (hh - H - HKV)) * T + tt) * HD;
    dst[d0] = __float2bfloat16(x0);
    dst[d1] = __float2bfloat16(x1);
}

#ifndef FOCUS_TRAIN_ATTN_ONLY
extern "C" __global__ void rope_split_f32(const float* qkv, const float* cs, const float* sn, bf16* qr, bf16* kr,
                                          bf16* vr, int B, int T, int H, int HKV, int HD, int interleaved) {
    rope_split<float>(qkv, cs, sn, qr, kr, vr, B, T, H, HKV, HD, interleaved);
}
extern "C" __global__ void rope_split_bf16(const bf16* qkv, const float* cs, const float* sn, bf16* qr, bf16* kr,
                                           bf16* vr, int B, int T, int H, int HKV, int HD, int interleaved) {
    rope_split<bf16>(qkv, cs, sn, qr, kr, vr, B, T, H, HKV, HD, interleaved);
}
#endif

// Dynamic shared memory of the attention kernels in bytes; attention.rs's `smem_bytes` computes
// the same numbers (kernel 0: forward, 1: dq, 2: dkdv).
template <int HD, int KM, int KERNEL>
__host__ __device__ constexpr int smem_bytes() {
    constexpr int BN = Cfg<HD>::BN, L = lds<HD>();
    constexpr int a_tiles = Cfg<HD>::AREG ? 0 : (KERNEL == 0 ? 1 : 2);
    return (a_tiles * BT * L + 4 * BN * L) * 2 + 2 * BN * KM * 4 + (KERNEL == 2 ? 4 * BN * 4 : 0);
}
// d = 64 needs no opt-in (at most 48 KB, as before); the largest fits an H100/H200 block (227 KB).
static_assert(smem_bytes<64, 16, 2>() <= 48 * 1024, "d = 64 keeps within the default 48 KB");
static_assert(smem_bytes<256, 16, 2>() <= 227 * 1024, "d = 256 fits a block's shared memory");

// ---------------------------------------------------------------------------------------------
// Forward: grid (ceil(T/64), H, B), 128 threads. Writes out (B*T, H*D) and lse (B, H, T) in
// log2 units.

template <int HD, int KM, int GATE, bool CAP, typename TO>
__device__ void attn_fwd(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                         const float* __restrict__ gm, const unsigned short* __restrict__ tk, TO* __restrict__ out, float* __restrict__ lse, int T, int H,
                         int HKV, int K, int window, int sink, int span, float scale_log2, float gparam,
                         float softcap) {
    constexpr int BN = Cfg<HD>::BN, L = lds<HD>();
    constexpr bool AREG = Cfg<HD>::AREG;
    bf16* Qs = reinterpret_cast<bf16*>(dyn_smem);   // BT rows (smem A operands only)
    bf16* Ks = Qs + (AREG ? 0 : BT * L);             // 2 x BN rows
    bf16* Vs = Ks + 2 * BN * L;                      // 2 x BN rows
    float* Gs = reinterpret_cast<float*>(Vs + 2 * BN * L);  // 2 x BN * KM (bf16 hi, lo)

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int b = blockIdx.z, h = blockIdx.y, kh = h / (H / HKV);
    const int tile = gridDim.x - 1 - blockIdx.x;  // longest rows first
    const int row0 = tile * BT, wrow = row0 + warp * 16;
    const bf16* qb = q + ((size_t)b * H + h) * T * HD;
    const bf16* kb = k + ((size_t)b * HKV + kh) * T * HD;
    const bf16* vb = v + ((size_t)b * HKV + kh) * T * HD;
    const float* gb = gm + (size_t)b * T * K;
    const float cap_log2 = softcap * 1.4426950408889634f;

    if (!AREG) tile_async<HD, BT>(Qs, qb, row0, T, tid);  // joins the first tile's group
    AOp<HD, AREG> qa;
    qa.init(qb, Qs + warp * 16 * L, wrow, T, lane);
    const int rp[2] = {wrow + g, wrow + g + 8};
    uint32_t ga[KM / 8][4];
    if (GATE != GATE_NONE) g_rows<KM>(ga, gb, rp, T, K, t);
    // GATE_HARD: the top-k bits of the sequence's tokens, and of this thread's two rows.
    const unsigned short* tkb = GATE == GATE_HARD ? tk + (size_t)b * T : nullptr;
    unsigned mr[2] = {0u, 0u};
    if (GATE == GATE_HARD) {
        mr[0] = rp[0] < T ? tkb[rp[0]] : 0u;
        mr[1] = rp[1] < T ? tkb[rp[1]] : 0u;
    }

    float o[HD / 8][4];
    zero(o);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
    // Key tiles from the first key of the block's first row's window to the diagonal.
    const int first = max(0, row0 - span + 1) / BN;
    const int last = (row0 + BT) / BN;  // exclusive
    auto load = [&](int buf, int j0) {
        tile_async<HD, BN>(Ks + buf * BN * L, kb, j0, T, tid);
        tile_async<HD, BN>(Vs + buf * BN * L, vb, j0, T, tid);
        cp_async_commit();
        if (GATE != GATE_NONE) g_tile<KM, BN>(reinterpret_cast<bf16*>(Gs + buf * BN * KM), gb, j0, T, K, tid);
    };
    load(0, first * BN);
    for (int it = first; it < last; ++it) {
        const int buf = (it - first) & 1, j0 = it * BN;
        if (it + 1 < last) {
            load(buf ^ 1, j0 + BN);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        float sc[BN / 8][4], th[BN / 8][4], af[BN / 8][4];  // th: unused here
        zero(sc);
        mma_abt<HD, BN>(sc, qa, Ks + buf * BN * L, lane);
        const int cls = tile_class<true, BN>(wrow, j0, T, window, sink, span);
        if (GATE == GATE_HARD) zero(af);  // the forward keeps or prunes: no affinity needed
        else if (GATE != GATE_NONE && cls != TILE_LOCAL)
            affinity<KM, BN>(af, ga, reinterpret_cast<const bf16*>(Gs + buf * BN * KM), lane);
        gate_tile<GATE, CAP, true, BN>(sc, af, cls, rp, j0, T, window, sink, span, scale_log2, gparam, cap_log2, th,
                                       t, mr, tkb);
        float alpha[2];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            float mx = -INFINITY;
#pragma unroll
            for (int nt = 0; nt < BN / 8; ++nt) mx = fmaxf(mx, fmaxf(sc[nt][half * 2], sc[nt][half * 2 + 1]));
            const float mnew = fmaxf(m[half], quad_max(mx));
            const float base = mnew == -INFINITY ? 0.f : mnew;
            alpha[half] = ex2(m[half] - base);
            m[half] = mnew;
            float sum = 0.f;
#pragma unroll
            for (int nt = 0; nt < BN / 8; ++nt) {
                sc[nt][half * 2] = ex2(sc[nt][half * 2] - base);
                sc[nt][half * 2 + 1] = ex2(sc[nt][half * 2 + 1] - base);
                if (GATE == GATE_LOG) {  // the gate's factor (the max above is of the ungated scores)
                    sc[nt][half * 2] *= af[nt][half * 2];
                    sc[nt][half * 2 + 1] *= af[nt][half * 2 + 1];
                }
                sum += sc[nt][half * 2] + sc[nt][half * 2 + 1];
            }
            l[half] = fmaf(l[half], alpha[half], sum);
        }
#pragma unroll
        for (int dn = 0; dn < HD / 8; ++dn)
#pragma unroll
            for (int e = 0; e < 4; ++e) o[dn][e] *= alpha[e >> 1];
        mma_pb<HD, BN>(o, sc, Vs + buf * BN * L, lane);
        __syncthreads();  // the next iteration's prefetch overwrites this buffer
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const float lt = quad_sum(l[half]);
        const int r = rp[half];
        if (r >= T) continue;
        const float inv = 1.f / lt;
        TO* dst = out + ((size_t)b * T + r) * H * HD + (size_t)h * HD;
#pragma unroll
        for (int dn = 0; dn < HD / 8; ++dn) {
            dst[dn * 8 + 2 * t] = from_f<TO>(o[dn][half * 2] * inv);
            dst[dn * 8 + 2 * t + 1] = from_f<TO>(o[dn][half * 2 + 1] * inv);
        }
        if (t == 0) lse[((size_t)b * H + h) * T + r] = m[half] + __log2f(lt);
    }
}

// ---------------------------------------------------------------------------------------------
// Backward, step 0: dO (B*T, H*D) -> dOt (B, H, T, D) bf16 and D = rowsum(dO * O) (B, H, T).
// One warp per (token, head), lanes along D: a thread a row read rows HD apart across its
// warp (2.9 ms a layer at Llama 3 8B's shape, 4 x 2,048 tokens, on an H100).

template <typename TG, typename TO>
__device__ void attn_bwd_prep(const TG* __restrict__ dout, const TO* __restrict__ out, bf16* __restrict__ dot,
                              float* __restrict__ dd, int B, int T, int H, int HD) {
    const long n = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (n >= (long)B * T * H) return;  // whole warps: n is the warp's
    const int h = (int)(n % H);
    const long row = n / H;
    const int b = (int)(row / T), tt = (int)(row % T);
    const TG* a = dout + (size_t)row * H * HD + (size_t)h * HD;
    const TO* o = out + (size_t)row * H * HD + (size_t)h * HD;
    bf16* dst = dot + (((size_t)b * H + h) * T + tt) * HD;
    float s = 0.f;
    for (int d = lane; d < HD; d += 32) {
        const float x = to_f(a[d]);
        s = fmaf(x, to_f(o[d]), s);
        dst[d] = __float2bfloat16(x);
    }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffff, s, off);
    if (lane == 0) dd[((size_t)b * H + h) * T + tt] = s;
}

// ---------------------------------------------------------------------------------------------
// Backward, dQ and the query side of dg: grid (ceil(T/64), H, B), 128 threads.

template <int HD, int KM, int GATE, bool CAP>
__device__ void attn_bwd_dq(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                            const float* __restrict__ gm, const unsigned short* __restrict__ tk,
                            const bf16* __restrict__ dot, const float* __restrict__ lse,
                            const float* __restrict__ dd, float* __restrict__ dq, float* __restrict__ dg, int T,
                            int H, int HKV, int K, int window, int sink, int span, float scale_log2, float gparam,
                            float softcap) {
    constexpr int BN = Cfg<HD>::BN, L = lds<HD>();
    constexpr bool AREG = Cfg<HD>::AREG;
    bf16* Qs = reinterpret_cast<bf16*>(dyn_smem);  // BT rows of q, then BT of dO (smem A only)
    bf16* Dos = Qs + (AREG ? 0 : BT * L);
    bf16* Ks = Dos + (AREG ? 0 : BT * L);           // 2 x BN rows
    bf16* Vs = Ks + 2 * BN * L;
    float* Gs = reinterpret_cast<float*>(Vs + 2 * BN * L);

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int b = blockIdx.z, h = blockIdx.y, kh = h / (H / HKV);
    const int tile = gridDim.x - 1 - blockIdx.x;
    const int row0 = tile * BT, wrow = row0 + warp * 16;
    const size_t bh = (size_t)b * H + h;
    const bf16* qb = q + bh * T * HD;
    const bf16* ob = dot + bh * T * HD;
    const bf16* kb = k + ((size_t)b * HKV + kh) * T * HD;
    const bf16* vb = v + ((size_t)b * HKV + kh) * T * HD;
    const float* gb = gm + (size_t)b * T * K;
    const float scale = scale_log2 * 0.69314718055994531f;  // 1 / sqrt(D)
    const float cap_log2 = softcap * 1.4426950408889634f;

    if (!AREG) {
        tile_async<HD, BT>(Qs, qb, row0, T, tid);
        tile_async<HD, BT>(Dos, ob, row0, T, tid);
    }
    AOp<HD, AREG> qa, oa;
    qa.init(qb, Qs + warp * 16 * L, wrow, T, lane);
    oa.init(ob, Dos + warp * 16 * L, wrow, T, lane);
    const int rp[2] = {wrow + g, wrow + g + 8};
    float lr[2], dr[2];
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = rp[half];
        lr[half] = r < T ? lse[bh * T + r] : 0.f;
        dr[half] = r < T ? dd[bh * T + r] : 0.f;
    }
    uint32_t ga[KM / 8][4];
    if (GATE != GATE_NONE) g_rows<KM>(ga, gb, rp, T, K, t);
    // GATE_HARD: the top-k bits of the sequence's tokens, and of this thread's two rows.
    const unsigned short* tkb = GATE == GATE_HARD ? tk + (size_t)b * T : nullptr;
    unsigned mr[2] = {0u, 0u};
    if (GATE == GATE_HARD) {
        mr[0] = rp[0] < T ? tkb[rp[0]] : 0u;
        mr[1] = rp[1] < T ? tkb[rp[1]] : 0u;
    }
    float dga[KM / 8][4];  // dg of the warp's rows (dg_mma's layout)
    zero(dga);
    float acc[HD / 8][4];
    zero(acc);
    const int first = max(0, row0 - span + 1) / BN;
    const int last = (row0 + BT) / BN;
    auto load = [&](int buf, int j0) {
        tile_async<HD, BN>(Ks + buf * BN * L, kb, j0, T, tid);
        tile_async<HD, BN>(Vs + buf * BN * L, vb, j0, T, tid);
        cp_async_commit();
        if (GATE != GATE_NONE) g_tile<KM, BN>(reinterpret_cast<bf16*>(Gs + buf * BN * KM), gb, j0, T, K, tid);
    };
    load(0, first * BN);
    for (int it = first; it < last; ++it) {
        const int buf = (it - first) & 1, j0 = it * BN;
        if (it + 1 < last) {
            load(buf ^ 1, j0 + BN);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const bf16* kt = Ks + buf * BN * L;
        const bf16* gt = reinterpret_cast<const bf16*>(Gs + buf * BN * KM);
        float s[BN / 8][4], dp[BN / 8][4], raw[BN / 8][4], af[BN / 8][4];
        zero(s);
        mma_abt<HD, BN>(s, qa, kt, lane);
        const int cls = tile_class<true, BN>(wrow, j0, T, window, sink, span);
        if (GATE != GATE_NONE && cls != TILE_LOCAL) affinity<KM, BN>(af, ga, gt, lane);
        // raw: u for the paper gate's dA; soft-capped, tanh(u / cap) (gate_tile writes it).
        if constexpr (GATE == GATE_PAPER && !CAP) {
#pragma unroll
            for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) raw[nt][e] = s[nt][e] * scale;
        }
        gate_tile<GATE, CAP, true, BN>(s, af, cls, rp, j0, T, window, sink, span, scale_log2, gparam, cap_log2, raw,
                                       t, mr, tkb);
        zero(dp);
        mma_abt<HD, BN>(dp, oa, Vs + buf * BN * L, lane);
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int half = e >> 1, kp = j0 + nt * 8 + 2 * t + (e & 1);
                const bool gated = GATE != GATE_NONE && (cls == TILE_GATED || (cls == TILE_GENERAL &&
                                                         gated_pair(rp[half], kp, window, sink) && kp < T));
                s[nt][e] = pair_bwd<GATE, CAP>(s[nt][e] - lr[half], dp[nt][e] - dr[half], af[nt][e], gated,
                                               raw[nt][e], softcap, gparam);  // dU: the A operand of dQ += dU K
            }
        if (GATE != GATE_NONE && cls != TILE_LOCAL) dg_mma<KM, BN>(dga, af, gt, lane);
        mma_pb<HD, BN>(acc, s, kt, lane);
        __syncthreads();
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = rp[half];
        if (r >= T) continue;
        float* dst = dq + (bh * T + r) * HD;
#pragma unroll
        for (int dn = 0; dn < HD / 8; ++dn) {
            dst[dn * 8 + 2 * t] = acc[dn][half * 2] * scale;
            dst[dn * 8 + 2 * t + 1] = acc[dn][half * 2 + 1] * scale;
        }
        if (GATE != GATE_NONE) dg_store<KM>(dg + (bh * T + r) * K, dga, half, K, t);
    }
}

// ---------------------------------------------------------------------------------------------
// Backward, dK, dV (per query head) and the key side of dg: grid (ceil(T/64), H, B * PARTS),
// 128 threads. The tile is S^T: rows are keys, columns queries. With PARTS = 2 (D >= 128) part
// 0 computes dV, part 1 dK and dg (dK writes nothing else, so dg's partials are whole).

template <int HD, int KM, int GATE, bool CAP>
__device__ void attn_bwd_dkdv(const bf16* __restrict__ q, const bf16* __restrict__ k, const bf16* __restrict__ v,
                              const float* __restrict__ gm, const unsigned short* __restrict__ tk,
                              const bf16* __restrict__ dot,
                              const float* __restrict__ lse, const float* __restrict__ dd, float* __restrict__ dk,
                              float* __restrict__ dv, float* __restrict__ dg, int T, int H, int HKV, int K,
                              int window, int sink, int span, float scale_log2, float gparam, float softcap) {
    constexpr int BN = Cfg<HD>::BN, L = lds<HD>(), PARTS = Cfg<HD>::PARTS;
    constexpr bool AREG = Cfg<HD>::AREG;
    bf16* Ksm = reinterpret_cast<bf16*>(dyn_smem);  // BT rows of k, then BT of v (smem A only)
    bf16* Vsm = Ksm + (AREG ? 0 : BT * L);
    bf16* Qs = Vsm + (AREG ? 0 : BT * L);            // 2 x BN rows
    bf16* Os = Qs + 2 * BN * L;
    float* Gs = reinterpret_cast<float*>(Os + 2 * BN * L);
    float* Ls = Gs + 2 * BN * KM;  // 2 x BN
    float* Ds = Ls + 2 * BN;       // 2 x BN

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int b = blockIdx.z / PARTS, h = blockIdx.y, kh = h / (H / HKV);
    const int part = PARTS == 1 ? 0 : blockIdx.z % PARTS;
    const bool want_dk = PARTS == 1 || part == 1;
    const int tile = blockIdx.x;  // the first key tiles see the most queries: first
    const int row0 = tile * BT, wrow = row0 + warp * 16;
    const size_t bh = (size_t)b * H + h;
    const bf16* qb = q + bh * T * HD;
    const bf16* ob = dot + bh * T * HD;
    const bf16* kb = k + ((size_t)b * HKV + kh) * T * HD;
    const bf16* vb = v + ((size_t)b * HKV + kh) * T * HD;
    const float* gb = gm + (size_t)b * T * K;
    const float scale = scale_log2 * 0.69314718055994531f;
    const float cap_log2 = softcap * 1.4426950408889634f;

    if (!AREG) {
        tile_async<HD, BT>(Ksm, kb, row0, T, tid);
        if (want_dk) tile_async<HD, BT>(Vsm, vb, row0, T, tid);
    }
    AOp<HD, AREG> ka, va;
    ka.init(kb, Ksm + warp * 16 * L, wrow, T, lane);
    if (want_dk) va.init(vb, Vsm + warp * 16 * L, wrow, T, lane);
    const int rp[2] = {wrow + g, wrow + g + 8};
    uint32_t ga[KM / 8][4];
    if (GATE != GATE_NONE) g_rows<KM>(ga, gb, rp, T, K, t);
    // GATE_HARD: the top-k bits of the sequence's tokens, and of this thread's two rows.
    const unsigned short* tkb = GATE == GATE_HARD ? tk + (size_t)b * T : nullptr;
    unsigned mr[2] = {0u, 0u};
    if (GATE == GATE_HARD) {
        mr[0] = rp[0] < T ? tkb[rp[0]] : 0u;
        mr[1] = rp[1] < T ? tkb[rp[1]] : 0u;
    }
    float dga[KM / 8][4];  // dg of the warp's rows (dg_mma's layout)
    zero(dga);
    // acc0: dV (part 0, or both in one block) or dK (part 1); acc1: dK when one block does both.
    float acc0[HD / 8][4], acc1[PARTS == 1 ? HD / 8 : 1][4];
    zero(acc0);
    zero(acc1);
    // Query tiles from the block's first key to the last query whose window holds its last key.
    const int qend = min(T, span > T ? T : row0 + BT - 1 + span);  // exclusive
    const int ntiles = (qend - row0 + BN - 1) / BN;
    auto load = [&](int buf, int i0) {
        tile_async<HD, BN>(Qs + buf * BN * L, qb, i0, T, tid);
        tile_async<HD, BN>(Os + buf * BN * L, ob, i0, T, tid);
        cp_async_commit();
        if (GATE != GATE_NONE) g_tile<KM, BN>(reinterpret_cast<bf16*>(Gs + buf * BN * KM), gb, i0, T, K, tid);
        if (tid < BN) {
            const bool ok = i0 + tid < T;
            Ls[buf * BN + tid] = ok ? lse[bh * T + i0 + tid] : 0.f;
            Ds[buf * BN + tid] = ok ? dd[bh * T + i0 + tid] : 0.f;
        }
    };
    load(0, row0);
    for (int it = 0; it < ntiles; ++it) {
        const int buf = it & 1, i0 = row0 + it * BN;
        if (it + 1 < ntiles) {
            load(buf ^ 1, i0 + BN);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const bf16* qt = Qs + buf * BN * L;
        const bf16* ot = Os + buf * BN * L;
        const bf16* gt = reinterpret_cast<const bf16*>(Gs + buf * BN * KM);
        const float* lt = Ls + buf * BN;
        const float* dt = Ds + buf * BN;
        float s[BN / 8][4], dp[BN / 8][4], raw[BN / 8][4], af[BN / 8][4];
        zero(s);
        mma_abt<HD, BN>(s, ka, qt, lane);
        const int cls = tile_class<false, BN>(wrow, i0, T, window, sink, span);
        if (GATE != GATE_NONE && cls != TILE_LOCAL) affinity<KM, BN>(af, ga, gt, lane);
        // raw: as in attn_bwd_dq.
        if constexpr (GATE == GATE_PAPER && !CAP) {
#pragma unroll
            for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) raw[nt][e] = s[nt][e] * scale;
        }
        gate_tile<GATE, CAP, false, BN>(s, af, cls, rp, i0, T, window, sink, span, scale_log2, gparam, cap_log2, raw,
                                        t, mr, tkb);
        zero(dp);
        if (want_dk) mma_abt<HD, BN>(dp, va, ot, lane);
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int half = e >> 1;
                const int cl = nt * 8 + 2 * t + (e & 1), qp = i0 + cl;
                const float x2 = s[nt][e] - lt[cl];
                // P, the A operand of dV += P^T dO (af: the log gate's factor, read before pair_bwd)
                if (PARTS == 1 || !want_dk) s[nt][e] = GATE == GATE_LOG ? ex2(x2) * af[nt][e] : ex2(x2);
                if (want_dk) {
                    const bool gated = GATE != GATE_NONE && (cls == TILE_GATED || (cls == TILE_GENERAL &&
                                                             gated_pair(qp, rp[half], window, sink) && qp < T));
                    // dU, the A operand of dK += dU^T Q
                    dp[nt][e] = pair_bwd<GATE, CAP>(x2, dp[nt][e] - dt[cl], af[nt][e], gated, raw[nt][e], softcap,
                                                    gparam);
                }
            }
        if (GATE != GATE_NONE && want_dk && cls != TILE_LOCAL) dg_mma<KM, BN>(dga, af, gt, lane);
        if constexpr (PARTS == 1) {
            mma_pb<HD, BN>(acc0, s, ot, lane);
            mma_pb<HD, BN>(acc1, dp, qt, lane);
        } else if (part == 0) {
            mma_pb<HD, BN>(acc0, s, ot, lane);
        } else {
            mma_pb<HD, BN>(acc0, dp, qt, lane);
        }
        __syncthreads();
    }
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int r = rp[half];
        if (r >= T) continue;
        float* dkr = dk + (bh * T + r) * HD;
        float* dvr = dv + (bh * T + r) * HD;
#pragma unroll
        for (int dn = 0; dn < HD / 8; ++dn)
#pragma unroll
            for (int x = 0; x < 2; ++x) {
                const int col = dn * 8 + 2 * t + x;
                if constexpr (PARTS == 1) {
                    dvr[col] = acc0[dn][half * 2 + x];
                    dkr[col] = acc1[dn][half * 2 + x] * scale;
                } else if (part == 0) {
                    dvr[col] = acc0[dn][half * 2 + x];
                } else {
                    dkr[col] = acc0[dn][half * 2 + x] * scale;
                }
            }
        if (GATE != GATE_NONE && want_dk) dg_store<KM>(dg + (bh * T + r) * K, dga, half, K, t);
    }
}

// ---------------------------------------------------------------------------------------------
// Backward, last steps. d(qkv) from the per-head partials, RoPE undone: one thread per (token,
// head slot, rotation pair). dg = sum over heads of both kernels' partials: one per (b, t, k).

template <typename TO>
__device__ void attn_bwd_finish(const float* __restrict__ dq, const float* __restrict__ dk, const float* __restrict__ dv,
                                const float* __restrict__ cs, const float* __restrict__ sn, TO* __restrict__ dqkv, int B,
                                int T, int H, int HKV, int HD, int interleaved) {
    const int NH = H + 2 * HKV, rep = H / HKV, P = HD / 2;
    const long n = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= (long)B * T * NH * P) return;
    const int p = (int)(n % P);
    const int hh = (int)((n / P) % NH);
    const long row = n / ((long)P * NH);
    const int b = (int)(row / T), tt = (int)(row % T);
    const int d0 = interleaved ? 2 * p : p, d1 = interleaved ? 2 * p + 1 : p + P;
    float y0 = 0.f, y1 = 0.f;
    if (hh < H) {
        const float* src = dq + (((size_t)b * H + hh) * T + tt) * HD;
        y0 = src[d0];
        y1 = src[d1];
    } else {
        const int kh = hh < H + HKV ? hh - H : hh - H - HKV;
        const float* base = hh < H + HKV ? dk : dv;
        for (int r = 0; r < rep; ++r) {
            const float* src = base + (((size_t)b * H + kh * rep + r) * T + tt) * HD;
            y0 += src[d0];
            y1 += src[d1];
        }
    }
    if (cs != nullptr && hh < H + HKV) {
        const float c = cs[(size_t)tt * P + p], s = sn[(size_t)tt * P + p];
        const float x0 = y0 * c + y1 * s, x1 = -y0 * s + y1 * c;
        y0 = x0;
        y1 = x1;
    }
    TO* dst = dqkv + (size_t)row * NH * HD + (size_t)hh * HD;
    dst[d0] = from_f<TO>(y0);
    dst[d1] = from_f<TO>(y1);
}

#ifndef FOCUS_TRAIN_ATTN_ONLY
extern "C" __global__ void attn_dg_reduce(const float* __restrict__ dga, const float* __restrict__ dgb,
                                          float* __restrict__ dg, int B, int T, int H, int K) {
    const long n = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= (long)B * T * K) return;
    const int kk = (int)(n % K);
    const long bt = n / K;
    const int b = (int)(bt / T), tt = (int)(bt % T);
    float s = 0.f;
    for (int h = 0; h < H; ++h) {
        const size_t i = (((size_t)b * H + h) * T + tt) * K + kk;
        s += dga[i] + dgb[i];
    }
    dg[n] = s;
}

// GATE_HARD's top-k bits: each of n rows of memberships g (K <= 16 f32) -> the bit mask of its
// k largest entries, ties to the lower index (`rank_in_row`, as focus_route.cu chooses them).
extern "C" __global__ void topk_bits(const float* __restrict__ g, unsigned short* __restrict__ out, int n, int K,
                                     int k) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float* r = g + (size_t)i * K;
    unsigned m = 0;
    for (int x = 0; x < K; ++x)
        if (rank_in_row(r, K, x) < k) m |= 1u << x;
    out[i] = (unsigned short)m;
}
#endif

// ---------------------------------------------------------------------------------------------
// Attention entry points: name_<gate>[_cap]_k<KM>_d<D>[_<out type>] (`_cap`: soft-capped by
// `softcap`, which the others ignore).

#define ATTN_ARGS const bf16 *q, const bf16 *k, const bf16 *v, const float *gm, const unsigned short *tk
#define ATTN_TAIL int T, int H, int HKV, int K, int window, int sink, int span, float scale_log2, float gparam, \
                  float softcap
#define ATTN_PASS T, H, HKV, K, window, sink, span, scale_log2, gparam, softcap
#define ATTN_ENTRIES(GN, GATE, CAP, KM, HD)                                                                         \
    extern "C" __global__ void __launch_bounds__(128) attn_fwd_##GN##_k##KM##_d##HD##_bf16(ATTN_ARGS, bf16* out,    \
                                                                                           float* lse, ATTN_TAIL) { \
        attn_fwd<HD, KM, GATE, CAP, bf16>(q, k, v, gm, tk, out, lse, ATTN_PASS);                                        \
    }                                                                                                               \
    extern "C" __global__ void __launch_bounds__(128) attn_fwd_##GN##_k##KM##_d##HD##_f32(ATTN_ARGS, float* out,    \
                                                                                          float* lse, ATTN_TAIL) {  \
        attn_fwd<HD, KM, GATE, CAP, float>(q, k, v, gm, tk, out, lse, ATTN_PASS);                                       \
    }                                                                                                               \
    extern "C" __global__ void __launch_bounds__(128) attn_bwd_dq_##GN##_k##KM##_d##HD(                             \
        ATTN_ARGS, const bf16* dot, const float* lse, const float* dd, float* dq, float* dg, ATTN_TAIL) {           \
        attn_bwd_dq<HD, KM, GATE, CAP>(q, k, v, gm, tk, dot, lse, dd, dq, dg, ATTN_PASS);                               \
    }                                                                                                               \
    extern "C" __global__ void __launch_bounds__(128) attn_bwd_dkdv_##GN##_k##KM##_d##HD(                           \
        ATTN_ARGS, const bf16* dot, const float* lse, const float* dd, float* dk, float* dv, float* dg,             \
        ATTN_TAIL) {                                                                                                \
        attn_bwd_dkdv<HD, KM, GATE, CAP>(q, k, v, gm, tk, dot, lse, dd, dk, dv, dg, ATTN_PASS);                         \
    }
#define ATTN_DIMS(GN, GATE, CAP, KM)                                                  \
    ATTN_ENTRIES(GN, GATE, CAP, KM, 64) ATTN_ENTRIES(GN, GATE, CAP, KM, 128) ATTN_ENTRIES(GN, GATE, CAP, KM, 256)
#if defined(FOCUS_TRAIN_HARD)
ATTN_DIMS(hard, GATE_HARD, false, 8)
ATTN_DIMS(hard, GATE_HARD, false, 16)
ATTN_DIMS(hard_cap, GATE_HARD, true, 8)
ATTN_DIMS(hard_cap, GATE_HARD, true, 16)
#elif !defined(FOCUS_TRAIN_CAP)
ATTN_DIMS(none, GATE_NONE, false, 8)
ATTN_DIMS(log, GATE_LOG, false, 8)
ATTN_DIMS(log, GATE_LOG, false, 16)
ATTN_DIMS(paper, GATE_PAPER, false, 8)
ATTN_DIMS(paper, GATE_PAPER, false, 16)
#else
ATTN_DIMS(none_cap, GATE_NONE, true, 8)
ATTN_DIMS(log_cap, GATE_LOG, true, 8)
ATTN_DIMS(log_cap, GATE_LOG, true, 16)
ATTN_DIMS(paper_cap, GATE_PAPER, true, 8)
ATTN_DIMS(paper_cap, GATE_PAPER, true, 16)
#endif

// Everything below is of the main module only.
#ifndef FOCUS_TRAIN_ATTN_ONLY

extern "C" __global__ void attn_bwd_prep_bf16(const bf16* dout, const bf16* out, bf16* dot, float* dd, int B, int T,
                                              int H, int HD) {
    attn_bwd_prep<bf16, bf16>(dout, out, dot, dd, B, T, H, HD);
}
extern "C" __global__ void attn_bwd_prep_f32(const float* dout, const float* out, bf16* dot, float* dd, int B, int T,
                                             int H, int HD) {
    attn_bwd_prep<float, float>(dout, out, dot, dd, B, T, H, HD);
}
extern "C" __global__ void attn_bwd_finish_bf16(const float* dq, const float* dk, const float* dv, const float* cs,
                                                const float* sn, bf16* dqkv, int B, int T, int H, int HKV, int HD,
                                                int interleaved) {
    attn_bwd_finish<bf16>(dq, dk, dv, cs, sn, dqkv, B, T, H, HKV, HD, interleaved);
}
extern "C" __global__ void attn_bwd_finish_f32(const float* dq, const float* dk, const float* dv, const float* cs,
                                               const float* sn, float* dqkv, int B, int T, int H, int HKV, int HD,
                                               int interleaved) {
    attn_bwd_finish<float>(dq, dk, dv, cs, sn, dqkv, B, T, H, HKV, HD, interleaved);
}

// ---------------------------------------------------------------------------------------------
// Sinkhorn in the log domain (FOCUS-METHOD section 1), one block of SK_THREADS per sequence:
// scores (B, T, K) -> memberships (B, T, K). l = s / tau; each iteration subtracts each
// column's log-sum-exp over tokens (or its running prefix, causal), then each row's over
// groups; g = exp(l). With iters = 0 it is a row softmax.
//
// Column work: thread (r, k), k = tid % K, r = tid / K < R (R a power of two, R * K <= 1024),
// owns rows [r * CH, (r + 1) * CH) of column k (CH = ceil(T / R)); partial (max, sum) pairs are
// combined in shared memory (a tree; causal: a serial exclusive prefix over the R chunks). Row
// work: one thread per token. The working values live in global memory (L2).
//
// Backward (full gradient): the forward is recomputed with every intermediate stored (work:
// 2 * iters + 1 arrays of T x K per sequence: L[it] = snap[2 it], M[it] = snap[2 it + 1]);
// then, from dl = dg * g, for each iteration in reverse:
//   row step:    dl_mid = dl - exp(L[it+1]) * rowsum(dl)
//   column step: dl_in = dl_mid - exp(M[it]) * colsum(dl_mid)                      (whole)
//                dl_in[t] = dl_mid[t] - exp(M[it][t]) U[t],                        (causal)
//                U[t] = dl_mid[t] + exp(P[t] - P[t+1]) U[t+1], P = L[it] - M[it]
// and ds = dl / tau. Detached (and iters = 0): ds = g (dg - rowsum(g dg)) / tau.

#include "focus_sinkhorn.cuh"  // SK_THREADS, LseAcc, sk_layout, sk_forward

extern "C" __global__ void __launch_bounds__(SK_THREADS) sinkhorn_fwd(const float* __restrict__ s, float* __restrict__ g,
                                                                      int T, int K, float inv_tau, int iters, int causal) {
    __shared__ LseAcc part[SK_THREADS];
    const size_t off = (size_t)blockIdx.x * T * K;
    float* l = g + off;
    for (int i = threadIdx.x; i < T * K; i += blockDim.x) l[i] = s[off + i] * inv_tau;
    __syncthreads();
    const SkLayout L = sk_layout(T, K);
    sk_forward(l, nullptr, T, K, iters, causal != 0, L, part);
    for (int i = threadIdx.x; i < T * K; i += blockDim.x) l[i] = __expf(l[i]);
}

// ds (B, T, K); work: B * (2 * iters + 1) * T * K floats (full gradient only); g: the forward's
// output (detached gradient and iters = 0 only).
extern "C" __global__ void __launch_bounds__(SK_THREADS) sinkhorn_bwd(const float* __restrict__ s, const float* __restrict__ gout,
                                                                      const float* __restrict__ dg, float* __restrict__ ds,
                                                                      float* __restrict__ work, int T, int K, float inv_tau,
                                                                      int iters, int causal, int detached) {
    __shared__ LseAcc part[SK_THREADS];
    __shared__ float psum[SK_THREADS];
    const int n = T * K;
    const size_t off = (size_t)blockIdx.x * n;
    float* dl = ds + off;
    if (detached || iters == 0) {
        for (int t = threadIdx.x; t < T; t += blockDim.x) {
            const float* gr = gout + off + (size_t)t * K;
            const float* dr = dg + off + (size_t)t * K;
            float m = 0.f;
            for (int k = 0; k < K; ++k) m = fmaf(gr[k], dr[k], m);
            for (int k = 0; k < K; ++k) dl[(size_t)t * K + k] = gr[k] * (dr[k] - m) * inv_tau;
        }
        return;
    }
    float* snap = work + (size_t)blockIdx.x * (2 * iters + 1) * n;
    const SkLayout L = sk_layout(T, K);
    // Recompute the forward in dl (as scratch), storing every intermediate.
    for (int i = threadIdx.x; i < n; i += blockDim.x) dl[i] = s[off + i] * inv_tau;
    __syncthreads();
    sk_forward(dl, snap, T, K, iters, causal != 0, L, part);
    const float* Lf = snap + (size_t)(2 * iters) * n;
    for (int i = threadIdx.x; i < n; i += blockDim.x) dl[i] = dg[off + i] * __expf(Lf[i]);
    __syncthreads();
    for (int it = iters - 1; it >= 0; --it) {
        const float* Lo = snap + (size_t)(2 * it + 2) * n;  // after the row step
        const float* Mi = snap + (size_t)(2 * it + 1) * n;  // after the column step
        const float* Li = snap + (size_t)(2 * it) * n;      // before it
        for (int t = threadIdx.x; t < T; t += blockDim.x) {
            float* row = dl + (size_t)t * K;
            float sum = 0.f;
            for (int k = 0; k < K; ++k) sum += row[k];
            for (int k = 0; k < K; ++k) row[k] -= __expf(Lo[(size_t)t * K + k]) * sum;
        }
        __syncthreads();
        if (!causal) {
            float acc = 0.f;
            if (L.col)
                for (int t = L.a; t < L.e; ++t) acc += dl[(size_t)t * K + L.k];
            if (L.col) psum[L.r * K + L.k] = acc;
            __syncthreads();
            for (int st = L.R / 2; st > 0; st >>= 1) {
                if (L.col && L.r < st) psum[L.r * K + L.k] += psum[(L.r + st) * K + L.k];
                __syncthreads();
            }
            if (L.col) {
                const float c = psum[L.k];
                for (int t = L.a; t < L.e; ++t) {
                    const size_t i = (size_t)t * K + L.k;
                    dl[i] -= __expf(Mi[i]) * c;
                }
            }
        } else {
            // U[t] = dl[t] + exp(P[t] - P[t+1]) U[t+1]: each chunk's value with no carry, a
            // serial pass over chunks for the carries, then each chunk again with its carry.
            auto P = [&](int t) { return Li[(size_t)t * K + L.k] - Mi[(size_t)t * K + L.k]; };
            float u = 0.f;
            if (L.col)
                for (int t = L.e - 1; t >= L.a; --t) u = dl[(size_t)t * K + L.k] + (t + 1 < L.e ? __expf(P(t) - P(t + 1)) * u : 0.f);
            if (L.col) psum[L.r * K + L.k] = u;
            __syncthreads();
            if (L.col && L.r == 0) {
                float carry = 0.f;  // U at the first row of the next chunk
                for (int rr = L.R - 1; rr >= 0; --rr) {
                    const int a = min(T, rr * L.CH), e = min(T, a + L.CH);
                    const float cu = psum[rr * K + L.k];
                    psum[rr * K + L.k] = carry;  // now: the carry into chunk rr
                    if (a < e) carry = cu + (e < T ? __expf(P(a) - P(e)) * carry : 0.f);
                }
            }
            __syncthreads();
            if (L.col) {
                float uu = psum[L.r * K + L.k];
                for (int t = L.e - 1; t >= L.a; --t) {
                    const size_t i = (size_t)t * K + L.k;
                    uu = dl[i] + (t + 1 < T ? __expf(P(t) - P(t + 1)) * uu : 0.f);
                    dl[i] -= __expf(Mi[i]) * uu;
                }
            }
        }
        __syncthreads();
    }
    for (int i = threadIdx.x; i < n; i += blockDim.x) dl[i] *= inv_tau;
}

// ---------------------------------------------------------------------------------------------
// RMSNorm: y = x / sqrt(mean(x^2) + eps) * w over rows of n (x f32), one warp per row; and its
// backward dx = r (dy w) - x r^3 mean(dy w x).

template <typename TO>
__device__ void rms_fwd(const float* __restrict__ x, const float* __restrict__ w, TO* __restrict__ y, long rows, int n,
                        float eps) {
    const long row = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float* xr = x + (size_t)row * n;
    float ss = 0.f;
    for (int j = lane; j < n; j += 32) ss = fmaf(xr[j], xr[j], ss);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, o);
    const float r = rsqrtf(ss / n + eps);
    TO* yr = y + (size_t)row * n;
    for (int j = lane; j < n; j += 32) yr[j] = from_f<TO>(xr[j] * r * w[j]);
}

template <typename TG>
__device__ void rms_bwd(const float* __restrict__ x, const float* __restrict__ w, const TG* __restrict__ dy,
                        float* __restrict__ dx, long rows, int n, float eps) {
    const long row = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float* xr = x + (size_t)row * n;
    const TG* dr = dy + (size_t)row * n;
    float ss = 0.f, dot = 0.f;
    for (int j = lane; j < n; j += 32) {
        ss = fmaf(xr[j], xr[j], ss);
        dot = fmaf(to_f(dr[j]) * w[j], xr[j], dot);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        ss += __shfl_xor_sync(0xffffffff, ss, o);
        dot += __shfl_xor_sync(0xffffffff, dot, o);
    }
    const float r = rsqrtf(ss / n + eps);
    const float c = r * r * r * dot / n;
    float* out = dx + (size_t)row * n;
    for (int j = lane; j < n; j += 32) out[j] = r * to_f(dr[j]) * w[j] - xr[j] * c;
}

extern "C" __global__ void rms_fwd_f32(const float* x, const float* w, float* y, long rows, int n, float eps) {
    rms_fwd<float>(x, w, y, rows, n, eps);
}
extern "C" __global__ void rms_fwd_bf16(const float* x, const float* w, bf16* y, long rows, int n, float eps) {
    rms_fwd<bf16>(x, w, y, rows, n, eps);
}
extern "C" __global__ void rms_bwd_f32(const float* x, const float* w, const float* dy, float* dx, long rows, int n,
                                       float eps) {
    rms_bwd<float>(x, w, dy, dx, rows, n, eps);
}
extern "C" __global__ void rms_bwd_bf16(const float* x, const float* w, const bf16* dy, float* dx, long rows, int n,
                                        float eps) {
    rms_bwd<bf16>(x, w, dy, dx, rows, n, eps);
}

// ---------------------------------------------------------------------------------------------
// SwiGLU on the concatenated gate/up projection: gu (rows, 2F) = [gate | up] -> silu(gate) * up
// (rows, F); backward dgate = da up silu'(gate), dup = da silu(gate).

// The gated MLP's activation act(gate) and its derivative: silu (SwiGLU) or GELU's tanh form
// (GeGLU, Gemma's): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <bool GELU>
__device__ __forceinline__ float2 act_and_grad(float x) {
    if constexpr (GELU) {
        const float k = 0.7978845608028654f, u = k * (x + 0.044715f * x * x * x);
        const float th = tanhf(u);
        return make_float2(0.5f * x * (1.f + th), 0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * k * (1.f + 0.134145f * x * x));
    } else {
        const float sg = 1.f / (1.f + __expf(-x));
        return make_float2(x * sg, sg * (1.f + x * (1.f - sg)));
    }
}

template <typename T, bool GELU>
__device__ void glu_fwd(const T* __restrict__ gu, T* __restrict__ a, long rows, int F) {
    const long n = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= rows * F) return;
    const long r = n / F;
    const int c = (int)(n % F);
    const float gt = to_f(gu[r * 2 * F + c]), up = to_f(gu[r * 2 * F + F + c]);
    a[n] = from_f<T>(act_and_grad<GELU>(gt).x * up);
}

template <typename T, bool GELU>
__device__ void glu_bwd(const T* __restrict__ gu, const T* __restrict__ da, T* __restrict__ dgu, long rows, int F) {
    const long n = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= rows * F) return;
    const long r = n / F;
    const int c = (int)(n % F);
    const float gt = to_f(gu[r * 2 * F + c]), up = to_f(gu[r * 2 * F + F + c]), d = to_f(da[n]);
    const float2 ag = act_and_grad<GELU>(gt);
    dgu[r * 2 * F + c] = from_f<T>(d * up * ag.y);
    dgu[r * 2 * F + F + c] = from_f<T>(d * ag.x);
}

#define GLU_ENTRIES(NAME, GELU)                                                                                    \
    extern "C" __global__ void NAME##_fwd_f32(const float* gu, float* a, long rows, int F) {                          \
        glu_fwd<float, GELU>(gu, a, rows, F);                                                                          \
    }                                                                                                                  \
    extern "C" __global__ void NAME##_fwd_bf16(const bf16* gu, bf16* a, long rows, int F) {                           \
        glu_fwd<bf16, GELU>(gu, a, rows, F);                                                                           \
    }                                                                                                                  \
    extern "C" __global__ void NAME##_bwd_f32(const float* gu, const float* da, float* dgu, long rows, int F) {       \
        glu_bwd<float, GELU>(gu, da, dgu, rows, F);                                                                    \
    }                                                                                                                  \
    extern "C" __global__ void NAME##_bwd_bf16(const bf16* gu, const bf16* da, bf16* dgu, long rows, int F) {         \
        glu_bwd<bf16, GELU>(gu, da, dgu, rows, F);                                                                     \
    }
GLU_ENTRIES(swiglu, false)
GLU_ENTRIES(geglu, true)

// ---------------------------------------------------------------------------------------------
// Cross-entropy per row: loss[r] = logsumexp(z[r]) - z[r, tgt[r]]; backward
// dx[r, c] = (softmax(z[r])[c] - [c == tgt[r]]) * dloss[r] * dz/dx. One block of 256 per row.
// z = x, or with a final soft-cap `cap` > 0 (Gemma 2's logits) z = cap tanh(x / cap) and
// dz/dx = 1 - tanh^2: the cap inside the kernels, not three composed ops over the head's chunk
// and three more in their backward (~75 ms a step at Gemma-2-9B's 256,000-word vocabulary).

template <typename T>
__device__ __forceinline__ float capped(T x, float cap) {
    return cap > 0.f ? cap * tanhf(to_f(x) / cap) : to_f(x);
}

template <typename T>
__device__ LseAcc row_lse(const T* x, int V, float cap) {
    __shared__ LseAcc red[8];
    LseAcc acc = {-INFINITY, 0.f};
    for (int c = threadIdx.x; c < V; c += blockDim.x) acc = lse_push(acc, capped(x[c], cap));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        LseAcc other = {__shfl_xor_sync(0xffffffff, acc.m, o), __shfl_xor_sync(0xffffffff, acc.s, o)};
        acc = lse_join(acc, other);
    }
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = acc;
    __syncthreads();
    LseAcc tot = red[0];
    for (int w = 1; w < (int)(blockDim.x >> 5); ++w) tot = lse_join(tot, red[w]);
    return tot;
}

template <typename T>
__device__ void ce_fwd(const T* __restrict__ x, const uint32_t* __restrict__ tgt, float* __restrict__ loss, int V,
                       float cap) {
    const long r = blockIdx.x;
    const T* xr = x + (size_t)r * V;
    const float z = lse_val(row_lse(xr, V, cap));
    if (threadIdx.x == 0) loss[r] = z - capped(xr[tgt[r]], cap);
}

template <typename T>
__device__ void ce_bwd(const T* __restrict__ x, const uint32_t* __restrict__ tgt, const float* __restrict__ dloss,
                       T* __restrict__ dx, int V, float cap) {
    const long r = blockIdx.x;
    const T* xr = x + (size_t)r * V;
    const float z = lse_val(row_lse(xr, V, cap));
    const float d = dloss[r];
    const uint32_t y = tgt[r];
    T* out = dx + (size_t)r * V;
    for (int c = threadIdx.x; c < V; c += blockDim.x) {
        const float xc = to_f(xr[c]);
        float zc = xc, dz = 1.f;
        if (cap > 0.f) {
            const float th = tanhf(xc / cap);
            zc = cap * th;
            dz = 1.f - th * th;
        }
        out[c] = from_f<T>((__expf(zc - z) - (c == (int)y ? 1.f : 0.f)) * d * dz);
    }
}

extern "C" __global__ void ce_fwd_f32(const float* x, const uint32_t* tgt, float* loss, int V, float cap) {
    ce_fwd<float>(x, tgt, loss, V, cap);
}
extern "C" __global__ void ce_fwd_bf16(const bf16* x, const uint32_t* tgt, float* loss, int V, float cap) {
    ce_fwd<bf16>(x, tgt, loss, V, cap);
}
extern "C" __global__ void ce_bwd_f32(const float* x, const uint32_t* tgt, const float* dloss, float* dx, int V,
                                      float cap) {
    ce_bwd<float>(x, tgt, dloss, dx, V, cap);
}
extern "C" __global__ void ce_bwd_bf16(const bf16* x, const uint32_t* tgt, const float* dloss, bf16* dx, int V,
                                       float cap) {
    ce_bwd<bf16>(x, tgt, dloss, dx, V, cap);
}

// bf16 -> f32, 8 values a thread: a 16-byte load and two 16-byte stores. The frozen projections'
// f32 outputs and their inputs' gradients (4 to 6 casts of 8,192 x 4,096 a layer in Llama 3 8B's
// step); candle's cast of this pair stores a float at a time, 32 bytes apart across a warp, and
// took 0.35 ms for one on an H100, 3.5x its f32 -> bf16.
extern "C" __global__ void cast_bf16_f32_x8(const uint4* __restrict__ x, float4* __restrict__ y, long n8) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n8) return;
    const uint4 v = x[i];
    const __nv_bfloat162* b = reinterpret_cast<const __nv_bfloat162*>(&v);
    const float2 f0 = __bfloat1622float2(b[0]), f1 = __bfloat1622float2(b[1]);
    const float2 f2 = __bfloat1622float2(b[2]), f3 = __bfloat1622float2(b[3]);
    y[2 * i] = make_float4(f0.x, f0.y, f1.x, f1.y);
    y[2 * i + 1] = make_float4(f2.x, f2.y, f3.x, f3.y);
}
#endif  // FOCUS_TRAIN_ATTN_ONLY
