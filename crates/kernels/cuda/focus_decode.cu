// One generation step's attention on CUDA (attention::decode's `attend`, for a cache on the GPU):
// the newest token's query heads over the cached keys and values, dense or hard top-k Focus,
// flash decoding in one kernel: `decode_partial` gives each (query head, chunk of cached
// positions) an online-softmax partial (`decode_partial2`: two query heads of one KV head a
// block, their K and V rows loaded once), and the last block of a head to finish merges the
// head's partials by log-sum-exp (a second kernel cost a launch and a wait a layer: ~5-8 us of
// a ~60 us SmolLM2 layer on an H200).
//
// Layout: q (H, D); k, v (Hkv, cap, D) with the first n rows of each head filled; masks (cap)
// the cached tokens' top-k sets as bitmasks, the newest (the query's, row n - 1) included. Query head h reads KV head h / rep.
// The Focus rule (focus::mask::classify): position j is kept by the newest query i = n - 1 when
// i - j <= window (local), j < sink (an attention sink [ours], kept and ungated like a local
// key) or when the two top-k sets share a group. A top-k step tests the
// 8-byte set of a distant key and reads the key's row only if it is kept, so no other key's
// bytes are read. Dense and soft steps (topk = 0) keep every key. The layer's own sliding window (Gemma) is the
// start position `from`: earlier keys are outside it for every mode.
// Soft-capping (Gemma 2) acts on each scaled logit: s = cap * tanh(s / cap), when cap > 0.
// Soft mode (gate 1 = log, 2 = paper) gates each distant key by its affinity
// a = memb_i . memb_j with the query (memberships (cap, K), the newest row included), as
// focus::gate::GateFn does: s + ln(a + eps), or s * sigmoid(lambda a).
// f32 throughout (the decode cache is f32); head dims up to 256 (at most 8 values per lane).
// The step's position comes from device memory (`step` = [token id, position], u32, written by
// the host before the step), never from a kernel argument: a step captured once as a CUDA graph
// replays at every position. The grid is sized for the cache's capacity; a chunk past the
// newest token exits at once, and the merge folds only the chunks in use (in the same order as
// a grid of exactly those chunks, so the result does not depend on the capacity, nor on which
// block comes last).

#include <stdint.h>

#define WARPS 4
#define MAXPER 8
// The most positions a partial takes (attention::cuda::decode's MAX_CHUNK).
#define MAXCHUNK 256

// The first position inside the layer's own sliding window (0 for a global layer, own_window 0).
__device__ __forceinline__ int first_position(int n, int own_window) {
    return own_window > 0 && n > own_window ? n - own_window : 0;
}

// Each key is taken by a group of G lanes (a power of two, at most MAXPER values each), so that
// a warp has 32 / G keys in flight: with one key per warp (G = 32 for every head dim) a step
// waited on one row's load after another, and its time hardly depended on the context. A lane
// group takes two keys at a time, their K and V rows loaded together before any arithmetic, and
// every per-lane array is indexed by unrolled constants (registers: with a runtime bound they
// lived in local memory, and each key re-read the query and the accumulator from there).
// Top-k's key sets are loaded with the query, before the first wait.

// A key's score after the layer's soft-cap and the soft gate (see the file's notes).
__device__ __forceinline__ float adjust(float s, int i, int j, float softcap, const float* __restrict__ memb, int groups,
                                        int gate, float gparam, int window, int sink) {
    if (softcap > 0.f) s = softcap * tanhf(s / softcap);
    if (gate != 0 && i - j > window && j >= sink) {
        float a = 0.f;
        for (int g = 0; g < groups; g++) a += memb[(size_t)i * groups + g] * memb[(size_t)j * groups + g];
        s = gate == 1 ? s + logf(a + gparam) : s * (1.f / (1.f + expf(-gparam * a)));
    }
    return s;
}

