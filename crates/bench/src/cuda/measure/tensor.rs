//! The per-tensor recipes (tensorwise = TE's `Float8CurrentScaling`, delayed = TE's
//! `DelayedScaling`): their scale state, one training step, and the checks before timing.
//!
//! Scale state lives in three arrays per direction, one 16-byte slot per tensor: the amax history
//! `[len, t]` (row 0 is this step's amax; current scaling uses row 0 only), the quantization
//! factor `scale` and its inverse `scale_inv` (what the GEMM multiplies by). Forward tensors are
//! the input of each expert segment (columns `0..g`) and the weight of each expert (`g..2g`);
//! backward tensors the output gradient of each segment (`0..g`). Each rotation set's FP8
//! weights carry their own `scale_inv` (in the set's `sw`), as a Float8Tensor does.

//!
//! The checks are in `tensor_check`.

use super::super::buffer::DevBuf;
use super::super::launch::{self, TensorCast};
use super::super::{Gpu, gemm::Ptrs};
use super::MeasureOptions;
use super::buffers::{Dims, Fp8Outs, Fp8Set, Outs, Set};
use super::ctx::{Ctx, Marks, Phase, Step};
use super::ops::{fp8_bprops, fp8_fprops, norm_launch};
use crate::error::BenchError;
use crate::layout::{Segments, TENSOR_SLOT};
use crate::recipe::{AmaxAlgo, Recipe};

/// Floats, and bytes, of one tensor's slot in the scale arrays (16-byte aligned for cuBLASLt).
pub(super) const SLOT: usize = TENSOR_SLOT as usize;
const SLOT_BYTES: u64 = 4 * TENSOR_SLOT;

/// Scale state and tile tables of a point under a per-tensor recipe.
pub(super) struct PerTensor {
    pub(super) g: u64,
    pub(super) len: u64,
    pub(super) delayed: bool,
    tiles_x: (DevBuf, u32),
    tiles_dy: (DevBuf, u32),
    tiles_w: (DevBuf, u32),
    pub(super) fwd_hist: DevBuf,
    pub(super) fwd_scale: DevBuf,
    pub(super) fwd_sinv: DevBuf,
    pub(super) bwd_hist: DevBuf,
    pub(super) bwd_scale: DevBuf,
    pub(super) bwd_sinv: DevBuf,
}

impl PerTensor {
    /// Every allocation, for bounds-checked reads.
    pub(super) fn bufs(&self) -> impl Iterator<Item = &DevBuf> {
        [
            &self.fwd_hist,
            &self.fwd_scale,
            &self.fwd_sinv,
            &self.bwd_hist,
            &self.bwd_scale,
            &self.bwd_sinv,
        ]
        .into_iter()
    }
}

/// Allocates the scale state, quantizes every set's FP8 weights (FP8 params: once, outside the
/// step) and, for delayed scaling, seeds the scales from one current-scaling pass over the first
/// set (a trainer's history is warm after its first steps; the warmup steps then run the real
/// delayed flow).
pub(super) fn setup(
    gpu: &Gpu,
    rot: &[Set],
    d: &Dims,
    seg: &Segments,
    outs: &Outs,
    f: &Fp8Outs,
    opt: &MeasureOptions,
) -> Result<PerTensor, BenchError> {
    let g = d.g;
    let r = &opt.recipe;
    let delayed = r.recipe() == Recipe::Delayed;
    let len = u64::from(r.history_len());
    let wseg = Segments::new(&vec![d.n; g as usize], 1);
    let pt = PerTensor {
        g,
        len,
        delayed,
        tiles_x: gpu.upload_tile_table(&seg.tensor_tiles(d.k, 0))?,
        tiles_dy: gpu.upload_tile_table(&seg.tensor_tiles(d.n, 0))?,
        tiles_w: gpu.upload_tile_table(&wseg.tensor_tiles(d.k, 0))?,
        fwd_hist: gpu.alloc(SLOT_BYTES * len * 2 * g)?,
        fwd_scale: gpu.alloc(SLOT_BYTES * 2 * g)?,
        fwd_sinv: gpu.alloc(SLOT_BYTES * 2 * g)?,
        bwd_hist: gpu.alloc(SLOT_BYTES * len * g)?,
        bwd_scale: gpu.alloc(SLOT_BYTES * g)?,
        bwd_sinv: gpu.alloc(SLOT_BYTES * g)?,
    };
    for b in [&pt.fwd_hist, &pt.bwd_hist] {
        b.zero(&gpu.stream)?;
    }
    for set in rot {
        weight_cast(gpu, &pt, set, d, opt, true)?;
    }
    if delayed {
        let s8 = rot[0].fp8()?;
        let (xp, dyp) = (&s8.xp, &s8.dyp);
        let p = seg.total_padded();
        let src = match &f.xn {
            Some(xn) => {
                norm_bf16(gpu, outs, d, xp.ptr(), p, xn.ptr())?;
                xn.ptr()
            }
            None => xp.ptr(),
        };
        current_scales(
            gpu,
            &pt,
            src,
            d.k,
            &pt.tiles_x,
            pt.fwd_hist.ptr(),
            g,
            false,
            opt,
            [pt.fwd_scale.ptr(), pt.fwd_sinv.ptr()],
        )?;
        current_scales(
            gpu,
            &pt,
            dyp.ptr(),
            d.n,
            &pt.tiles_dy,
            pt.bwd_hist.ptr(),
            g,
            r.grad_e5m2(),
            opt,
            [pt.bwd_scale.ptr(), pt.bwd_sinv.ptr()],
        )?;
    }
    Ok(pt)
}

