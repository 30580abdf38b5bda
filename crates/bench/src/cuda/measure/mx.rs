//! MXFP8 (TE's `MXFP8BlockScaling`, Blackwell): E4M3 in 1x32 blocks with E8M0 scales, rowwise
//! and columnwise copies of every operand, cuBLASLt VEC32_UE8M0 GEMMs. Written for sm_100 and
//! newer; `measure::check_arch` refuses the recipe on older devices before any of this runs, so
//! on the H200 it compiles but is never launched (and is not yet measured anywhere).

use std::collections::HashMap;

use fp8_report::Point;

use super::super::buffer::DevBuf;
use super::super::check::{DeviceReader, Sampler, dot, e4m3_to_f32, rel_err};
use super::super::gemm::Ptrs;
use super::super::{Gpu, launch};
use super::MeasureOptions;
use super::buffers::{Dims, Set};
use super::ctx::{Ctx, Fp8Recipe, Marks, Phase, Step};
use super::ops::{fp8_bprops, fp8_fprops, norm_launch};
use super::sampling::{pick_row, push, record, run_poisoned};
use super::{GEMM_TOL, QUANT_TOL};
use crate::error::BenchError;
use crate::layout::{MX_BLOCK, Segments, mx_scale_bytes, mx_scale_index};

/// Scales of one point under MXFP8: per segment for the activations and gradients, per
/// rotation set (keyed by its bf16 weight's address) for the weights.
pub(super) struct Mx {
    xs_row: (DevBuf, Vec<u64>),
    xs_col: (DevBuf, Vec<u64>),
    dys_row: (DevBuf, Vec<u64>),
    dys_col: (DevBuf, Vec<u64>),
    /// Per set: (rowwise scales of every expert's W, columnwise scales of every expert's W^T).
    w: HashMap<u64, (DevBuf, DevBuf)>,
}

/// Scale buffer offsets (bytes) of each segment, 16-byte aligned.
fn offsets(seg: &Segments, bytes: impl Fn(u64) -> u64) -> (Vec<u64>, u64) {
    let mut at = 0;
    let mut v = Vec::new();
    for &p in &seg.padded {
        v.push(at);
        at += bytes(p).next_multiple_of(16);
    }
    (v, at.max(16))
}

/// Allocates the scales and quantizes every set's weights (FP8 params).
pub(super) fn setup(
    gpu: &Gpu,
    rot: &[Set],
    d: &Dims,
    seg: &Segments,
    opt: &MeasureOptions,
) -> Result<Mx, BenchError> {
    let (k, n, g) = (d.k, d.n, d.g);
    if !opt.fp8_param {
        return Err(BenchError::Unsupported(
            "MXFP8 is measured with FP8 params only (drop --no-fp8-param)".into(),
        ));
    }
    if !k.is_multiple_of(MX_BLOCK) || !n.is_multiple_of(MX_BLOCK) {
        return Err(BenchError::Unsupported(format!(
            "MXFP8 needs in/out features in multiples of 32 ({k} x {n})"
        )));
    }
    if let Some(p) = seg.padded.iter().find(|p| !p.is_multiple_of(MX_BLOCK)) {
        return Err(BenchError::Unsupported(format!(
            "MXFP8 needs token counts (each expert's, padded) in multiples of 32; got {p}: measure with --fp8-pad 32"
        )));
    }
    let alloc = |(v, len): (Vec<u64>, u64)| -> Result<(DevBuf, Vec<u64>), BenchError> {
        Ok((gpu.alloc(len)?, v))
    };
    let mx = Mx {
        xs_row: alloc(offsets(seg, |p| mx_scale_bytes(p, k)))?,
        xs_col: alloc(offsets(seg, |p| mx_scale_bytes(k, p)))?,
        dys_row: alloc(offsets(seg, |p| mx_scale_bytes(p, n)))?,
        dys_col: alloc(offsets(seg, |p| mx_scale_bytes(n, p)))?,
        w: rot
            .iter()
            .map(|set| -> Result<_, BenchError> {
                let (wq, wqt) = (&set.fp8()?.wq, &set.fp8()?.wqt);
                let (rs, cs) = (mx_scale_bytes(n, k), mx_scale_bytes(k, n));
                let (wr, wc) = (gpu.alloc(g * rs)?, gpu.alloc(g * cs)?);
                for e in 0..g {
                    launch::quant_mx(
                        gpu,
                        set.w.at(2 * e * n * k),
                        n,
                        k,
                        Some((wq.at(e * n * k), wr.at(e * rs))),
                        Some((wqt.at(e * n * k), wc.at(e * cs))),
                    )?;
                }
                Ok((set.w.ptr(), (wr, wc)))
            })
            .collect::<Result<_, _>>()?,
    };
    Ok(mx)
}

