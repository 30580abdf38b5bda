//! Buffer and scale layouts of the blockwise recipe, and the padding TE applies.
//!
//! Pure arithmetic, tested on the CPU. The CUDA kernels and the cuBLASLt calls use exactly these
//! numbers; a wrong stride here is the "silent garbage, relative error 10^3" failure the
//! correctness check exists for.

/// Block length of the recipe: 1x128 for activations and gradients, 128x128 for weights.
pub const BLOCK: u64 = 128;

/// Floats per tensor in the per-tensor recipes' scale arrays (amax, scale, scale_inv, history
/// columns): 16 bytes, because cuBLASLt wants every scale pointer 16-byte aligned and a grouped
/// GEMM points at one expert's.
pub const TENSOR_SLOT: u64 = 4;

/// Rounds `x` up to a multiple of `m` (`m > 0`).
pub const fn round_up(x: u64, m: u64) -> u64 {
    x.div_ceil(m) * m
}

/// Scale floats of a 1x128 (VEC128_32F) quantization of a row-major `[rows, cols]` operand along
/// `cols`: `ceil(cols / 128)` blocks per row, stored block-major with the row index fastest and
/// the row count padded to 4 (16 bytes), as TE lays them out for cuBLASLt.
pub const fn vec128_scale_len(rows: u64, cols: u64) -> u64 {
    cols.div_ceil(BLOCK) * round_up(rows, 4)
}

/// Index of the scale of element `(r, c)` in a VEC128 scale tensor of an operand with `rows`
/// rows.
pub const fn vec128_scale_index(rows: u64, r: u64, c: u64) -> u64 {
    (c / BLOCK) * round_up(rows, 4) + r
}

/// Scale floats of a 128x128 (BLK128x128_32F) quantization of a row-major `[rows, cols]`
/// operand: row blocks outer, column blocks inner, the inner count padded to 4.
pub const fn blk128_scale_len(rows: u64, cols: u64) -> u64 {
    rows.div_ceil(BLOCK) * round_up(cols.div_ceil(BLOCK), 4)
}

/// Index of the scale of element `(r, c)` in a BLK128x128 scale tensor.
pub const fn blk128_scale_index(cols: u64, r: u64, c: u64) -> u64 {
    (r / BLOCK) * round_up(cols.div_ceil(BLOCK), 4) + c / BLOCK
}

/// MXFP8 block length (1x32 along the contraction dimension).
pub const MX_BLOCK: u64 = 32;

/// Bytes of the E8M0 scales of an MXFP8 operand `[rows, cols]` quantized along `cols`, in
/// cuBLASLt's swizzled VEC32_UE8M0 layout: the `[rows, cols / 32]` matrix padded to whole tiles
/// of 128 rows x 4 columns.
pub const fn mx_scale_bytes(rows: u64, cols: u64) -> u64 {
    round_up(rows, 128) * round_up(cols / MX_BLOCK, 4)
}

/// Index of the scale of row `r`, block `cb` (columns `32 cb .. 32 cb + 31`) in that layout:
/// tile `(r / 128, cb / 4)` of 512 bytes, row-major over tiles, and inside a tile
/// `(r % 32) * 16 + ((r % 128) / 32) * 4 + cb % 4` (the kernels compute the same).
pub const fn mx_scale_index(cols: u64, r: u64, cb: u64) -> u64 {
    let col_tiles = (cols / MX_BLOCK).div_ceil(4);
    ((r / 128) * col_tiles + cb / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4 + cb % 4
}

/// A grouped operand: experts stacked by rows, each padded for FP8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segments {
    /// Logical rows per segment (expert).
    pub rows: Vec<u64>,
    /// Padded rows per segment.
    pub padded: Vec<u64>,
    /// First padded row of each segment.
    pub offsets: Vec<u64>,
}

impl Segments {
    /// Segments for the given logical splits, each padded to a multiple of `pad`.
    pub fn new(splits: &[u64], pad: u64) -> Self {
        let padded: Vec<u64> = splits.iter().map(|&r| round_up(r, pad.max(1))).collect();
        let mut offsets = Vec::with_capacity(padded.len());
        let mut at = 0;
        for p in &padded {
            offsets.push(at);
            at += p;
        }
        Segments {
            rows: splits.to_vec(),
            padded,
            offsets,
        }
    }

    /// Total padded rows.
    pub fn total_padded(&self) -> u64 {
        self.padded.iter().sum()
    }

    /// Total logical rows.
    pub fn total_rows(&self) -> u64 {
        self.rows.iter().sum()
    }

    /// Offsets (in floats) of each segment's rowwise scale tensor for `cols` columns.
    pub fn rowwise_scale_offsets(&self, cols: u64) -> (Vec<u64>, u64) {
        prefix(self.padded.iter().map(|&p| vec128_scale_len(p, cols)))
    }

    /// Offsets (in floats) of each segment's columnwise scale tensor: the transposed operand is
    /// `[cols, padded]` quantized along `padded`.
    pub fn colwise_scale_offsets(&self, cols: u64) -> (Vec<u64>, u64) {
        prefix(self.padded.iter().map(|&p| vec128_scale_len(cols, p)))
    }

    /// Offsets (in bytes) of each segment's transposed FP8 data `[cols, padded]`.
    pub fn colwise_data_offsets(&self, cols: u64) -> (Vec<u64>, u64) {
        prefix(self.padded.iter().map(|&p| cols * p))
    }

