// Quantization and helper kernels for the FP8 blockwise recipe (TE's Float8BlockScaling):
// activations and gradients in 1x128 blocks, weights in 128x128 blocks, E4M3, FP32 scales.
// Compiled at run time with NVRTC for the device's arch. No headers: NVRTC has no CUDA include
// path by default, so bf16 and fp8 conversions are done by hand on the raw bits.
//
// Scale layouts (the cuBLASLt "GEMM-ready" forms TE uses):
//   1x128 (VEC128_32F) for a row-major operand [R, C] quantized along C:
//       scale(r, cb) at cb * ld + r,  ld = round_up(R, 4)
//   128x128 (BLK128x128_32F) for a row-major operand [R, C]:
//       scale(rb, cb) at rb * ld + cb, ld = round_up(ceil(C / 128), 4)
// The scale stored is the dequantization factor (amax / 448, optionally rounded up to a power of
// two, as TE's default), which is what cuBLASLt multiplies by.

typedef unsigned short bf16_t;
typedef unsigned char fp8_t;
typedef unsigned long long u64;

#define FP8_MAX 448.0f

__device__ __forceinline__ float bf16_to_f(bf16_t v) {
    return __uint_as_float(((unsigned int)v) << 16);
}

__device__ __forceinline__ bf16_t f_to_bf16(float f) {
    unsigned int u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16_t)0x7fc0;  // NaN
    u += 0x7fffu + ((u >> 16) & 1u);                              // round to nearest even
    return (bf16_t)(u >> 16);
}

// float -> E4M3 (saturating, round to nearest even). Hardware cvt on sm_89+.
__device__ __forceinline__ fp8_t f_to_e4m3(float f) {
    unsigned short r;
    asm("{ .reg .b16 t; cvt.rn.satfinite.e4m3x2.f32 t, %1, %2; mov.b16 %0, t; }"
        : "=h"(r) : "f"(0.0f), "f"(f));
    return (fp8_t)(r & 0xff);
}

// Dequantization scale for a block with absolute maximum `amax`: amax / 448, or with `pow2` that
// value rounded up to a power of two (TE's default: the quantization factor is rounded down).
// The power-of-two case needs no division: p = 2^floor(log2(amax * (1/448))) is within a factor
// two of the answer, and the exact products 448 * p, 448 * 2p pick the smallest power of two P
// with 448 * P >= amax. That equals rounding the correctly rounded amax / 448 up to a power of
// two, because a bf16 amax never lies within an f32 ulp above 448 * 2^k without being equal to
// it. Quotients below the smallest normal give 2^-126, as rounding the subnormal quotient up did.
__device__ __forceinline__ float dequant_scale(float amax, int pow2) {
    if (!(amax > 0.0f) || isinf(amax)) return 1.0f;
    if (pow2) {
        const unsigned int e = __float_as_uint(amax * (1.0f / FP8_MAX)) & 0x7f800000u;
        if (e == 0) return __uint_as_float(0x00800000u);
        const float p = __uint_as_float(e);
        return FP8_MAX * p >= amax ? p : (FP8_MAX * 2.0f * p >= amax ? 2.0f * p : 4.0f * p);
    }
    return amax / FP8_MAX;
}

__device__ __forceinline__ float warp_max(float v, int width) {
    for (int o = width / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o, width));
    return v;
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// ---------------------------------------------------------------------------------------------
// Random normal bf16 data: a counter-based hash + Box-Muller, so buffers of any size are filled
// on the device with no host transfer. Never zeros.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned int hash32(unsigned int x) {
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
    return x;
}

extern "C" __global__ void fill_normal_bf16(bf16_t* out, u64 n, unsigned int seed, float stddev) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 stride = (u64)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        unsigned int a = hash32((unsigned int)i ^ hash32(seed ^ (unsigned int)(i >> 32)));
        unsigned int b = hash32(a ^ 0x9e3779b9U);
        float u1 = ((a >> 8) + 1.0f) * (1.0f / 16777217.0f);
        float u2 = (b >> 8) * (1.0f / 16777216.0f);
        float z = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
        out[i] = f_to_bf16(z * stddev);
    }
}