/// Both MXFP8 copies of every segment of a `[rows, cols]` operand.
#[allow(clippy::too_many_arguments)]
fn quant_segments(
    gpu: &Gpu,
    src: u64,
    cols: u64,
    seg: &Segments,
    q_row: u64,
    s_row: &(DevBuf, Vec<u64>),
    q_col: (u64, &[u64]),
    s_col: &(DevBuf, Vec<u64>),
) -> Result<u32, BenchError> {
    let mut launches = 0;
    for (e, &p) in seg.padded.iter().enumerate() {
        if p == 0 {
            continue;
        }
        let r0 = seg.offsets[e];
        launch::quant_mx(
            gpu,
            src + 2 * r0 * cols,
            p,
            cols,
            Some((q_row + r0 * cols, s_row.0.at(s_row.1[e]))),
            Some((q_col.0 + q_col.1[e], s_col.0.at(s_col.1[e]))),
        )?;
        launches += 2;
    }
    Ok(launches)
}

impl Mx {
    /// This set's weight scales (rowwise of W, columnwise of W^T).
    fn weight_scales(&self, set: &Set) -> Result<&(DevBuf, DevBuf), BenchError> {
        self.w
            .get(&set.w.ptr())
            .ok_or_else(|| BenchError::Internal("MXFP8 weight scales missing".into()))
    }
}

/// One MXFP8 training step: norm (bf16), the casts of the input, fprop; the casts of the output
/// gradient, dgrad and wgrad. Weights are FP8 params (cast once in `setup`).
impl Step for Mx {
    fn step(
        &self,
        gpu: &mut Gpu,
        ctx: &Ctx<'_>,
        set: &Set,
        marks: &mut dyn Marks,
    ) -> Result<u32, BenchError> {
        step(self, gpu, ctx, set, marks)
    }
}

fn step(
    mx: &Mx,
    gpu: &mut Gpu,
    ctx: &Ctx<'_>,
    set: &Set,
    marks: &mut dyn Marks,
) -> Result<u32, BenchError> {
    let (d, seg) = (ctx.d, ctx.seg);
    let f = ctx.fp8_outs()?;
    let s8 = set.fp8()?;
    let (xp, dyp, wq, wqt) = (&s8.xp, &s8.dyp, &s8.wq, &s8.wqt);
    let (wr, wc) = mx.weight_scales(set)?;
    let (k, n) = (d.k, d.n);
    let p = seg.total_padded();
    let lay = &f.lay;
    let mut launches = 0;
    marks.mark(gpu, Phase::Start)?;
    let src = match (&f.xn, d.norm) {
        (Some(xn), Some(kind)) => {
            norm_launch(
                gpu,
                ctx.outs,
                kind,
                k,
                [xp.ptr(), xn.ptr(), 0, 0],
                p,
                0,
                false,
            )?;
            launches += 1;
            xn.ptr()
        }
        _ => xp.ptr(),
    };
    launches += quant_segments(
        gpu,
        src,
        k,
        seg,
        f.xq_row.ptr(),
        &mx.xs_row,
        (f.xq_col.ptr(), &lay.qcol_x),
        &mx.xs_col,
    )?;
    marks.mark(gpu, Phase::ForwardCasts)?;
    let (rs, cs) = (mx_scale_bytes(n, k), mx_scale_bytes(k, n));
    launches += fp8_fprops(gpu, ctx, |e, r0| {
        let eu = e as u64;
        Ptrs {
            a: wq.at(eu * n * k),
            b: f.xq_row.at(r0 * k),
            d: f.y.at(2 * r0 * n),
            sa: wr.at(eu * rs),
            sb: mx.xs_row.0.at(mx.xs_row.1[e]),
        }
    })?;
    marks.mark(gpu, Phase::Forward)?;
    launches += quant_segments(
        gpu,
        dyp.ptr(),
        n,
        seg,
        f.dyq_row.ptr(),
        &mx.dys_row,
        (f.dyq_col.ptr(), &lay.qcol_dy),
        &mx.dys_col,
    )?;
    marks.mark(gpu, Phase::BackwardCasts)?;
    launches += fp8_bprops(gpu, ctx, &f.dw, |e, r0| {
        let eu = e as u64;
        (
            Ptrs {
                a: wqt.at(eu * n * k),
                b: f.dyq_row.at(r0 * n),
                d: f.dx.at(2 * r0 * k),
                sa: wc.at(eu * cs),
                sb: mx.dys_row.0.at(mx.dys_row.1[e]),
            },
            Ptrs {
                a: f.xq_col.at(lay.qcol_x[e]),
                b: f.dyq_col.at(lay.qcol_dy[e]),
                d: f.dw.at(2 * eu * n * k),
                sa: mx.xs_col.0.at(mx.xs_col.1[e]),
                sb: mx.dys_col.0.at(mx.dys_col.1[e]),
            },
        )
    })?;
    marks.mark(gpu, Phase::Backward)?;
    Ok(launches)
}

/// Row `r` of an MXFP8 operand `[rows, cols]` at `data`, dequantized with its E8M0 scales.
fn mx_row(
    rd: &DeviceReader<'_>,
    data: u64,
    scales: &[u8],
    cols: u64,
    r: u64,
) -> Result<Vec<f64>, BenchError> {
    let mut raw = vec![0u8; cols as usize];
    rd.raw(data + r * cols, &mut raw)?;
    raw.iter()
        .enumerate()
        .map(|(c, &b)| {
            let si = mx_scale_index(cols, r, c as u64 / MX_BLOCK) as usize;
            let e = *scales
                .get(si)
                .ok_or_else(|| BenchError::Internal(format!("MX scale index {si} out of range")))?;
            Ok(f64::from(e4m3_to_f32(b)) * 2f64.powi(i32::from(e) - 127))
        })
        .collect()
}

