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
// Bit arithmetic instead of frexpf/ldexpf, which are slow library calls.
__device__ __forceinline__ float dequant_scale(float amax, int pow2) {
    if (!(amax > 0.0f) || isinf(amax)) return 1.0f;
    float s = amax / FP8_MAX;
    if (pow2) {
        unsigned int u = __float_as_uint(s);
        if (u & 0x007fffffu) u = (u & 0xff800000u) + 0x00800000u;
        s = __uint_as_float(u);
    }
    return s;
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
// segments; `seg` describes each tile's segment so one launch covers all experts and no block
// crosses an expert boundary.
//
// Per-tile descriptor (u64 x 6): row0 (first row of the segment in x), seg_rows, tile_m (tile's
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
// 1x128 quantization of activations / gradients, rowwise and/or columnwise, in 128x128 tiles.
//
// One CTA (256 threads) quantizes one 128x128 tile of a row-major bf16 [rows, cols] segment.
// Rowwise: each tile row is one 1x128 block, quantized straight from registers (16 threads per
// block, 16-lane shuffle for the amax). Columnwise: each tile column (128 rows) is one block of the
// transposed [cols, rows] output; the tile goes through shared memory with an odd word stride so
// that a warp reading one column touches 32 banks, and lanes write 32 consecutive bytes.
// Grouped GEMMs (MoE experts) are several segments; `tiles` describes each tile's segment so one
// launch covers all experts and no block crosses an expert boundary.
// ---------------------------------------------------------------------------------------------
extern "C" __global__ void __launch_bounds__(256)
quant_1x128(const bf16_t* __restrict__ x, u64 cols, const TileDesc* __restrict__ tiles,
            int do_row, int do_col, int pow2,
            fp8_t* __restrict__ q_row, float* __restrict__ s_row,
            fp8_t* __restrict__ q_col, float* __restrict__ s_col) {
    __shared__ unsigned int sm[TILE][SMW];
    __shared__ __align__(16) fp8_t stage[64][TILE + 16];
    __shared__ float colmax[8][TILE];
    __shared__ float colinv[TILE];
    const TileDesc t = tiles[blockIdx.x];
    const int tid = threadIdx.x;
    const u64 rows_here = min((u64)TILE, t.seg_rows - t.tile_m);
    const u64 cols_here = min((u64)TILE, cols - t.tile_c);
    uint4 v[8];
    load_tile(x + (t.row0 + t.tile_m) * cols + t.tile_c, cols, rows_here, cols_here, tid, v);
    if (do_col) stash_tile(sm, tid, v);
    if (do_row) {
        const u64 ld_row = (t.seg_rows + 3) & ~3ull;
        const int c8 = (tid & 15) * 8;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int r = (tid >> 4) + 16 * i;
            float amax = warp_max(amax8(v[i]), 16);
            if (r < rows_here) {
                const float s = dequant_scale(amax, pow2);
                const u64 row = t.row0 + t.tile_m + r;
                uint2 q = quant8(v[i], 1.0f / s);
                if (c8 + 8 <= cols_here) {
                    *reinterpret_cast<uint2*>(q_row + row * cols + t.tile_c + c8) = q;
                } else {
                    unsigned long long qq = ((unsigned long long)q.y << 32) | q.x;
                    for (int j = 0; j < 8 && c8 + j < cols_here; ++j) q_row[row * cols + t.tile_c + c8 + j] = (fp8_t)(qq >> (8 * j));
                }
                if ((tid & 15) == 0) s_row[t.srow_off + (t.tile_c / TILE) * ld_row + t.tile_m + r] = s;
            }
        }
    }
    if (do_col) {
        const int warp = tid >> 5, lane = tid & 31;
        // Column amax from registers: each thread has 8 rows x 8 columns; combine the two row
        // groups of a warp with one shuffle per column, then the 8 warps through shared memory.
        float cm[8];
#pragma unroll
        for (int j = 0; j < 8; ++j) cm[j] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const unsigned int w[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                cm[2 * j] = fmaxf(cm[2 * j], fabsf(lo16(w[j])));
                cm[2 * j + 1] = fmaxf(cm[2 * j + 1], fabsf(hi16(w[j])));
            }
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) cm[j] = fmaxf(cm[j], __shfl_xor_sync(0xffffffffu, cm[j], 16));
        if (lane < 16) {
#pragma unroll
            for (int j = 0; j < 8; ++j) colmax[warp][lane * 8 + j] = cm[j];
        }
        __syncthreads();
        if (tid < TILE) {
            float a = colmax[0][tid];
#pragma unroll
            for (int q = 1; q < 8; ++q) a = fmaxf(a, colmax[q][tid]);
            const float sc = dequant_scale(a, pow2);
            colinv[tid] = 1.0f / sc;
            if (tid < cols_here) s_col[t.scol_off + (t.tile_m / TILE) * ((cols + 3) & ~3ull) + t.tile_c + tid] = sc;
        }
        __syncthreads();
        // Two halves of 64 columns: each warp quantizes 8 columns into the byte staging tile
        // (lane j takes rows j, j+32, j+64, j+96: 32 banks per read), then the CTA writes the
        // transposed rows out as 16-byte vectors (128 contiguous bytes per column).
#pragma unroll 1
        for (int half = 0; half < 2; ++half) {
#pragma unroll
            for (int cc = 0; cc < 8; ++cc) {
                const int cl = warp * 8 + cc;
                const int c = half * 64 + cl;
                const float inv = colinv[c];
                const unsigned short p01 = cvt2(sm_elem(sm, lane + 32, c) * inv, sm_elem(sm, lane, c) * inv);
                const unsigned short p23 = cvt2(sm_elem(sm, lane + 96, c) * inv, sm_elem(sm, lane + 64, c) * inv);
                stage[cl][lane] = (fp8_t)(p01 & 0xff);
                stage[cl][lane + 32] = (fp8_t)(p01 >> 8);
                stage[cl][lane + 64] = (fp8_t)(p23 & 0xff);
                stage[cl][lane + 96] = (fp8_t)(p23 >> 8);
            }
            __syncthreads();
#pragma unroll
            for (int it = 0; it < 2; ++it) {
                const int item = tid + 256 * it;        // 64 columns x 8 chunks of 16 rows
                const int cl = item >> 3, chunk = item & 7;
                const int c = half * 64 + cl;
                if (c < cols_here && chunk * 16 < rows_here) {
                    fp8_t* dst = q_col + t.qcol_off + (t.tile_c + c) * t.seg_rows + t.tile_m + chunk * 16;
                    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(&stage[cl][chunk * 16]);
                }
            }
            if (half == 0) __syncthreads();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The same cast with one barrier and no shared tile: the transpose happens in registers.
//
// Warp w covers 32 rows x 64 columns of the tile: column half h = w & 1, row block rb = w >> 1.
// Lane: column group cg = lane & 7 (8 columns), row group rg = lane >> 3 (8 rows). So a thread
// holds an 8x8 block, and its 8 bytes of one quantized column are 8 consecutive bytes of the
// transposed output: 4 lanes write one full 32-byte sector per column, straight from registers.
// Row and column maxima are partial per warp; both cross the warps through 3 KB of shared memory
// at the single barrier.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ float elem8(uint4 v, int j) {
    const unsigned int w = (j >> 1) == 0 ? v.x : (j >> 1) == 1 ? v.y : (j >> 1) == 2 ? v.z : v.w;
    return (j & 1) ? hi16(w) : lo16(w);
}

__device__ __forceinline__ void quant_1x128_rt_body(
        const bf16_t* __restrict__ x, u64 cols, const TileDesc* __restrict__ tiles,
        int do_row, int do_col, int pow2,
        fp8_t* __restrict__ q_row, float* __restrict__ s_row,
        fp8_t* __restrict__ q_col, float* __restrict__ s_col) {
    __shared__ float colmax[4][TILE];
    __shared__ float rowmax[2][TILE];
    const TileDesc t = tiles[blockIdx.x];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int h = warp & 1, rb = warp >> 1, cg = lane & 7, rg = lane >> 3;
    const int c8 = h * 64 + cg * 8;       // first column of this thread inside the tile
    const int r8 = rb * 32 + rg * 8;      // first row
    const u64 rows_here = min((u64)TILE, t.seg_rows - t.tile_m);
    const u64 cols_here = min((u64)TILE, cols - t.tile_c);
    const bf16_t* base = x + (t.row0 + t.tile_m) * cols + t.tile_c;
    uint4 v[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int r = r8 + i;
        v[i] = make_uint4(0, 0, 0, 0);
        if (r < rows_here) {
            const bf16_t* src = base + (u64)r * cols + c8;
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
    // Partial maxima: rows over this warp's 64 columns (8 lanes), columns over its 32 rows.
    float ra[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) ra[i] = warp_max(amax8(v[i]), 8);
    float cm[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        if (!do_col) break;
        float a = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; ++i) a = fmaxf(a, fabsf(elem8(v[i], j)));
        a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 8));
        cm[j] = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 16));
    }
    if (do_row && cg == 0) {
#pragma unroll
        for (int i = 0; i < 8; ++i) rowmax[h][r8 + i] = ra[i];
    }
    if (do_col && rg == 0) {
        *reinterpret_cast<float4*>(&colmax[rb][c8]) = make_float4(cm[0], cm[1], cm[2], cm[3]);
        *reinterpret_cast<float4*>(&colmax[rb][c8 + 4]) = make_float4(cm[4], cm[5], cm[6], cm[7]);
    }
    __syncthreads();
    if (do_row) {
        const u64 ld_row = (t.seg_rows + 3) & ~3ull;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int r = r8 + i;
            if (r < rows_here) {
                const float s = dequant_scale(fmaxf(rowmax[0][r], rowmax[1][r]), pow2);
                const u64 row = t.row0 + t.tile_m + r;
                uint2 q = quant8(v[i], 1.0f / s);
                if (c8 + 8 <= cols_here) {
                    *reinterpret_cast<uint2*>(q_row + row * cols + t.tile_c + c8) = q;
                } else {
                    unsigned long long qq = ((unsigned long long)q.y << 32) | q.x;
                    for (int j = 0; j < 8 && c8 + j < cols_here; ++j) q_row[row * cols + t.tile_c + c8 + j] = (fp8_t)(qq >> (8 * j));
                }
                if (h == 0 && cg == 0) s_row[t.srow_off + (t.tile_c / TILE) * ld_row + t.tile_m + r] = s;
            }
        }
    }
    if (do_col && r8 < rows_here) {
        const u64 ld_col = (cols + 3) & ~3ull;
        fp8_t* dst = q_col + t.qcol_off + (t.tile_c + c8) * t.seg_rows + t.tile_m + r8;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            if (c8 + j < cols_here) {
                float m = colmax[0][c8 + j];
#pragma unroll
                for (int q = 1; q < 4; ++q) m = fmaxf(m, colmax[q][c8 + j]);
                const float sc = dequant_scale(m, pow2);
                const float inv = 1.0f / sc;
                const unsigned int w0 = cvt2(elem8(v[1], j) * inv, elem8(v[0], j) * inv)
                                      | ((unsigned int)cvt2(elem8(v[3], j) * inv, elem8(v[2], j) * inv) << 16);
                const unsigned int w1 = cvt2(elem8(v[5], j) * inv, elem8(v[4], j) * inv)
                                      | ((unsigned int)cvt2(elem8(v[7], j) * inv, elem8(v[6], j) * inv) << 16);
                *reinterpret_cast<uint2*>(dst + (u64)j * t.seg_rows) = make_uint2(w0, w1);
                if (r8 == 0) s_col[t.scol_off + (t.tile_m / TILE) * ld_col + t.tile_c + c8 + j] = sc;
            }
        }
    }
}

