//! The device buffers of one point: rotation sets of inputs, outputs, and the FP8 operands,
//! scales and tile tables, with their byte sizes.

use fp8_engine::model::Norm;

use super::super::buffer::DevBuf;
use super::super::{Gpu, launch};
use crate::error::BenchError;
use crate::layout::{Segments, blk128_scale_len, round_up};

use super::MeasureOptions;

/// Device buffers of one rotation set.
pub(super) struct Set {
    pub(super) x: DevBuf,
    pub(super) w: DevBuf,
    pub(super) dy: DevBuf,
    /// The FP8 operands, when the point measures FP8.
    pub(super) fp8: Option<Fp8Set>,
}

/// The FP8 side of a rotation set: padded copies of x and dy, the FP8 weights and their
/// transposes, with their scales (blockwise: 128x128 tiles; per-tensor: `scale_inv` slots).
pub(super) struct Fp8Set {
    pub(super) xp: DevBuf,
    pub(super) dyp: DevBuf,
    pub(super) wq: DevBuf,
    pub(super) sw: DevBuf,
    pub(super) wqt: DevBuf,
    pub(super) swt: DevBuf,
}

impl Set {
    /// Every allocation of the set, for bounds-checked reads.
    pub(super) fn bufs(&self) -> impl Iterator<Item = &DevBuf> {
        [&self.x, &self.w, &self.dy]
            .into_iter()
            .chain(self.fp8.iter().flat_map(Fp8Set::bufs))
    }

    /// The FP8 operands; an internal error when the point allocated none.
    pub(super) fn fp8(&self) -> Result<&Fp8Set, BenchError> {
        self.fp8
            .as_ref()
            .ok_or_else(|| BenchError::Internal("FP8 operands not allocated".into()))
    }
}

impl Fp8Set {
    fn bufs(&self) -> impl Iterator<Item = &DevBuf> {
        [
            &self.xp, &self.dyp, &self.wq, &self.sw, &self.wqt, &self.swt,
        ]
        .into_iter()
    }
}

pub(super) struct Outs {
    pub(super) y: DevBuf,
    pub(super) dx: DevBuf,
    pub(super) dw: DevBuf,
    pub(super) xn: Option<DevBuf>,
    pub(super) gamma: DevBuf,
    pub(super) beta: DevBuf,
}

/// Where each expert's FP8 operands and scales live, computed once per point (the timed steps
/// reuse it).
pub(super) struct Fp8Layout {
    /// Floats of one expert's 128x128 weight scales, and of its transpose's.
    pub(super) sw_len: u64,
    pub(super) swt_len: u64,
    /// Per expert: rowwise scale, columnwise scale and columnwise data offsets of x and dy.
    pub(super) srow_x: Vec<u64>,
    pub(super) scol_x: Vec<u64>,
    pub(super) qcol_x: Vec<u64>,
    pub(super) srow_dy: Vec<u64>,
    pub(super) scol_dy: Vec<u64>,
    pub(super) qcol_dy: Vec<u64>,
    /// Totals of the same six tensors.
    pub(super) sxr_len: u64,
    pub(super) sxc_len: u64,
    pub(super) xqc_len: u64,
    pub(super) sdr_len: u64,
    pub(super) sdc_len: u64,
    pub(super) dqc_len: u64,
}

impl Fp8Layout {
    pub(super) fn new(seg: &Segments, k: u64, n: u64) -> Self {
        let (srow_x, sxr_len) = seg.rowwise_scale_offsets(k);
        let (scol_x, sxc_len) = seg.colwise_scale_offsets(k);
        let (qcol_x, xqc_len) = seg.colwise_data_offsets(k);
        let (srow_dy, sdr_len) = seg.rowwise_scale_offsets(n);
        let (scol_dy, sdc_len) = seg.colwise_scale_offsets(n);
        let (qcol_dy, dqc_len) = seg.colwise_data_offsets(n);
        Fp8Layout {
            sw_len: round_up(blk128_scale_len(n, k), 4),
            swt_len: round_up(blk128_scale_len(k, n), 4),
            srow_x,
            scol_x,
            qcol_x,
            srow_dy,
            scol_dy,
            qcol_dy,
            sxr_len,
            sxc_len,
            xqc_len,
            sdr_len,
            sdc_len,
            dqc_len,
        }
    }
}

impl Outs {
    /// Every allocation, for bounds-checked reads.
    pub(super) fn bufs(&self) -> impl Iterator<Item = &DevBuf> {
        [&self.y, &self.dx, &self.dw, &self.gamma, &self.beta]
            .into_iter()
            .chain(self.xn.as_ref())
    }
}

