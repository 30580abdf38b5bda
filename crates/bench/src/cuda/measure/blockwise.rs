//! The blockwise recipe (TE's `Float8BlockScaling`, DeepSeek-V3's): 1x128 scales for inputs
//! and gradients (rowwise and columnwise copies), 128x128 for weights; its step and its checks.

use fp8_report::Point;

use super::super::buffer::DevBuf;
use super::super::check::{DeviceReader, Fp8Rows, Sampler, dot, expected_scale, rel_err};
use super::super::gemm::Ptrs;
use super::super::{Gpu, launch};
use super::buffers::{Fp8Outs, Fp8Set, Set, quant_weights};
use super::ctx::{Ctx, Fp8Recipe, Marks, Phase, Step};
use super::ops::{fp8_bprops, fp8_fprops, norm};
use super::sampling::{pick_row, push, read_f32s, record, row_local, run_poisoned};
use super::{GEMM_TOL, QUANT_TOL};
use crate::error::BenchError;
use crate::layout::round_up;

/// The blockwise recipe; its scales live in the point's buffers, so it holds no state.
pub(super) struct Blockwise;

impl Step for Blockwise {
    fn step(
        &self,
        gpu: &mut Gpu,
        ctx: &Ctx<'_>,
        set: &Set,
        marks: &mut dyn Marks,
    ) -> Result<u32, BenchError> {
        let (f, s8) = (ctx.fp8_outs()?, set.fp8()?);
        marks.mark(gpu, Phase::Start)?;
        let mut launches = forward_casts(gpu, ctx, f, s8)?;
        if !ctx.opt.fp8_param {
            launches += quant_weights(gpu, set, ctx.d, ctx.opt.pow2_scales)?;
        }
        marks.mark(gpu, Phase::ForwardCasts)?;
        launches += fprop(gpu, ctx, f, s8)?;
        marks.mark(gpu, Phase::Forward)?;
        launches += grad_cast(gpu, ctx, f, s8)?;
        marks.mark(gpu, Phase::BackwardCasts)?;
        launches += bprop(gpu, ctx, f, s8)?;
        marks.mark(gpu, Phase::Backward)?;
        Ok(launches)
    }
}

impl Fp8Recipe for Blockwise {
    fn verify(
        &self,
        gpu: &mut Gpu,
        ctx: &Ctx<'_>,
        set: &Set,
        point: &mut Point,
    ) -> Result<(), BenchError> {
        run_poisoned(gpu, ctx, set, self, "fp8")?;
        check(gpu, ctx, set, point)
    }
}

/// Both 1x128 copies of the input: fused with the norm (norm + rowwise, then the columnwise
/// cast of the normalized input) or in one cast kernel.
fn forward_casts(gpu: &Gpu, ctx: &Ctx<'_>, f: &Fp8Outs, s8: &Fp8Set) -> Result<u32, BenchError> {
    let (k, pow2) = (ctx.d.k, ctx.opt.pow2_scales);
    let p = ctx.seg.total_padded();
    let Some(xn) = &f.xn else {
        let io = [
            f.xq_row.ptr(),
            f.sx_row.ptr(),
            f.xq_col.ptr(),
            f.sx_col.ptr(),
        ];
        launch::quant_1x128(
            gpu,
            s8.xp.ptr(),
            k,
            f.tiles_x.ptr(),
            f.n_tiles_x,
            true,
            true,
            pow2,
            io,
        )?;
        return Ok(1);
    };
    let (xq, sx) = (f.xq_row.ptr(), f.sx_row.ptr());
    norm(gpu, ctx, s8.xp.ptr(), p, xn.ptr(), xq, sx, round_up(p, 4))?;
    let io = [0, 0, f.xq_col.ptr(), f.sx_col.ptr()];
    launch::quant_1x128(
        gpu,
        xn.ptr(),
        k,
        f.tiles_x.ptr(),
        f.n_tiles_x,
        false,
        true,
        pow2,
        io,
    )?;
    Ok(2)
}

/// The forward GEMM of every expert: W (128x128 scales) times the rowwise input.
fn fprop(gpu: &mut Gpu, ctx: &Ctx<'_>, f: &Fp8Outs, s8: &Fp8Set) -> Result<u32, BenchError> {
    let (k, n) = (ctx.d.k, ctx.d.n);
    let lay = &f.lay;
    fp8_fprops(gpu, ctx, |e, r0| {
        let eu = e as u64;
        Ptrs {
            a: s8.wq.at(eu * n * k),
            b: f.xq_row.at(r0 * k),
            d: f.y.at(2 * r0 * n),
            sa: s8.sw.at(4 * eu * lay.sw_len),
            sb: f.sx_row.at(4 * lay.srow_x[e]),
        }
    })
}