#define QUANT_RT_ARGS const bf16_t* __restrict__ x, u64 cols, const TileDesc* __restrict__ tiles, \
    int do_row, int do_col, int pow2, fp8_t* __restrict__ q_row, float* __restrict__ s_row, \
    fp8_t* __restrict__ q_col, float* __restrict__ s_col
extern "C" __global__ void __launch_bounds__(256, 2) quant_1x128_rt2(QUANT_RT_ARGS) {
    quant_1x128_rt_body(x, cols, tiles, do_row, do_col, pow2, q_row, s_row, q_col, s_col);
}
extern "C" __global__ void __launch_bounds__(256, 3) quant_1x128_rt3(QUANT_RT_ARGS) {
    quant_1x128_rt_body(x, cols, tiles, do_row, do_col, pow2, q_row, s_row, q_col, s_col);
}
extern "C" __global__ void __launch_bounds__(256, 4) quant_1x128_rt4(QUANT_RT_ARGS) {
    quant_1x128_rt_body(x, cols, tiles, do_row, do_col, pow2, q_row, s_row, q_col, s_col);
}

// ---------------------------------------------------------------------------------------------
// The register-transpose cast with fewer instructions per element (the cast is issue-bound, not
// memory-bound: with 2, 3, 4 CTAs per SM the same kernel reached 54%, 65%, 70% of the copy
// bandwidth, and keeping more tiles in flight with cp.async made it slower).
// - Maxima on packed bf16 pairs: sign bits cleared with one AND, max.bf16x2 (exact: the maximum
//   of bf16 values is one of them), two rows per shuffle. NaN is ignored, as fmaxf does.
// - Power-of-two scales are inverted with one integer subtraction instead of a division.
// - Full tiles (all but the last row and column of tiles) run without bounds checks.
// - Needs cols % 8 == 0 (16-byte aligned rows); the launcher checks.
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
__device__ __forceinline__ void quant_1x128_lean_tile(
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

__device__ __forceinline__ void quant_1x128_lean_body(
        const bf16_t* __restrict__ x, u64 cols, const TileDesc* __restrict__ tiles,
        int do_row, int do_col, int pow2,
        fp8_t* __restrict__ q_row, float* __restrict__ s_row,
        fp8_t* __restrict__ q_col, float* __restrict__ s_col) {
    __shared__ __align__(16) unsigned int rowmax[2][TILE / 2];
    __shared__ __align__(16) unsigned int colmax[4][TILE / 2];
    const TileDesc t = tiles[blockIdx.x];
    if (t.seg_rows - t.tile_m >= TILE && cols - t.tile_c >= TILE)
        quant_1x128_lean_tile<true>(x, cols, t, do_row, do_col, pow2, q_row, s_row, q_col, s_col, rowmax, colmax);
    else
        quant_1x128_lean_tile<false>(x, cols, t, do_row, do_col, pow2, q_row, s_row, q_col, s_col, rowmax, colmax);
}
extern "C" __global__ void __launch_bounds__(256, 4) quant_1x128_lean4(QUANT_RT_ARGS) {
    quant_1x128_lean_body(x, cols, tiles, do_row, do_col, pow2, q_row, s_row, q_col, s_col);
}
extern "C" __global__ void __launch_bounds__(256, 3) quant_1x128_lean3(QUANT_RT_ARGS) {
    quant_1x128_lean_body(x, cols, tiles, do_row, do_col, pow2, q_row, s_row, q_col, s_col);
}

// ---------------------------------------------------------------------------------------------
// The register-transpose cast as a persistent, pipelined kernel: each CTA walks tiles
// blockIdx.x, +gridDim.x, ... and keeps the next S-1 tiles in flight with cp.async (global to
// shared, no registers held), so loads never wait for the cast of the current tile. Each thread
// copies exactly the 16-byte chunks it later reads, so a thread's own cp.async.wait_group is all
// the synchronisation the data needs; the only barrier is the row/column maxima exchange, whose
// buffers alternate between tiles. Needs cols % 8 == 0 (16-byte aligned rows); the launcher checks.
// ---------------------------------------------------------------------------------------------
__device__ __forceinline__ unsigned int smem_u32(const void* p) {
    unsigned int r;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(r) : "l"(p));
    return r;
}

