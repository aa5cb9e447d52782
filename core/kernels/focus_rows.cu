// Row kernels that a pass on CUDA fuses (model::fused): RMS norm, the residual add with the RMS
// norm that follows it, and SwiGLU's silu(gate) * up. A decode step is bound by launches, not
// bytes (one token's rows; ~2-3 us a kernel on an H200 whatever it does), so each of these is one
// launch where candle's ops take one to three, and the norm's row is read by a whole block at
// once (candle's rmsnorm gives a row of fewer than 1024 values one warp, which then waits on
// ~d / 32 loads in a row).
// The arithmetic is candle's (f32): scale = rsqrt(sum(x^2) / d + eps), y = scale * x * w;
// silu(g) = g / (1 + exp(-g)). The sum runs in another order (a tree over the block), so values
// agree to rounding.

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
