// Exact causal attention kernels for the GPU: dense, and hard top-k Focus attention built from
// the same tile code (compiled to PTX by crates/kernels/build.rs under the `cuda` feature).
//
// Layout: q (H, T, 64), k and v (Hkv, T, 64), row-major; head h reads kv head h / rep.
//
// Focus splits the kept pairs into two disjoint sets and merges them by log-sum-exp:
//   band:  causal local pairs, i - j <= window (every token, original order);
//   group: distant pairs, i - j > window, that share a group. The tokens of group g are
//          gathered in position order (a "segment"); a query attends causally within its
//          segment. A pair sharing several groups is kept only in its lowest shared group.
// Each pass writes a normalised partial output and its log-sum-exp; focus_merge combines them
// (for k = 1 the group pass merges with the band's partials itself).
// Attention sinks [ours] (keys j < sink kept for every later query): focus_sink_* adds the sink
// keys past the band that share no group with the query to the band's partials (at the end).
//
// Three passes run the same tile loop (MODE), which only changes which rows a tile reads and
// which pairs it keeps:
//   DENSE: one segment, identity rows, keep j <= i; writes the final output;
//   BAND:  identity rows, keys from i - window, keep i - window <= j <= i;
//   GROUP: q, k, v gathered in segment order (focus_gather), positions through idx; keep
//          pos_i - pos_j > window (and the lowest shared group). For k = 1 it also does the
//          merge (merge_weights) and writes the final output.
//
// The bf16 kernel is flash-attention-2 style: mma.sync m16n8k16 tensor-core tiles, scores and
// the output accumulator in registers (fp32), K/V tiles double-buffered in shared memory with
// cp.async. The f32 kernel uses plain FMAs so that it is exact to ~1e-6 (tf32 would not be).

#include "focus_common.cuh"  // cp.async, mma, ldmatrix, ex2, pack_bf16, quad reductions

#define HD 64           // head dim
#define BC 64           // keys per tile
#define LDS (HD + 8)    // padded smem row (bf16): rows 144 bytes apart, so fragment loads are
                        // bank-conflict free and every row stays 16-byte aligned
#define MODE_DENSE 0
#define MODE_BAND 1
#define MODE_GROUP 2
#define NO_POS 0x7fffffff
#ifndef LAZY_RESCALE
#define LAZY_RESCALE 1  // skip the output rescale of tiles where no row maximum grew
#endif

typedef unsigned int u32;

// ---------------------------------------------------------------------------------------------
// Tile geometry shared by both kernels.

struct Seg {
    int off;   // first row of the segment in idx / slot
    int len;   // rows in the segment
    int row0;  // first query row of this tile
    int g;     // group of the segment (GROUP), else -1
};

template <int MODE, int BR>
__device__ __forceinline__ Seg tile_segment(int T, const int* tile_seg, const int* tile_row,
                                            const int* seg_off, const int* seg_len) {
    Seg s;
    if (MODE == MODE_GROUP) {
        s.g = tile_seg[blockIdx.x];
        s.row0 = tile_row[blockIdx.x];
        s.off = seg_off[s.g];
        s.len = seg_len[s.g];
    } else {
        s.g = -1;
        s.off = 0;
        s.len = T;
        // Dense: the longest rows (last tiles) first, so that the tail of the grid is short.
        s.row0 = (MODE == MODE_DENSE ? (gridDim.x - 1 - blockIdx.x) : blockIdx.x) * BR;
    }
    return s;
}

template <int MODE>
__device__ __forceinline__ int row_pos(const Seg& s, const int* idx, int r) {
    return MODE == MODE_GROUP ? idx[s.off + r] : r;
}

// Where row r's vectors are: GROUP reads q, k, v gathered into segment order (focus_gather), so
// a tile's rows are contiguous in memory as in the dense pass; the others read position r.
template <int MODE>
__device__ __forceinline__ int row_addr(const Seg& s, int r) {
    return MODE == MODE_GROUP ? s.off + r : r;
}

// First row r in [0, n) of the segment with pos(r) > limit (positions increase along a segment).
template <int MODE>
__device__ int upper_rows(const Seg& s, const int* idx, int n, int limit) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        if (row_pos<MODE>(s, idx, mid) <= limit) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// Key rows this tile reads: [kbeg, kend); tiles wholly inside [kbeg, kfree) need no mask.
struct KeyRange { int kbeg, kfree, kend; };

