//! The checks of the per-tensor recipes: sampled casts and GEMMs against the dequantized
//! operands (each tensor with its own `scale_inv`), and the scale state against the amax
//! (current scaling) or the history update (delayed).

use fp8_report::Point;

use super::super::Gpu;
use super::super::buffer::DevBuf;
use super::super::check::{DeviceReader, Sampler, dot, expected_tensor_scale, fp8_scalar, rel_err};
use super::super::launch::fp8_max;
use super::buffers::{Fp8Set, Set};
use super::ctx::{Ctx, Fp8Recipe};
use super::sampling::{pick_row, push, read_f32s, record, run_poisoned};
use super::tensor::{PerTensor, SLOT};
use super::{GEMM_TOL, MeasureOptions};
use crate::error::BenchError;
use crate::recipe::AmaxAlgo;

/// Bound for a dequantized E5M2 tensor against its source (2 mantissa bits: twice E4M3's).
pub const QUANT_TOL_E5M2: f64 = 0.16;
/// Bound for a dequantized per-tensor E4M3 tensor (one scale for the whole tensor puts small
/// values nearer the subnormals than a 1x128 block scale does).
pub const QUANT_TOL_TENSOR: f64 = 0.10;

/// One per-tensor FP8 step on poisoned outputs, then every check: no non-finite outputs;
/// sampled rows of every cast against the source (dequantized with the tensor's own
/// `scale_inv`); sampled entries of every GEMM against an f64 product of the dequantized
/// operands; the scales against the amax (current) or the history update (delayed).
impl Fp8Recipe for PerTensor {
    fn verify(
        &self,
        gpu: &mut Gpu,
        ctx: &Ctx<'_>,
        set: &Set,
        point: &mut Point,
    ) -> Result<(), BenchError> {
        let hist_before = (
            read_f32s(gpu, &self.fwd_hist)?,
            read_f32s(gpu, &self.bwd_hist)?,
        );
        run_poisoned(gpu, ctx, set, self, "fp8")?;
        let seen_amax = check_casts_and_gemms(gpu, ctx, self, set, point)?;
        check_scales(gpu, self, ctx.opt, &hist_before, &seen_amax)
    }
}

/// The sampled checks of the casts and GEMMs; returns the largest |value| the samples saw per
/// input and gradient tensor (what the recorded amax must cover).
fn check_casts_and_gemms(
    gpu: &Gpu,
    ctx: &Ctx<'_>,
    pt: &PerTensor,
    set: &Set,
    point: &mut Point,
) -> Result<Vec<f32>, BenchError> {
    let (d, seg, opt) = (ctx.d, ctx.seg, ctx.opt);
    let f = ctx.fp8_outs()?;
    let Fp8Set {
        xp,
        dyp,
        wq,
        sw,
        wqt,
        ..
    } = set.fp8()?;
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
    Ok(seen_amax)
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
