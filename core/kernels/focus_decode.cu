// One generation step's attention on CUDA (generate::decode's `attend`, for a cache on the GPU):
// the newest token's query heads over the cached keys and values, dense or hard top-k Focus,
// in two passes (flash decoding): `decode_partial` gives each (query head, chunk of cached
// positions) an online-softmax partial, `decode_merge` merges a head's partials by log-sum-exp.
//
// Layout: q (H, D); k, v (Hkv, cap, D) with the first n rows of each head filled; masks (cap)
// the cached tokens' top-k sets as bitmasks. Query head h reads KV head h / rep.
// The Focus rule (focus::mask::classify): position j is kept by the newest query i = n - 1 when
// i - j <= window (local) or when the two top-k sets share a group. A top-k step tests the
// 8-byte set of a distant key and reads the key's row only if it is kept, so no other key's
// bytes are read. Dense and soft steps (topk = 0) keep every key. The layer's own sliding window (Gemma) is the
// start position `from`: earlier keys are outside it for every mode.
// Soft-capping (Gemma 2) acts on each scaled logit: s = cap * tanh(s / cap), when cap > 0.
// Soft mode (gate 1 = log, 2 = paper) gates each distant key by its affinity
// a = memb_i . memb_j with the query (memberships (cap, K), the newest row included), as
// attention::fused::GateFn does: s + ln(a + eps), or s * sigmoid(lambda a).
// f32 throughout (the decode cache is f32); head dims up to 256 (8 values per lane).

#include <stdint.h>

#define WARPS 4
#define MAXPER 8

extern "C" __global__ void decode_partial(
    const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
    const unsigned long long* __restrict__ masks, float* __restrict__ part_m, float* __restrict__ part_l,
    float* __restrict__ part_o, int n, int from, int cap, int d, int rep, int chunk, int chunks,
    int topk, unsigned long long qmask, int window, float scale, float softcap,
    const float* __restrict__ memb, int groups, int gate, float gparam) {
    const int h = blockIdx.y, c = blockIdx.x;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int kvh = h / rep;
    const int i = n - 1;
    const int per = (d + 31) / 32;
    float qr[MAXPER], acc[MAXPER];
    for (int e = 0; e < MAXPER; e++) {
        int x = lane + 32 * e;
        qr[e] = (e < per && x < d) ? q[h * d + x] * scale : 0.f;
        acc[e] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    const int lo = from + c * chunk, hi = min(n, lo + chunk);
    const float* kh = k + (size_t)kvh * cap * d;
    const float* vh = v + (size_t)kvh * cap * d;
    for (int j = lo + warp; j < hi; j += WARPS) {
        // Local first: the newest key's set may not be on the device yet.
        bool kept = !topk || i - j <= window || (masks[j] & qmask) != 0ull;
        if (!kept) continue;
        const float* kr = kh + (size_t)j * d;
        float s = 0.f;
        for (int e = 0; e < per; e++) {
            int x = lane + 32 * e;
            if (x < d) s += qr[e] * kr[x];
        }
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
        if (softcap > 0.f) s = softcap * tanhf(s / softcap);
        if (gate != 0 && i - j > window) {
            float a = 0.f;
            for (int g = 0; g < groups; g++) a += memb[(size_t)i * groups + g] * memb[(size_t)j * groups + g];
            s = gate == 1 ? s + logf(a + gparam) : s * (1.f / (1.f + expf(-gparam * a)));
        }
        float mn = fmaxf(m, s);
        float corr = expf(m - mn), p = expf(s - mn);
        l = l * corr + p;
        const float* vr = vh + (size_t)j * d;
        for (int e = 0; e < per; e++) {
            int x = lane + 32 * e;
            acc[e] = acc[e] * corr + (x < d ? p * vr[x] : 0.f);
        }
        m = mn;
    }
    // Merge the block's warps.
    __shared__ float sm[WARPS], sl[WARPS];
    __shared__ float so[WARPS][32 * MAXPER];
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
    for (int e = 0; e < per; e++) so[warp][lane + 32 * e] = acc[e];
    __syncthreads();
    if (warp == 0) {
        float mm = -INFINITY;
        for (int w = 0; w < WARPS; w++) mm = fmaxf(mm, sm[w]);
        float ll = 0.f, oo[MAXPER];
        for (int e = 0; e < per; e++) oo[e] = 0.f;
        for (int w = 0; w < WARPS; w++) {
            float f = sm[w] == -INFINITY ? 0.f : expf(sm[w] - mm);
            ll += f * sl[w];
            for (int e = 0; e < per; e++) oo[e] += f * so[w][lane + 32 * e];
        }
        const size_t slot = (size_t)h * chunks + c;
        if (lane == 0) {
            part_m[slot] = mm;
            part_l[slot] = ll;
        }
        for (int e = 0; e < per; e++) {
            int x = lane + 32 * e;
            if (x < d) part_o[slot * d + x] = oo[e];
        }
    }
}

// out (H, D): per head, the partials of its chunks merged. One block of 32 x MAXPER threads per head.
extern "C" __global__ void decode_merge(const float* __restrict__ part_m, const float* __restrict__ part_l,
                                        const float* __restrict__ part_o, float* __restrict__ out, int d, int chunks) {
    const int h = blockIdx.x, x = threadIdx.x;
    if (x >= d) return;
    float mm = -INFINITY;
    for (int c = 0; c < chunks; c++) mm = fmaxf(mm, part_m[h * chunks + c]);
    float ll = 0.f, o = 0.f;
    for (int c = 0; c < chunks; c++) {
        size_t slot = (size_t)h * chunks + c;
        float f = part_m[slot] == -INFINITY ? 0.f : expf(part_m[slot] - mm);
        ll += f * part_l[slot];
        o += f * part_o[slot * d + x];
    }
    out[h * d + x] = o / ll;
}