// Busy-waits `ns` nanoseconds on one thread. Launched before a timed region so that the host
// can queue the timed work while the GPU is busy: the events then measure GPU time, not the
// host's launch rate (which dominates GEMMs of a few tens of microseconds).
extern "C" __global__ void spin_ns(u64 ns) {
    u64 t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

// Counts non-finite bf16 values (poisoned outputs that were never written stay NaN).
extern "C" __global__ void count_nonfinite_bf16(const bf16_t* x, u64 n, unsigned int* count) {
    u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    u64 stride = (u64)gridDim.x * blockDim.x;
    unsigned int c = 0;
    for (; i < n; i += stride) c += ((x[i] & 0x7f80u) == 0x7f80u);
    for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
    if ((threadIdx.x & 31) == 0 && c) atomicAdd(count, c);
}

// ---------------------------------------------------------------------------------------------
// 1x128 quantization of activations / gradients, rowwise and/or columnwise, in 128x128 tiles.
//
// One CTA (256 threads) quantizes one 128x128 tile of a row-major bf16 [rows, cols] segment.
// Rowwise: each tile row is exactly one 1x128 block. Columnwise: each tile column (128 rows) is
// one block of the transposed [cols, rows] output. Grouped GEMMs (MoE experts) are several
// segments; `tiles` describes each tile's segment so one launch covers all experts and no block
// crosses an expert boundary.
//
// Per-tile descriptor (u64 x 7): row0 (first row of the segment in x), seg_rows, tile_m (tile's
// first row inside the segment), tile_c (first column), rowwise scale offset, columnwise data
// offset, columnwise scale offset (packed: offsets in elements).
// ---------------------------------------------------------------------------------------------
#define TILE 128
#define SMW 65   // 32-bit words per smem row: 64 words of data + 1 pad, so column reads are conflict-free

struct TileDesc {
    u64 row0;       // first row of the segment in x / q
    u64 seg_rows;   // rows of the segment (padded to the FP8 multiple)
    u64 tile_m;     // first row of this tile inside the segment
    u64 tile_c;     // first column of this tile
    u64 srow_off;   // rowwise scale base for the segment (floats)
    u64 qcol_off;   // columnwise data base for the segment (bytes)
    u64 scol_off;   // columnwise scale base for the segment (floats)
};

// Loads a 128x128 bf16 tile into registers: thread t holds 8 vectors of 8 elements, rows
// (t >> 4) + 16 i, columns (t & 15) * 8 .. +8. Out-of-range elements are zero.
__device__ __forceinline__ void load_tile(const bf16_t* __restrict__ base, u64 ld, u64 rows_here, u64 cols_here, int tid, uint4 v[8]) {
    const int c8 = (tid & 15) * 8;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = (tid >> 4) + 16 * i;
        v[i] = make_uint4(0, 0, 0, 0);
        if (r < rows_here) {
            const bf16_t* src = base + (u64)r * ld + c8;
            if (c8 + 8 <= cols_here) {
                v[i] = __ldg(reinterpret_cast<const uint4*>(src));
            } else {
                unsigned int w[4] = {0, 0, 0, 0};
#pragma unroll
                for (int j = 0; j < 8; ++j)
                    if (c8 + j < cols_here) w[j >> 1] |= ((unsigned int)src[j]) << (16 * (j & 1));
                v[i] = make_uint4(w[0], w[1], w[2], w[3]);
            }
        }
    }
}

__device__ __forceinline__ float lo16(unsigned int w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi16(unsigned int w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ float amax8(uint4 v) {
    float a = 0.0f;
    unsigned int w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) a = fmaxf(a, fmaxf(fabsf(lo16(w[j])), fabsf(hi16(w[j]))));
    return a;
}

__device__ __forceinline__ unsigned short cvt2(float a, float b) {
    unsigned short r;
    // Packs b into the low byte and a into the high byte.
    asm("{ .reg .b16 t; cvt.rn.satfinite.e4m3x2.f32 t, %1, %2; mov.b16 %0, t; }" : "=h"(r) : "f"(a), "f"(b));
    return r;
}

__device__ __forceinline__ uint2 quant8(uint4 v, float inv) {
    unsigned int w[4] = {v.x, v.y, v.z, v.w};
    unsigned int p[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) p[j] = cvt2(hi16(w[j]) * inv, lo16(w[j]) * inv);
    return make_uint2(p[0] | (p[1] << 16), p[2] | (p[3] << 16));
}

// Stores the register tile into shared memory as 32-bit words, row stride SMW.
__device__ __forceinline__ void stash_tile(unsigned int (*sm)[SMW], int tid, const uint4 v[8]) {
    const int w0 = (tid & 15) * 4;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = (tid >> 4) + 16 * i;
        sm[r][w0] = v[i].x; sm[r][w0 + 1] = v[i].y; sm[r][w0 + 2] = v[i].z; sm[r][w0 + 3] = v[i].w;
    }
}

__device__ __forceinline__ float sm_elem(unsigned int (*sm)[SMW], int r, int c) {
    unsigned int w = sm[r][c >> 1];
    return (c & 1) ? hi16(w) : lo16(w);
}

