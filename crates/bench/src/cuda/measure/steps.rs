//! One training step of a module in BF16 and in FP8: the casts and the three GEMMs of forward
//! and backward, with the phase boundaries the timing records.

use std::collections::HashMap;

use cudarc::driver::{CudaEvent, LaunchConfig, PushKernelArg};
use fp8_engine::model::Norm;

use super::super::buffer::DevBuf;
use super::super::gemm::{Plan, Ptrs, Shape};
use super::super::{Gpu, launch};
use crate::error::BenchError;
use crate::layout::{Segments, round_up};

use super::MeasureOptions;
use super::buffers::{Dims, Fp8Layout, Fp8Outs, Outs, Set, quant_weights};

pub(super) struct Ctx<'a> {
    pub(super) d: &'a Dims,
    pub(super) seg: &'a Segments,
    pub(super) opt: &'a MeasureOptions,
    pub(super) outs: &'a Outs,
    pub(super) fp8: Option<&'a Fp8Outs>,
    pub(super) plans: &'a HashMap<Shape, Plan>,
    pub(super) bf16_shapes: &'a [Option<(Shape, Shape, Shape)>],
    pub(super) fp8_shapes: &'a [Option<(Shape, Shape, Shape)>],
    /// Scale state of the per-tensor recipes.
    pub(super) pt: Option<&'a super::tensor::PerTensor>,
    /// Scales of MXFP8.
    pub(super) mx: Option<&'a super::mx::Mx>,
}

/// The boundaries a step records, in the order it reaches them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Before anything of the step.
    Start,
    /// After the forward casts (FP8; right after `Start` in BF16).
    ForwardCasts,
    /// After the forward GEMM.
    Forward,
    /// After the backward casts.
    BackwardCasts,
    /// After the dgrad and wgrad GEMMs: the end of the step.
    Backward,
}

impl Phase {
    /// Boundaries per step.
    pub(super) const COUNT: usize = 5;

    /// Index into one step's events.
    pub(super) const fn index(self) -> usize {
        self as usize
    }
}

/// Where a step records its phase boundaries.
pub(super) trait Marks {
    /// Records the boundary `at`.
    fn mark(&mut self, gpu: &Gpu, at: Phase) -> Result<(), BenchError>;
}

/// Records nothing (warmups and checks).
pub(super) struct NoMarks;

impl Marks for NoMarks {
    fn mark(&mut self, _: &Gpu, _: Phase) -> Result<(), BenchError> {
        Ok(())
    }
}

/// Records CUDA events, one per [`Phase`].
pub(super) struct EventMarks<'a>(pub(super) &'a [CudaEvent]);

impl Marks for EventMarks<'_> {
    fn mark(&mut self, gpu: &Gpu, at: Phase) -> Result<(), BenchError> {
        self.0[at.index()]
            .record(&gpu.stream)
            .map_err(BenchError::driver)
    }
}

pub(super) fn gemm(gpu: &mut Gpu, ctx: &Ctx<'_>, sh: Shape, p: Ptrs) -> Result<(), BenchError> {
    let plan = ctx
        .plans
        .get(&sh)
        .ok_or_else(|| BenchError::Internal(format!("no plan for {sh:?}")))?;
    gpu.lt.run(plan, &p, ctx.opt.candidates)
}

/// The FP8 forward GEMM of every expert with rows: `ptrs(e, offset)` gives expert `e`'s
/// operands (its first padded row is `offset`). Returns the launches.
pub(super) fn fp8_fprops(
    gpu: &mut Gpu,
    ctx: &Ctx<'_>,
    ptrs: impl Fn(usize, u64) -> Ptrs,
) -> Result<u32, BenchError> {
    let mut launches = 0;
    for (e, sh) in ctx.fp8_shapes.iter().enumerate() {
        let Some((fp, _, _)) = sh else { continue };
        gemm(gpu, ctx, *fp, ptrs(e, ctx.seg.offsets[e]))?;
        launches += 1;
    }
    Ok(launches)
}

