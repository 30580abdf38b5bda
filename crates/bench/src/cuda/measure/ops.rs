//! The operations every precision's step is made of: one planned GEMM, the per-expert GEMM
//! loops of forward and backward, and the norm kernel (optionally fused with the rowwise FP8
//! cast).

use cudarc::driver::{LaunchConfig, PushKernelArg};
use fp8_engine::model::Norm;

use super::super::Gpu;
use super::super::buffer::DevBuf;
use super::super::gemm::{Ptrs, Shape};
use super::buffers::Outs;
use super::ctx::Ctx;
use crate::error::BenchError;

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