// ---------------------------------------------------------------------------------------------
// The 1x128 cast kernel. One CTA (256 threads) casts one 128x128 tile; the transpose happens in
// registers. Warp w covers 32 rows x 64 columns of the tile (column half h = w & 1, row block
// rb = w >> 1); lane: column group cg = lane & 7 (8 columns), row group rg = lane >> 3 (8 rows).
// So a thread holds an 8x8 block, and its 8 bytes of one quantized column are 8 consecutive bytes
// of the transposed output: 4 lanes write a full 32-byte sector per column, straight from
// registers. Row and column maxima are partial per warp and cross the warps through 1.5 KB of
// shared memory at the single barrier.
//
// The cast is issue-bound, not memory-bound (docs/PERFORMANCE.md has the experiments), so:
// - maxima on packed bf16 pairs: sign bits cleared with one AND, max.bf16x2 (exact: the maximum
//   of bf16 values is one of them), two rows per shuffle; NaN is ignored, as fmaxf does;
// - power-of-two scales are inverted with one integer subtraction instead of a division;
// - full tiles (all but the last row and column of tiles) run without bounds checks.
// Needs cols % 8 == 0 (16-byte aligned rows); the launcher checks.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned int bmax2(unsigned int a, unsigned int b) {
    unsigned int d;
    asm("max.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

__device__ __forceinline__ unsigned int absmax_word(uint4 v) {
    const unsigned int m = 0x7fff7fffu;
    return bmax2(bmax2(v.x & m, v.y & m), bmax2(v.z & m, v.w & m));
}

// Both halves of a packed pair hold the larger of the two.
__device__ __forceinline__ unsigned int fold2(unsigned int w) { return bmax2(w, __byte_perm(w, 0, 0x1032)); }

__device__ __forceinline__ unsigned int word_of(uint4 v, int q) {
    return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
}

// Dequantization scale and its inverse (the factor the data is multiplied by).
__device__ __forceinline__ float scale_inv(float amax, int pow2, float* inv) {
    const float s = dequant_scale(amax, pow2);
    *inv = pow2 ? __uint_as_float(0x7f000000u - __float_as_uint(s)) : 1.0f / s;
    return s;
}

template <bool FULL>
__device__ __forceinline__ void quant_1x128_tile(
        const bf16_t* __restrict__ x, u64 cols, const TileDesc& t, int do_row, int do_col, int pow2,
        fp8_t* __restrict__ q_row, float* __restrict__ s_row,
        fp8_t* __restrict__ q_col, float* __restrict__ s_col,
        unsigned int (*rowmax)[TILE / 2], unsigned int (*colmax)[TILE / 2]) {
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int h = warp & 1, rb = warp >> 1, cg = lane & 7, rg = lane >> 3;
    const int c8 = h * 64 + cg * 8;
    const int r8 = rb * 32 + rg * 8;
    const int rows_here = FULL ? TILE : (int)min((u64)TILE, t.seg_rows - t.tile_m);
    const int cols_here = FULL ? TILE : (int)min((u64)TILE, cols - t.tile_c);
    const bool chunk_in = FULL || c8 < cols_here;
    const bf16_t* src = x + (t.row0 + t.tile_m + r8) * cols + t.tile_c + c8;
    uint4 v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        v[i] = make_uint4(0, 0, 0, 0);
        if (FULL || (chunk_in && r8 + i < rows_here)) v[i] = __ldg(reinterpret_cast<const uint4*>(src + (u64)i * cols));
    }
    unsigned int rp[4];   // rows (2q, 2q+1) of this thread, max over its 8 columns, packed
    if (do_row) {
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            rp[q] = __byte_perm(fold2(absmax_word(v[2 * q])), fold2(absmax_word(v[2 * q + 1])), 0x5410);
#pragma unroll
            for (int o = 1; o < 8; o <<= 1) rp[q] = bmax2(rp[q], __shfl_xor_sync(0xffffffffu, rp[q], o));
        }
        if (cg == 0) *reinterpret_cast<uint4*>(&rowmax[h][r8 / 2]) = make_uint4(rp[0], rp[1], rp[2], rp[3]);
    }
    unsigned int cp[4];   // columns (2q, 2q+1) of this thread, max over the warp's 32 rows, packed
    if (do_col) {
        const unsigned int m = 0x7fff7fffu;
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            unsigned int a = word_of(v[0], q) & m;
#pragma unroll
            for (int i = 1; i < 8; ++i) a = bmax2(a, word_of(v[i], q) & m);
            a = bmax2(a, __shfl_xor_sync(0xffffffffu, a, 8));
            cp[q] = bmax2(a, __shfl_xor_sync(0xffffffffu, a, 16));
        }
        if (rg == 0) *reinterpret_cast<uint4*>(&colmax[rb][c8 / 2]) = make_uint4(cp[0], cp[1], cp[2], cp[3]);
    }
    __syncthreads();
    if (do_row) {
        const uint4 o = *reinterpret_cast<const uint4*>(&rowmax[h ^ 1][r8 / 2]);
        rp[0] = bmax2(rp[0], o.x); rp[1] = bmax2(rp[1], o.y); rp[2] = bmax2(rp[2], o.z); rp[3] = bmax2(rp[3], o.w);
        const u64 ld_row = (t.seg_rows + 3) & ~3ull;
        fp8_t* dst = q_row + (t.row0 + t.tile_m + r8) * cols + t.tile_c + c8;
        float* sdst = s_row + t.srow_off + (t.tile_c / TILE) * ld_row + t.tile_m + r8;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const float amax = (i & 1) ? hi16(rp[i >> 1]) : lo16(rp[i >> 1]);
            float inv;
            const float sc = scale_inv(amax, pow2, &inv);
            if (FULL || (chunk_in && r8 + i < rows_here)) {
                *reinterpret_cast<uint2*>(dst + (u64)i * cols) = quant8(v[i], inv);
                if (h == 0 && cg == 0) sdst[i] = sc;
            }
        }
    }
    if (do_col && (FULL || r8 < rows_here)) {
        uint4 a = *reinterpret_cast<const uint4*>(&colmax[0][c8 / 2]);
#pragma unroll
        for (int q = 1; q < 4; ++q) {
            const uint4 b = *reinterpret_cast<const uint4*>(&colmax[q][c8 / 2]);
            a.x = bmax2(a.x, b.x); a.y = bmax2(a.y, b.y); a.z = bmax2(a.z, b.z); a.w = bmax2(a.w, b.w);
        }
        const u64 ld_col = (cols + 3) & ~3ull;
        fp8_t* dst = q_col + t.qcol_off + (t.tile_c + c8) * t.seg_rows + t.tile_m + r8;
        float* sdst = s_col + t.scol_off + (t.tile_m / TILE) * ld_col + t.tile_c + c8;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int q = j >> 1;
            const unsigned int w = word_of(a, q);
            float inv;
            const float sc = scale_inv((j & 1) ? hi16(w) : lo16(w), pow2, &inv);
            float f[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const unsigned int e = word_of(v[i], q);
                f[i] = ((j & 1) ? hi16(e) : lo16(e)) * inv;
            }
            const unsigned int w0 = cvt2(f[1], f[0]) | ((unsigned int)cvt2(f[3], f[2]) << 16);
            const unsigned int w1 = cvt2(f[5], f[4]) | ((unsigned int)cvt2(f[7], f[6]) << 16);
            if (FULL || c8 + j < cols_here) {
                *reinterpret_cast<uint2*>(dst + (u64)j * t.seg_rows) = make_uint2(w0, w1);
                if (r8 == 0) sdst[j] = sc;
            }
        }
    }
}

