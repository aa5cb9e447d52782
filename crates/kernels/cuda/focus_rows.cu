// Row kernels that a pass on CUDA fuses (model::fused): RMS norm, the residual add with the RMS
// norm that follows it, and SwiGLU's silu(gate) * up; and a decode step's one-row products (at
// the end of the file). A decode step is bound by launches, not
// bytes (one token's rows; ~2-3 us a kernel on an H200 whatever it does), so each of these is one
// launch where candle's ops take one to three, and the norm's row is read by a whole block at
// once (candle's rmsnorm gives a row of fewer than 1024 values one warp, which then waits on
// ~d / 32 loads in a row).
// The arithmetic is candle's (f32): scale = rsqrt(sum(x^2) / d + eps), y = scale * x * w;
// silu(g) = g / (1 + exp(-g)). The sum runs in another order (a tree over the block), so values
// agree to rounding.

#include <cuda_bf16.h>
#include <stdint.h>

#define ROW_THREADS 256

__device__ __forceinline__ float block_sum(float x) {
    __shared__ float red[ROW_THREADS / 32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    if (lane == 0) red[warp] = x;
    __syncthreads();
    float s = 0.f;
    for (int w = 0; w < ROW_THREADS / 32; w++) s += red[w];
    return s;
}

// y = rms_norm(x) * w, one block per row of d.
extern "C" __global__ void rms_norm_rows(const float* __restrict__ x, const float* __restrict__ w, float* __restrict__ y, int d, float eps) {
    const float* xr = x + (size_t)blockIdx.x * d;
    float* yr = y + (size_t)blockIdx.x * d;
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += ROW_THREADS) ss += xr[i] * xr[i];
    const float scale = rsqrtf(block_sum(ss) / d + eps);
    for (int i = threadIdx.x; i < d; i += ROW_THREADS) yr[i] = scale * xr[i] * w[i];
}

// r = a + b and y = rms_norm(r) * w, one block per row: out holds r (rows x d) then y.
extern "C" __global__ void add_rms_norm_rows(const float* __restrict__ a, const float* __restrict__ b, const float* __restrict__ w,
                                             float* __restrict__ out, int rows, int d, float eps) {
    const size_t row = (size_t)blockIdx.x * d;
    float* r = out + row;
    float* y = out + (size_t)rows * d + row;
    float ss = 0.f;
    for (int i = threadIdx.x; i < d; i += ROW_THREADS) {
        const float v = a[row + i] + b[row + i];
        r[i] = v;
        ss += v * v;
    }
    const float scale = rsqrtf(block_sum(ss) / d + eps);
    // Each thread reads back the sums it wrote itself.
    for (int i = threadIdx.x; i < d; i += ROW_THREADS) y[i] = scale * r[i] * w[i];
}

// y = silu(g) * u over n values.
extern "C" __global__ void silu_mul(const float* __restrict__ g, const float* __restrict__ u, float* __restrict__ y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        const float v = g[i];
        y[i] = v / (1.f + expf(-v)) * u[i];
    }
}

// A generation step's products: one row x (k) times row-major weights (rows of k). One warp per
// output, its lanes reading the weight's row (in float4s when `vec4`: k % 4 == 0 and every
// pointer 16-byte aligned) with their loads unrolled, so that a warp has its whole row in
// flight; the lanes' sums meet by shuffles. A step's kernels each cost ~3-4 us on an H200
// whatever they do (cuBLAS's M = 1 product ~4.5 us), so the products that read the same row
// are one launch: Q, K and V (and their biases) in `rows_times`, SwiGLU's gate, up and
// silu(gate) * up in `swiglu_row`, and the MLP's residual add in the down product's; the RMS
// norm before a product runs inside it (`nw`).
#define MV_WARPS 8

// A weight's values as f32: four at i (in units of four) and one at i. bf16 is f32's high
// half, so its four values are two 32-bit words split (little-endian: the lower half first).
__device__ __forceinline__ float4 load4(const float* w, int i) { return ((const float4*)w)[i]; }
__device__ __forceinline__ float4 load4(const __nv_bfloat16* w, int i) {
    const uint2 u = ((const uint2*)w)[i];
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                       __uint_as_float(u.y & 0xffff0000u));
}
__device__ __forceinline__ float load1(const float* w, int i) { return w[i]; }
__device__ __forceinline__ float load1(const __nv_bfloat16* w, int i) { return __bfloat162float(w[i]); }

