//! The per-tensor recipes (tensorwise = TE's `Float8CurrentScaling`, delayed = TE's
//! `DelayedScaling`): their scale state, one training step, and the checks before timing.
//!
//! Scale state lives in three arrays per direction, one 16-byte slot per tensor: the amax history
//! `[len, t]` (row 0 is this step's amax; current scaling uses row 0 only), the quantization
//! factor `scale` and its inverse `scale_inv` (what the GEMM multiplies by). Forward tensors are
//! the input of each expert segment (columns `0..g`) and the weight of each expert (`g..2g`);
//! backward tensors the output gradient of each segment (`0..g`). Each rotation set's FP8
//! weights carry their own `scale_inv` (in the set's `sw`), as a Float8Tensor does.

use fp8_report::Point;

use super::super::buffer::DevBuf;
use super::super::check::{DeviceReader, Sampler, dot, expected_tensor_scale, fp8_scalar, rel_err};
use super::super::launch::{self, TensorCast, fp8_max};
use super::super::{Gpu, gemm::Ptrs};
use super::buffers::{Dims, Fp8Outs, Outs, Set};
use super::steps::{Ctx, Marks, Phase, fp8_bprops, fp8_fprops, norm_launch};
use super::verify::{pick_row, push, read_f32s, record, run_poisoned};
use super::{GEMM_TOL, MeasureOptions};
use crate::error::BenchError;
use crate::layout::{Segments, TENSOR_SLOT};

/// Floats, and bytes, of one tensor's slot in the scale arrays (16-byte aligned for cuBLASLt).
const SLOT: usize = TENSOR_SLOT as usize;
const SLOT_BYTES: u64 = 4 * TENSOR_SLOT;
use crate::recipe::{AmaxAlgo, Recipe};

/// Bound for a dequantized E5M2 tensor against its source (2 mantissa bits: twice E4M3's).
pub const QUANT_TOL_E5M2: f64 = 0.16;
/// Bound for a dequantized per-tensor E4M3 tensor (one scale for the whole tensor puts small
/// values nearer the subnormals than a 1x128 block scale does).
pub const QUANT_TOL_TENSOR: f64 = 0.10;

/// Scale state and tile tables of a point under a per-tensor recipe.
pub(super) struct PerTensor {
    g: u64,
    len: u64,
    delayed: bool,
    tiles_x: (DevBuf, u32),
    tiles_dy: (DevBuf, u32),
    tiles_w: (DevBuf, u32),
    fwd_hist: DevBuf,
    fwd_scale: DevBuf,
    fwd_sinv: DevBuf,
    bwd_hist: DevBuf,
    bwd_scale: DevBuf,
    bwd_sinv: DevBuf,
}