__device__ __forceinline__ void quant_1x128_body(
        const bf16_t* __restrict__ x, u64 cols, const TileDesc* __restrict__ tiles,
        int do_row, int do_col, int pow2,
        fp8_t* __restrict__ q_row, float* __restrict__ s_row,
        fp8_t* __restrict__ q_col, float* __restrict__ s_col) {
    __shared__ __align__(16) unsigned int rowmax[2][TILE / 2];
    __shared__ __align__(16) unsigned int colmax[4][TILE / 2];
    const TileDesc t = tiles[blockIdx.x];
    if (t.seg_rows - t.tile_m >= TILE && cols - t.tile_c >= TILE)
        quant_1x128_tile<true>(x, cols, t, do_row, do_col, pow2, q_row, s_row, q_col, s_col, rowmax, colmax);
    else
        quant_1x128_tile<false>(x, cols, t, do_row, do_col, pow2, q_row, s_row, q_col, s_col, rowmax, colmax);
}
#define QUANT_1X128_ARGS const bf16_t* __restrict__ x, u64 cols, const TileDesc* __restrict__ tiles, \
    int do_row, int do_col, int pow2, fp8_t* __restrict__ q_row, float* __restrict__ s_row, \
    fp8_t* __restrict__ q_col, float* __restrict__ s_col
// Two launch bounds of the same body, each the faster one measured for its use: 4 CTAs per SM
// when the transposed copy is written, 3 (no register spills) for the rowwise-only cast.
extern "C" __global__ void __launch_bounds__(256, 4) quant_1x128(QUANT_1X128_ARGS) {
    quant_1x128_body(x, cols, tiles, do_row, do_col, pow2, q_row, s_row, q_col, s_col);
}
extern "C" __global__ void __launch_bounds__(256, 3) quant_1x128_rowwise(QUANT_1X128_ARGS) {
    quant_1x128_body(x, cols, tiles, do_row, do_col, pow2, q_row, s_row, q_col, s_col);
}

// ---------------------------------------------------------------------------------------------
// 128x128 weight quantization with its transposed copy (for dgrad): one CTA per 128x128 block.
//   q  [N, K] row-major, scale s  (rb=N/128, cb=K/128), ld = round_up(ceil(K/128), 4)
//   qT [K, N] row-major, scale sT (rb=K/128, cb=N/128), ld = round_up(ceil(N/128), 4)
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(256)
quant_128x128(const bf16_t* __restrict__ w, u64 n, u64 k, int pow2,
              fp8_t* __restrict__ q, float* __restrict__ s,
              fp8_t* __restrict__ qt, float* __restrict__ st) {
    __shared__ unsigned int sm[TILE][SMW];
    __shared__ __align__(16) fp8_t stage[64][TILE + 16];
    __shared__ float red[8];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const u64 n0 = (u64)blockIdx.y * TILE, k0 = (u64)blockIdx.x * TILE;
    const u64 nh = min((u64)TILE, n - n0), kh = min((u64)TILE, k - k0);
    uint4 v[8];
    load_tile(w + n0 * k + k0, k, nh, kh, tid, v);
    stash_tile(sm, tid, v);
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) amax = fmaxf(amax, amax8(v[i]));
    amax = warp_max(amax, 32);
    if (lane == 0) red[warp] = amax;
    __syncthreads();
    amax = red[0];
#pragma unroll
    for (int i = 1; i < 8; ++i) amax = fmaxf(amax, red[i]);
    const float sc = dequant_scale(amax, pow2);
    const float inv = 1.0f / sc;
    // Row-major copy straight from registers.
    const int c8 = (tid & 15) * 8;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = (tid >> 4) + 16 * i;
        if (r < nh) {
            uint2 qq = quant8(v[i], inv);
            if (c8 + 8 <= kh) {
                *reinterpret_cast<uint2*>(q + (n0 + r) * k + k0 + c8) = qq;
            } else {
                unsigned long long b = ((unsigned long long)qq.y << 32) | qq.x;
                for (int j = 0; j < 8 && c8 + j < kh; ++j) q[(n0 + r) * k + k0 + c8 + j] = (fp8_t)(b >> (8 * j));
            }
        }
    }
    // Transposed copy: quantize from shared memory (lane j handles rows j, j+32, j+64, j+96 of a
    // column, so a warp touches 32 banks), stage the bytes, write 16-byte vectors.