fn bytes(gpu: &Gpu, b: &DevBuf) -> Result<Vec<u8>, BenchError> {
    let mut v = vec![0u8; b.bytes() as usize];
    b.read_into(&gpu.stream, &mut v)?;
    Ok(v)
}

/// One MXFP8 step on poisoned outputs, then the checks.
impl Fp8Recipe for Mx {
    fn verify(
        &self,
        gpu: &mut Gpu,
        ctx: &Ctx<'_>,
        set: &Set,
        point: &mut Point,
    ) -> Result<(), BenchError> {
        run_poisoned(gpu, ctx, set, self, "mxfp8")?;
        check(self, gpu, ctx, set, point)
    }
}

/// Sampled casts against the source and GEMM entries against f64 products of the dequantized
/// operands.
fn check(
    mx: &Mx,
    gpu: &Gpu,
    ctx: &Ctx<'_>,
    set: &Set,
    point: &mut Point,
) -> Result<(), BenchError> {
    let (d, seg, opt) = (ctx.d, ctx.seg, ctx.opt);
    let f = ctx.fp8_outs()?;
    let s8 = set.fp8()?;
    let (xp, wq, wqt) = (&s8.xp, &s8.wq, &s8.wqt);
    let (wr, wc) = mx.weight_scales(set)?;
    let (k, n) = (d.k, d.n);
    let (rs, cs) = (mx_scale_bytes(n, k) as usize, mx_scale_bytes(k, n) as usize);
    let host = |b: &DevBuf| bytes(gpu, b);
    let (xs_r, xs_c, dys_r, dys_c, wr_h, wc_h) = (
        host(&mx.xs_row.0)?,
        host(&mx.xs_col.0)?,
        host(&mx.dys_row.0)?,
        host(&mx.dys_col.0)?,
        host(wr)?,
        host(wc)?,
    );
    let rd = &DeviceReader::new(&gpu.stream, set.bufs().chain(f.bufs()));
    let x_src = f.xn.as_ref().map_or(xp.ptr(), DevBuf::ptr);
    let lay = &f.lay;
    let mut s = Sampler::new(u64::from(opt.seed) ^ 0x3a3a);
    let mut q = (vec![], vec![]);
    let mut gm = [(vec![], vec![]), (vec![], vec![]), (vec![], vec![])];
    for _ in 0..opt.samples {
        let Some((e, prow, local)) = pick_row(&mut s, &seg.rows, &seg.offsets) else {
            break;
        };
        let (eu, p_e, r0) = (e as u64, seg.padded[e], seg.offsets[e]);
        let xrow = mx_row(
            rd,
            f.xq_row.at(r0 * k),
            &xs_r[mx.xs_row.1[e] as usize..],
            k,
            local,
        )?;
        let xsrc: Vec<f64> = rd.bf16_f64(x_src + 2 * prow * k, k)?;
        push(&mut q, &xrow, &xsrc);
        let j = s.below(n);
        let wrow = mx_row(rd, wq.at(eu * n * k), &wr_h[e * rs..], k, j)?;
        gm[0]
            .0
            .push(f64::from(rd.bf16(f.y.at(2 * (prow * n + j)), 1)?[0]));
        gm[0].1.push(dot(&xrow, &wrow));
        let c = s.below(k);
        let dyrow = mx_row(
            rd,
            f.dyq_row.at(r0 * n),
            &dys_r[mx.dys_row.1[e] as usize..],
            n,
            local,
        )?;
        let wtrow = mx_row(rd, wqt.at(eu * n * k), &wc_h[e * cs..], n, c)?;
        gm[1]
            .0
            .push(f64::from(rd.bf16(f.dx.at(2 * (prow * k + c)), 1)?[0]));
        gm[1].1.push(dot(&dyrow, &wtrow));
        let xcol = mx_row(
            rd,
            f.xq_col.at(lay.qcol_x[e]),
            &xs_c[mx.xs_col.1[e] as usize..],
            p_e,
            c,
        )?;
        let dycol = mx_row(
            rd,
            f.dyq_col.at(lay.qcol_dy[e]),
            &dys_c[mx.dys_col.1[e] as usize..],
            p_e,
            j,
        )?;
        gm[2].0.push(f64::from(
            rd.bf16(f.dw.at(2 * (eu * n * k + j * k + c)), 1)?[0],
        ));
        gm[2].1.push(dot(&dycol, &xcol));
    }
    record(point, "fp8_quant_x_rowwise", rel_err(&q.0, &q.1), QUANT_TOL)?;
    for (i, name) in ["fp8_fprop", "fp8_dgrad", "fp8_wgrad"].iter().enumerate() {
        record(point, name, rel_err(&gm[i].0, &gm[i].1), GEMM_TOL)?;
    }
    Ok(())
}