    /// The tile descriptors the `quant_1x128` kernel takes: one per 128x128 tile of each
    /// segment, as 7 u64s `[row0, seg_rows, tile_m, tile_c, srow_off, qcol_off, scol_off]`.
    pub fn tiles(&self, cols: u64) -> Vec<[u64; 7]> {
        let (srow, _) = self.rowwise_scale_offsets(cols);
        let (qcol, _) = self.colwise_data_offsets(cols);
        let (scol, _) = self.colwise_scale_offsets(cols);
        let mut out = Vec::new();
        for (i, &p) in self.padded.iter().enumerate() {
            let mut m = 0;
            while m < p {
                let mut c = 0;
                while c < cols {
                    out.push([self.offsets[i], p, m, c, srow[i], qcol[i], scol[i]]);
                    c += BLOCK;
                }
                m += BLOCK;
            }
        }
        out
    }
}

impl Segments {
    /// The tile descriptors of the per-tensor casts (`amax_tiles`, `cast_tensor`): the same
    /// tiles as [`Segments::tiles`], with the offset of the segment's slot in the per-tensor
    /// arrays (its amax, scale and scale_inv: [`TENSOR_SLOT`] `* (first + i)` floats) where the
    /// 1x128 table has the rowwise scale offset, and no columnwise scale offset.
    pub fn tensor_tiles(&self, cols: u64, first: u64) -> Vec<[u64; 7]> {
        let (qcol, _) = self.colwise_data_offsets(cols);
        let mut out = Vec::new();
        for (i, &p) in self.padded.iter().enumerate() {
            let mut m = 0;
            while m < p {
                let mut c = 0;
                while c < cols {
                    let slot = TENSOR_SLOT * (first + i as u64);
                    out.push([self.offsets[i], p, m, c, slot, qcol[i], 0]);
                    c += BLOCK;
                }
                m += BLOCK;
            }
        }
        out
    }
}

fn prefix(sizes: impl Iterator<Item = u64>) -> (Vec<u64>, u64) {
    let mut at = 0;
    let mut out = Vec::new();
    for s in sizes {
        // 16-byte alignment for every scale tensor (4 floats) and data block.
        out.push(at);
        at += round_up(s, 16);
    }
    (out, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mx_scale_layout_is_a_bijection_onto_whole_tiles() {
        for (rows, cols) in [(128u64, 128u64), (256, 96), (40, 64), (384, 512)] {
            let len = mx_scale_bytes(rows, cols);
            let mut seen = vec![false; len as usize];
            for r in 0..rows {
                for cb in 0..cols / MX_BLOCK {
                    let i = mx_scale_index(cols, r, cb) as usize;
                    assert!(i < seen.len(), "{rows}x{cols}: ({r}, {cb}) -> {i} >= {len}");
                    assert!(!seen[i], "{rows}x{cols}: ({r}, {cb}) collides");
                    seen[i] = true;
                }
            }
        }
        // The documented positions: rows 0, 32, 64, 96 interleave within 16 bytes.
        assert_eq!(mx_scale_index(128, 32, 0), 4);
        assert_eq!(mx_scale_index(128, 1, 0), 16);
        assert_eq!(mx_scale_index(128, 0, 3), 3);
        assert_eq!(mx_scale_index(256, 0, 4), 512);
        assert_eq!(mx_scale_index(256, 128, 0), 1024);
    }

    #[test]
    fn tensor_tiles_point_at_16_byte_slots_and_cover_every_segment() {
        let seg = Segments::new(&[300, 0, 16], 16);
        let t = seg.tensor_tiles(520, 2);
        // 304 padded rows -> 3 row tiles, 520 columns -> 5 column tiles; the empty segment none.
        assert_eq!(t.len(), 3 * 5 + 5);
        assert!(t.iter().all(|d| (4 * d[4]) % 16 == 0));
        assert_eq!(t[0][4], TENSOR_SLOT * 2);
        assert_eq!(t.last().map(|d| d[4]), Some(TENSOR_SLOT * 4));
        assert_eq!(t.last().map(|d| d[5]), Some(520 * 304));
    }

    #[test]
    fn scale_lengths_cover_every_block() {
        assert_eq!(vec128_scale_len(16, 128), 16);
        assert_eq!(vec128_scale_len(17, 129), 2 * 20);
        assert_eq!(blk128_scale_len(128, 128), 4);
        assert_eq!(blk128_scale_len(1280, 8192), 10 * 64);
        assert_eq!(blk128_scale_len(3696, 8192), 29 * 64);
        // Non-multiples of 128 ceil-divide and pad the inner count to 4 floats (16 bytes).
        assert_eq!(blk128_scale_len(8192, 3696), 64 * 32);
        assert_eq!(blk128_scale_len(100, 300), 4);
    }

    #[test]
    fn indices_stay_inside_their_tensors() {
        for (rows, cols) in [(16u64, 128u64), (1008, 3696), (4096, 1152), (130, 260)] {
            let len = vec128_scale_len(rows, cols);
            assert!(vec128_scale_index(rows, rows - 1, cols - 1) < len);
            let len = blk128_scale_len(rows, cols);
            assert!(blk128_scale_index(cols, rows - 1, cols - 1) < len);
        }
    }

    #[test]
    fn segments_pad_and_align() {
        let s = Segments::new(&[0, 5, 128, 300], 16);
        assert_eq!(s.padded, vec![0, 16, 128, 304]);
        assert_eq!(s.offsets, vec![0, 0, 16, 144]);
        assert_eq!(s.total_padded(), 448);
        assert_eq!(s.total_rows(), 433);
        let (off, total) = s.rowwise_scale_offsets(256);
        assert!(off.iter().all(|o| o % 16 == 0));
        assert!(total >= 448 * 2);
        // Tiles: 0 for the empty expert, 1x2 + 1x2 + 3x2.
        let tiles = s.tiles(256);
        assert_eq!(tiles.len(), 2 + 2 + 6);
        assert!(tiles.iter().all(|t| t[2] < t[1] && t[3] < 256));
    }
}