#pragma unroll 1
    for (int half = 0; half < 2; ++half) {
#pragma unroll 4
        for (int cc = 0; cc < 8; ++cc) {
            const int cl = warp * 8 + cc;
            const int c = half * 64 + cl;
#pragma unroll
            for (int j = 0; j < 4; ++j) stage[cl][lane + 32 * j] = (fp8_t)(cvt2(0.0f, sm_elem(sm, lane + 32 * j, c) * inv) & 0xff);
        }
        __syncthreads();
#pragma unroll
        for (int it = 0; it < 2; ++it) {
            const int item = tid + 256 * it;
            const int cl = item >> 3, chunk = item & 7;
            const int c = half * 64 + cl;
            if (c < kh && chunk * 16 < nh) {
                *reinterpret_cast<uint4*>(qt + (k0 + c) * n + n0 + chunk * 16) = *reinterpret_cast<const uint4*>(&stage[cl][chunk * 16]);
            }
        }
        __syncthreads();
    }
    if (tid == 0) {
        const u64 ld = ((k + TILE - 1) / TILE + 3) & ~3ull;
        const u64 ldt = ((n + TILE - 1) / TILE + 3) & ~3ull;
        s[blockIdx.y * ld + blockIdx.x] = sc;
        st[blockIdx.x * ldt + blockIdx.y] = sc;
    }
}

// ---------------------------------------------------------------------------------------------
// Norm (RMSNorm or LayerNorm) over rows of [rows, k], one CTA of 256 threads per row, each
// thread holding up to 8 vectors of 8 elements (k <= 16384). Writes the bf16 output and, when
// q != 0, the 1x128 rowwise FP8 quantization of it in the same pass (TE fuses the norm with the
// cast). A 128-element block is 16 consecutive threads' vectors: a 16-lane shuffle finds its amax.
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(256)
norm_fwd(const bf16_t* __restrict__ x, const bf16_t* __restrict__ gamma, const bf16_t* __restrict__ beta,
         u64 rows, u64 k, int layernorm, float eps, bf16_t* __restrict__ y,
         fp8_t* __restrict__ q, float* __restrict__ s_row, u64 ld_srow, int pow2) {
    const u64 row = blockIdx.x;
    if (row >= rows) return;
    const int tid = threadIdx.x;
    __shared__ float red[8];
    float v[8][8];
    float sum = 0.0f, sumsq = 0.0f;
#pragma unroll
    for (int c = 0; c < 8; ++c) {
        u64 col = (u64)c * 2048 + tid * 8;
        if (col < k) {
            uint4 raw = *reinterpret_cast<const uint4*>(x + row * k + col);
            const bf16_t* e = reinterpret_cast<const bf16_t*>(&raw);
            for (int j = 0; j < 8; ++j) { v[c][j] = bf16_to_f(e[j]); sum += v[c][j]; sumsq += v[c][j] * v[c][j]; }
        }
    }
    const int warp = tid >> 5, lane = tid & 31;
    float mean = 0.0f;
    if (layernorm) {
        float ws = warp_sum(sum);
        if (lane == 0) red[warp] = ws;
        __syncthreads();
        float tot = 0.0f;
        for (int i = 0; i < 8; ++i) tot += red[i];
        mean = tot / (float)k;
        __syncthreads();
        sumsq = 0.0f;
#pragma unroll
        for (int c = 0; c < 8; ++c) {
            u64 col = (u64)c * 2048 + tid * 8;
            if (col < k) for (int j = 0; j < 8; ++j) { float d = v[c][j] - mean; sumsq += d * d; }
        }
    }
    float wq = warp_sum(sumsq);
    if (lane == 0) red[warp] = wq;
    __syncthreads();
    float tot = 0.0f;
    for (int i = 0; i < 8; ++i) tot += red[i];
    const float rstd = rsqrtf(tot / (float)k + eps);
#pragma unroll
    for (int c = 0; c < 8; ++c) {
        u64 col = (u64)c * 2048 + tid * 8;
        bool live = col < k;
        float o[8];
        float amax = 0.0f;
        if (live) {
            uint4 graw = *reinterpret_cast<const uint4*>(gamma + col);
            const bf16_t* g = reinterpret_cast<const bf16_t*>(&graw);
            uint4 braw = make_uint4(0, 0, 0, 0);
            if (layernorm) braw = *reinterpret_cast<const uint4*>(beta + col);
            const bf16_t* b = reinterpret_cast<const bf16_t*>(&braw);
            uint4 outraw;
            bf16_t* outv = reinterpret_cast<bf16_t*>(&outraw);
            for (int j = 0; j < 8; ++j) {
                float t = (v[c][j] - mean) * rstd * bf16_to_f(g[j]) + (layernorm ? bf16_to_f(b[j]) : 0.0f);
                outv[j] = f_to_bf16(t);
                o[j] = bf16_to_f(outv[j]);
                amax = fmaxf(amax, fabsf(o[j]));
            }
            *reinterpret_cast<uint4*>(y + row * k + col) = outraw;
        }
        if (q) {
            // Blocks of 128 columns = 16 consecutive lanes; all lanes of the warp take part.
            amax = warp_max(amax, 16);
            if (live) {
                float sc = dequant_scale(amax, pow2);
                float inv = 1.0f / sc;
                unsigned int lo = 0, hi = 0;
                for (int j = 0; j < 4; ++j) lo |= ((unsigned int)f_to_e4m3(o[j] * inv)) << (8 * j);
                for (int j = 0; j < 4; ++j) hi |= ((unsigned int)f_to_e4m3(o[4 + j] * inv)) << (8 * j);
                *reinterpret_cast<uint2*>(q + row * k + col) = make_uint2(lo, hi);
                if ((tid & 15) == 0) s_row[(col / 128) * ld_srow + row] = sc;
            }
        }
    }
}

