// One generation step's Focus routing on CUDA (attention::cuda::route): the newest token's router
// projection, scores, causal Sinkhorn row and top-k set, written into the layer cache's device
// mirror, so that the decode kernel reads the query's set from device memory and no routing
// value crosses to the host inside a step. At the end, route_topk_rows: a prefill's top-k
// routing of T tokens from their scores, so that only the masks cross to the host.
//
// One block of ROUTE_THREADS threads per call (the work is d_model x d_g multiply-adds and
// iters x K Sinkhorn terms). The same arithmetic as the host (focus::router's one-row scores,
// focus::sinkhorn::CausalSinkhorn::push, focus::mask::topk_mask):
//   v = (h * scale) W_g            (scale: an optional per-channel router input scale, or null)
//   s_g = v . C_g                  (cosine: v / |v| . C_g / |C_g|, each norm sqrt(sum x^2 + 1e-12))
//   l = s / tau; per iteration and group: run_g = logaddexp(run_g, l_g); l_g -= run_g;
//   then l -= logsumexp(l) (also once when iters == 0); memberships = exp(l) as f32.
//   top-k set: the k largest f32 memberships, ties to the lower group (a stable descending sort).
// The running state `run` (iters x K f64, the per-iteration prefix log-sum-exps) is updated in
// place. Sinkhorn runs in f32 here (the host's in f64): its chain of 10 iterations is the
// kernel's critical path, and in f64 it took ~6.6 us of a ~14 us call on an H200, longer than
// the Q/K/V work it runs beside (one lane per group; one lane running all groups with the
// library's log1pf and division took ~14 us); the iteration's exp, log and division are the
// hardware's. The sums also run in another order than the host's loops (a tree over lanes),
// so memberships agree to ~1e-6 and the state to ~1e-6 relative (the tests allow 2e-4 and
// 1e-3).
//
// Outputs: memberships row `pos` (step[1]) of memb (cap, K) f32, masks[pos] (i64 bit pattern), and the
// step record `rec` (f64): [scores K][memberships K][run iters x K], which the host copies once
// per step, for all layers at once, to fill its mirror of the routing.

#include "focus_common.cuh"    // rank_in_row
#include "focus_sinkhorn.cuh"  // SK_THREADS, sk_layout, sk_forward (training's Sinkhorn)

#define ROUTE_THREADS 1024
// Groups per lane in the Sinkhorn warp (K <= 64).
#define GPL 2

