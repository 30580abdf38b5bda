//! The checks every point passes before it is timed: no non-finite outputs, and sampled
//! entries of every GEMM and cast against an f64 host reference.

use fp8_report::Point;

use super::super::Gpu;
use super::super::buffer::DevBuf;
use super::super::check::{DeviceReader, Fp8Rows, Sampler, dot, expected_scale, rel_err};
use crate::error::BenchError;

use super::buffers::{Fp8Layout, Set};
use super::steps::{Ctx, NoMarks, bf16_step, fp8_step};
use super::{GEMM_TOL, QUANT_TOL};

/// One BF16 step on poisoned outputs, then every check.
pub(super) fn bf16(
    gpu: &mut Gpu,
    ctx: &Ctx<'_>,
    set: &Set,
    point: &mut Point,
) -> Result<(), BenchError> {
    let (outs, d) = (ctx.outs, ctx.d);
    for b in [&outs.y, &outs.dx, &outs.dw] {
        b.fill_bytes(&gpu.stream, 0xff)?;
    }
    bf16_step(gpu, ctx, set, &mut NoMarks)?;
    let scratch = gpu.alloc(4)?;
    check_nonfinite(
        gpu,
        &scratch,
        &[
            (&outs.y, d.rows * d.n, "bf16 fprop"),
            (&outs.dx, d.rows * d.k, "bf16 dgrad"),
            (&outs.dw, d.g * d.n * d.k, "bf16 wgrad"),
        ],
    )?;
    check_bf16(gpu, ctx, set, point)
}

/// One FP8 step on poisoned outputs, then every check.
pub(super) fn fp8(
    gpu: &mut Gpu,
    ctx: &Ctx<'_>,
    set: &Set,
    point: &mut Point,
) -> Result<(), BenchError> {
    run_poisoned(gpu, ctx, set, fp8_step, "fp8")?;
    check_fp8(gpu, ctx, set, point)
}

/// Poisons the FP8 outputs, runs one `step` (any recipe's) and checks that every output was
/// written and finite; `label` names the recipe in the error.
pub(super) fn run_poisoned(
    gpu: &mut Gpu,
    ctx: &Ctx<'_>,
    set: &Set,
    step: super::timing::StepFn,
    label: &str,
) -> Result<(), BenchError> {
    let f = ctx
        .fp8
        .ok_or_else(|| BenchError::Internal("fp8 buffers missing".into()))?;
    let (d, p_rows) = (ctx.d, ctx.seg.total_padded());
    for b in [&f.y, &f.dx, &f.dw] {
        b.fill_bytes(&gpu.stream, 0xff)?;
    }
    step(gpu, ctx, set, &mut NoMarks)?;
    let scratch = gpu.alloc(4)?;
    check_nonfinite(
        gpu,
        &scratch,
        &[
            (&f.y, p_rows * d.n, &format!("{label} fprop")),
            (&f.dx, p_rows * d.k, &format!("{label} dgrad")),
            (&f.dw, d.g * d.n * d.k, &format!("{label} wgrad")),
        ],
    )
}

pub(super) fn check_nonfinite(
    gpu: &Gpu,
    scratch: &DevBuf,
    outs: &[(&DevBuf, u64, &str)],
) -> Result<(), BenchError> {
    for (b, len, what) in outs {
        let c = gpu.count_nonfinite(b, *len, scratch)?;
        if c > 0 {
            return Err(BenchError::Check(format!(
                "{what}: {c} non-finite or unwritten outputs"
            )));
        }
    }
    Ok(())
}

pub(super) fn record(point: &mut Point, name: &str, err: f64, tol: f64) -> Result<(), BenchError> {
    point.errors.insert(name.to_owned(), err);
    if err.is_finite() && err <= tol {
        Ok(())
    } else {
        Err(BenchError::Check(format!(
            "{name}: relative error {err:.3e} above the bound {tol:.0e}"
        )))
    }
}

/// Picks an expert with rows and a row inside it.
pub(super) fn pick_row(
    s: &mut Sampler,
    splits: &[u64],
    offsets: &[u64],
) -> Option<(usize, u64, u64)> {
    let live: Vec<usize> = (0..splits.len()).filter(|&e| splits[e] > 0).collect();
    if live.is_empty() {
        return None;
    }
    let e = live[s.below(live.len() as u64) as usize];
    let r = s.below(splits[e]);
    Some((e, offsets[e] + r, r))
}