// =============================================================================================
// Per-tensor recipes: tensorwise (TE's Float8CurrentScaling) and delayed (TE's DelayedScaling).
// One scale per tensor; a grouped operand has one per expert segment (TE quantizes each split
// with its own quantizer). The tile tables are the 1x128 ones, except that `srow_off` holds the
// segment's index into the per-tensor arrays (amax, scale, scale_inv). Formats: E4M3 (max 448)
// or E5M2 (max 57344: TE's HYBRID format uses it for gradients).
//
// Tensorwise runs as TE does: amax buffer zeroed, an amax pass, a scale kernel, then the cast
// (with its transpose) using the fresh scale.
//
// Per-tensor arrays keep one tensor per 16 bytes (TSTRIDE floats): cuBLASLt wants its scale
// pointers 16-byte aligned, and a grouped GEMM points at one expert's scale_inv. Delayed runs the cast with the scale computed from
// the amax history at the end of the previous step, recording this tensor's amax in the same
// pass; `delayed_update` then rolls the history and recomputes the scales, once per direction.
// =============================================================================================
#define E5M2_MAX 57344.0f
#define TSTRIDE 4

template <bool E5>
__device__ __forceinline__ unsigned short cvt2f(float a, float b) {
    unsigned short r;
    // Packs b into the low byte and a into the high byte.
    if (E5) asm("{ .reg .b16 t; cvt.rn.satfinite.e5m2x2.f32 t, %1, %2; mov.b16 %0, t; }" : "=h"(r) : "f"(a), "f"(b));
    else asm("{ .reg .b16 t; cvt.rn.satfinite.e4m3x2.f32 t, %1, %2; mov.b16 %0, t; }" : "=h"(r) : "f"(a), "f"(b));
    return r;
}

template <bool E5>
__device__ __forceinline__ uint2 quant8f(uint4 v, float s) {
    unsigned int w[4] = {v.x, v.y, v.z, v.w};
    unsigned int p[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) p[j] = cvt2f<E5>(hi16(w[j]) * s, lo16(w[j]) * s);
    return make_uint2(p[0] | (p[1] << 16), p[2] | (p[3] << 16));
}

// Loads this thread's 8x8 block of a tile (the quant_1x128 thread layout) into v; returns the
// packed absolute maximum of what it loaded (both halves hold the max).
template <bool FULL>
__device__ __forceinline__ unsigned int load_block8(
        const bf16_t* __restrict__ x, u64 cols, const TileDesc& t, uint4 v[8],
        int* r8_out, int* c8_out, int* rows_here_out, int* cols_here_out) {
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int h = warp & 1, rb = warp >> 1, cg = lane & 7, rg = lane >> 3;
    const int c8 = h * 64 + cg * 8;
    const int r8 = rb * 32 + rg * 8;
    const int rows_here = FULL ? TILE : (int)min((u64)TILE, t.seg_rows - t.tile_m);
    const int cols_here = FULL ? TILE : (int)min((u64)TILE, cols - t.tile_c);
    const bool chunk_in = FULL || c8 < cols_here;
    const bf16_t* src = x + (t.row0 + t.tile_m + r8) * cols + t.tile_c + c8;
    unsigned int m = 0;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        v[i] = make_uint4(0, 0, 0, 0);
        if (FULL || (chunk_in && r8 + i < rows_here)) v[i] = __ldg(reinterpret_cast<const uint4*>(src + (u64)i * cols));
        m = bmax2(m, absmax_word(v[i]));
    }
    *r8_out = r8; *c8_out = c8; *rows_here_out = rows_here; *cols_here_out = cols_here;
    return fold2(m);
}

// Block-wide maximum of a non-negative float, then one atomicMax into `dst` (non-negative
// floats order like their bit patterns). Every thread must call it.
__device__ __forceinline__ void block_amax_to(float a, float* dst) {
    __shared__ float red[8];
    a = warp_max(a, 32);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) red[warp] = a;
    __syncthreads();
    if (threadIdx.x == 0) {
        float m = red[0];
#pragma unroll
        for (int i = 1; i < 8; ++i) m = fmaxf(m, red[i]);
        atomicMax(reinterpret_cast<unsigned int*>(dst), __float_as_uint(m));
    }
}

// The amax pass of current scaling: one CTA per tile, atomicMax into amax[segment]. `amax` must
// be zeroed first (TE zeroes it the same way, with a memset).
template <bool FULL>
__device__ __forceinline__ void amax_tile(const bf16_t* __restrict__ x, u64 cols, const TileDesc& t, float* amax) {
    uint4 v[8];
    int r8, c8, rh, ch;
    const unsigned int m = load_block8<FULL>(x, cols, t, v, &r8, &c8, &rh, &ch);
    block_amax_to(lo16(m), amax + t.srow_off);
}

extern "C" __global__ void __launch_bounds__(256)
amax_tiles(const bf16_t* __restrict__ x, u64 cols, const TileDesc* __restrict__ tiles, float* amax) {
    const TileDesc t = tiles[blockIdx.x];
    if (t.seg_rows - t.tile_m >= TILE && cols - t.tile_c >= TILE) amax_tile<true>(x, cols, t, amax);
    else amax_tile<false>(x, cols, t, amax);
}