__device__ void merge_head(const float* part_m, const float* part_l, const float* part_o, float* out, int h, int d,
                           int chunks, int used);

// One block: chunk blockIdx.x of up to RP query heads that share a KV head (GQA): the block
// loads each kept key's K and V rows once for its heads, and tests the chunk's top-k sets once
// (the layer's sets are the same for every head). blockIdx.y = KV head * nsub + sub, the block
// taking the KV head's query heads sub * RP .. sub * RP + RP - 1 (fewer in the last sub). Each
// head's partial is computed exactly as a block of that head alone would (the same keys per lane
// group, in the same order), so the result does not depend on RP.
template <int RP>
__device__ __forceinline__ void decode_block(
    const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
    const unsigned long long* __restrict__ masks, float* __restrict__ part_m, float* __restrict__ part_l,
    float* __restrict__ part_o, const unsigned* __restrict__ step, int own_window, int cap, int d, int rep,
    int chunk, int chunks, int topk, int window, int sink, float scale, float softcap,
    const float* __restrict__ memb, int groups, int gate, float gparam, float* __restrict__ out,
    unsigned* __restrict__ arrivals, int nsub) {
    const int c = blockIdx.x;
    const int kvh = blockIdx.y / nsub, sub = blockIdx.y % nsub;
    const int h0 = kvh * rep + sub * RP;
    // Heads this block takes (a compile-time 1 for RP = 1: so the one-head kernel needs 92
    // registers, 94 before the template, 127 with a runtime count).
    const int nh = RP == 1 ? 1 : min(RP, rep - sub * RP);
    const int n = (int)step[1] + 1, from = first_position(n, own_window);
    // Chunks past the newest token (the grid covers the capacity): nothing to do. The whole
    // block leaves together, before any barrier.
    if (n > cap || from + c * chunk >= n) return;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int i = n - 1;
    const int lo = from + c * chunk, hi = min(n, lo + chunk);
    // The query's own top-k set, from the device mirror (the routing kernel wrote it there in
    // this step, or the host synced it): no routing value is a kernel argument. The chunk's
    // sets (at most MAXCHUNK = 2 x the block) are loaded at once, beside it and the query.
    unsigned long long qmask = 0ull, kset[MAXCHUNK / (WARPS * 32)];
#pragma unroll
    for (int r = 0; r < MAXCHUNK / (WARPS * 32); r++) {
        const int j = lo + r * WARPS * 32 + threadIdx.x;
        kset[r] = topk && j < hi ? masks[j] : 0ull;
    }
    if (topk) qmask = masks[i];
    int G = 1;
    while (G < 32 && G * MAXPER < d) G <<= 1;
    const int sub_g = lane / G, gl = lane % G;
    const unsigned gmask = G == 32 ? 0xffffffffu : ((1u << G) - 1u) << (sub_g * G);
    // This lane group's slot among the block's NG groups; the groups take keys in turn.
    const int NG = WARPS * (32 / G), slot = warp * (32 / G) + sub_g;
    // Lane gl holds dimensions gl, gl + G, ... (at most MAXPER of them), for each head.
    bool in[MAXPER];
    float qr[RP][MAXPER], acc[RP][MAXPER], m[RP], l[RP];
#pragma unroll
    for (int e = 0; e < MAXPER; e++) in[e] = gl + G * e < d;
#pragma unroll
    for (int hh = 0; hh < RP; hh++) {
#pragma unroll
        for (int e = 0; e < MAXPER; e++) {
            qr[hh][e] = hh < nh && in[e] ? q[(h0 + hh) * d + gl + G * e] * scale : 0.f;
            acc[hh][e] = 0.f;
        }
        m[hh] = -INFINITY;
        l[hh] = 0.f;
    }
    const float* kh = k + (size_t)kvh * cap * d;
    const float* vh = v + (size_t)kvh * cap * d;
    // Top-k: the chunk's kept positions first, in order, listed by the whole block (a ballot
    // per warp), so that the lane groups then take kept keys only and never wait on a test.
    __shared__ int kept_pos[MAXCHUNK];
    __shared__ int warp_count[WARPS];
    int nkept = hi - lo;
    if (topk) {
        nkept = 0;
#pragma unroll
        for (int r = 0; r < MAXCHUNK / (WARPS * 32); r++) {
            const int base = lo + r * WARPS * 32;
            if (base >= hi) break;
            const int j = base + threadIdx.x;
            // Local keys and sink keys j < sink [ours] are kept whatever their set.
            const bool keep = j < hi && (i - j <= window || j < sink || (kset[r] & qmask) != 0ull);
            const unsigned ballot = __ballot_sync(0xffffffffu, keep);
            if (lane == 0) warp_count[warp] = __popc(ballot);
            __syncthreads();
            int before = nkept;
            for (int w = 0; w < warp; w++) before += warp_count[w];
            if (keep) kept_pos[before + __popc(ballot & ((1u << lane) - 1u))] = j;
            for (int w = 0; w < WARPS; w++) nkept += warp_count[w];
            __syncthreads();
        }
    }
    for (int idx = slot; idx < nkept; idx += 2 * NG) {
        const bool two = idx + NG < nkept;
        const int j0 = topk ? kept_pos[idx] : lo + idx;
        const int j1 = two ? (topk ? kept_pos[idx + NG] : lo + idx + NG) : j0;
        const float* k0 = kh + (size_t)j0 * d + gl;
        const float* k1 = kh + (size_t)j1 * d + gl;
        const float* v0 = vh + (size_t)j0 * d + gl;
        const float* v1 = vh + (size_t)j1 * d + gl;
        float ka[MAXPER], kb[MAXPER], va[MAXPER], vb[MAXPER];
#pragma unroll
        for (int e = 0; e < MAXPER; e++) {
            ka[e] = in[e] ? k0[G * e] : 0.f;
            kb[e] = in[e] ? k1[G * e] : 0.f;
            va[e] = in[e] ? v0[G * e] : 0.f;
            vb[e] = in[e] ? v1[G * e] : 0.f;
        }
#pragma unroll
        for (int hh = 0; hh < RP; hh++) {
            if (hh >= nh) break;
            float s0 = 0.f, s1 = 0.f;
#pragma unroll
            for (int e = 0; e < MAXPER; e++) {
                s0 += qr[hh][e] * ka[e];
                s1 += qr[hh][e] * kb[e];
            }
            // Within the group only: the other groups of the warp may be at another key.
            for (int o = G / 2; o > 0; o >>= 1) {
                s0 += __shfl_xor_sync(gmask, s0, o);
                s1 += __shfl_xor_sync(gmask, s1, o);
            }
            s0 = adjust(s0, i, j0, softcap, memb, groups, gate, gparam, window, sink);
            s1 = two ? adjust(s1, i, j1, softcap, memb, groups, gate, gparam, window, sink) : -INFINITY;
            const float mn = fmaxf(m[hh], fmaxf(s0, s1));
            const float corr = expf(m[hh] - mn), p0 = expf(s0 - mn), p1 = two ? expf(s1 - mn) : 0.f;
            l[hh] = l[hh] * corr + p0 + p1;
#pragma unroll
            for (int e = 0; e < MAXPER; e++) acc[hh][e] = acc[hh][e] * corr + p0 * va[e] + p1 * vb[e];
            m[hh] = mn;
        }
    }
    // Per head: merge the block's lane groups (NG x (d + 1) <= WARPS x 32 x (MAXPER + 1)
    // values; a group's row padded by one so that the groups of a warp write to different
    // banks) into the head's partial for this chunk.
    __shared__ float sm[WARPS * 32], sl[WARPS * 32], sf[WARPS * 32];
    __shared__ float so[WARPS * 32 * (MAXPER + 1)];
    const int dp = (d + 3) & ~3;
#pragma unroll
    for (int hh = 0; hh < RP; hh++) {
        if (hh >= nh) break;
        const int h = h0 + hh;
        if (gl == 0) {
            sm[slot] = m[hh];
            sl[slot] = l[hh];
        }
#pragma unroll
        for (int e = 0; e < MAXPER; e++)
            if (in[e]) so[slot * (d + 1) + gl + G * e] = acc[hh][e];
        __syncthreads();
        float mm = -INFINITY;
        for (int g = 0; g < NG; g++) mm = fmaxf(mm, sm[g]);
        // Each group's weight once.
        if (threadIdx.x < NG) sf[threadIdx.x] = sm[threadIdx.x] == -INFINITY ? 0.f : expf(sm[threadIdx.x] - mm);
        __syncthreads();
        // A partial's row is padded to a multiple of 4 values (zeros), for the merge's float4 loads.
        const size_t row = (size_t)h * chunks + c;
        for (int x = threadIdx.x; x < dp; x += blockDim.x) {
            float ll = 0.f, oo = 0.f;
            for (int g = 0; g < NG; g++) {
                ll += sf[g] * sl[g];
                oo += x < d ? sf[g] * so[g * (d + 1) + x] : 0.f;
            }
            if (x == 0) {
                part_m[row] = mm;
                part_l[row] = ll;
            }
            part_o[row * dp + x] = oo;
        }
        // The shared rows are rewritten by the next head.
        __syncthreads();
    }
    // Each head's blocks in use count their arrival after their partial is visible (fence);
    // the last one merges them all and clears the count for the next launch.
    const int used = min(chunks, (n - from + chunk - 1) / chunk);
    __shared__ unsigned last_mask;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned lm = 0u;
        for (int hh = 0; hh < nh; hh++)
            if (atomicAdd(&arrivals[h0 + hh], 1u) == (unsigned)(used - 1)) lm |= 1u << hh;
        last_mask = lm;
    }
    __syncthreads();
    if (last_mask == 0u) return;
    __threadfence();
    for (int hh = 0; hh < nh; hh++) {
        if (!(last_mask & (1u << hh))) continue;
        merge_head(part_m, part_l, part_o, out, h0 + hh, d, chunks, used);
        if (threadIdx.x == 0) arrivals[h0 + hh] = 0;
        __syncthreads();
    }
}