/// The norm of a LayerNormLinear in bf16 only: the per-tensor cast needs the whole tensor's
/// amax (current scaling), and TE's delayed path writes FP8 from the norm in one kernel that
/// this stands in for with the same bytes moved plus one read.
fn norm_bf16(
    gpu: &Gpu,
    outs: &Outs,
    d: &Dims,
    x: u64,
    rows: u64,
    y: u64,
) -> Result<(), BenchError> {
    let Some(kind) = d.norm else { return Ok(()) };
    norm_launch(gpu, outs, kind, d.k, [x, y, 0, 0], rows, 0, false)
}

/// Zeroes the amax row, runs the amax pass and the scale kernel: current scaling's first half.
#[allow(clippy::too_many_arguments)]
fn current_scales(
    gpu: &Gpu,
    pt: &PerTensor,
    src: u64,
    cols: u64,
    tiles: &(DevBuf, u32),
    amax: u64,
    n: u64,
    e5m2: bool,
    opt: &MeasureOptions,
    out: [u64; 2],
) -> Result<u32, BenchError> {
    let _ = pt;
    // SAFETY of the range: `amax` is the first row of a history holding at least n floats.
    zero_floats(gpu, amax, n)?;
    launch::amax_tiles(gpu, src, cols, tiles.0.ptr(), tiles.1, amax)?;
    launch::tensor_scale(gpu, amax, n, e5m2, opt.pow2_scales, out[0], out[1])?;
    Ok(3)
}

fn zero_floats(gpu: &Gpu, at: u64, n: u64) -> Result<(), BenchError> {
    // SAFETY: callers pass a row of a history buffer they allocated with at least n floats.
    unsafe {
        cudarc::driver::result::memset_d8_async(
            at,
            0,
            (SLOT_BYTES * n) as usize,
            gpu.stream.cu_stream(),
        )
    }
    .map_err(BenchError::driver)
}

/// Quantizes a set's weights (rowwise and transposed), writing their `scale_inv` into the set's
/// `sw`. Current scaling (and every recipe's FP8-param setup, `fresh`) takes a fresh amax;
/// delayed scaling casts with the weight scale it has and records the amax.
fn weight_cast(
    gpu: &Gpu,
    pt: &PerTensor,
    set: &Set,
    d: &Dims,
    opt: &MeasureOptions,
    fresh: bool,
) -> Result<u32, BenchError> {
    let Fp8Set { wq, sw, wqt, .. } = set.fp8()?;
    let g = pt.g;
    // The weight columns of the forward arrays start at g.
    let (amax, scale, sinv) = (
        pt.fwd_hist.at(SLOT_BYTES * g),
        pt.fwd_scale.at(SLOT_BYTES * g),
        pt.fwd_sinv.at(SLOT_BYTES * g),
    );
    let mut launches = 0;
    let amax_rec = if fresh || !pt.delayed {
        launches += current_scales(
            gpu,
            pt,
            set.w.ptr(),
            d.k,
            &pt.tiles_w,
            amax,
            g,
            false,
            opt,
            [scale, sinv],
        )?;
        0
    } else {
        amax
    };
    launch::cast_tensor(
        gpu,
        set.w.ptr(),
        d.k,
        pt.tiles_w.0.ptr(),
        pt.tiles_w.1,
        TensorCast {
            scale,
            scale_inv: sw.ptr(),
            amax_rec,
            row: wq.ptr(),
            col: wqt.ptr(),
            e5m2: false,
        },
    )?;
    Ok(launches + 1)
}