// Quantization factor and its inverse from an amax, as TE's compute_scale_from_amax: fmax / amax
// (optionally rounded down to a power of two); an amax of 0 or a non-finite one keeps `prev`.
__device__ __forceinline__ float scale_from_amax(float amax, float fmax, int pow2, float prev) {
    if (!(amax > 0.0f) || isinf(amax)) return prev;
    float s = fmax / amax;
    if (isinf(s)) s = 3.402823466e38f;
    if (pow2) s = __uint_as_float(__float_as_uint(s) & 0xff800000u);   // 2^floor(log2 s)
    return s;
}

// The scale kernel of current scaling: one thread per tensor (arrays strided by TSTRIDE).
extern "C" __global__ void tensor_scale(const float* __restrict__ amax, u64 n, float fmax, int pow2,
                                        float* __restrict__ scale, float* __restrict__ scale_inv) {
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float s = scale_from_amax(amax[TSTRIDE * i], fmax, pow2, 1.0f);
    scale[TSTRIDE * i] = s;
    scale_inv[TSTRIDE * i] = 1.0f / s;
}

// The per-tensor cast of one tile, rowwise and/or columnwise (the transposed copy the Hopper
// FP8 GEMM needs for wgrad), with the quantization factor scale[segment]. With `amax_rec` (the
// delayed recipe) the tile's amax is recorded into amax_rec[segment] in the same pass. The
// tile at the segment's origin writes scale_inv[segment] = 1 / scale, as TE's casts do.
template <bool FULL, bool E5>
__device__ __forceinline__ void cast_tensor_tile(
        const bf16_t* __restrict__ x, u64 cols, const TileDesc& t, int do_row, int do_col,
        const float* __restrict__ scale, float* __restrict__ scale_inv, float* amax_rec,
        fp8_t* __restrict__ q_row, fp8_t* __restrict__ q_col) {
    uint4 v[8];
    int r8, c8, rows_here, cols_here;
    const unsigned int m = load_block8<FULL>(x, cols, t, v, &r8, &c8, &rows_here, &cols_here);
    const float s = scale[t.srow_off];
    if (t.tile_m == 0 && t.tile_c == 0 && threadIdx.x == 0) scale_inv[t.srow_off] = 1.0f / s;
    const bool chunk_in = FULL || c8 < cols_here;
    if (do_row) {
        fp8_t* dst = q_row + (t.row0 + t.tile_m + r8) * cols + t.tile_c + c8;
#pragma unroll
        for (int i = 0; i < 8; ++i)
            if (FULL || (chunk_in && r8 + i < rows_here))
                *reinterpret_cast<uint2*>(dst + (u64)i * cols) = quant8f<E5>(v[i], s);
    }
    if (do_col && (FULL || r8 < rows_here)) {
        fp8_t* dst = q_col + t.qcol_off + (t.tile_c + c8) * t.seg_rows + t.tile_m + r8;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int q = j >> 1;
            float f[8];
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const unsigned int e = word_of(v[i], q);
                f[i] = ((j & 1) ? hi16(e) : lo16(e)) * s;
            }
            const unsigned int w0 = cvt2f<E5>(f[1], f[0]) | ((unsigned int)cvt2f<E5>(f[3], f[2]) << 16);
            const unsigned int w1 = cvt2f<E5>(f[5], f[4]) | ((unsigned int)cvt2f<E5>(f[7], f[6]) << 16);
            if (FULL || c8 + j < cols_here) *reinterpret_cast<uint2*>(dst + (u64)j * t.seg_rows) = make_uint2(w0, w1);
        }
    }
    if (amax_rec) block_amax_to(lo16(m), amax_rec + t.srow_off);
}

template <bool E5>
__device__ __forceinline__ void cast_tensor_body(
        const bf16_t* __restrict__ x, u64 cols, const TileDesc* __restrict__ tiles, int do_row, int do_col,
        const float* __restrict__ scale, float* __restrict__ scale_inv, float* amax_rec,
        fp8_t* __restrict__ q_row, fp8_t* __restrict__ q_col) {
    const TileDesc t = tiles[blockIdx.x];
    if (t.seg_rows - t.tile_m >= TILE && cols - t.tile_c >= TILE)
        cast_tensor_tile<true, E5>(x, cols, t, do_row, do_col, scale, scale_inv, amax_rec, q_row, q_col);
    else
        cast_tensor_tile<false, E5>(x, cols, t, do_row, do_col, scale, scale_inv, amax_rec, q_row, q_col);
}

extern "C" __global__ void __launch_bounds__(256)
cast_tensor(const bf16_t* __restrict__ x, u64 cols, const TileDesc* __restrict__ tiles, int do_row, int do_col,
            int e5m2, const float* __restrict__ scale, float* __restrict__ scale_inv, float* amax_rec,
            fp8_t* __restrict__ q_row, fp8_t* __restrict__ q_col) {
    if (e5m2) cast_tensor_body<true>(x, cols, tiles, do_row, do_col, scale, scale_inv, amax_rec, q_row, q_col);
    else cast_tensor_body<false>(x, cols, tiles, do_row, do_col, scale, scale_inv, amax_rec, q_row, q_col);
}