#define DECODE_ARGS                                                                                                     \
    const float *__restrict__ q, const float *__restrict__ k, const float *__restrict__ v,                             \
        const unsigned long long *__restrict__ masks, float *__restrict__ part_m, float *__restrict__ part_l,           \
        float *__restrict__ part_o, const unsigned *__restrict__ step, int own_window, int cap, int d, int rep,          \
        int chunk, int chunks, int topk, int window, int sink, float scale, float softcap,                              \
        const float *__restrict__ memb, int groups, int gate, float gparam, float *__restrict__ out,                    \
        unsigned *__restrict__ arrivals, int nsub
#define DECODE_PASS                                                                                                     \
    q, k, v, masks, part_m, part_l, part_o, step, own_window, cap, d, rep, chunk, chunks, topk, window, sink, scale,   \
        softcap, memb, groups, gate, gparam, out, arrivals, nsub

// One query head a block (every shape), or two of a KV head (decode.rs: heads_per_block).
extern "C" __global__ void decode_partial(DECODE_ARGS) { decode_block<1>(DECODE_PASS); }
extern "C" __global__ void decode_partial2(DECODE_ARGS) { decode_block<2>(DECODE_PASS); }

// out (H, D) row h: head h's partials of its `used` chunks merged (`chunks`: the partials' row
// length, the grid's chunks), by the block of WARPS x 32 threads that finished last. The
// partials were written by other blocks: read through L2 (__ldcg), never a stale L1 line. The
// chunks' maximum and weights in parallel (weights into dynamic shared memory, `chunks`
// floats), then the block splits into 128 / (D' / 4) sets of float4 columns (D' = D rounded up
// to a multiple of 4: the partials' row length), set s summing chunks s, s + sets, ...: a
// thread waits on ~used / sets loads, not ~used (one thread per dimension through every chunk
// took ~17 us a layer at 8K). The sets' sums are added in set order: the order depends on the
// chunk count alone.
__device__ __forceinline__ float block_reduce(float x, float* red, bool is_max) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    for (int o = 16; o > 0; o >>= 1) {
        const float y = __shfl_xor_sync(0xffffffffu, x, o);
        x = is_max ? fmaxf(x, y) : x + y;
    }
    __syncthreads();
    if (lane == 0) red[warp] = x;
    __syncthreads();
    float r = red[0];
    for (int w = 1; w < warps; w++) r = is_max ? fmaxf(r, red[w]) : r + red[w];
    return r;
}