pub(super) struct Fp8Outs {
    pub(super) lay: Fp8Layout,
    pub(super) xq_row: DevBuf,
    pub(super) sx_row: DevBuf,
    pub(super) xq_col: DevBuf,
    pub(super) sx_col: DevBuf,
    pub(super) dyq_row: DevBuf,
    pub(super) sdy_row: DevBuf,
    pub(super) dyq_col: DevBuf,
    pub(super) sdy_col: DevBuf,
    pub(super) y: DevBuf,
    pub(super) dx: DevBuf,
    pub(super) dw: DevBuf,
    pub(super) xn: Option<DevBuf>,
    pub(super) tiles_x: DevBuf,
    pub(super) n_tiles_x: u32,
    pub(super) tiles_dy: DevBuf,
    pub(super) n_tiles_dy: u32,
}

impl Fp8Outs {
    /// Every allocation, for bounds-checked reads.
    pub(super) fn bufs(&self) -> impl Iterator<Item = &DevBuf> {
        [
            &self.xq_row,
            &self.sx_row,
            &self.xq_col,
            &self.sx_col,
            &self.dyq_row,
            &self.sdy_row,
            &self.dyq_col,
            &self.sdy_col,
            &self.y,
            &self.dx,
            &self.dw,
            &self.tiles_x,
            &self.tiles_dy,
        ]
        .into_iter()
        .chain(self.xn.as_ref())
    }
}

pub(super) struct Dims {
    pub(super) k: u64,
    pub(super) n: u64,
    pub(super) g: u64,
    pub(super) rows: u64,
    /// Logical rows per expert and their offsets (BF16 layout).
    pub(super) splits: Vec<u64>,
    pub(super) offsets: Vec<u64>,
    pub(super) norm: Option<Norm>,
}

/// Bytes of one bf16 value.
const BF16: u64 = 2;
/// Bytes of one FP8 value.
const FP8: u64 = 1;

/// Byte sizes of the tensors a point allocates, in one place: the allocations and the memory
/// estimate both use them.
impl Dims {
    /// Activations `[rows, k]` in bf16 (x, dx, the normalized x).
    pub(super) fn x_bytes(&self) -> u64 {
        BF16 * self.rows * self.k
    }
    /// `[rows, n]` in bf16 (y, dy).
    pub(super) fn y_bytes(&self) -> u64 {
        BF16 * self.rows * self.n
    }
    /// Weights of every local expert, `[g, n, k]` in bf16 (w, dw).
    pub(super) fn w_bytes(&self) -> u64 {
        BF16 * self.g * self.n * self.k
    }
    /// FP8 weights of every local expert (w and its transpose each).
    pub(super) fn wq_bytes(&self) -> u64 {
        FP8 * self.g * self.n * self.k
    }
    /// One rotation set: the bf16 inputs, and with FP8 the padded inputs and FP8 weights.
    pub(super) fn set_bytes(&self, padded_rows: u64, fp8: bool) -> u64 {
        let bf16 = self.x_bytes() + self.y_bytes() + self.w_bytes();
        if fp8 {
            bf16 + BF16 * padded_rows * (self.k + self.n) + 2 * self.wq_bytes()
        } else {
            bf16
        }
    }
}

/// Allocates and fills everything a point needs: enough rotation sets that one step's inputs
/// are out of L2 when it runs again, the outputs, and the FP8 operands. Refuses a point that
/// would not fit in free device memory (with 1 GiB to spare).
#[allow(clippy::type_complexity)]
pub(super) fn allocate(
    gpu: &Gpu,
    bp: &crate::sweep::BenchPoint,
    d: &Dims,
    seg: &Segments,
    opt: &MeasureOptions,
) -> Result<(Vec<Set>, Outs, Option<Fp8Outs>), BenchError> {
    let (k, n, g) = (d.k, d.n, d.g);
    let set_bytes = d.set_bytes(seg.total_padded(), opt.fp8);
    let sets = ((3 * gpu.l2_bytes).div_ceil(set_bytes.max(1))).clamp(1, 8) as usize;
    let (free, _) = gpu.mem_info()?;
    let need = crate::sweep::point_bytes(bp, opt.pad) + (sets as u64 - 1) * set_bytes;
    if need > free.saturating_sub(1 << 30) {
        return Err(BenchError::OutOfMemory {
            bytes: need,
            detail: format!("{free} bytes free"),
        });
    }
    let mut rot = Vec::with_capacity(sets);
    for i in 0..sets {
        let seed = opt.seed.wrapping_add(i as u32 * 7919);
        let set = Set {
            x: gpu.alloc(d.x_bytes())?,
            w: gpu.alloc(d.w_bytes())?,
            dy: gpu.alloc(d.y_bytes())?,
            fp8: None,
        };
        gpu.fill_normal(&set.x, d.rows * k, seed, 1.0)?;
        gpu.fill_normal(&set.w, g * n * k, seed ^ 0xa5a5, 0.05)?;
        gpu.fill_normal(&set.dy, d.rows * n, seed ^ 0x5a5a, 1.0)?;
        rot.push(set);
    }
    let outs = Outs {
        y: gpu.alloc(d.y_bytes())?,
        dx: gpu.alloc(d.x_bytes())?,
        dw: gpu.alloc(d.w_bytes())?,
        xn: if d.norm.is_some() {
            Some(gpu.alloc(d.x_bytes())?)
        } else {
            None
        },
        gamma: gpu.alloc(BF16 * k)?,
        beta: gpu.alloc(BF16 * k)?,
    };
    gpu.fill_normal(&outs.gamma, k, opt.seed ^ 0x77, 1.0)?;
    gpu.fill_normal(&outs.beta, k, opt.seed ^ 0x78, 0.1)?;
    let fp8 = if opt.fp8 {
        Some(setup_fp8(gpu, &mut rot, d, seg, opt)?)
    } else {
        None
    };
    Ok((rot, outs, fp8))
}

