// Sinkhorn in the log domain on the GPU, one block of SK_THREADS per sequence (the device
// functions; the layout and the backward are described at focus_train.cu's sinkhorn_fwd):
// training's sinkhorn_fwd / sinkhorn_bwd and a prefill's routing (focus_route.cu's
// route_topk_rows) run these same iterations.
#pragma once
#include <math.h>

#define SK_THREADS 1024

struct LseAcc {
    float m, s;
};
__device__ __forceinline__ LseAcc lse_push(LseAcc a, float x) {
    if (x == -INFINITY) return a;
    if (x > a.m) {
        a.s = a.s * __expf(a.m - x) + 1.f;
        a.m = x;
    } else {
        a.s += __expf(x - a.m);
    }
    return a;
}
__device__ __forceinline__ LseAcc lse_join(LseAcc a, LseAcc b) {
    if (b.s == 0.f) return a;
    if (a.s == 0.f) return b;
    const float m = fmaxf(a.m, b.m);
    return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}
__device__ __forceinline__ float lse_val(LseAcc a) { return a.s == 0.f ? -INFINITY : a.m + __logf(a.s); }

struct SkLayout {
    int K, R, CH, r, k;
    bool col;  // this thread takes part in column work
    int a, e;  // its rows [a, e)
};

__device__ SkLayout sk_layout(int T, int K) {
    SkLayout L;
    L.K = K;
    int R = 1;
    while (R * 2 * K <= SK_THREADS) R *= 2;
    L.R = R;
    L.CH = (T + R - 1) / R;
    L.k = threadIdx.x % K;
    L.r = threadIdx.x / K;
    L.col = L.r < R;
    L.a = min(T, L.r * L.CH);
    L.e = min(T, L.a + L.CH);
    return L;
}

// l[t, k] -= log-sum-exp over tokens of column k (causal: over tokens <= t). `mid`, if not
// null, receives the result too.
__device__ void sk_col_step(float* l, int T, const SkLayout& L, bool causal, LseAcc* part) {
    const int K = L.K;
    LseAcc acc = {-INFINITY, 0.f};
    if (L.col)
        for (int t = L.a; t < L.e; ++t) acc = lse_push(acc, l[(size_t)t * K + L.k]);
    if (L.col) part[L.r * K + L.k] = acc;
    __syncthreads();
    if (!causal) {
        for (int st = L.R / 2; st > 0; st >>= 1) {
            if (L.col && L.r < st) part[L.r * K + L.k] = lse_join(part[L.r * K + L.k], part[(L.r + st) * K + L.k]);
            __syncthreads();
        }
        if (L.col) {
            const float c = lse_val(part[L.k]);
            for (int t = L.a; t < L.e; ++t) l[(size_t)t * K + L.k] -= c;
        }
    } else {
        if (L.col && L.r == 0) {
            LseAcc run = {-INFINITY, 0.f};
            for (int rr = 0; rr < L.R; ++rr) {
                const LseAcc tmp = part[rr * K + L.k];
                part[rr * K + L.k] = run;
                run = lse_join(run, tmp);
            }
        }
        __syncthreads();
        if (L.col) {
            LseAcc run = part[L.r * K + L.k];
            for (int t = L.a; t < L.e; ++t) {
                const size_t i = (size_t)t * K + L.k;
                const float x = l[i];
                run = lse_push(run, x);
                l[i] = x - lse_val(run);
            }
        }
    }
    __syncthreads();
}

__device__ void sk_row_step(float* l, int T, int K) {
    for (int t = threadIdx.x; t < T; t += blockDim.x) {
        float* row = l + (size_t)t * K;
        float m = -INFINITY;
        for (int k = 0; k < K; ++k) m = fmaxf(m, row[k]);
        float s = 0.f;
        for (int k = 0; k < K; ++k) s += __expf(row[k] - m);
        const float z = m + __logf(s);
        for (int k = 0; k < K; ++k) row[k] -= z;
    }
    __syncthreads();
}

__device__ void sk_copy(float* dst, const float* src, int n) {
    for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
    __syncthreads();
}

// The forward on l (already s / tau); snap, if not null, receives L[0], M[0], L[1], ...
__device__ void sk_forward(float* l, float* snap, int T, int K, int iters, bool causal, const SkLayout& L,
                           LseAcc* part) {
    const int n = T * K;
    if (snap) sk_copy(snap, l, n);
    for (int it = 0; it < iters; ++it) {
        sk_col_step(l, T, L, causal, part);
        if (snap) sk_copy(snap + (size_t)(2 * it + 1) * n, l, n);
        sk_row_step(l, T, K);
        if (snap) sk_copy(snap + (size_t)(2 * it + 2) * n, l, n);
    }
    if (iters == 0) sk_row_step(l, T, K);
}