/// One FP8 training step under a per-tensor recipe, with TE's kernel sequence (see the module
/// docs of `launch` and `kernels.cu`).
impl Step for PerTensor {
    fn step(
        &self,
        gpu: &mut Gpu,
        ctx: &Ctx<'_>,
        set: &Set,
        marks: &mut dyn Marks,
    ) -> Result<u32, BenchError> {
        let (f, s8) = (ctx.fp8_outs()?, set.fp8()?);
        marks.mark(gpu, Phase::Start)?;
        let mut launches = self.input_cast(gpu, ctx, f, s8)?;
        if !ctx.opt.fp8_param {
            launches += weight_cast(gpu, self, set, ctx.d, ctx.opt, false)?;
        }
        marks.mark(gpu, Phase::ForwardCasts)?;
        launches += self.fprop(gpu, ctx, f, s8)?;
        marks.mark(gpu, Phase::Forward)?;
        launches += self.grad_cast(gpu, ctx, f, s8)?;
        marks.mark(gpu, Phase::BackwardCasts)?;
        launches += self.bprop(gpu, ctx, f, s8)?;
        marks.mark(gpu, Phase::Backward)?;
        Ok(launches)
    }
}

/// One direction's scale state: the amax history and the two scale arrays.
struct Direction<'a> {
    hist: &'a DevBuf,
    scale: &'a DevBuf,
    sinv: &'a DevBuf,
    e5m2: bool,
}