template <int MODE, int BR>
__device__ KeyRange key_range(const Seg& s, const int* idx, int window) {
    KeyRange r;
    int qlast = min(s.row0 + BR, s.len) - 1;
    if (MODE == MODE_DENSE) {
        r.kbeg = 0; r.kfree = s.row0; r.kend = qlast + 1;
    } else if (MODE == MODE_BAND) {
        r.kbeg = max(0, s.row0 - window); r.kfree = r.kbeg; r.kend = qlast + 1;
    } else {
        // Keys must be more than `window` positions before the query.
        r.kbeg = 0;
        r.kfree = upper_rows<MODE>(s, idx, s.row0 + 1, row_pos<MODE>(s, idx, s.row0) - window - 1);
        r.kend = upper_rows<MODE>(s, idx, qlast + 1, row_pos<MODE>(s, idx, qlast) - window - 1);
    }
    return r;
}

// Whether the pair (query at qp, key at kp) is kept. Keys past the range carry NO_POS.
template <int MODE>
// `kml`: the key's groups below the segment's group (a pair sharing one of those is counted in
// that lower group's segment instead); 0 for k = 1.
__device__ __forceinline__ bool keep_pair(bool need_pos, int qp, int kp, int window, u32 qm, u32 kml) {
    if (MODE == MODE_DENSE) return kp <= qp;
    if (MODE == MODE_BAND) return kp <= qp && qp - kp <= window;
    return (!need_pos || (kp != NO_POS && qp - kp > window)) && (qm & kml) == 0;
}

// k = 1: each token has one group segment, so the group pass merges its result with the band's
// itself (out != null; part_o and part_lse then hold the band pass's partials) and no group
// partials or merge pass are needed. Weights of the normalised band output (cb) and of the
// un-normalised group accumulator (cg), from the band's natural-log lse, the group's row sum
// l and its maximum m2 (log2 domain), and inv = 1 / l (0 for a row with no distant pair).
__device__ __forceinline__ void merge_weights(float band_lse, float l, float m2, float inv, float& cb, float& cg) {
    const float lg = l > 0.f ? (m2 + log2f(l)) * 0.69314718055994531f : -INFINITY;
    const float mx = fmaxf(band_lse, lg);
    const float wb = expf(band_lse - mx), wg = l > 0.f ? expf(lg - mx) : 0.f;
    const float norm = 1.f / (wb + wg);
    cb = wb * norm;
    cg = wg * norm * inv;
}

// ---------------------------------------------------------------------------------------------
// bf16 tensor-core kernel.

// A row's 16 score entries held by this thread (columns 2t, 2t+1 of 8 n8 tiles; `half` picks
// the row) reduced pairwise as a tree: depth 4 instead of a serial chain of 16.
template <typename Op>
__device__ __forceinline__ float row_tree(const float (&s)[8][4], int half, Op op) {
    float v[8];
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) v[nt] = op(s[nt][half * 2], s[nt][half * 2 + 1]);
#pragma unroll
    for (int w = 4; w >= 1; w >>= 1)
#pragma unroll
        for (int j = 0; j < w; ++j) v[j] = op(v[j], v[j + w]);
    return v[0];
}