__device__ void merge_head(const float* part_m, const float* part_l, const float* part_o, float* out, int h, int d,
                           int chunks, int used) {
    extern __shared__ float wt[];
    __shared__ float red[WARPS];
    __shared__ float4 so[WARPS * 32];
    const int x = threadIdx.x, T = blockDim.x;
    const float* pm = part_m + (size_t)h * chunks;
    const float* pl = part_l + (size_t)h * chunks;
    float mm = -INFINITY;
    for (int c = x; c < used; c += T) mm = fmaxf(mm, __ldcg(pm + c));
    mm = block_reduce(mm, red, true);
    float ll = 0.f;
    for (int c = x; c < used; c += T) {
        const float m = __ldcg(pm + c);
        const float f = m == -INFINITY ? 0.f : expf(m - mm);
        wt[c] = f;
        ll += f * __ldcg(pl + c);
    }
    ll = block_reduce(ll, red, false);
    // wt is complete: block_reduce's barriers follow the writes.
    const int dp = (d + 3) & ~3, cols = dp / 4, sets = T / cols, set = x / cols, col = x % cols;
    const float4* po = reinterpret_cast<const float4*>(part_o + (size_t)h * chunks * dp);
    float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
    if (set < sets) {
#pragma unroll 4
        for (int c = set; c < used; c += sets) {
            const float4 p = __ldcg(po + (size_t)c * cols + col);
            const float w = wt[c];
            o.x += w * p.x;
            o.y += w * p.y;
            o.z += w * p.z;
            o.w += w * p.w;
        }
        so[set * cols + col] = o;
    }
    __syncthreads();
    if (x < cols) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int s2 = 0; s2 < sets; s2++) {
            const float4 p = so[s2 * cols + x];
            acc.x += p.x;
            acc.y += p.y;
            acc.z += p.z;
            acc.w += p.w;
        }
        const float r[4] = {acc.x / ll, acc.y / ll, acc.z / ll, acc.w / ll};
#pragma unroll
        for (int e = 0; e < 4; e++)
            if (4 * x + e < d) out[(size_t)h * d + 4 * x + e] = r[e];
    }
}

// A step's new key and value rows into the cache at the step's position: k_new, v_new (Hkv, D),
// k, v (Hkv, cap, D). One block per KV head. A position past the capacity writes nothing (the
// host reserves room before the step).
extern "C" __global__ void kv_append(float* __restrict__ k, float* __restrict__ v, const float* __restrict__ k_new,
                                     const float* __restrict__ v_new, const unsigned* __restrict__ step, int cap, int d) {
    const int h = blockIdx.x;
    const unsigned pos = step[1];
    if (pos >= (unsigned)cap) return;
    const size_t row = ((size_t)h * cap + pos) * d;
    for (int x = threadIdx.x; x < d; x += blockDim.x) {
        k[row + x] = k_new[h * d + x];
        v[row + x] = v_new[h * d + x];
    }
}