// The delayed recipe's per-step update, one CTA (256 threads) per tensor. `history` is
// [len, TSTRIDE * n] (tensor t in column TSTRIDE * t; row 0: the amax the casts recorded this step). The new amax is the history's
// maximum (algo_max) or row 0 (most_recent); the history is rolled by one (row i takes row i+1,
// the last row takes row 0) and row 0 is cleared for the next step, as TE's
// amax_and_scale_update does. Scales are recomputed from the new amax (fmax: the format's).
#define MAX_HISTORY 4096
extern "C" __global__ void __launch_bounds__(256)
delayed_update(float* __restrict__ history, u64 len, u64 n, int algo_max, float fmax,
               int pow2, float* __restrict__ scale, float* __restrict__ scale_inv) {
    __shared__ float h[MAX_HISTORY];
    __shared__ float red[8];
    const u64 t = blockIdx.x;
    if (t >= n || len == 0 || len > MAX_HISTORY) return;
    float a = 0.0f;
    for (u64 i = threadIdx.x; i < len; i += blockDim.x) {
        h[i] = history[i * TSTRIDE * n + TSTRIDE * t];
        a = fmaxf(a, h[i]);
    }
    a = warp_max(a, 32);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = a;
    __syncthreads();
    float m = red[0];
#pragma unroll
    for (int i = 1; i < 8; ++i) m = fmaxf(m, red[i]);
    const float amax = algo_max ? m : h[0];
    for (u64 i = threadIdx.x; i < len; i += blockDim.x) {
        const float rolled = (i + 1 < len) ? h[i + 1] : h[0];
        history[i * TSTRIDE * n + TSTRIDE * t] = (i == 0) ? 0.0f : rolled;
    }
    if (threadIdx.x == 0) {
        const float s = scale_from_amax(amax, fmax, pow2, scale[TSTRIDE * t]);
        scale[TSTRIDE * t] = s;
        scale_inv[TSTRIDE * t] = 1.0f / s;
    }
}

// =============================================================================================
// MXFP8 (TE's MXFP8BlockScaling; Blackwell, sm_100+): E4M3 data in 1x32 blocks along the
// contraction dimension, one E8M0 scale (a biased power-of-two exponent) per block, scales in
// cuBLASLt's swizzled layout for VEC32_UE8M0: the [rows, cols / 32] scale matrix in tiles of
// 128 rows x 4 columns (512 bytes), tile (rt, ct) at (rt * ceil(cols / 128) + ct) * 512, and
// inside a tile (r % 32) * 16 + ((r % 128) / 32) * 4 + c % 4. The launcher refuses to run below
// sm_100; on Hopper this compiles only (cuBLASLt has no VEC32_UE8M0 GEMM there).
// One thread per 32-element block: written for correctness, not tuned.
// =============================================================================================
__device__ __forceinline__ u64 mx_scale_index(u64 r, u64 cb, u64 cols) {
    const u64 col_tiles = (cols / 32 + 3) / 4;
    return ((r / 128) * col_tiles + cb / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + (cb % 4);
}

// E8M0 byte of the smallest power of two P with 448 * P >= amax (2^-127 for a zero block).
__device__ __forceinline__ unsigned char e8m0_of(float amax) {
    if (!(amax > 0.0f) || isinf(amax)) return 127;
    const float p = dequant_scale(amax, 1);
    return (unsigned char)((__float_as_uint(p) >> 23) & 0xff);
}

// Rowwise: blocks of 32 along the columns of a row-major [rows, cols] bf16 matrix.
extern "C" __global__ void quant_mx_rows(const bf16_t* __restrict__ x, u64 rows, u64 cols,
                                         fp8_t* __restrict__ q, unsigned char* __restrict__ s) {
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 nb = cols / 32;
    if (i >= rows * nb) return;
    const u64 r = i / nb, cb = i % nb;
    const bf16_t* src = x + r * cols + cb * 32;
    float v[32], amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) { v[j] = bf16_to_f(src[j]); amax = fmaxf(amax, fabsf(v[j])); }
    const unsigned char e = e8m0_of(amax);
    const float inv = __uint_as_float((unsigned int)(254 - e) << 23);   // 1 / 2^(e - 127)
#pragma unroll
    for (int j = 0; j < 32; ++j) q[r * cols + cb * 32 + j] = f_to_e4m3(v[j] * inv);
    s[mx_scale_index(r, cb, cols)] = e;
}

// Columnwise: blocks of 32 down the rows, written transposed ([cols, rows] row-major) with the
// scales of that transposed operand.
extern "C" __global__ void quant_mx_cols(const bf16_t* __restrict__ x, u64 rows, u64 cols,
                                         fp8_t* __restrict__ qt, unsigned char* __restrict__ st) {
    const u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    const u64 nb = rows / 32;
    if (i >= cols * nb) return;
    const u64 c = i % cols, rb = i / cols;
    float v[32], amax = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; ++j) { v[j] = bf16_to_f(x[(rb * 32 + j) * cols + c]); amax = fmaxf(amax, fabsf(v[j])); }
    const unsigned char e = e8m0_of(amax);
    const float inv = __uint_as_float((unsigned int)(254 - e) << 23);
#pragma unroll
    for (int j = 0; j < 32; ++j) qt[c * rows + rb * 32 + j] = f_to_e4m3(v[j] * inv);
    st[mx_scale_index(c, rb, rows)] = e;
}