pub(super) fn check_bf16(
    gpu: &Gpu,
    ctx: &Ctx<'_>,
    set: &Set,
    point: &mut Point,
) -> Result<(), BenchError> {
    let d = ctx.d;
    let (k, n) = (d.k, d.n);
    let rd = &DeviceReader::new(&gpu.stream, set.bufs().chain(ctx.outs.bufs()));
    let x = ctx.outs.xn.as_ref().map_or(set.x.ptr(), DevBuf::ptr);
    let mut s = Sampler::new(u64::from(ctx.opt.seed) ^ 0xbf16);
    let (mut got, mut want) = (vec![], vec![]);
    let (mut gd, mut wd) = (vec![], vec![]);
    let (mut gw, mut ww) = (vec![], vec![]);
    for _ in 0..ctx.opt.samples {
        let Some((e, row, _)) = pick_row(&mut s, &d.splits, &d.offsets) else {
            break;
        };
        let eu = e as u64;
        let j = s.below(n);
        let xr: Vec<f64> = rd.bf16_f64(x + 2 * row * k, k)?;
        let wr: Vec<f64> = rd.bf16_f64(set.w.at(2 * (eu * n + j) * k), k)?;
        want.push(dot(&xr, &wr));
        got.push(f64::from(rd.bf16(ctx.outs.y.at(2 * (row * n + j)), 1)?[0]));
        // dgrad: dX[row][c] = dY[row] . W[:, c]
        let c = s.below(k);
        let dyr: Vec<f64> = rd.bf16_f64(set.dy.at(2 * row * n), n)?;
        let wc: Vec<f64> = rd.bf16_column_f64(set.w.at(2 * eu * n * k), k, c, 0, n)?;
        wd.push(dot(&dyr, &wc));
        gd.push(f64::from(rd.bf16(ctx.outs.dx.at(2 * (row * k + c)), 1)?[0]));
        // wgrad: dW[j][c] = dY[:, j] . X[:, c] over the expert's rows
        let r0 = d.offsets[e];
        let rows = d.splits[e];
        let dyc: Vec<f64> = rd.bf16_column_f64(set.dy.ptr(), n, j, r0, rows)?;
        let xc: Vec<f64> = rd.bf16_column_f64(x, k, c, r0, rows)?;
        ww.push(dot(&dyc, &xc));
        gw.push(f64::from(
            rd.bf16(ctx.outs.dw.at(2 * (eu * n * k + j * k + c)), 1)?[0],
        ));
    }
    record(point, "bf16_fprop", rel_err(&got, &want), GEMM_TOL)?;
    record(point, "bf16_dgrad", rel_err(&gd, &wd), GEMM_TOL)?;
    record(point, "bf16_wgrad", rel_err(&gw, &ww), GEMM_TOL)
}

pub(super) fn read_f32s(gpu: &Gpu, b: &DevBuf) -> Result<Vec<f32>, BenchError> {
    let mut v = vec![0f32; (b.bytes() / 4) as usize];
    b.read_into(&gpu.stream, &mut v)?;
    Ok(v)
}