__device__ __forceinline__ void cp_async16(unsigned int dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(bytes) : "memory");
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N> __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}

template <int S>
__device__ __forceinline__ void quant_1x128_pipe_body(
        const bf16_t* __restrict__ x, u64 cols, const TileDesc* __restrict__ tiles, u64 n_tiles,
        int do_row, int do_col, int pow2,
        fp8_t* __restrict__ q_row, float* __restrict__ s_row,
        fp8_t* __restrict__ q_col, float* __restrict__ s_col) {
    extern __shared__ __align__(16) uint4 stage[];   // S tiles x 128 rows x 16 chunks of 16 bytes
    __shared__ float colmax[2][4][TILE];
    __shared__ float rowmax[2][2][TILE];
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int h = warp & 1, rb = warp >> 1, cg = lane & 7, rg = lane >> 3;
    const int c8 = h * 64 + cg * 8;
    const int r8 = rb * 32 + rg * 8;
    const u64 step = gridDim.x;
    auto issue = [&](u64 tile, int s) {
        if (tile < n_tiles) {
            const TileDesc t = tiles[tile];
            const u64 rows_here = min((u64)TILE, t.seg_rows - t.tile_m);
            const u64 cols_here = min((u64)TILE, cols - t.tile_c);
            const bf16_t* base = x + (t.row0 + t.tile_m) * cols + t.tile_c;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int r = r8 + i;
                const bool ok = r < rows_here && c8 < cols_here;
                cp_async16(smem_u32(&stage[(s * TILE + r) * 16 + c8 / 8]), ok ? base + (u64)r * cols + c8 : x, ok ? 16 : 0);
            }
        }
        cp_async_commit();
    };