// 4 warps; each warp owns MT m16 row tiles, so a block covers BR = 64 * MT query rows.
template <int MODE, int MT>
__device__ void flash_bf16(const __nv_bfloat16* __restrict__ q, const __nv_bfloat16* __restrict__ k,
                           const __nv_bfloat16* __restrict__ v, __nv_bfloat16* __restrict__ out,
                           float* __restrict__ part_o, float* __restrict__ part_lse,
                           const int* __restrict__ idx, const int* __restrict__ slot,
                           const int* __restrict__ seg_off, const int* __restrict__ seg_len,
                           const int* __restrict__ tile_seg, const int* __restrict__ tile_row,
                           const u32* __restrict__ masks, int T, int rep, int window, int multi,
                           int slots, float scale_log2) {
    constexpr int BR = 64 * MT;
    __shared__ __align__(16) __nv_bfloat16 Ks[2][BC * LDS];
    __shared__ __align__(16) __nv_bfloat16 Vs[2][BC * LDS];
    __shared__ int kpos_s[2][BC];
    __shared__ u32 kmask_s[2][BC];
    __shared__ KeyRange range_s;

    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int h = blockIdx.y, kh = h / rep;
    const Seg s = tile_segment<MODE, BR>(T, tile_seg, tile_row, seg_off, seg_len);
    if (tid == 0) range_s = key_range<MODE, BR>(s, idx, window);
    const size_t qbase = (size_t)h * T * HD, kbase = (size_t)kh * T * HD;
    const u32 lower = s.g > 0 ? ((1u << s.g) - 1) : 0u;

    // Query fragments (A operand) straight from global memory, and each row's position.
    uint32_t qa[MT][4][4];
    int qpos[MT][2];
    u32 qmask[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            int r = s.row0 + warp * 16 * MT + mt * 16 + g + half * 8;
            bool ok = r < s.len;
            int p = ok ? row_pos<MODE>(s, idx, r) : 0;
            qpos[mt][half] = ok ? p : -1;
            qmask[mt][half] = (ok && multi) ? masks[p] : 0u;
            const uint32_t* src = reinterpret_cast<const uint32_t*>(q + qbase + (size_t)row_addr<MODE>(s, ok ? r : 0) * HD);
#pragma unroll
            for (int ks = 0; ks < 4; ++ks) {
                qa[mt][ks][half] = ok ? src[(ks * 16 + 2 * t) / 2] : 0u;
                qa[mt][ks][2 + half] = ok ? src[(ks * 16 + 8 + 2 * t) / 2] : 0u;
            }
        }
    }
    __syncthreads();
    const KeyRange kr = range_s;

    float o[MT][8][4];
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int dn = 0; dn < 8; ++dn)
#pragma unroll
            for (int i = 0; i < 4; ++i) o[mt][dn][i] = 0.f;
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.f;
    }

    // A tile's key positions (GROUP: through idx) are fetched one tile ahead into registers, so
    // that the dependent index loads are not waited for.
    struct Fetch { int row[(BC * 8) / 128]; int kp; unsigned km; };
    auto fetch = [&](int j0, Fetch& f) {
#pragma unroll
        for (int i = 0; i < (BC * 8) / 128; ++i) {
            int r = j0 + (tid >> 3) + i * (128 / 8);
            f.row[i] = r < kr.kend ? row_addr<MODE>(s, r) : -1;
        }
        int r = j0 + tid;
        bool ok = tid < BC && r < kr.kend;
        // GROUP, k = 1: a tile below kfree reads no key position, so skip its index load (it
        // stalled the loop: H200, 1M tokens, K=8 k=1, 554 -> 509 ms).
        const bool pos = MODE != MODE_GROUP || multi || j0 + BC > kr.kfree;
        f.kp = ok ? (pos ? row_pos<MODE>(s, idx, r) : 0) : NO_POS;
        f.km = (ok && multi) ? (masks[f.kp] & lower) : 0u;
    };
    auto load_tile = [&](int buf, const Fetch& f) {
        const int ch = tid & 7;
#pragma unroll
        for (int i = 0; i < (BC * 8) / 128; ++i) {
            int row = (tid >> 3) + i * (128 / 8);
            bool ok = f.row[i] >= 0;
            size_t off = kbase + (size_t)(ok ? f.row[i] : 0) * HD + ch * 8;
            cp_async16(&Ks[buf][row * LDS + ch * 8], k + off, ok);
            cp_async16(&Vs[buf][row * LDS + ch * 8], v + off, ok);
        }
        if (tid < BC) {
            kpos_s[buf][tid] = f.kp;
            kmask_s[buf][tid] = f.km;
        }
        cp_async_commit();
    };

    const int ntiles = kr.kend > kr.kbeg ? (kr.kend - kr.kbeg + BC - 1) / BC : 0;
    Fetch nf;
    if (ntiles > 0) {
        fetch(kr.kbeg, nf);
        load_tile(0, nf);
        if (ntiles > 1) fetch(kr.kbeg + BC, nf);
    }
    for (int it = 0; it < ntiles; ++it) {
        const int buf = it & 1, j0 = kr.kbeg + it * BC;
        if (it + 1 < ntiles) {
            load_tile(buf ^ 1, nf);
            if (it + 2 < ntiles) fetch(j0 + 2 * BC, nf);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        // Position masks only near the diagonal; the shared-group rule (k > 1) everywhere.
        const bool need_pos = j0 + BC > kr.kfree;
        const bool need_mask = need_pos || multi;
        const __nv_bfloat16* Kt = Ks[buf];
        const __nv_bfloat16* Vt = Vs[buf];

        // S = Q K^T for this warp's rows: MT x 8 tiles of m16n8. One ldmatrix.x4 brings the B
        // fragments of two k16 steps of one n8 tile (K rows are keys: no transpose needed).
        float sc[MT][8][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) sc[mt][nt][i] = 0.f;
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
            for (int kp = 0; kp < 2; ++kp) {
                uint32_t b[4];
                ldmatrix_x4(b, Kt + (nt * 8 + (lane & 7)) * LDS + kp * 32 + (lane >> 3) * 8);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_bf16(sc[mt][nt], qa[mt][2 * kp], b[0], b[1]);
                    mma_bf16(sc[mt][nt], qa[mt][2 * kp + 1], b[2], b[3]);
                }
            }
        }

        // Online softmax in the log2 domain on raw scores (scale folded into one FMA, as in
        // flash-attention 2); masked entries become -inf. The output is rescaled only when a
        // row maximum of this warp grew: after the first tiles of a long row it rarely does, and
        // the rescale is one multiply per accumulator per tile. Every step runs over all 2 * MT
        // rows at once, and row maxima and sums are trees (row_tree): with two warps per
        // scheduler, serial chains of 16 dependent max / add instructions per row left the
        // scheduler waiting on each one's latency (H200, 1M tokens: dense 3.72 -> 3.42 s, Focus
        // K=8 k=1 510 -> 473 ms, k=2 3.40 -> 2.50 s).
        float alpha[MT][2];
        bool grew = false;
        if (need_mask) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < 8; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int half = e >> 1, c = nt * 8 + 2 * t + (e & 1);
                        if (!keep_pair<MODE>(need_pos, qpos[mt][half], kpos_s[buf][c], window, qmask[mt][half],
                                             kmask_s[buf][c]))
                            sc[mt][nt][e] = -INFINITY;
                    }
        }
        float mx[MT][2], base[MT][2];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int half = 0; half < 2; ++half)
                mx[mt][half] = row_tree(sc[mt], half, [](float a, float b) { return fmaxf(a, b); });
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                float mnew = fmaxf(m[mt][half], quad_max(mx[mt][half]));
                // A row with nothing kept so far keeps m = -inf; use 0 so that exp2 gives 0, not NaN.
                base[mt][half] = (mnew == -INFINITY ? 0.f : mnew) * scale_log2;
                const bool up = mnew != m[mt][half];
                grew |= up;
                alpha[mt][half] = up ? ex2(fmaf(m[mt][half], scale_log2, -base[mt][half])) : 1.f;
                m[mt][half] = mnew;
            }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < 8; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) sc[mt][nt][e] = ex2(fmaf(sc[mt][nt][e], scale_log2, -base[mt][e >> 1]));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int half = 0; half < 2; ++half)
                l[mt][half] = fmaf(l[mt][half], alpha[mt][half], row_tree(sc[mt], half, [](float a, float b) { return a + b; }));