impl PerTensor {
    /// Every allocation, for bounds-checked reads.
    fn bufs(&self) -> impl Iterator<Item = &DevBuf> {
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
        let set = &rot[0];
        let (Some(xp), Some(dyp)) = (&set.xp, &set.dyp) else {
            return Err(BenchError::Internal("fp8 set incomplete".into()));
        };
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
    let (Some(wq), Some(sw), Some(wqt)) = (&set.wq, &set.sw, &set.wqt) else {
        return Err(BenchError::Internal("FP8 weights not allocated".into()));
    };
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
pub(super) fn step(
    gpu: &mut Gpu,
    ctx: &Ctx<'_>,
    set: &Set,
    marks: &mut dyn Marks,
) -> Result<u32, BenchError> {
    let (d, seg, opt) = (ctx.d, ctx.seg, ctx.opt);
    let (Some(f), Some(pt)) = (ctx.fp8, ctx.pt) else {
        return Err(BenchError::Internal("per-tensor state missing".into()));
    };
    let (Some(xp), Some(dyp), Some(wq), Some(sw), Some(wqt)) =
        (&set.xp, &set.dyp, &set.wq, &set.sw, &set.wqt)
    else {
        return Err(BenchError::Internal("fp8 set incomplete".into()));
    };
    let (k, n, g) = (d.k, d.n, pt.g);
    let p = seg.total_padded();
    let ge5 = opt.recipe.grad_e5m2();
    let mut launches = 0;
    marks.mark(gpu, Phase::Start)?;
    let src = match &f.xn {
        Some(xn) => {
            norm_bf16(gpu, ctx.outs, d, xp.ptr(), p, xn.ptr())?;
            launches += 1;
            xn.ptr()
        }
        None => xp.ptr(),
    };
    let fwd = [pt.fwd_scale.ptr(), pt.fwd_sinv.ptr()];
    let x_rec = if pt.delayed {
        pt.fwd_hist.ptr()
    } else {
        launches += current_scales(
            gpu,
            pt,
            src,
            k,
            &pt.tiles_x,
            pt.fwd_hist.ptr(),
            g,
            false,
            opt,
            fwd,
        )?;
        0
    };
    launch::cast_tensor(
        gpu,
        src,
        k,
        pt.tiles_x.0.ptr(),
        pt.tiles_x.1,
        TensorCast {
            scale: fwd[0],
            scale_inv: fwd[1],
            amax_rec: x_rec,
            row: f.xq_row.ptr(),
            col: f.xq_col.ptr(),
            e5m2: false,
        },
    )?;
    launches += 1;
    if !opt.fp8_param {
        launches += weight_cast(gpu, pt, set, d, opt, false)?;
    }
    marks.mark(gpu, Phase::ForwardCasts)?;
    let lay = &f.lay;
    launches += fp8_fprops(gpu, ctx, |e, r0| {
        let eu = e as u64;
        Ptrs {
            a: wq.at(eu * n * k),
            b: f.xq_row.at(r0 * k),
            d: f.y.at(2 * r0 * n),
            sa: sw.at(SLOT_BYTES * eu),
            sb: pt.fwd_sinv.at(SLOT_BYTES * eu),
        }
    })?;
    if pt.delayed {
        // TE updates the forward tensors' history and scales when the autocast region exits.
        let algo = opt.recipe.algo() == AmaxAlgo::Max;
        launch::delayed_update(
            gpu,
            pt.fwd_hist.ptr(),
            pt.len,
            2 * g,
            algo,
            false,
            opt.pow2_scales,
            fwd,
        )?;
        launches += 1;
    }
    marks.mark(gpu, Phase::Forward)?;
    let bwd = [pt.bwd_scale.ptr(), pt.bwd_sinv.ptr()];
    let dy_rec = if pt.delayed {
        pt.bwd_hist.ptr()
    } else {
        launches += current_scales(
            gpu,
            pt,
            dyp.ptr(),
            n,
            &pt.tiles_dy,
            pt.bwd_hist.ptr(),
            g,
            ge5,
            opt,
            bwd,
        )?;
        0
    };
    launch::cast_tensor(
        gpu,
        dyp.ptr(),
        n,
        pt.tiles_dy.0.ptr(),
        pt.tiles_dy.1,
        TensorCast {
            scale: bwd[0],
            scale_inv: bwd[1],
            amax_rec: dy_rec,
            row: f.dyq_row.ptr(),
            col: f.dyq_col.ptr(),
            e5m2: ge5,
        },
    )?;
    launches += 1;
    marks.mark(gpu, Phase::BackwardCasts)?;
    launches += fp8_bprops(gpu, ctx, &f.dw, |e, r0| {
        let eu = e as u64;
        (
            Ptrs {
                a: wqt.at(eu * n * k),
                b: f.dyq_row.at(r0 * n),
                d: f.dx.at(2 * r0 * k),
                sa: sw.at(SLOT_BYTES * eu),
                sb: pt.bwd_sinv.at(SLOT_BYTES * eu),
            },
            Ptrs {
                a: f.xq_col.at(lay.qcol_x[e]),
                b: f.dyq_col.at(lay.qcol_dy[e]),
                d: f.dw.at(2 * eu * n * k),
                sa: pt.fwd_sinv.at(SLOT_BYTES * eu),
                sb: pt.bwd_sinv.at(SLOT_BYTES * eu),
            },
        )
    })?;
    if pt.delayed {
        let algo = opt.recipe.algo() == AmaxAlgo::Max;
        launch::delayed_update(
            gpu,
            pt.bwd_hist.ptr(),
            pt.len,
            g,
            algo,
            ge5,
            opt.pow2_scales,
            bwd,
        )?;
        launches += 1;
    }
    marks.mark(gpu, Phase::Backward)?;
    Ok(launches)
}

/// One per-tensor FP8 step on poisoned outputs, then every check: no non-finite outputs;
/// sampled rows of every cast against the source (dequantized with the tensor's own
/// `scale_inv`); sampled entries of every GEMM against an f64 product of the dequantized
/// operands; the scales against the amax (current) or the history update (delayed).
pub(super) fn verify(
    gpu: &mut Gpu,
    ctx: &Ctx<'_>,
    set: &Set,
    point: &mut Point,
) -> Result<(), BenchError> {
    let (d, seg, opt) = (ctx.d, ctx.seg, ctx.opt);
    let (Some(f), Some(pt)) = (ctx.fp8, ctx.pt) else {
        return Err(BenchError::Internal("per-tensor state missing".into()));
    };
    let hist_before = (read_f32s(gpu, &pt.fwd_hist)?, read_f32s(gpu, &pt.bwd_hist)?);
    run_poisoned(gpu, ctx, set, step, "fp8")?;
    let (Some(xp), Some(dyp), Some(wq), Some(sw), Some(wqt)) =
        (&set.xp, &set.dyp, &set.wq, &set.sw, &set.wqt)
    else {
        return Err(BenchError::Internal("fp8 set incomplete".into()));
    };
    let ge5 = opt.recipe.grad_e5m2();
    let (k, n) = (d.k, d.n);
    let rd = &DeviceReader::new(&gpu.stream, set.bufs().chain(f.bufs()).chain(pt.bufs()));
    let x_src = f.xn.as_ref().map_or(xp.ptr(), DevBuf::ptr);
    let (fsinv, bsinv, swh) = (
        read_f32s(gpu, &pt.fwd_sinv)?,
        read_f32s(gpu, &pt.bwd_sinv)?,
        read_f32s(gpu, sw)?,
    );
    let lay = &f.lay;
    let mut s = Sampler::new(u64::from(opt.seed) ^ 0x7e45);
    let mut q = [
        (vec![], vec![]),
        (vec![], vec![]),
        (vec![], vec![]),
        (vec![], vec![]),
    ];
    let mut gm = [(vec![], vec![]), (vec![], vec![]), (vec![], vec![])];
    let mut seen_amax = vec![0f32; 2 * d.g as usize];
    for _ in 0..opt.samples {
        let Some((e, prow, _)) = pick_row(&mut s, &seg.rows, &seg.offsets) else {
            break;
        };
        let (eu, p_e) = (e as u64, seg.padded[e]);
        let xsrc = rd.bf16_f64(x_src + 2 * prow * k, k)?;
        let xrow = fp8_scalar(rd, f.xq_row.at(prow * k), k, false, fsinv[SLOT * e])?;
        push(&mut q[0], &xrow, &xsrc);
        let m = xsrc.iter().fold(0f64, |a, v| a.max(v.abs())) as f32;
        seen_amax[e] = seen_amax[e].max(m);
        let j = s.below(n);
        let wrow = fp8_scalar(rd, wq.at(eu * n * k + j * k), k, false, swh[SLOT * e])?;
        push(
            &mut q[1],
            &wrow,
            &rd.bf16_f64(set.w.at(2 * (eu * n + j) * k), k)?,
        );
        gm[0]
            .0
            .push(f64::from(rd.bf16(f.y.at(2 * (prow * n + j)), 1)?[0]));
        gm[0].1.push(dot(&xrow, &wrow));
        let c = s.below(k);
        let dysrc = rd.bf16_f64(dyp.at(2 * prow * n), n)?;
        let dyrow = fp8_scalar(rd, f.dyq_row.at(prow * n), n, ge5, bsinv[SLOT * e])?;
        push(&mut q[2], &dyrow, &dysrc);
        let dym = dysrc.iter().fold(0f64, |a, v| a.max(v.abs())) as f32;
        seen_amax[d.g as usize + e] = seen_amax[d.g as usize + e].max(dym);
        let wtrow = fp8_scalar(rd, wqt.at(eu * n * k + c * n), n, false, swh[SLOT * e])?;
        gm[1]
            .0
            .push(f64::from(rd.bf16(f.dx.at(2 * (prow * k + c)), 1)?[0]));
        gm[1].1.push(dot(&dyrow, &wtrow));
        let xcol = fp8_scalar(
            rd,
            f.xq_col.at(lay.qcol_x[e] + c * p_e),
            p_e,
            false,
            fsinv[SLOT * e],
        )?;
        let dycol = fp8_scalar(
            rd,
            f.dyq_col.at(lay.qcol_dy[e] + j * p_e),
            p_e,
            ge5,
            bsinv[SLOT * e],
        )?;
        let xcsrc: Vec<f64> = rd.bf16_column_f64(x_src, k, c, seg.offsets[e], p_e)?;
        push(&mut q[3], &xcol, &xcsrc);
        gm[2].0.push(f64::from(
            rd.bf16(f.dw.at(2 * (eu * n * k + j * k + c)), 1)?[0],
        ));
        gm[2].1.push(dot(&dycol, &xcol));
    }
    let (xt, gt) = (
        QUANT_TOL_TENSOR,
        if ge5 {
            QUANT_TOL_E5M2
        } else {
            QUANT_TOL_TENSOR
        },
    );
    for (i, (name, tol)) in [
        ("fp8_quant_x_rowwise", xt),
        ("fp8_quant_w_tensor", xt),
        ("fp8_quant_dy_rowwise", gt),
        ("fp8_quant_x_colwise", xt),
    ]
    .into_iter()
    .enumerate()
    {
        record(point, name, rel_err(&q[i].0, &q[i].1), tol)?;
    }
    for (i, name) in ["fp8_fprop", "fp8_dgrad", "fp8_wgrad"].iter().enumerate() {
        record(point, name, rel_err(&gm[i].0, &gm[i].1), GEMM_TOL)?;
    }
    check_scales(gpu, pt, opt, &hist_before, &seen_amax)
}

/// The scale state after one step. Current scaling: each input and gradient amax covers what
/// the samples saw, and scale and scale_inv follow from it exactly. Delayed: the history was
/// rolled by one with this step's amax last, and the scales follow from the history by the
/// configured algorithm.
fn check_scales(
    gpu: &Gpu,
    pt: &PerTensor,
    opt: &MeasureOptions,
    before: &(Vec<f32>, Vec<f32>),
    seen: &[f32],
) -> Result<(), BenchError> {
    let g = pt.g as usize;
    let len = pt.len as usize;
    let pow2 = opt.pow2_scales;
    let algo_max = opt.recipe.algo() == AmaxAlgo::Max;
    let ge5 = opt.recipe.grad_e5m2();
    let dirs = [
        (
            &before.0,
            &pt.fwd_hist,
            &pt.fwd_scale,
            &pt.fwd_sinv,
            2 * g,
            fp8_max(false),
            "forward",
        ),
        (
            &before.1,
            &pt.bwd_hist,
            &pt.bwd_scale,
            &pt.bwd_sinv,
            g,
            fp8_max(ge5),
            "backward",
        ),
    ];
    for (di, (old, hist, scale, sinv, t, fmax, what)) in dirs.into_iter().enumerate() {
        let (h, sc, si) = (
            read_f32s(gpu, hist)?,
            read_f32s(gpu, scale)?,
            read_f32s(gpu, sinv)?,
        );
        // Tensors this step quantized: the inputs or gradients (weights are FP8 params).
        let live = if opt.fp8_param { g } else { t };
        for i in 0..live {
            let (sc_i, si_i) = (sc[SLOT * i], si[SLOT * i]);
            let col = |rows: &Vec<f32>, r: usize| rows[SLOT * (r * t + i)];
            let (amax, recorded) = if pt.delayed {
                if len == 1 {
                    continue; // the recorded amax was consumed and cleared by the update
                }
                let rec = col(&h, len - 1);
                let prev = (1..len).map(|r| col(old, r)).fold(rec, f32::max);
                (if algo_max { prev } else { rec }, rec)
            } else {
                (col(&h, 0), col(&h, 0))
            };
            let seen_i = if i < g { seen[di * g + i] } else { 0.0 };
            if recorded < seen_i {
                return Err(BenchError::Check(format!(
                    "{what} tensor {i}: recorded amax {recorded} is below a sampled |value| {seen_i}"
                )));
            }
            let want = expected_tensor_scale(amax, fmax, pow2);
            let ok = if amax > 0.0 {
                (sc_i - want).abs() <= want * 1e-6
            } else {
                sc_i.is_finite() && sc_i > 0.0
            };
            if !ok || (sc_i * si_i - 1.0).abs() > 1e-6 {
                return Err(BenchError::Check(format!(
                    "{what} tensor {i}: scale {} / scale_inv {} do not follow from amax {amax} (want scale {want})",
                    sc_i, si_i
                )));
            }
        }
    }
    Ok(())
}