pub(super) fn check_fp8(
    gpu: &Gpu,
    ctx: &Ctx<'_>,
    set: &Set,
    point: &mut Point,
) -> Result<(), BenchError> {
    let (d, seg, opt) = (ctx.d, ctx.seg, ctx.opt);
    let f = ctx
        .fp8
        .ok_or_else(|| BenchError::Internal("fp8 buffers missing".into()))?;
    let (Some(xp), Some(dyp), Some(wq), Some(sw), Some(wqt), Some(swt)) =
        (&set.xp, &set.dyp, &set.wq, &set.sw, &set.wqt, &set.swt)
    else {
        return Err(BenchError::Internal("fp8 set incomplete".into()));
    };
    let rd = &DeviceReader::new(&gpu.stream, set.bufs().chain(f.bufs()));
    let (k, n) = (d.k, d.n);
    let x_src = f.xn.as_ref().map_or(xp.ptr(), DevBuf::ptr);
    let (sx_row, sx_col, sdy_row, sdy_col) = (
        read_f32s(gpu, &f.sx_row)?,
        read_f32s(gpu, &f.sx_col)?,
        read_f32s(gpu, &f.sdy_row)?,
        read_f32s(gpu, &f.sdy_col)?,
    );
    let (sw_h, swt_h) = (read_f32s(gpu, sw)?, read_f32s(gpu, swt)?);
    let Fp8Layout {
        srow_x,
        scol_x,
        qcol_x,
        srow_dy,
        scol_dy,
        qcol_dy,
        ..
    } = &f.lay;
    let (sw_len, swt_len) = (f.lay.sw_len as usize, f.lay.swt_len as usize);
    let mut s = Sampler::new(u64::from(opt.seed) ^ 0xf8);
    let mut q = [
        (vec![], vec![]),
        (vec![], vec![]),
        (vec![], vec![]),
        (vec![], vec![]),
    ];
    let mut gm = [(vec![], vec![]), (vec![], vec![]), (vec![], vec![])];
    let mut scale_bad = 0usize;
    for _ in 0..opt.samples {
        let Some((e, prow, local)) = pick_row(&mut s, &seg.rows, &seg.offsets) else {
            break;
        };
        let (eu, p_e) = (e as u64, seg.padded[e]);
        let seg_sx = &sx_row[srow_x[e] as usize..];
        let seg_sdy = &sdy_row[srow_dy[e] as usize..];
        let xq = Fp8Rows {
            data: f.xq_row.at(prow * k),
            rows: p_e,
            cols: k,
            scales: seg_sx,
            blk: false,
        };
        // Rows of the segment: index the scale with the local row.
        let xrow = row_local(rd, &xq, local, k)?;
        let xsrc: Vec<f64> = rd.bf16_f64(x_src + 2 * prow * k, k)?;
        push(&mut q[0], &xrow, &xsrc);
        // Scale exactness on the first block of the row.
        let amax = xsrc.iter().take(128).fold(0.0f64, |a, v| a.max(v.abs())) as f32;
        if (expected_scale(amax, opt.pow2_scales) - seg_sx[local as usize]).abs()
            > expected_scale(amax, opt.pow2_scales) * 1e-6
        {
            scale_bad += 1;
        }
        let j = s.below(n);
        let wrow = Fp8Rows {
            data: wq.at(eu * n * k),
            rows: n,
            cols: k,
            scales: &sw_h[e * sw_len..],
            blk: true,
        }
        .row(rd, j)?;
        let wsrc: Vec<f64> = rd.bf16_f64(set.w.at(2 * (eu * n + j) * k), k)?;
        push(&mut q[1], &wrow, &wsrc);
        gm[0]
            .0
            .push(f64::from(rd.bf16(f.y.at(2 * (prow * n + j)), 1)?[0]));
        gm[0].1.push(dot(&xrow, &wrow));
        // dgrad
        let c = s.below(k);
        let dyq = Fp8Rows {
            data: f.dyq_row.at(prow * n),
            rows: p_e,
            cols: n,
            scales: seg_sdy,
            blk: false,
        };
        let dyrow = row_local(rd, &dyq, local, n)?;
        let dysrc: Vec<f64> = rd.bf16_f64(dyp.at(2 * prow * n), n)?;
        push(&mut q[2], &dyrow, &dysrc);
        let wtrow = Fp8Rows {
            data: wqt.at(eu * n * k),
            rows: k,
            cols: n,
            scales: &swt_h[e * swt_len..],
            blk: true,
        }
        .row(rd, c)?;
        gm[1]
            .0
            .push(f64::from(rd.bf16(f.dx.at(2 * (prow * k + c)), 1)?[0]));
        gm[1].1.push(dot(&dyrow, &wtrow));
        // wgrad over the padded segment: rows of the transposed operands.
        let xcol = Fp8Rows {
            data: f.xq_col.at(qcol_x[e]),
            rows: k,
            cols: p_e,
            scales: &sx_col[scol_x[e] as usize..],
            blk: false,
        }
        .row(rd, c)?;
        let dycol = Fp8Rows {
            data: f.dyq_col.at(qcol_dy[e]),
            rows: n,
            cols: p_e,
            scales: &sdy_col[scol_dy[e] as usize..],
            blk: false,
        }
        .row(rd, j)?;
        let xcsrc: Vec<f64> = rd.bf16_column_f64(x_src, k, c, seg.offsets[e], p_e)?;
        push(&mut q[3], &xcol, &xcsrc);
        gm[2].0.push(f64::from(
            rd.bf16(f.dw.at(2 * (eu * n * k + j * k + c)), 1)?[0],
        ));
        gm[2].1.push(dot(&dycol, &xcol));
    }
    for (i, name) in [
        "fp8_quant_x_rowwise",
        "fp8_quant_w_128x128",
        "fp8_quant_dy_rowwise",
        "fp8_quant_x_colwise",
    ]
    .iter()
    .enumerate()
    {
        record(point, name, rel_err(&q[i].0, &q[i].1), QUANT_TOL)?;
    }
    for (i, name) in ["fp8_fprop", "fp8_dgrad", "fp8_wgrad"].iter().enumerate() {
        record(point, name, rel_err(&gm[i].0, &gm[i].1), GEMM_TOL)?;
    }
    if scale_bad > 0 {
        return Err(BenchError::Check(format!(
            "{scale_bad} rowwise scales differ from amax/448 rounding"
        )));
    }
    Ok(())
}

/// Row `local` of a segment operand whose `data` already points at that row.
pub(super) fn row_local(
    rd: &DeviceReader<'_>,
    op: &Fp8Rows<'_>,
    local: u64,
    cols: u64,
) -> Result<Vec<f64>, BenchError> {
    let whole = Fp8Rows {
        data: op.data - local * cols,
        rows: op.rows,
        cols,
        scales: op.scales,
        blk: false,
    };
    whole.row(rd, local)
}

pub(super) fn push(acc: &mut (Vec<f64>, Vec<f64>), got: &[f64], want: &[f64]) {
    acc.0.extend_from_slice(got);
    acc.1.extend_from_slice(want);
}