/// Both 1x128 copies of the output gradient.
fn grad_cast(gpu: &Gpu, ctx: &Ctx<'_>, f: &Fp8Outs, s8: &Fp8Set) -> Result<u32, BenchError> {
    let io = [
        f.dyq_row.ptr(),
        f.sdy_row.ptr(),
        f.dyq_col.ptr(),
        f.sdy_col.ptr(),
    ];
    let pow2 = ctx.opt.pow2_scales;
    launch::quant_1x128(
        gpu,
        s8.dyp.ptr(),
        ctx.d.n,
        f.tiles_dy.ptr(),
        f.n_tiles_dy,
        true,
        true,
        pow2,
        io,
    )?;
    Ok(1)
}

/// dgrad (W^T with its own 128x128 scales, rowwise gradient) and wgrad (the columnwise copies)
/// of every expert.
fn bprop(gpu: &mut Gpu, ctx: &Ctx<'_>, f: &Fp8Outs, s8: &Fp8Set) -> Result<u32, BenchError> {
    let (k, n) = (ctx.d.k, ctx.d.n);
    let lay = &f.lay;
    fp8_bprops(gpu, ctx, &f.dw, |e, r0| {
        let eu = e as u64;
        (
            Ptrs {
                a: s8.wqt.at(eu * n * k),
                b: f.dyq_row.at(r0 * n),
                d: f.dx.at(2 * r0 * k),
                sa: s8.swt.at(4 * eu * lay.swt_len),
                sb: f.sdy_row.at(4 * lay.srow_dy[e]),
            },
            Ptrs {
                a: f.xq_col.at(lay.qcol_x[e]),
                b: f.dyq_col.at(lay.qcol_dy[e]),
                d: f.dw.at(2 * eu * n * k),
                sa: f.sx_col.at(4 * lay.scol_x[e]),
                sb: f.sdy_col.at(4 * lay.scol_dy[e]),
            },
        )
    })
}

/// The host copies of every scale the checks dequantize with.
struct Scales {
    x_row: Vec<f32>,
    x_col: Vec<f32>,
    dy_row: Vec<f32>,
    dy_col: Vec<f32>,
    w: Vec<f32>,
    wt: Vec<f32>,
}

/// Sampled values and their references: the four casts, then the three GEMMs.
#[derive(Default)]
struct Samples {
    quant: [(Vec<f64>, Vec<f64>); 4],
    gemm: [(Vec<f64>, Vec<f64>); 3],
    /// Rowwise input scales that differ from amax/448 (rounded as configured).
    scale_bad: usize,
}

const QUANT_NAMES: [&str; 4] = [
    "fp8_quant_x_rowwise",
    "fp8_quant_w_128x128",
    "fp8_quant_dy_rowwise",
    "fp8_quant_x_colwise",
];
const GEMM_NAMES: [&str; 3] = ["fp8_fprop", "fp8_dgrad", "fp8_wgrad"];

/// Sampled rows of every cast against the source, sampled entries of every GEMM against an f64
/// product of the dequantized operands, and the rowwise scales against the amax.
fn check(gpu: &Gpu, ctx: &Ctx<'_>, set: &Set, point: &mut Point) -> Result<(), BenchError> {
    let (f, s8) = (ctx.fp8_outs()?, set.fp8()?);
    let rd = &DeviceReader::new(&gpu.stream, set.bufs().chain(f.bufs()));
    let sc = Scales {
        x_row: read_f32s(gpu, &f.sx_row)?,
        x_col: read_f32s(gpu, &f.sx_col)?,
        dy_row: read_f32s(gpu, &f.sdy_row)?,
        dy_col: read_f32s(gpu, &f.sdy_col)?,
        w: read_f32s(gpu, &s8.sw)?,
        wt: read_f32s(gpu, &s8.swt)?,
    };
    let mut s = Sampler::new(u64::from(ctx.opt.seed) ^ 0xf8);
    let mut acc = Samples::default();
    for _ in 0..ctx.opt.samples {
        let Some((e, prow, local)) = pick_row(&mut s, &ctx.seg.rows, &ctx.seg.offsets) else {
            break;
        };
        sample(rd, ctx, set, &sc, &mut s, (e, prow, local), &mut acc)?;
    }
    for (name, (got, want)) in QUANT_NAMES.iter().zip(&acc.quant) {
        record(point, name, rel_err(got, want), QUANT_TOL)?;
    }
    for (name, (got, want)) in GEMM_NAMES.iter().zip(&acc.gemm) {
        record(point, name, rel_err(got, want), GEMM_TOL)?;
    }
    if acc.scale_bad > 0 {
        return Err(BenchError::Check(format!(
            "{} rowwise scales differ from amax/448 rounding",
            acc.scale_bad
        )));
    }
    Ok(())
}