// Over the lanes of each aligned run of `width` (a power of two, at most 32): Sinkhorn's
// reductions take only the lanes that hold groups (8 of them for K = 8: 3 shuffle rounds, not 5,
// in a chain of 10 iterations).
__device__ __forceinline__ float warp_max(float x, int width) {
    for (int o = width / 2; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

__device__ __forceinline__ float warp_sum(float x, int width) {
    for (int o = width / 2; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

__device__ __forceinline__ float warp_sumf(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// log(sum exp(l)) over the warp's groups (lane g holds l[g] and l[g + 32]; -inf pads);
// -inf when every term is -inf, as the host's log_sum_exp.
// Every lane of the warp runs both reductions (the shuffles name the whole warp): lanes past
// the groups' run hold -inf and must not leave early.
__device__ __forceinline__ float warp_lse(const float* l, int width) {
    float m = -INFINITY;
    for (int e = 0; e < GPL; e++) m = fmaxf(m, l[e]);
    m = warp_max(m, width);
    float s = 0.f;
    for (int e = 0; e < GPL; e++) s += l[e] == -INFINITY ? 0.f : expf(l[e] - m);
    s = warp_sum(s, width);
    return m == -INFINITY ? m : m + logf(s);
}

// Rows of W_g a thread loads at once (all in flight before the first multiply-add).
#define ROWS_IN_FLIGHT 16

extern "C" __global__ void route_newest(
    const float* __restrict__ h, const float* __restrict__ scale, const float* __restrict__ proj,
    const float* __restrict__ centroids, int dm, int dg, int groups, int cosine, double tau, int iters,
    int k, double* __restrict__ run, float* __restrict__ memb, long long* __restrict__ masks,
    const unsigned* __restrict__ step, int cap, double* __restrict__ rec, int centroids_shared,
    const float* __restrict__ nw, float eps) {
    // Dynamic shared memory: the Sinkhorn state (iters x K, f32 here, written back as f64
    // once: a global round trip per iteration cost more than the arithmetic), then v (dg), the
    // per-slice partial sums (at most T), the scaled input (dm) and, when they fit, the
    // centroids (K x dg).
    extern __shared__ float shd[];
    float* srun = shd;
    float* v = srun + iters * groups;
    float* part = v + dg;
    float* hs = part + blockDim.x;
    float* cs = hs + dm;
    __shared__ float s_scores[64];
    __shared__ float s_memb[64];
    __shared__ unsigned long long s_mask;
    const int t = threadIdx.x, T = blockDim.x;
    const int warp = t / 32, lane = t % 32, warps = T / 32;

    // Every load that does not depend on another is issued first (the state, the input, the
    // centroids, the first rows of W_g): the kernel's time was a chain of load latencies.
    // With `nw` the input is the residual row and its RMS norm applies here: x * nw staged,
    // and v scaled by rsqrt(mean(x^2) + eps) once the squares are summed (beside the loads).
    __shared__ float s_sq[ROUTE_THREADS / 32];
    for (int x = t; x < iters * groups; x += T) srun[x] = (float)run[x];
    float sq = 0.f;
    for (int r = t; r < dm; r += T) {
        const float x = h[r];
        sq += x * x;
        hs[r] = (scale ? x * scale[r] : x) * (nw ? nw[r] : 1.f);
    }
    sq = warp_sumf(sq);
    if (lane == 0) s_sq[warp] = sq;
    if (centroids_shared)
        for (int x = t; x < groups * dg; x += T) cs[x] = centroids[x];
    const float* cen = centroids_shared ? cs : centroids;
    // v = (h * scale) W_g: columns in tiles of up to T; each tile's T / cols row slices summed
    // in shared memory (W_g is row-major, so consecutive threads read consecutive columns).
    // A thread's rows are loaded ROWS_IN_FLIGHT at a time into registers, then multiplied.
    for (int c0 = 0; c0 < dg; c0 += T) {
        const int cols = min(T, dg - c0);
        const int slices = T / cols;
        const int c = t % cols, sl = t / cols;
        const bool mine = sl < slices;
        float acc = 0.f;
        // Every thread runs the first batch, whose barrier publishes the staged input.
        for (int r0 = sl;; r0 += ROWS_IN_FLIGHT * slices) {
            float w[ROWS_IN_FLIGHT];
#pragma unroll
            for (int u = 0; u < ROWS_IN_FLIGHT; u++) {
                const int r = r0 + u * slices;
                w[u] = mine && r < dm ? proj[(size_t)r * dg + c0 + c] : 0.f;
            }
            if (c0 == 0 && r0 == sl) __syncthreads();
#pragma unroll
            for (int u = 0; u < ROWS_IN_FLIGHT; u++) {
                const int r = r0 + u * slices;
                if (mine && r < dm) acc += hs[r] * w[u];
            }
            if (r0 + ROWS_IN_FLIGHT * slices >= dm) break;
        }
        if (sl < slices) part[sl * cols + c] = acc;
        __syncthreads();
        // The norm's scale, from the warps' sums of squares (published by the barriers above),
        // summed by every warp (the columns may span several).
        const float inv = nw ? rsqrtf(warp_sumf(lane < warps ? s_sq[lane] : 0.f) / dm + eps) : 1.f;
        if (t < cols) {
            float s = 0.f;
            for (int q = 0; q < slices; q++) s += part[q * cols + t];
            v[c0 + t] = s * inv;
        }
        __syncthreads();
    }

    // Scores: one warp per group at a time.
    float vnorm = 1.f;
    if (cosine) {
        float ss = 0.f;
        for (int c = lane; c < dg; c += 32) ss += v[c] * v[c];
        vnorm = sqrtf(warp_sumf(ss) + 1e-12f);
    }
    for (int g = warp; g < groups; g += warps) {
        const float* cg = cen + (size_t)g * dg;
        float dot = 0.f, cc = 0.f;
        for (int c = lane; c < dg; c += 32) {
            dot += v[c] * cg[c];
            cc += cg[c] * cg[c];
        }
        dot = warp_sumf(dot);
        if (cosine) dot = dot / vnorm / sqrtf(warp_sumf(cc) + 1e-12f);
        if (lane == 0) s_scores[g] = dot;
    }
    __syncthreads();

    // The token's position from device memory (step = [id, position]): a step captured as a
    // CUDA graph replays at every position. Past the capacity nothing is written (the host
    // reserves room before the step); read here, after the loads above were issued.
    const int pos = (int)step[1];
    if (pos >= cap) return;

    // Causal Sinkhorn's row, on warp 0: lane g holds groups g and g + 32.
    if (warp == 0) {
        int width = 1;
        while (width < groups && width < 32) width <<= 1;
        float l[GPL];
        for (int e = 0; e < GPL; e++) {
            const int g = lane + 32 * e;
            l[e] = g < groups ? s_scores[g] / (float)tau : -INFINITY;
        }
        for (int it = 0; it < iters; it++) {
            float* r = srun + (size_t)it * groups;
            // exp(l) after the column step is sigmoid(x - r_old), which the log-add-exp's own
            // exp(-|x - r_old|) gives without another exp; so the row's log-sum-exp is the log
            // of a plain sum (no maximum), unless that sum underflows (then the shifted one).
            float p = 0.f;
            for (int e = 0; e < GPL; e++) {
                const int g = lane + 32 * e;
                if (g < groups) {
                    const float x = l[e], ro = r[g];
                    const float a = fmaxf(ro, x), b = fminf(ro, x);
                    // The hardware's exp, log and division (the library's log1pf and
                    // division were most of an iteration's chain): 1 + tt is in [1, 2], where
                    // __logf's absolute error is ~4e-7.
                    const float tt = b == -INFINITY ? 0.f : __expf(b - a);
                    r[g] = a + __logf(1.f + tt);
                    l[e] = x - r[g];
                    p += __fdividef(x >= ro ? 1.f : tt, 1.f + tt);
                }
            }
            // The same value on every lane of the run (and 0 past it), taken from lane 0, so
            // that the whole warp takes the same branch into warp_lse's shuffles.
            const float sum = __shfl_sync(0xffffffffu, warp_sum(p, width), 0);
            const float z = sum > 1e-30f ? __logf(sum) : warp_lse(l, width);
            for (int e = 0; e < GPL; e++) l[e] -= z;
        }
        if (iters == 0) {
            const float z = warp_lse(l, width);
            for (int e = 0; e < GPL; e++) l[e] -= z;
        }
        for (int e = 0; e < GPL; e++) {
            const int g = lane + 32 * e;
            if (g < groups) s_memb[g] = expf(l[e]);
        }
        if (lane == 0) s_mask = 0ull;
        __syncwarp();
        // Top-k: group g is kept when fewer than k groups rank before it (larger, or equal
        // with a lower index).
        for (int e = 0; e < GPL; e++) {
            const int g = lane + 32 * e;
            if (g < groups && rank_in_row(s_memb, groups, g) < k) atomicOr(&s_mask, 1ull << g);
        }
        __syncwarp();
        for (int e = 0; e < GPL; e++) {
            const int g = lane + 32 * e;
            if (g < groups) {
                memb[(size_t)pos * groups + g] = s_memb[g];
                rec[g] = (double)s_scores[g];
                rec[groups + g] = (double)s_memb[g];
            }
        }
        if (lane == 0) masks[pos] = (long long)s_mask;
    }
    __syncthreads();
    // The updated running state back, and into the record.
    for (int x = t; x < iters * groups; x += T) {
        run[x] = (double)srun[x];
        rec[2 * groups + x] = (double)srun[x];
    }
}

// ---------------------------------------------------------------------------------------------
// A token's top-k mask from its log-memberships l (K <= 32): the k largest exp(l), ties to the
// lower group (rank_in_row), or 0 when a membership is not finite (no top-k set is 0).
// Inlined with its loops unrolled, so that a caller's row held in registers stays there.
__device__ __forceinline__ unsigned topk_mask_of_logs(const float* l, int K, int k) {
    float g[32];
    bool finite = true;
#pragma unroll
    for (int x = 0; x < 32; ++x)
        if (x < K) {
            g[x] = __expf(l[x]);
            finite = finite && isfinite(g[x]);
        }
    unsigned m = 0;
    if (finite)
        for (int x = 0; x < K; ++x)
            if (rank_in_row(g, K, x) < k) m |= 1u << x;
    return m;
}

// ---------------------------------------------------------------------------------------------
// A prefill's top-k routing (attention::cuda::route::topk_masks): the scores of T tokens (T x K
// f32, s = h W_g . C) balanced by training's Sinkhorn (focus_sinkhorn.cuh: l = s / tau, iters
// column then row steps, causal or over the whole sequence; f32, the host's in f64), then each
// token's k largest memberships exp(l) as a bit mask, ties to the lower group (rank_in_row, as
// focus::mask::topk_mask). A row with a non-finite membership gets mask 0, which no top-k set
// is (k >= 1): the host refuses the pass (Adapter::check_memberships' error). One block; `l`
// (T x K f32) is the working space. K <= 32. Causal Sinkhorn's prefix sums take this kernel;
// Sinkhorn over the whole sequence takes the many-block kernels below (one block holds one SM:
// at 32K tokens this one took ~3.5 ms a layer on an H100).
extern "C" __global__ void __launch_bounds__(SK_THREADS) route_topk_rows(const float* __restrict__ s, float* __restrict__ l,
                                                                         unsigned* __restrict__ masks, int T, int K,
                                                                         float inv_tau, int iters, int causal, int k) {
    __shared__ LseAcc part[SK_THREADS];
    const size_t n = (size_t)T * K;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) l[i] = s[i] * inv_tau;
    __syncthreads();
    const SkLayout L = sk_layout(T, K);
    sk_forward(l, nullptr, T, K, iters, causal != 0, L, part);
    for (int t = threadIdx.x; t < T; t += blockDim.x) masks[t] = topk_mask_of_logs(l + (size_t)t * K, K, k);
}

// Sinkhorn over the whole sequence (not causal) and the top-k masks on many blocks: one thread a
// token, ROWS_PER_BLOCK tokens a block. Each launch is one iteration: every block first adds up
// the previous launch's per-block column partials (max, sum of exp) into the columns'
// log-sum-exps, then takes them off its rows, normalises each row over its groups and writes its
// own partials of the result for the next launch (two buffers, alternating); the last launch
// writes the masks as route_topk_rows does. route_rows_init scales the scores by 1 / tau and
// writes the first partials. The same arithmetic as focus_sinkhorn.cuh's (f32, __expf/__logf),
// with the column sums added in another order.
#define ROWS_PER_BLOCK 256
#define MAX_GROUPS 32

// This block's (max, sum of exp) of each column of its rows' values v (K per thread; rows past
// T pass valid = false) into part[0..K). `sh` holds 2 x K x (ROWS_PER_BLOCK / 32) floats.
__device__ void block_column_partials(const float* v, bool valid, int K, LseAcc* part, float* sh) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = ROWS_PER_BLOCK / 32;
    float* smax = sh;
    float* ssum = sh + K * warps;
#pragma unroll
    for (int k = 0; k < MAX_GROUPS; ++k) {
        if (k >= K) break;
        float m = valid ? v[k] : -INFINITY;
        for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
        if (lane == 0) smax[k * warps + warp] = m;
    }
    __syncthreads();
    __shared__ float colmax[MAX_GROUPS];
    if (threadIdx.x < K) {
        float m = -INFINITY;
        for (int w = 0; w < warps; ++w) m = fmaxf(m, smax[threadIdx.x * warps + w]);
        colmax[threadIdx.x] = m;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < MAX_GROUPS; ++k) {
        if (k >= K) break;
        const float m = colmax[k];
        float e = valid && m != -INFINITY && v[k] != -INFINITY ? __expf(v[k] - m) : 0.f;
        for (int o = 16; o > 0; o >>= 1) e += __shfl_xor_sync(0xffffffffu, e, o);
        if (lane == 0) ssum[k * warps + warp] = e;
    }
    __syncthreads();
    if (threadIdx.x < K) {
        float e = 0.f;
        for (int w = 0; w < warps; ++w) e += ssum[threadIdx.x * warps + w];
        part[threadIdx.x] = {colmax[threadIdx.x], e};
    }
}

extern "C" __global__ void __launch_bounds__(ROWS_PER_BLOCK) route_rows_init(const float* __restrict__ s, float* __restrict__ l,
                                                                              LseAcc* __restrict__ part, int T, int K, float inv_tau) {
    __shared__ float sh[2 * MAX_GROUPS * (ROWS_PER_BLOCK / 32)];
    const int t = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x;
    const bool valid = t < T;
    float v[MAX_GROUPS];
#pragma unroll
    for (int k = 0; k < MAX_GROUPS; ++k)
        if (k < K && valid) {
            v[k] = s[(size_t)t * K + k] * inv_tau;
            l[(size_t)t * K + k] = v[k];
        }
    block_column_partials(v, valid, K, part + (size_t)blockIdx.x * K, sh);
}

// One iteration (cols = 1: the column step, then the row step; cols = 0: the row step alone,
// the softmax of zero iterations). `last`: write the masks (k of them a token) instead of
// partials.
extern "C" __global__ void __launch_bounds__(ROWS_PER_BLOCK) route_rows_step(float* __restrict__ l, const LseAcc* __restrict__ pin,
                                                                              LseAcc* __restrict__ pout, unsigned* __restrict__ masks,
                                                                              int T, int K, int cols, int last, int k) {
    __shared__ float sh[2 * MAX_GROUPS * (ROWS_PER_BLOCK / 32)];
    __shared__ float z[MAX_GROUPS];
    if (threadIdx.x < K) {
        LseAcc a = {-INFINITY, 0.f};
        if (cols)
            for (int b = 0; b < gridDim.x; ++b) a = lse_join(a, pin[(size_t)b * K + threadIdx.x]);
        z[threadIdx.x] = cols ? lse_val(a) : 0.f;
    }
    __syncthreads();
    const int t = blockIdx.x * ROWS_PER_BLOCK + threadIdx.x;
    const bool valid = t < T;
    float v[MAX_GROUPS];
    float m = -INFINITY;
#pragma unroll
    for (int x = 0; x < MAX_GROUPS; ++x)
        if (x < K && valid) {
            v[x] = l[(size_t)t * K + x] - z[x];
            m = fmaxf(m, v[x]);
        }
    float e = 0.f;
#pragma unroll
    for (int x = 0; x < MAX_GROUPS; ++x)
        if (x < K && valid && v[x] != -INFINITY) e += __expf(v[x] - m);
    const float r = m == -INFINITY ? m : m + __logf(e);
#pragma unroll
    for (int x = 0; x < MAX_GROUPS; ++x)
        if (x < K && valid) {
            v[x] -= r;
            if (!last) l[(size_t)t * K + x] = v[x];
        }
    if (!last) {
        block_column_partials(v, valid, K, pout + (size_t)blockIdx.x * K, sh);
        return;
    }
    if (valid) masks[t] = topk_mask_of_logs(v, K, k);
}