pub(super) fn setup_fp8(
    gpu: &Gpu,
    rot: &mut [Set],
    d: &Dims,
    seg: &Segments,
    opt: &MeasureOptions,
) -> Result<Fp8Outs, BenchError> {
    let (k, n, g) = (d.k, d.n, d.g);
    let p = seg.total_padded();
    let lay = Fp8Layout::new(seg, k, n);
    let (sw_len, swt_len) = (lay.sw_len, lay.swt_len);
    for set in rot.iter_mut() {
        // Padded BF16 inputs: the logical rows of each expert at its padded offset, zeros in
        // the pad rows (what the trainer's padding produces).
        let xp = gpu.alloc(2 * p * k)?;
        let dyp = gpu.alloc(2 * p * n)?;
        xp.zero(&gpu.stream)?;
        dyp.zero(&gpu.stream)?;
        let mut src_row = 0;
        for (e, &r) in seg.rows.iter().enumerate() {
            xp.copy_from(
                &gpu.stream,
                2 * seg.offsets[e] * k,
                &set.x,
                2 * src_row * k,
                2 * r * k,
            )?;
            dyp.copy_from(
                &gpu.stream,
                2 * seg.offsets[e] * n,
                &set.dy,
                2 * src_row * n,
                2 * r * n,
            )?;
            src_row += r;
        }
        set.fp8 = Some(Fp8Set {
            xp,
            dyp,
            wq: gpu.alloc(g * n * k)?,
            sw: gpu.alloc(4 * g * sw_len)?,
            wqt: gpu.alloc(g * n * k)?,
            swt: gpu.alloc(4 * g * swt_len)?,
        });
        if opt.fp8_param && opt.recipe.recipe() == crate::recipe::Recipe::Blockwise {
            // FP8 params: the weights are quantized once, outside the step (the other recipes
            // do it in their own setup, `tensor::setup` and `mx::setup`, with their scales).
            quant_weights(gpu, set, d, opt.pow2_scales)?;
        }
    }
    let (tiles_x, n_tiles_x) = gpu.upload_tiles(seg, k)?;
    let (tiles_dy, n_tiles_dy) = gpu.upload_tiles(seg, n)?;
    Ok(Fp8Outs {
        xq_row: gpu.alloc(p * k)?,
        sx_row: gpu.alloc(4 * lay.sxr_len)?,
        xq_col: gpu.alloc(lay.xqc_len)?,
        sx_col: gpu.alloc(4 * lay.sxc_len)?,
        dyq_row: gpu.alloc(p * n)?,
        sdy_row: gpu.alloc(4 * lay.sdr_len)?,
        dyq_col: gpu.alloc(lay.dqc_len)?,
        sdy_col: gpu.alloc(4 * lay.sdc_len)?,
        y: gpu.alloc(2 * p * n)?,
        dx: gpu.alloc(2 * p * k)?,
        dw: gpu.alloc(2 * g * n * k)?,
        xn: if d.norm.is_some() {
            Some(gpu.alloc(2 * p * k)?)
        } else {
            None
        },
        tiles_x,
        n_tiles_x,
        tiles_dy,
        n_tiles_dy,
        lay,
    })
}

pub(super) fn quant_weights(gpu: &Gpu, set: &Set, d: &Dims, pow2: bool) -> Result<u32, BenchError> {
    let (k, n) = (d.k, d.n);
    let sw_len = round_up(blk128_scale_len(n, k), 4);
    let swt_len = round_up(blk128_scale_len(k, n), 4);
    let f = set.fp8()?;
    for e in 0..d.g {
        let out = [
            f.wq.at(e * n * k),
            f.sw.at(4 * e * sw_len),
            f.wqt.at(e * n * k),
            f.swt.at(4 * e * swt_len),
        ];
        launch::quant_128x128(gpu, set.w.at(2 * e * n * k), n, k, pow2, out)?;
    }
    Ok(d.g as u32)
}