/// One sample: row `prow` (row `local` of expert `e`'s padded segment), one output column `j`
/// and one input column `c`, through all four casts and three GEMMs.
fn sample(
    rd: &DeviceReader<'_>,
    ctx: &Ctx<'_>,
    set: &Set,
    sc: &Scales,
    s: &mut Sampler,
    (e, prow, local): (usize, u64, u64),
    acc: &mut Samples,
) -> Result<(), BenchError> {
    let (f, s8) = (ctx.fp8_outs()?, set.fp8()?);
    let (seg, lay, pow2) = (ctx.seg, &f.lay, ctx.opt.pow2_scales);
    let (k, n) = (ctx.d.k, ctx.d.n);
    let (eu, p_e) = (e as u64, seg.padded[e]);
    let x_src = f.xn.as_ref().map_or(s8.xp.ptr(), DevBuf::ptr);
    let seg_sx = &sc.x_row[lay.srow_x[e] as usize..];
    // Rows of the segment: index the scale with the local row.
    let xq = Fp8Rows {
        data: f.xq_row.at(prow * k),
        rows: p_e,
        cols: k,
        scales: seg_sx,
        blk: false,
    };
    let xrow = row_local(rd, &xq, local, k)?;
    let xsrc: Vec<f64> = rd.bf16_f64(x_src + 2 * prow * k, k)?;
    push(&mut acc.quant[0], &xrow, &xsrc);
    // Scale exactness on the first block of the row.
    let amax = xsrc.iter().take(128).fold(0.0f64, |a, v| a.max(v.abs())) as f32;
    let want = expected_scale(amax, pow2);
    if (want - seg_sx[local as usize]).abs() > want * 1e-6 {
        acc.scale_bad += 1;
    }
    let j = s.below(n);
    let w_scales = &sc.w[e * lay.sw_len as usize..];
    let wrow = Fp8Rows {
        data: s8.wq.at(eu * n * k),
        rows: n,
        cols: k,
        scales: w_scales,
        blk: true,
    }
    .row(rd, j)?;
    push(
        &mut acc.quant[1],
        &wrow,
        &rd.bf16_f64(set.w.at(2 * (eu * n + j) * k), k)?,
    );
    acc.gemm[0]
        .0
        .push(f64::from(rd.bf16(f.y.at(2 * (prow * n + j)), 1)?[0]));
    acc.gemm[0].1.push(dot(&xrow, &wrow));
    // dgrad
    let c = s.below(k);
    let seg_sdy = &sc.dy_row[lay.srow_dy[e] as usize..];
    let dyq = Fp8Rows {
        data: f.dyq_row.at(prow * n),
        rows: p_e,
        cols: n,
        scales: seg_sdy,
        blk: false,
    };
    let dyrow = row_local(rd, &dyq, local, n)?;
    push(
        &mut acc.quant[2],
        &dyrow,
        &rd.bf16_f64(s8.dyp.at(2 * prow * n), n)?,
    );
    let wt_scales = &sc.wt[e * lay.swt_len as usize..];
    let wtrow = Fp8Rows {
        data: s8.wqt.at(eu * n * k),
        rows: k,
        cols: n,
        scales: wt_scales,
        blk: true,
    }
    .row(rd, c)?;
    acc.gemm[1]
        .0
        .push(f64::from(rd.bf16(f.dx.at(2 * (prow * k + c)), 1)?[0]));
    acc.gemm[1].1.push(dot(&dyrow, &wtrow));
    // wgrad over the padded segment: rows of the transposed operands.
    let xc_scales = &sc.x_col[lay.scol_x[e] as usize..];
    let xcol = Fp8Rows {
        data: f.xq_col.at(lay.qcol_x[e]),
        rows: k,
        cols: p_e,
        scales: xc_scales,
        blk: false,
    }
    .row(rd, c)?;
    let dyc_scales = &sc.dy_col[lay.scol_dy[e] as usize..];
    let dycol = Fp8Rows {
        data: f.dyq_col.at(lay.qcol_dy[e]),
        rows: n,
        cols: p_e,
        scales: dyc_scales,
        blk: false,
    }
    .row(rd, j)?;
    let xcsrc: Vec<f64> = rd.bf16_column_f64(x_src, k, c, seg.offsets[e], p_e)?;
    push(&mut acc.quant[3], &xcol, &xcsrc);
    acc.gemm[2].0.push(f64::from(
        rd.bf16(f.dw.at(2 * (eu * n * k + j * k + c)), 1)?[0],
    ));
    acc.gemm[2].1.push(dot(&dycol, &xcol));
    Ok(())
}