// x . wr over k values by one warp (W: float, or bf16 weights read as f32). With `nw` (an RMS
// norm's weight: the product of the normalised row, rms_norm(x) * nw), x is taken as x * nw and
// the warp's lanes also sum x^2 into *ss (the norm's scale applies to the result: the same value
// to rounding, and no kernel or pass over the row before the product). `vec4`: four values a
// load (k % 4 == 0, x and nw 16-byte aligned, the weight 16 (f32) or 8 (bf16) bytes).
template <typename W>
__device__ __forceinline__ float warp_dot(const float* __restrict__ x, const W* __restrict__ wr, int k, int vec4,
                                          const float* __restrict__ nw, float* ss) {
    const int lane = threadIdx.x % 32;
    float acc = 0.f, sq = 0.f;
    if (vec4) {
        const float4* x4 = (const float4*)x;
        const float4* n4 = (const float4*)nw;
        const int k4 = k / 4;
#pragma unroll 8
        for (int i = lane; i < k4; i += 32) {
            const float4 a = load4(wr, i);
            float4 c = x4[i];
            if (nw) {
                const float4 m = n4[i];
                sq += c.x * c.x + c.y * c.y + c.z * c.z + c.w * c.w;
                c = make_float4(c.x * m.x, c.y * m.y, c.z * m.z, c.w * m.w);
            }
            acc += a.x * c.x + a.y * c.y + a.z * c.z + a.w * c.w;
        }
    } else {
#pragma unroll 8
        for (int i = lane; i < k; i += 32) {
            const float c = x[i];
            if (nw) sq += c * c;
            acc += load1(wr, i) * (nw ? c * nw[i] : c);
        }
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (ss) {
        for (int o = 16; o > 0; o >>= 1) sq += __shfl_xor_sync(0xffffffffu, sq, o);
        *ss = sq;
    }
    return acc;
}

// The RMS norm's scale of a row whose squares sum to ss (1 without a norm).
__device__ __forceinline__ float norm_scale(const float* nw, float ss, int k, float eps) {
    return nw ? rsqrtf(ss / k + eps) : 1.f;
}

// y = [x W0^T + b0, x W1^T + b1, x W2^T + b2] + res: up to three weights (n0, n1, n2 rows; an
// absent one has none), each bias and the residual res (n0 + n1 + n2 values) optional (null);
// with `nw`, x is first RMS-normed (weight nw, `eps`). `rows_times` for f32 weights,
// `rows_times_bf16` for bf16 ones.
template <typename W>
__device__ __forceinline__ void rows_times_t(const float* __restrict__ x, int k, const W* __restrict__ w0, const float* __restrict__ b0,
                                             int n0, const W* __restrict__ w1, const float* __restrict__ b1, int n1,
                                             const W* __restrict__ w2, const float* __restrict__ b2, int n2,
                                             const float* __restrict__ res, float* __restrict__ y, int vec4,
                                             const float* __restrict__ nw, float eps) {
    const int row = blockIdx.x * MV_WARPS + threadIdx.x / 32;
    if (row >= n0 + n1 + n2) return;
    const W* w = w0;
    const float* b = b0;
    int r = row;
    if (r >= n0) {
        r -= n0;
        w = w1;
        b = b1;
        if (r >= n1) {
            r -= n1;
            w = w2;
            b = b2;
        }
    }
    float ss = 0.f;
    const float acc = warp_dot(x, w + (size_t)r * k, k, vec4, nw, nw ? &ss : nullptr) * norm_scale(nw, ss, k, eps);
    if (threadIdx.x % 32 == 0) y[row] = acc + (b ? b[r] : 0.f) + (res ? res[row] : 0.f);
}

#define ROWS_TIMES(NAME, W)                                                                                          \
    extern "C" __global__ void NAME(const float* __restrict__ x, int k, const W* __restrict__ w0,                     \
                                    const float* __restrict__ b0, int n0, const W* __restrict__ w1,                   \
                                    const float* __restrict__ b1, int n1, const W* __restrict__ w2,                   \
                                    const float* __restrict__ b2, int n2, const float* __restrict__ res,              \
                                    float* __restrict__ y, int vec4, const float* __restrict__ nw, float eps) {       \
        rows_times_t(x, k, w0, b0, n0, w1, b1, n1, w2, b2, n2, res, y, vec4, nw, eps);                                \
    }
ROWS_TIMES(rows_times, float)
ROWS_TIMES(rows_times_bf16, __nv_bfloat16)

// y_j = silu(x . g_j) * (x . u_j): SwiGLU's hidden row from the gate and up weights (n rows
// each); with `nw`, of the RMS-normed x (as rows_times). `swiglu_row` / `swiglu_row_bf16`.
template <typename W>
__device__ __forceinline__ void swiglu_row_t(const float* __restrict__ x, int k, const W* __restrict__ wg, const W* __restrict__ wu,
                                             float* __restrict__ y, int n, int vec4, const float* __restrict__ nw, float eps) {
    const int row = blockIdx.x * MV_WARPS + threadIdx.x / 32;
    if (row >= n) return;
    float ss = 0.f;
    const float g0 = warp_dot(x, wg + (size_t)row * k, k, vec4, nw, nw ? &ss : nullptr);
    const float u0 = warp_dot(x, wu + (size_t)row * k, k, vec4, nw, nullptr);
    // One scale for both: the squares were summed with the gate's product.
    const float scale = norm_scale(nw, ss, k, eps), g = g0 * scale, u = u0 * scale;
    if (threadIdx.x % 32 == 0) y[row] = g / (1.f + expf(-g)) * u;
}

extern "C" __global__ void swiglu_row(const float* __restrict__ x, int k, const float* __restrict__ wg, const float* __restrict__ wu,
                                      float* __restrict__ y, int n, int vec4, const float* __restrict__ nw, float eps) {
    swiglu_row_t(x, k, wg, wu, y, n, vec4, nw, eps);
}
extern "C" __global__ void swiglu_row_bf16(const float* __restrict__ x, int k, const __nv_bfloat16* __restrict__ wg,
                                           const __nv_bfloat16* __restrict__ wu, float* __restrict__ y, int n, int vec4,
                                           const float* __restrict__ nw, float eps) {
    swiglu_row_t(x, k, wg, wu, y, n, vec4, nw, eps);
}
