//! The BF16 step, the baseline every FP8 recipe is timed against, and its checks.

use fp8_report::Point;

use super::super::Gpu;
use super::super::buffer::DevBuf;
use super::super::check::{DeviceReader, Sampler, dot, rel_err};
use super::super::gemm::Ptrs;
use super::GEMM_TOL;
use super::buffers::Set;
use super::ctx::{Ctx, Marks, NoMarks, Phase, Step};
use super::ops::{gemm, norm};
use super::sampling::{check_nonfinite, pick_row, record};
use crate::error::BenchError;

/// The BF16 step: the norm (LayerNormLinear), then the GEMMs of every expert with rows.
pub(super) struct Bf16;

impl Step for Bf16 {
    fn step(
        &self,
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
}

/// One BF16 step on poisoned outputs, then every check.
pub(super) fn verify(
    gpu: &mut Gpu,
    ctx: &Ctx<'_>,
    set: &Set,
    point: &mut Point,
) -> Result<(), BenchError> {
    let (outs, d) = (ctx.outs, ctx.d);
    for b in [&outs.y, &outs.dx, &outs.dw] {
        b.fill_bytes(&gpu.stream, 0xff)?;
    }
    Bf16.step(gpu, ctx, set, &mut NoMarks)?;
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

/// Sampled entries of the three GEMMs against f64 dot products of the BF16 operands.
fn check_bf16(gpu: &Gpu, ctx: &Ctx<'_>, set: &Set, point: &mut Point) -> Result<(), BenchError> {
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