impl PerTensor {
    fn forward(&self) -> Direction<'_> {
        Direction {
            hist: &self.fwd_hist,
            scale: &self.fwd_scale,
            sinv: &self.fwd_sinv,
            e5m2: false,
        }
    }

    fn backward(&self, opt: &MeasureOptions) -> Direction<'_> {
        let e5m2 = opt.recipe.grad_e5m2();
        Direction {
            hist: &self.bwd_hist,
            scale: &self.bwd_scale,
            sinv: &self.bwd_sinv,
            e5m2,
        }
    }

    /// Casts `[rows, cols]` at `src` to FP8 (rowwise copy and transpose, `out`): current
    /// scaling takes this step's amax first; delayed casts with the scale it has and records
    /// the amax in the history's first row.
    #[allow(clippy::too_many_arguments)]
    fn cast(
        &self,
        gpu: &Gpu,
        opt: &MeasureOptions,
        src: u64,
        cols: u64,
        tiles: &(DevBuf, u32),
        dir: &Direction<'_>,
        out: [u64; 2],
    ) -> Result<u32, BenchError> {
        let (scale, sinv) = (dir.scale.ptr(), dir.sinv.ptr());
        let mut launches = 0;
        let amax_rec = if self.delayed {
            dir.hist.ptr()
        } else {
            let (h, g, e5) = (dir.hist.ptr(), self.g, dir.e5m2);
            launches += current_scales(gpu, self, src, cols, tiles, h, g, e5, opt, [scale, sinv])?;
            0
        };
        let cast = TensorCast {
            scale,
            scale_inv: sinv,
            amax_rec,
            row: out[0],
            col: out[1],
            e5m2: dir.e5m2,
        };
        launch::cast_tensor(gpu, src, cols, tiles.0.ptr(), tiles.1, cast)?;
        Ok(launches + 1)
    }

    /// TE updates a direction's history and scales when its region exits (delayed only).
    fn update(
        &self,
        gpu: &Gpu,
        opt: &MeasureOptions,
        dir: &Direction<'_>,
        tensors: u64,
    ) -> Result<u32, BenchError> {
        if !self.delayed {
            return Ok(0);
        }
        let algo_max = opt.recipe.algo() == AmaxAlgo::Max;
        let scales = [dir.scale.ptr(), dir.sinv.ptr()];
        let (h, len, e5, pow2) = (dir.hist.ptr(), self.len, dir.e5m2, opt.pow2_scales);
        launch::delayed_update(gpu, h, len, tensors, algo_max, e5, pow2, scales)?;
        Ok(1)
    }

    /// The norm (bf16) and the input's cast.
    fn input_cast(
        &self,
        gpu: &Gpu,
        ctx: &Ctx<'_>,
        f: &Fp8Outs,
        s8: &Fp8Set,
    ) -> Result<u32, BenchError> {
        let p = ctx.seg.total_padded();
        let mut launches = 0;
        let src = match &f.xn {
            Some(xn) => {
                norm_bf16(gpu, ctx.outs, ctx.d, s8.xp.ptr(), p, xn.ptr())?;
                launches += 1;
                xn.ptr()
            }
            None => s8.xp.ptr(),
        };
        let out = [f.xq_row.ptr(), f.xq_col.ptr()];
        Ok(launches
            + self.cast(
                gpu,
                ctx.opt,
                src,
                ctx.d.k,
                &self.tiles_x,
                &self.forward(),
                out,
            )?)
    }

    /// The forward GEMM of every expert, then the forward history update.
    fn fprop(
        &self,
        gpu: &mut Gpu,
        ctx: &Ctx<'_>,
        f: &Fp8Outs,
        s8: &Fp8Set,
    ) -> Result<u32, BenchError> {
        let (k, n) = (ctx.d.k, ctx.d.n);
        let launches = fp8_fprops(gpu, ctx, |e, r0| {
            let eu = e as u64;
            Ptrs {
                a: s8.wq.at(eu * n * k),
                b: f.xq_row.at(r0 * k),
                d: f.y.at(2 * r0 * n),
                sa: s8.sw.at(SLOT_BYTES * eu),
                sb: self.fwd_sinv.at(SLOT_BYTES * eu),
            }
        })?;
        Ok(launches + self.update(gpu, ctx.opt, &self.forward(), 2 * self.g)?)
    }

    /// The output gradient's cast.
    fn grad_cast(
        &self,
        gpu: &Gpu,
        ctx: &Ctx<'_>,
        f: &Fp8Outs,
        s8: &Fp8Set,
    ) -> Result<u32, BenchError> {
        let out = [f.dyq_row.ptr(), f.dyq_col.ptr()];
        let dir = self.backward(ctx.opt);
        self.cast(
            gpu,
            ctx.opt,
            s8.dyp.ptr(),
            ctx.d.n,
            &self.tiles_dy,
            &dir,
            out,
        )
    }

    /// dgrad and wgrad of every expert, then the backward history update.
    fn bprop(
        &self,
        gpu: &mut Gpu,
        ctx: &Ctx<'_>,
        f: &Fp8Outs,
        s8: &Fp8Set,
    ) -> Result<u32, BenchError> {
        let (k, n) = (ctx.d.k, ctx.d.n);
        let lay = &f.lay;
        let launches = fp8_bprops(gpu, ctx, &f.dw, |e, r0| {
            let eu = e as u64;
            (
                Ptrs {
                    a: s8.wqt.at(eu * n * k),
                    b: f.dyq_row.at(r0 * n),
                    d: f.dx.at(2 * r0 * k),
                    sa: s8.sw.at(SLOT_BYTES * eu),
                    sb: self.bwd_sinv.at(SLOT_BYTES * eu),
                },
                Ptrs {
                    a: f.xq_col.at(lay.qcol_x[e]),
                    b: f.dyq_col.at(lay.qcol_dy[e]),
                    d: f.dw.at(2 * eu * n * k),
                    sa: self.fwd_sinv.at(SLOT_BYTES * eu),
                    sb: self.bwd_sinv.at(SLOT_BYTES * eu),
                },
            )
        })?;
        Ok(launches + self.update(gpu, ctx.opt, &self.backward(ctx.opt), self.g)?)
    }
}