#pragma unroll
    for (int s = 0; s < S - 1; ++s) issue(blockIdx.x + s * step, s);
    int k = 0;
    for (u64 tile = blockIdx.x; tile < n_tiles; tile += step, ++k) {
        issue(tile + (S - 1) * step, (k + S - 1) % S);
        const TileDesc t = tiles[tile];
        const u64 rows_here = min((u64)TILE, t.seg_rows - t.tile_m);
        const u64 cols_here = min((u64)TILE, cols - t.tile_c);
        const int s = k % S, par = k & 1;
        cp_async_wait<S - 1>();
        uint4 v[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) v[i] = stage[(s * TILE + r8 + i) * 16 + c8 / 8];
        float ra[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) ra[i] = warp_max(amax8(v[i]), 8);
        float cm[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            if (!do_col) break;
            float a = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; ++i) a = fmaxf(a, fabsf(elem8(v[i], j)));
            a = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 8));
            cm[j] = fmaxf(a, __shfl_xor_sync(0xffffffffu, a, 16));
        }
        if (do_row && cg == 0) {
#pragma unroll
            for (int i = 0; i < 8; ++i) rowmax[par][h][r8 + i] = ra[i];
        }
        if (do_col && rg == 0) {
            *reinterpret_cast<float4*>(&colmax[par][rb][c8]) = make_float4(cm[0], cm[1], cm[2], cm[3]);
            *reinterpret_cast<float4*>(&colmax[par][rb][c8 + 4]) = make_float4(cm[4], cm[5], cm[6], cm[7]);
        }
        __syncthreads();
        if (do_row) {
            const u64 ld_row = (t.seg_rows + 3) & ~3ull;
#pragma unroll
            for (int i = 0; i < 8; ++i) {
                const int r = r8 + i;
                if (r < rows_here && c8 < cols_here) {
                    const float sc = dequant_scale(fmaxf(rowmax[par][0][r], rowmax[par][1][r]), pow2);
                    const u64 row = t.row0 + t.tile_m + r;
                    *reinterpret_cast<uint2*>(q_row + row * cols + t.tile_c + c8) = quant8(v[i], 1.0f / sc);
                    if (h == 0 && cg == 0) s_row[t.srow_off + (t.tile_c / TILE) * ld_row + t.tile_m + r] = sc;
                }
            }
        }
        if (do_col && r8 < rows_here) {
            const u64 ld_col = (cols + 3) & ~3ull;
            fp8_t* dst = q_col + t.qcol_off + (t.tile_c + c8) * t.seg_rows + t.tile_m + r8;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                if (c8 + j < cols_here) {
                    float m = colmax[par][0][c8 + j];
#pragma unroll
                    for (int q = 1; q < 4; ++q) m = fmaxf(m, colmax[par][q][c8 + j]);
                    const float sc = dequant_scale(m, pow2);
                    const float inv = 1.0f / sc;
                    const unsigned int w0 = cvt2(elem8(v[1], j) * inv, elem8(v[0], j) * inv)
                                          | ((unsigned int)cvt2(elem8(v[3], j) * inv, elem8(v[2], j) * inv) << 16);
                    const unsigned int w1 = cvt2(elem8(v[5], j) * inv, elem8(v[4], j) * inv)
                                          | ((unsigned int)cvt2(elem8(v[7], j) * inv, elem8(v[6], j) * inv) << 16);
                    *reinterpret_cast<uint2*>(dst + (u64)j * t.seg_rows) = make_uint2(w0, w1);
                    if (r8 == 0) s_col[t.scol_off + (t.tile_m / TILE) * ld_col + t.tile_c + c8 + j] = sc;
                }
            }
        }
    }
    cp_async_wait<0>();
}

#define QUANT_PIPE_ARGS const bf16_t* __restrict__ x, u64 cols, const TileDesc* __restrict__ tiles, \
    u64 n_tiles, int do_row, int do_col, int pow2, fp8_t* __restrict__ q_row, float* __restrict__ s_row, \
    fp8_t* __restrict__ q_col, float* __restrict__ s_col
extern "C" __global__ void __launch_bounds__(256, 3) quant_1x128_pipe2(QUANT_PIPE_ARGS) {
    quant_1x128_pipe_body<2>(x, cols, tiles, n_tiles, do_row, do_col, pow2, q_row, s_row, q_col, s_col);
}
extern "C" __global__ void __launch_bounds__(256, 2) quant_1x128_pipe3(QUANT_PIPE_ARGS) {
    quant_1x128_pipe_body<3>(x, cols, tiles, n_tiles, do_row, do_col, pow2, q_row, s_row, q_col, s_col);
}
extern "C" __global__ void __launch_bounds__(256, 1) quant_1x128_pipe4(QUANT_PIPE_ARGS) {
    quant_1x128_pipe_body<4>(x, cols, tiles, n_tiles, do_row, do_col, pow2, q_row, s_row, q_col, s_col);
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
