//! GEMM-only throughput of one shape in BF16, FP8 blockwise and FP8 tensorwise.

use super::super::Gpu;
use super::super::buffer::DevBuf;
use super::super::gemm::{AlgoSearch, Dt, Plan, Ptrs, ScaleMode, Shape};
use super::super::launch::{self, TensorCast};
use super::{Figure, describe_tuning, time_on};
use crate::error::BenchError;
use crate::layout::{Segments, blk128_scale_len, round_up};

/// The BF16 operands of `Y[M,N] = X[M,K] W[N,K]^T`, random.
struct Operands {
    m: u64,
    k: u64,
    n: u64,
    x: DevBuf,
    w: DevBuf,
    y: DevBuf,
}

/// GEMM-only throughput of `Y[M,N] = X[M,K] W[N,K]^T` in BF16, FP8 blockwise and FP8
/// tensorwise (per-tensor scales; with split accumulation, as dgrad, wgrad and PyTorch's
/// `_scaled_mm` default run, and with fast accumulation, as TE's fprop runs). Figures in that
/// order.
pub fn gemm_throughput(
    gpu: &mut Gpu,
    m: u64,
    k: u64,
    n: u64,
    search: AlgoSearch,
) -> Result<Vec<Figure>, BenchError> {
    let ops = Operands {
        m,
        k,
        n,
        x: gpu.alloc(2 * m * k)?,
        w: gpu.alloc(2 * n * k)?,
        y: gpu.alloc(2 * m * n)?,
    };
    gpu.fill_normal(&ops.x, m * k, 11, 1.0)?;
    gpu.fill_normal(&ops.w, n * k, 12, 0.05)?;
    let bf = bf16(gpu, &ops, search)?;
    let f8 = blockwise(gpu, &ops, search)?;
    let tw = tensorwise(gpu, &ops, search)?;
    let labels = [
        "bf16",
        "fp8 blockwise",
        "fp8 tensorwise",
        "fp8 tensorwise fast-accum",
    ];
    let timed = [bf, f8].into_iter().chain(tw);
    let flops = 2.0 * (m * k * n) as f64;
    let bf_rate = flops / bf.0 / 1e9;
    Ok(timed
        .zip(labels)
        .map(|((ms, shape), label)| {
            let rate = flops / ms / 1e9;
            Figure {
                name: format!("{label} GEMM M={m} K={k} N={n}"),
                ms,
                rate,
                unit: "TFLOP/s",
                relative: (label != "bf16").then_some(rate / bf_rate),
                tuning: gpu.lt.tune_info(&shape, search).map(describe_tuning),
                target: None,
            }
        })
        .collect())
}

/// Runs the plan once (the search, when asked, happens here), then times 20 runs.
fn time_gemm(
    gpu: &mut Gpu,
    plan: &Plan,
    p: &Ptrs,
    search: AlgoSearch,
) -> Result<(f64, Shape), BenchError> {
    gpu.lt.run_with(plan, p, search)?;
    let (ctx, stream, spin) = (gpu.ctx.clone(), gpu.stream.clone(), gpu.k.spin.clone());
    let ms = time_on(&ctx, &stream, &spin, 20, || {
        gpu.lt.run_with(plan, p, search)
    })?;
    Ok((ms, plan.shape()))
}

fn bf16(gpu: &mut Gpu, o: &Operands, search: AlgoSearch) -> Result<(f64, Shape), BenchError> {
    let plan = gpu.lt.plan(Shape::bf16(o.n, o.m, o.k, true, false))?;
    let p = Ptrs {
        a: o.w.ptr(),
        b: o.x.ptr(),
        d: o.y.ptr(),
        sa: 0,
        sb: 0,
    };
    time_gemm(gpu, &plan, &p, search)
}