/// The FP8 dgrad and wgrad GEMMs of every expert: `ptrs(e, offset)` gives expert `e`'s
/// (dgrad, wgrad) operands. An expert with no rows still gets a zeroed weight gradient in
/// `dw`. Returns the launches.
pub(super) fn fp8_bprops(
    gpu: &mut Gpu,
    ctx: &Ctx<'_>,
    dw: &DevBuf,
    ptrs: impl Fn(usize, u64) -> (Ptrs, Ptrs),
) -> Result<u32, BenchError> {
    let (n, k) = (ctx.d.n, ctx.d.k);
    let mut launches = 0;
    for (e, sh) in ctx.fp8_shapes.iter().enumerate() {
        let Some((_, dg, wg)) = sh else {
            dw.zero_range(&gpu.stream, 2 * e as u64 * n * k, 2 * n * k)?;
            launches += 1;
            continue;
        };
        let (dgrad, wgrad) = ptrs(e, ctx.seg.offsets[e]);
        gemm(gpu, ctx, *dg, dgrad)?;
        gemm(gpu, ctx, *wg, wgrad)?;
        launches += 2;
    }
    Ok(launches)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn norm(
    gpu: &Gpu,
    ctx: &Ctx<'_>,
    x: u64,
    rows: u64,
    y: u64,
    q: u64,
    s_row: u64,
    ld_srow: u64,
) -> Result<(), BenchError> {
    let Some(kind) = ctx.d.norm else {
        return Ok(());
    };
    norm_launch(
        gpu,
        ctx.outs,
        kind,
        ctx.d.k,
        [x, y, q, s_row],
        rows,
        ld_srow,
        ctx.opt.pow2_scales,
    )
}

/// Launches `norm_fwd` over `rows` rows of `k` features: `io` = [x, y, q (0: no FP8 output),
/// rowwise 1x128 scales].
#[allow(clippy::too_many_arguments)]
pub(super) fn norm_launch(
    gpu: &Gpu,
    outs: &Outs,
    kind: Norm,
    k: u64,
    io: [u64; 4],
    rows: u64,
    ld_srow: u64,
    pow2: bool,
) -> Result<(), BenchError> {
    if rows == 0 {
        return Ok(());
    }
    let cfg = LaunchConfig {
        grid_dim: (rows as u32, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    };
    let ln = i32::from(kind == Norm::LayerNorm);
    let eps = 1e-5f32;
    let p2 = i32::from(pow2);
    let (gamma, beta) = (outs.gamma.ptr(), outs.beta.ptr());
    let [x, y, q, s_row] = io;
    let mut b = gpu.stream.launch_builder(&gpu.k.norm_fwd);
    b.arg(&x)
        .arg(&gamma)
        .arg(&beta)
        .arg(&rows)
        .arg(&k)
        .arg(&ln)
        .arg(&eps)
        .arg(&y)
        .arg(&q)
        .arg(&s_row)
        .arg(&ld_srow)
        .arg(&p2);
    // SAFETY: x/y are [rows, k] bf16, q is [rows, k] fp8 or null, scales sized by the caller.
    unsafe { b.launch(cfg) }.map_err(BenchError::driver)?;
    Ok(())
}

pub(super) fn bf16_step(
    gpu: &mut Gpu,
    ctx: &Ctx<'_>,
    set: &Set,
    marks: &mut dyn Marks,
) -> Result<u32, BenchError> {
    let d = ctx.d;
    let (k, n) = (d.k, d.n);
    let mut launches = 0;
    marks.mark(gpu, Phase::Start)?;
    let x = match &ctx.outs.xn {
        Some(xn) => {
            norm(gpu, ctx, set.x.ptr(), d.rows, xn.ptr(), 0, 0, 0)?;
            launches += 1;
            xn.ptr()
        }
        None => set.x.ptr(),
    };
    marks.mark(gpu, Phase::ForwardCasts)?;
    for (e, sh) in ctx.bf16_shapes.iter().enumerate() {
        let Some((f, _, _)) = sh else { continue };
        let (r0, e) = (d.offsets[e], e as u64);
        gemm(
            gpu,
            ctx,
            *f,
            Ptrs {
                a: set.w.at(2 * e * n * k),
                b: x + 2 * r0 * k,
                d: ctx.outs.y.at(2 * r0 * n),
                sa: 0,
                sb: 0,
            },
        )?;
        launches += 1;
    }
    marks.mark(gpu, Phase::Forward)?;
    marks.mark(gpu, Phase::BackwardCasts)?;
    for (e, sh) in ctx.bf16_shapes.iter().enumerate() {
        let Some((_, dg, wg)) = sh else {
            // An expert that received no tokens still has a weight gradient: zeros.
            ctx.outs
                .dw
                .zero_range(&gpu.stream, 2 * e as u64 * n * k, 2 * n * k)?;
            launches += 1;
            continue;
        };
        let (r0, e) = (d.offsets[e], e as u64);
        gemm(
            gpu,
            ctx,
            *dg,
            Ptrs {
                a: set.w.at(2 * e * n * k),
                b: set.dy.at(2 * r0 * n),
                d: ctx.outs.dx.at(2 * r0 * k),
                sa: 0,
                sb: 0,
            },
        )?;
        gemm(
            gpu,
            ctx,
            *wg,
            Ptrs {
                a: x + 2 * r0 * k,
                b: set.dy.at(2 * r0 * n),
                d: ctx.outs.dw.at(2 * e * n * k),
                sa: 0,
                sb: 0,
            },
        )?;
        launches += 2;
    }
    marks.mark(gpu, Phase::Backward)?;
    Ok(launches)
}

pub(super) fn fp8_step(
    gpu: &mut Gpu,
    ctx: &Ctx<'_>,
    set: &Set,
    marks: &mut dyn Marks,
) -> Result<u32, BenchError> {
    let (d, seg, opt) = (ctx.d, ctx.seg, ctx.opt);
    let f = ctx
        .fp8
        .ok_or_else(|| BenchError::Internal("fp8 buffers missing".into()))?;
    let (Some(xp), Some(dyp), Some(wq), Some(sw), Some(wqt), Some(swt)) =
        (&set.xp, &set.dyp, &set.wq, &set.sw, &set.wqt, &set.swt)
    else {
        return Err(BenchError::Internal("fp8 set incomplete".into()));
    };
    let (k, n) = (d.k, d.n);
    let p = seg.total_padded();
    let mut launches = 0;
    marks.mark(gpu, Phase::Start)?;
    match &f.xn {
        Some(xn) => {
            // Fused norm + rowwise cast, then the columnwise cast of the normalized input.
            norm(
                gpu,
                ctx,
                xp.ptr(),
                p,
                xn.ptr(),
                f.xq_row.ptr(),
                f.sx_row.ptr(),
                round_up(p, 4),
            )?;
            launch::quant_1x128(
                gpu,
                xn.ptr(),
                k,
                f.tiles_x.ptr(),
                f.n_tiles_x,
                false,
                true,
                opt.pow2_scales,
                [0, 0, f.xq_col.ptr(), f.sx_col.ptr()],
            )?;
            launches += 2;
        }
        None => {
            launch::quant_1x128(
                gpu,
                xp.ptr(),
                k,
                f.tiles_x.ptr(),
                f.n_tiles_x,
                true,
                true,
                opt.pow2_scales,
                [
                    f.xq_row.ptr(),
                    f.sx_row.ptr(),
                    f.xq_col.ptr(),
                    f.sx_col.ptr(),
                ],
            )?;
            launches += 1;
        }
    }
    if !opt.fp8_param {
        launches += quant_weights(gpu, set, d, opt.pow2_scales)?;
    }
    marks.mark(gpu, Phase::ForwardCasts)?;
    let Fp8Layout {
        sw_len,
        swt_len,
        srow_x,
        scol_x,
        qcol_x,
        srow_dy,
        scol_dy,
        qcol_dy,
        ..
    } = &f.lay;
    let (sw_len, swt_len) = (*sw_len, *swt_len);
    launches += fp8_fprops(gpu, ctx, |e, r0| {
        let eu = e as u64;
        Ptrs {
            a: wq.at(eu * n * k),
            b: f.xq_row.at(r0 * k),
            d: f.y.at(2 * r0 * n),
            sa: sw.at(4 * eu * sw_len),
            sb: f.sx_row.at(4 * srow_x[e]),
        }
    })?;
    marks.mark(gpu, Phase::Forward)?;
    launch::quant_1x128(
        gpu,
        dyp.ptr(),
        n,
        f.tiles_dy.ptr(),
        f.n_tiles_dy,
        true,
        true,
        opt.pow2_scales,
        [
            f.dyq_row.ptr(),
            f.sdy_row.ptr(),
            f.dyq_col.ptr(),
            f.sdy_col.ptr(),
        ],
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
                sa: swt.at(4 * eu * swt_len),
                sb: f.sdy_row.at(4 * srow_dy[e]),
            },
            Ptrs {
                a: f.xq_col.at(qcol_x[e]),
                b: f.dyq_col.at(qcol_dy[e]),
                d: f.dw.at(2 * eu * n * k),
                sa: f.sx_col.at(4 * scol_x[e]),
                sb: f.sdy_col.at(4 * scol_dy[e]),
            },
        )
    })?;
    marks.mark(gpu, Phase::Backward)?;
    Ok(launches)
}
