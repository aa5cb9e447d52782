// Device helpers that several kernel files use (included by focus_attention.cu and
// focus_train.cu; build.rs passes nvcc -I of this folder): cp.async copies into shared memory,
// the m16n8k16 bf16 tensor-core product and its ldmatrix fragment loads, bf16 packing, the
// hardware 2^x, reductions over the four lanes (a quad) that hold one row of an mma tile, and
// the top-k rank of a membership (included by focus_route.cu too). All are force-inlined, so a
// kernel file's PTX is what it was with its own copies.
#pragma once

#include <cuda_bf16.h>
#include <stdint.h>

// 16 bytes global -> shared, asynchronous; `valid` false zero-fills without reading.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    int n = valid ? 16 : 0;  // 0: zero-fill without reading
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

// c += a b (m16n8k16, bf16 in, f32 accumulators), one warp.
__device__ __forceinline__ void mma_bf16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t* r, const void* smem) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t* r, const void* smem) {
    unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(s));
}

// 2^x with the hardware approximation (2 ulp; ex2(-inf) = 0).
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// Two floats rounded to bf16 in one 32-bit register (lo in the low half), an mma operand.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// Max and sum over the 4 lanes of a quad (lanes 4r..4r+3 hold one row of an mma tile).
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffff, x, 1);
    return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// How many of row[0..n) rank before entry g: larger, or equal with a lower index (the order of
// focus::mask::top_k_indices); entry g is in the top k when this is below k.
__device__ __forceinline__ int rank_in_row(const float* row, int n, int g) {
    const float x = row[g];
    int before = 0;
    for (int j = 0; j < n; ++j) before += (row[j] > x) || (row[j] == x && j < g);
    return before;
}