/// The blockwise GEMM: X cast 1x128 rowwise, W 128x128.
fn blockwise(gpu: &mut Gpu, o: &Operands, search: AlgoSearch) -> Result<(f64, Shape), BenchError> {
    let (m, k, n) = (o.m, o.k, o.n);
    let seg = Segments::new(&[m], 16);
    let (tb, n_tiles) = gpu.upload_tiles(&seg, k)?;
    let (xq, sx) = (
        gpu.alloc(m * k)?,
        gpu.alloc(4 * seg.rowwise_scale_offsets(k).1)?,
    );
    let (wq, sw, wqt, swt) = (
        gpu.alloc(n * k)?,
        gpu.alloc(4 * round_up(blk128_scale_len(n, k), 4))?,
        gpu.alloc(n * k)?,
        gpu.alloc(4 * round_up(blk128_scale_len(k, n), 4))?,
    );
    let x_io = [xq.ptr(), sx.ptr(), 0, 0];
    launch::quant_1x128(
        gpu,
        o.x.ptr(),
        k,
        tb.ptr(),
        n_tiles,
        true,
        false,
        true,
        x_io,
    )?;
    let w_io = [wq.ptr(), sw.ptr(), wqt.ptr(), swt.ptr()];
    launch::quant_128x128(gpu, o.w.ptr(), n, k, true, w_io)?;
    let scales = (ScaleMode::Blk128, ScaleMode::Vec128);
    let plan = gpu
        .lt
        .plan(Shape::fp8_tn(n, m, k, (Dt::E4m3, Dt::E4m3), scales))?;
    let p = Ptrs {
        a: wq.ptr(),
        b: xq.ptr(),
        d: o.y.ptr(),
        sa: sw.ptr(),
        sb: sx.ptr(),
    };
    time_gemm(gpu, &plan, &p, search)
}

/// One FP8 copy of `[rows, k]` at `src` with one scale for the whole tensor (current
/// scaling): the data, its `scale_inv`, and the buffers the cast used (kept alive).
fn tensor_cast(
    gpu: &Gpu,
    src: u64,
    rows: u64,
    k: u64,
) -> Result<(DevBuf, DevBuf, [DevBuf; 2]), BenchError> {
    let seg = Segments::new(&[rows], 1);
    let (tiles, nt) = gpu.upload_tile_table(&seg.tensor_tiles(k, 0))?;
    let (q, amax, sc, si) = (
        gpu.alloc(rows * k)?,
        gpu.alloc(4)?,
        gpu.alloc(4)?,
        gpu.alloc(4)?,
    );
    amax.zero(&gpu.stream)?;
    launch::amax_tiles(gpu, src, k, tiles.ptr(), nt, amax.ptr())?;
    launch::tensor_scale(gpu, amax.ptr(), 1, false, false, sc.ptr(), si.ptr())?;
    let c = TensorCast {
        scale: sc.ptr(),
        scale_inv: si.ptr(),
        amax_rec: 0,
        row: q.ptr(),
        col: 0,
        e5m2: false,
    };
    launch::cast_tensor(gpu, src, k, tiles.ptr(), nt, c)?;
    Ok((q, si, [tiles, amax]))
}

/// The tensorwise GEMM with split and with fast accumulation. The blockwise data re-scaled is
/// not what a per-tensor cast makes, so the operands are cast again.
fn tensorwise(
    gpu: &mut Gpu,
    o: &Operands,
    search: AlgoSearch,
) -> Result<Vec<(f64, Shape)>, BenchError> {
    let (m, k, n) = (o.m, o.k, o.n);
    let (xt, sxt, _keep_x) = tensor_cast(gpu, o.x.ptr(), m, k)?;
    let (wt, swt, _keep_w) = tensor_cast(gpu, o.w.ptr(), n, k)?;
    let p = Ptrs {
        a: wt.ptr(),
        b: xt.ptr(),
        d: o.y.ptr(),
        sa: swt.ptr(),
        sb: sxt.ptr(),
    };
    let mut out = Vec::new();
    for fast in [false, true] {
        let scales = (ScaleMode::Tensor, ScaleMode::Tensor);
        let mut sh = Shape::fp8_tn(n, m, k, (Dt::E4m3, Dt::E4m3), scales);
        sh.fast_accum = fast;
        let plan = gpu.lt.plan(sh)?;
        out.push(time_gemm(gpu, &plan, &p, search)?);
    }
    Ok(out)
}
