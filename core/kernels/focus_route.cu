// One generation step's Focus routing on CUDA (attention::cuda::route): the newest token's router
// projection, scores, causal Sinkhorn row and top-k set, written into the layer cache's device
// mirror, so that the decode kernel reads the query's set from device memory and no routing
// value crosses to the host inside a step.
//
// One block of ROUTE_THREADS threads per call (the work is d_model x d_g multiply-adds and
// iters x K Sinkhorn terms). The same arithmetic as the host (focus::router's one-row scores,
// focus::sinkhorn::CausalSinkhorn::push, focus::mask::topk_mask):
//   v = (h * scale) W_g            (scale: an optional per-channel router input scale, or null)
//   s_g = v . C_g                  (cosine: v / |v| . C_g / |C_g|, each norm sqrt(sum x^2 + 1e-12))
//   l = s / tau (f64); per iteration and group: run_g = logaddexp(run_g, l_g); l_g -= run_g;
//   then l -= logsumexp(l) (also once when iters == 0); memberships = exp(l) as f32.
//   top-k set: the k largest f32 memberships, ties to the lower group (a stable descending sort).
// The running state `run` (iters x K f64, the per-iteration prefix log-sum-exps) is updated in
// place. The sums run in another order than the host's loops (a tree over lanes), so values
// agree to rounding (f64 in Sinkhorn: far below f32's resolution).
//
// Outputs: memberships row `pos` (step[1]) of memb (cap, K) f32, masks[pos] (i64 bit pattern), and the
// step record `rec` (f64): [scores K][memberships K][run iters x K], which the host copies once
// per step, for all layers at once, to fill its mirror of the routing.

#include <stdint.h>

#define ROUTE_THREADS 256
// Groups per lane in the Sinkhorn warp (K <= 64).
#define GPL 2

// Over the lanes of each aligned run of `width` (a power of two, at most 32): Sinkhorn's
// reductions take only the lanes that hold groups (8 of them for K = 8: 3 shuffle rounds, not 5,
// in a chain of 10 iterations).
__device__ __forceinline__ double warp_max(double x, int width) {
    for (int o = width / 2; o > 0; o >>= 1) x = fmax(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

__device__ __forceinline__ double warp_sum(double x, int width) {
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
__device__ __forceinline__ double warp_lse(const double* l, int width) {
    double m = -INFINITY;
    for (int e = 0; e < GPL; e++) m = fmax(m, l[e]);
    m = warp_max(m, width);
    double s = 0.0;
    for (int e = 0; e < GPL; e++) s += l[e] == -INFINITY ? 0.0 : exp(l[e] - m);
    s = warp_sum(s, width);
    return m == -INFINITY ? m : m + log(s);
}

extern "C" __global__ void route_newest(
    const float* __restrict__ h, const float* __restrict__ scale, const float* __restrict__ proj,
    const float* __restrict__ centroids, int dm, int dg, int groups, int cosine, double tau, int iters,
    int k, double* __restrict__ run, float* __restrict__ memb, long long* __restrict__ masks,
    const unsigned* __restrict__ step, int cap, double* __restrict__ rec) {
    // The token's position from device memory (step = [id, position]): a step captured as a
    // CUDA graph replays at every position. Past the capacity nothing is written (the host
    // reserves room before the step).
    const int pos = (int)step[1];
    if (pos >= cap) return;
    // Dynamic shared memory: the Sinkhorn state (iters x K f64, worked on here and written back
    // once: a global round trip per iteration cost more than the arithmetic), then v (dg), the
    // per-slice partial sums (at most T) and the scaled input (dm).
    extern __shared__ double shd[];
    double* srun = shd;
    float* v = (float*)(shd + iters * groups);
    float* part = v + dg;
    float* hs = part + blockDim.x;
    __shared__ float s_scores[64];
    __shared__ float s_memb[64];
    __shared__ unsigned long long s_mask;
    const int t = threadIdx.x, T = blockDim.x;
    const int warp = t / 32, lane = t % 32, warps = T / 32;

    for (int x = t; x < iters * groups; x += T) srun[x] = run[x];
    for (int r = t; r < dm; r += T) hs[r] = scale ? h[r] * scale[r] : h[r];
    __syncthreads();
    // v = (h * scale) W_g: columns in tiles of up to T; each tile's T / cols row slices summed
    // in shared memory (W_g is row-major, so consecutive threads read consecutive columns). The
    // row loop is unrolled so that a thread has several loads in flight: with one at a time a
    // routing call waited on ~dm / slices load latencies in a row (~30 us a layer on an H200).
    for (int c0 = 0; c0 < dg; c0 += T) {
        const int cols = min(T, dg - c0);
        const int slices = T / cols;
        const int c = t % cols, sl = t / cols;
        float acc = 0.f;
        if (sl < slices) {
#pragma unroll 8
            for (int r = sl; r < dm; r += slices) acc += hs[r] * proj[(size_t)r * dg + c0 + c];
            part[sl * cols + c] = acc;
        }
        __syncthreads();
        if (t < cols) {
            float s = 0.f;
            for (int q = 0; q < slices; q++) s += part[q * cols + t];
            v[c0 + t] = s;
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
        const float* cg = centroids + (size_t)g * dg;
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

    // Causal Sinkhorn's row, on warp 0: lane g holds groups g and g + 32.
    if (warp == 0) {
        int width = 1;
        while (width < groups && width < 32) width <<= 1;
        double l[GPL];
        for (int e = 0; e < GPL; e++) {
            const int g = lane + 32 * e;
            l[e] = g < groups ? (double)s_scores[g] / tau : -INFINITY;
        }
        for (int it = 0; it < iters; it++) {
            double* r = srun + (size_t)it * groups;
            for (int e = 0; e < GPL; e++) {
                const int g = lane + 32 * e;
                if (g < groups) {
                    const double x = l[e];
                    const double a = fmax(r[g], x), b = fmin(r[g], x);
                    r[g] = b == -INFINITY ? a : a + log1p(exp(b - a));
                    l[e] = x - r[g];
                }
            }
            const double z = warp_lse(l, width);
            for (int e = 0; e < GPL; e++) l[e] -= z;
        }
        if (iters == 0) {
            const double z = warp_lse(l, width);
            for (int e = 0; e < GPL; e++) l[e] -= z;
        }
        for (int e = 0; e < GPL; e++) {
            const int g = lane + 32 * e;
            if (g < groups) s_memb[g] = (float)exp(l[e]);
        }
        if (lane == 0) s_mask = 0ull;
        __syncwarp();
        // Top-k: group g is kept when fewer than k groups rank before it (larger, or equal
        // with a lower index).
        for (int e = 0; e < GPL; e++) {
            const int g = lane + 32 * e;
            if (g < groups) {
                const float x = s_memb[g];
                int before = 0;
                for (int j = 0; j < groups; j++) before += (s_memb[j] > x) || (s_memb[j] == x && j < g);
                if (before < k) atomicOr(&s_mask, 1ull << g);
            }
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
        run[x] = srun[x];
        rec[2 * groups + x] = srun[x];
    }
}