#if LAZY_RESCALE
        if (__any_sync(0xffffffff, grew))
#endif
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int dn = 0; dn < 8; ++dn)
#pragma unroll
                    for (int i = 0; i < 4; ++i) o[mt][dn][i] *= alpha[mt][i >> 1];

        // O += P V: the score accumulators of two adjacent n8 tiles are exactly the A fragment of
        // one k16 step; V's B fragments come from row-major smem through ldmatrix.trans.
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk) {
            uint32_t pa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                pa[mt][0] = pack_bf16(sc[mt][2 * kk][0], sc[mt][2 * kk][1]);
                pa[mt][1] = pack_bf16(sc[mt][2 * kk][2], sc[mt][2 * kk][3]);
                pa[mt][2] = pack_bf16(sc[mt][2 * kk + 1][0], sc[mt][2 * kk + 1][1]);
                pa[mt][3] = pack_bf16(sc[mt][2 * kk + 1][2], sc[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dp = 0; dp < 4; ++dp) {
                uint32_t b[4];
                int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
                int col = (2 * dp + (lane >> 4)) * 8;
                ldmatrix_x4_trans(b, Vt + key * LDS + col);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma_bf16(o[mt][2 * dp], pa[mt], b[0], b[1]);
                    mma_bf16(o[mt][2 * dp + 1], pa[mt], b[2], b[3]);
                }
            }
        }
        __syncthreads();  // the next iteration's prefetch overwrites this buffer
    }

    // Normalise and write.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            int r = s.row0 + warp * 16 * MT + mt * 16 + g + half * 8;
            float lt = quad_sum(l[mt][half]);
            if (r >= s.len) continue;
            float inv = lt > 0.f ? 1.f / lt : 0.f;
            int p = qpos[mt][half];
            if (MODE == MODE_DENSE) {
                __nv_bfloat16* dst = out + qbase + (size_t)p * HD;
#pragma unroll
                for (int dn = 0; dn < 8; ++dn)
                    *reinterpret_cast<__nv_bfloat162*>(dst + dn * 8 + 2 * t) = __floats2bfloat162_rn(
                        o[mt][dn][half * 2] * inv, o[mt][dn][half * 2 + 1] * inv);
            } else if (MODE == MODE_GROUP && out != nullptr) {
                // k = 1, merged here: part_o / part_lse hold the band pass's partials.
                const size_t row = (size_t)h * T + p;
                float cb, cg;
                merge_weights(part_lse[row], lt, m[mt][half] * scale_log2, inv, cb, cg);
                const float* band = part_o + row * HD;
                __nv_bfloat16* dst = out + row * HD;
#pragma unroll
                for (int dn = 0; dn < 8; ++dn) {
                    float2 b = *reinterpret_cast<const float2*>(band + dn * 8 + 2 * t);
                    *reinterpret_cast<__nv_bfloat162*>(dst + dn * 8 + 2 * t) = __floats2bfloat162_rn(
                        fmaf(cg, o[mt][dn][half * 2], cb * b.x), fmaf(cg, o[mt][dn][half * 2 + 1], cb * b.y));
                }
            } else {
                size_t row = MODE == MODE_GROUP ? (size_t)slot[s.off + r] : (size_t)p;
                float* dst = part_o + ((size_t)h * slots + row) * HD;
#pragma unroll
                for (int dn = 0; dn < 8; ++dn)
                    *reinterpret_cast<float2*>(dst + dn * 8 + 2 * t) =
                        make_float2(o[mt][dn][half * 2] * inv, o[mt][dn][half * 2 + 1] * inv);
                if (t == 0)
                    part_lse[(size_t)h * slots + row] =
                        lt > 0.f ? (m[mt][half] * scale_log2 + log2f(lt)) * 0.69314718055994531f : -INFINITY;
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// f32 kernel: one thread per query row, BR = BC = 64, keys and values in shared memory.

template <int MODE>
__device__ void flash_f32(const float* __restrict__ q, const float* __restrict__ k,
                          const float* __restrict__ v, float* __restrict__ out,
                          float* __restrict__ part_o, float* __restrict__ part_lse,
                          const int* __restrict__ idx, const int* __restrict__ slot,
                          const int* __restrict__ seg_off, const int* __restrict__ seg_len,
                          const int* __restrict__ tile_seg, const int* __restrict__ tile_row,
                          const u32* __restrict__ masks, int T, int rep, int window, int multi,
                          int slots, float scale_log2) {
    constexpr int BR = 64;
    __shared__ __align__(16) float Ks[BC][HD];
    __shared__ __align__(16) float Vs[BC][HD];
    __shared__ int kpos_s[BC];
    __shared__ u32 kmask_s[BC];
    __shared__ KeyRange range_s;

    const int tid = threadIdx.x, h = blockIdx.y, kh = h / rep;
    const Seg s = tile_segment<MODE, BR>(T, tile_seg, tile_row, seg_off, seg_len);
    if (tid == 0) range_s = key_range<MODE, BR>(s, idx, window);
    const size_t qbase = (size_t)h * T * HD, kbase = (size_t)kh * T * HD;
    const u32 lower = s.g > 0 ? ((1u << s.g) - 1) : 0u;

    const int r = s.row0 + tid;
    const bool live = r < s.len;
    const int qp = live ? row_pos<MODE>(s, idx, r) : -1;
    const u32 qm = (live && multi) ? masks[qp] : 0u;
    float qv[HD], acc[HD];
#pragma unroll
    for (int d = 0; d < HD; ++d) {
        qv[d] = live ? q[qbase + (size_t)row_addr<MODE>(s, r) * HD + d] : 0.f;
        acc[d] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    __syncthreads();
    const KeyRange kr = range_s;

    for (int j0 = kr.kbeg; j0 < kr.kend; j0 += BC) {
        __syncthreads();
        for (int c = tid; c < BC * (HD / 4); c += BR) {
            int row = c / (HD / 4), col = (c % (HD / 4)) * 4, rr = j0 + row;
            float4 kz = make_float4(0.f, 0.f, 0.f, 0.f), vz = kz;
            if (rr < kr.kend) {
                size_t off = kbase + (size_t)row_addr<MODE>(s, rr) * HD + col;
                kz = *reinterpret_cast<const float4*>(k + off);
                vz = *reinterpret_cast<const float4*>(v + off);
            }
            *reinterpret_cast<float4*>(&Ks[row][col]) = kz;
            *reinterpret_cast<float4*>(&Vs[row][col]) = vz;
        }
        {
            int rr = j0 + tid;
            bool ok = rr < kr.kend;
            int p = ok ? row_pos<MODE>(s, idx, rr) : NO_POS;
            kpos_s[tid] = p;
            kmask_s[tid] = (ok && multi) ? (masks[p] & lower) : 0u;
        }
        __syncthreads();
        if (!live) continue;
        const bool need_pos = j0 + BC > kr.kfree;
        const bool need_mask = need_pos || multi;
        for (int j = 0; j < BC; ++j) {
            if (need_mask && !keep_pair<MODE>(need_pos, qp, kpos_s[j], window, qm, kmask_s[j])) continue;
            float x = 0.f;
#pragma unroll
            for (int d = 0; d < HD; ++d) x = fmaf(qv[d], Ks[j][d], x);
            x *= scale_log2;
            if (x > m) {
                float alpha = exp2f(m - x);
                l *= alpha;
#pragma unroll
                for (int d = 0; d < HD; ++d) acc[d] *= alpha;
                m = x;
            }
            float p = exp2f(x - m);
            l += p;
#pragma unroll
            for (int d = 0; d < HD; ++d) acc[d] = fmaf(p, Vs[j][d], acc[d]);
        }
    }
    if (!live) return;
    float inv = l > 0.f ? 1.f / l : 0.f;
    if (MODE == MODE_DENSE) {
        float* dst = out + qbase + (size_t)qp * HD;
#pragma unroll
        for (int d = 0; d < HD; ++d) dst[d] = acc[d] * inv;
    } else if (MODE == MODE_GROUP && out != nullptr) {
        // k = 1, merged here (as in the bf16 kernel).
        const size_t row = (size_t)h * T + qp;
        float cb, cg;
        merge_weights(part_lse[row], l, m, inv, cb, cg);
        const float* band = part_o + row * HD;
        float* dst = out + row * HD;
#pragma unroll
        for (int d = 0; d < HD; ++d) dst[d] = fmaf(cg, acc[d], cb * band[d]);
    } else {
        size_t row = MODE == MODE_GROUP ? (size_t)slot[s.off + r] : (size_t)qp;
        float* dst = part_o + ((size_t)h * slots + row) * HD;
#pragma unroll
        for (int d = 0; d < HD; ++d) dst[d] = acc[d] * inv;
        part_lse[(size_t)h * slots + row] = l > 0.f ? (m + log2f(l)) * 0.69314718055994531f : -INFINITY;
    }
}

// ---------------------------------------------------------------------------------------------
// Entry points (extern "C" names for the host).

#define FLASH_ARGS(T)                                                                            \
    const T *q, const T *k, const T *v, T *out, float *part_o, float *part_lse, const int *idx, \
        const int *slot, const int *seg_off, const int *seg_len, const int *tile_seg,            \
        const int *tile_row, const u32 *masks, int Tn, int rep, int window, int multi, int slots, \
        float scale_log2
#define FLASH_PASS q, k, v, out, part_o, part_lse, idx, slot, seg_off, seg_len, tile_seg, tile_row, \
                   masks, Tn, rep, window, multi, slots, scale_log2

#define BF16_ENTRY(name, MODE, MT)                                                    \
    extern "C" __global__ void __launch_bounds__(128) name(FLASH_ARGS(__nv_bfloat16)) { \
        flash_bf16<MODE, MT>(FLASH_PASS);                                            \
    }
BF16_ENTRY(focus_dense_bf16_m1, MODE_DENSE, 1)
BF16_ENTRY(focus_dense_bf16_m2, MODE_DENSE, 2)
BF16_ENTRY(focus_band_bf16_m1, MODE_BAND, 1)
BF16_ENTRY(focus_band_bf16_m2, MODE_BAND, 2)
BF16_ENTRY(focus_group_bf16_m1, MODE_GROUP, 1)
BF16_ENTRY(focus_group_bf16_m2, MODE_GROUP, 2)

#define F32_ENTRY(name, MODE)                                                    \
    extern "C" __global__ void __launch_bounds__(64) name(FLASH_ARGS(float)) { \
        flash_f32<MODE>(FLASH_PASS);                                            \
    }
F32_ENTRY(focus_dense_f32, MODE_DENSE)
F32_ENTRY(focus_band_f32, MODE_BAND)
F32_ENTRY(focus_group_f32, MODE_GROUP)

// dst[h, r] = src[h, idx[r]] for the rows of all segments: q, k, v in segment order for the
// GROUP pass. One thread per 16 bytes; grid (ceil(rows * chunks / 256), heads), block 256.
template <typename TT>
__device__ void gather_rows(const TT* __restrict__ src, TT* __restrict__ dst, const int* __restrict__ idx,
                            int Tn, int rows) {
    constexpr int CH = HD * sizeof(TT) / 16;
    const long c = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= (long)rows * CH) return;
    const int r = (int)(c / CH), ch = (int)(c % CH), h = blockIdx.y;
    const uint4* from = reinterpret_cast<const uint4*>(src + ((size_t)h * Tn + idx[r]) * HD) + ch;
    uint4* to = reinterpret_cast<uint4*>(dst + ((size_t)h * rows + r) * HD) + ch;
    *to = *from;
}
extern "C" __global__ void focus_gather_bf16(const __nv_bfloat16* src, __nv_bfloat16* dst, const int* idx, int Tn, int rows) {
    gather_rows(src, dst, idx, Tn, rows);
}
extern "C" __global__ void focus_gather_f32(const float* src, float* dst, const int* idx, int Tn, int rows) {
    gather_rows(src, dst, idx, Tn, rows);
}

// out[h, i] = the log-sum-exp weighted mean of the band output and the k group outputs of token
// i. The band always holds the diagonal, so its weight is never zero. One warp per (head, token),
// two dims per lane: grid (ceil(H * T / 8)), block 256. (One 64-thread block per token, as
// before, launched 8M blocks at 1M tokens.)
__device__ __forceinline__ void store2(float* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }
__device__ __forceinline__ void store2(__nv_bfloat16* p, float a, float b) {
    *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(a, b);
}

template <typename TO>
__device__ void merge(const float* __restrict__ band_o, const float* __restrict__ band_lse,
                      const float* __restrict__ grp_o, const float* __restrict__ grp_lse,
                      TO* __restrict__ out, long rows, int kk) {
    const long b = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;  // h * T + i
    if (b >= rows) return;
    const int d = 2 * (threadIdx.x & 31);
    const size_t gb = (size_t)b * kk;
    float lb = band_lse[b], mx = lb;
    for (int s = 0; s < kk; ++s) mx = fmaxf(mx, grp_lse[gb + s]);
    float w = expf(lb - mx), wsum = w;
    float2 x = *reinterpret_cast<const float2*>(band_o + (size_t)b * HD + d);
    float a0 = w * x.x, a1 = w * x.y;
    for (int s = 0; s < kk; ++s) {
        float ls = grp_lse[gb + s];
        if (ls == -INFINITY) continue;
        float ws = expf(ls - mx);
        wsum += ws;
        float2 y = *reinterpret_cast<const float2*>(grp_o + (gb + s) * HD + d);
        a0 = fmaf(ws, y.x, a0);
        a1 = fmaf(ws, y.y, a1);
    }
    store2(out + (size_t)b * HD + d, a0 / wsum, a1 / wsum);
}

extern "C" __global__ void focus_merge_f32(const float* band_o, const float* band_lse, const float* grp_o,
                                           const float* grp_lse, float* out, long rows, int kk) {
    merge<float>(band_o, band_lse, grp_o, grp_lse, out, rows, kk);
}
extern "C" __global__ void focus_merge_bf16(const float* band_o, const float* band_lse, const float* grp_o,
                                            const float* grp_lse, __nv_bfloat16* out, long rows, int kk) {
    merge<__nv_bfloat16>(band_o, band_lse, grp_o, grp_lse, out, rows, kk);
}

// Attention sinks [ours]: the first `sink` tokens are kept for every later query. Query i's sink
// keys inside its band (i - j <= window) are already the band's, and those sharing a group with
// it the group pass's; the rest, j < min(sink, i - window) with no shared group, belong to the
// "always attend" set with the band: this pass computes them and merges them into the band's
// partials in place (normalised output, natural-log lse) before the group pass reads those.
// One warp per (head, token), two dims per lane: grid (ceil(H * T / 8)), block 256. A query walks
// at most `sink` keys (a few), one after another.
__device__ __forceinline__ float2 load2(const float* p) { return *reinterpret_cast<const float2*>(p); }
__device__ __forceinline__ float2 load2(const __nv_bfloat16* p) {
    return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
}

template <typename TT>
__device__ void sink_pass(const TT* __restrict__ q, const TT* __restrict__ k, const TT* __restrict__ v,
                          const u32* __restrict__ masks, float* __restrict__ band_o, float* __restrict__ band_lse,
                          int Tn, int rep, int window, int sink, long rows, float scale_log2) {
    const long b = ((long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;  // h * T + i
    if (b >= rows) return;
    const int d = 2 * (threadIdx.x & 31);
    const int h = (int)(b / Tn), i = (int)(b % Tn), kh = h / rep;
    const int end = min(sink, i - window);  // keys j < end (none when i <= window)
    if (end <= 0) return;
    const u32 qm = masks[i];
    const float2 qv = load2(q + (size_t)b * HD + d);
    float m = -INFINITY, l = 0.f, a0 = 0.f, a1 = 0.f;
    for (int j = 0; j < end; ++j) {
        if ((masks[j] & qm) != 0u) continue;  // the group pass has it (the same for the whole warp)
        const size_t kr = ((size_t)kh * Tn + j) * HD + d;
        const float2 kv = load2(k + kr);
        float s = qv.x * kv.x + qv.y * kv.y;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        s *= scale_log2;
        const float mn = fmaxf(m, s);
        const float c = exp2f(m - mn), p = exp2f(s - mn);
        const float2 vv = load2(v + kr);
        l = l * c + p;
        a0 = fmaf(a0, c, p * vv.x);
        a1 = fmaf(a1, c, p * vv.y);
        m = mn;
    }
    if (l == 0.f) return;
    // Merge with the band's partial; the band always holds the diagonal, so its lse is finite.
    const float ls = (m + log2f(l)) * 0.69314718055994531f, lb = band_lse[b];
    const float mx = fmaxf(lb, ls);
    const float wb = expf(lb - mx), ws = expf(ls - mx);
    const float inv = 1.f / (wb + ws), sl = ws / l;
    float* o = band_o + (size_t)b * HD + d;
    const float2 bo = load2(o);
    store2(o, (wb * bo.x + sl * a0) * inv, (wb * bo.y + sl * a1) * inv);
    __syncwarp();  // every lane has read band_lse[b] before lane 0 rewrites it
    if ((threadIdx.x & 31) == 0) band_lse[b] = mx + logf(wb + ws);
}

extern "C" __global__ void focus_sink_f32(const float* q, const float* k, const float* v, const u32* masks, float* band_o,
                                          float* band_lse, int Tn, int rep, int window, int sink, long rows,
                                          float scale_log2) {
    sink_pass<float>(q, k, v, masks, band_o, band_lse, Tn, rep, window, sink, rows, scale_log2);
}
extern "C" __global__ void focus_sink_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                           const u32* masks, float* band_o, float* band_lse, int Tn, int rep,
                                           int window, int sink, long rows, float scale_log2) {
    sink_pass<__nv_bfloat16>(q, k, v, masks, band_o, band_lse, Tn, rep, window, sink, rows, scale_log2);
}
