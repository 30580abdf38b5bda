//! One point: set up buffers, check every kernel and GEMM once, then time fwd+bwd in both
//! precisions with CUDA events, rotating input sets so repeated steps do not hit L2.
//!
//! `buffers` allocates, `plans` prepares the GEMMs; `ctx` is what every step and check shares,
//! `ops` the operations they are made of, `sampling` what the checks share. Each precision is a
//! file with its step and its checks: `bf16`, `blockwise`, `tensor` (+ `tensor_check`) for the
//! per-tensor recipes, `mx`. `timing` times a step. `run` chooses the FP8 recipe, once.

mod bf16;
mod blockwise;
mod buffers;
mod ctx;
mod mx;
mod ops;
mod plans;
mod sampling;
mod tensor;
mod tensor_check;
mod timing;

use fp8_engine::model::Norm;
use fp8_policy::ModuleKind;
use fp8_report::{Point, Status};

use super::Gpu;
use crate::error::BenchError;
use crate::layout::Segments;
use crate::recipe::Recipe;
use crate::sweep::BenchPoint;
use ctx::{Ctx, Fp8Recipe};

/// Untimed steps per point, everywhere (the seed's `TE_LAYER_PERF_WARMUP` default).
pub const DEFAULT_WARMUP: u32 = 10;
/// Timed steps per point, everywhere (the seed's `TE_LAYER_PERF_ITERS` default).
pub const DEFAULT_ITERS: u32 = 10;

/// How to measure.
#[derive(Debug, Clone)]
pub struct MeasureOptions {
    /// Untimed steps first.
    pub warmup: u32,
    /// Timed steps.
    pub iters: u32,
    /// Weights kept as FP8 params: no per-step weight cast.
    pub fp8_param: bool,
    /// Power-of-two scales (TE's default) instead of plain FP32.
    pub pow2_scales: bool,
    /// FP8 row padding multiple (16: what TE asserts).
    pub pad: u64,
    /// cuBLASLt heuristic candidates to time per GEMM shape.
    pub candidates: usize,
    /// Measure BF16.
    pub bf16: bool,
    /// Measure FP8.
    pub fp8: bool,
    /// Seed of the random data.
    pub seed: u32,
    /// Output entries sampled per check.
    pub samples: usize,
    /// The FP8 recipe and its options.
    pub recipe: crate::recipe::RecipeOptions,
}

impl Default for MeasureOptions {
    fn default() -> Self {
        MeasureOptions {
            warmup: DEFAULT_WARMUP,
            iters: DEFAULT_ITERS,
            fp8_param: true,
            pow2_scales: true,
            pad: 16,
            candidates: 8,
            bf16: true,
            fp8: true,
            seed: 0x5eed,
            samples: 32,
            recipe: crate::recipe::RecipeOptions::blockwise(),
        }
    }
}

/// Error bounds of the checks (relative Frobenius error over the sampled entries).
pub const GEMM_TOL: f64 = 1e-2;
/// Bound for a dequantized FP8 tensor against its BF16 source (E4M3 has 3 mantissa bits).
pub const QUANT_TOL: f64 = 0.08;

/// Measures one point. Never panics; a failure becomes a `failed`/`skipped` point.
pub fn measure_point(gpu: &mut Gpu, bp: &BenchPoint, opt: &MeasureOptions) -> Point {
    let seg = bp.segments(opt.pad);
    let mut point = bp.report_point(opt.pad);
    match run(gpu, bp, &seg, opt, &mut point) {
        Ok(()) => {}
        Err(BenchError::Check(msg)) => {
            point.status = Status::Failed;
            point.reason = Some(msg);
        }
        Err(e) => {
            point.status = Status::Skipped;
            point.reason = Some(e.to_string());
        }
    }
    // Free everything the point allocated before the next one.
    let _ = gpu.sync();
    point
}

fn run(
    gpu: &mut Gpu,
    bp: &BenchPoint,
    seg: &Segments,
    opt: &MeasureOptions,
    point: &mut Point,
) -> Result<(), BenchError> {
    let d = dims(bp, opt)?;
    let recipe = opt.recipe.recipe();
    if opt.fp8 {
        check_arch(gpu, recipe)?;
    }
    let (rot, outs, fp8) = buffers::allocate(gpu, bp, &d, seg, opt)?;
    let fp8_recipe: Option<Box<dyn Fp8Recipe>> = match (&fp8, recipe) {
        (None, _) => None,
        (Some(f), r) if r.per_tensor() => {
            Some(Box::new(tensor::setup(gpu, &rot, &d, seg, &outs, f, opt)?))
        }
        (Some(_), Recipe::Mxfp8) => Some(Box::new(mx::setup(gpu, &rot, &d, seg, opt)?)),
        (Some(_), _) => Some(Box::new(blockwise::Blockwise)),
    };
    let (plans, bf16_shapes, fp8_shapes) = plans::build(gpu, &d, seg, fp8.is_some(), &opt.recipe)?;
    let ctx = Ctx {
        d: &d,
        seg,
        opt,
        outs: &outs,
        fp8: fp8.as_ref(),
        plans: &plans,
        bf16_shapes: &bf16_shapes,
        fp8_shapes: &fp8_shapes,
    };
    // Correctness first: poison the outputs, run one step of each precision, check.
    if opt.bf16 {
        bf16::verify(gpu, &ctx, &rot[0], point)?;
    }
    if let Some(r) = &fp8_recipe {
        r.verify(gpu, &ctx, &rot[0], point)?;
    }
    if opt.bf16 {
        point.bf16 = Some(timing::time(gpu, &ctx, &rot, &bf16::Bf16)?);
    }
    if opt.fp8 {
        let r = fp8_recipe
            .as_deref()
            .ok_or_else(|| BenchError::Internal("fp8 buffers missing".into()))?;
        point.fp8 = Some(timing::time(gpu, &ctx, &rot, r)?);
    }
    if let (Some(b), Some(f)) = (point.bf16, point.fp8) {
        point.speedup = Some(b.total_ms.median / f.total_ms.median);
    }
    Ok(())
}

/// Refuses a recipe the device cannot run, before anything is allocated. MXFP8's scaled GEMMs
/// and E8M0 scales exist from sm_100 (Blackwell); Hopper runs the other three.
fn check_arch(gpu: &Gpu, recipe: Recipe) -> Result<(), BenchError> {
    let cc = &gpu.info.compute_capability;
    let major: u32 = cc
        .split('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or(0);
    if recipe == Recipe::Nvfp4 {
        return Err(BenchError::Unsupported(format!(
            "the cuBLASLt backend has no NVFP4 GEMMs; on {} measure nvfp4 with --backend te on a B200, or estimate it with --backend model --device-profile b200",
            gpu.info.name
        )));
    }
    if recipe == Recipe::Mxfp8 && major < 10 {
        return Err(BenchError::Unsupported(format!(
            "the mxfp8 recipe needs compute capability 10.0 or newer (Blackwell); {} is {cc}: measure it on a B200, or estimate it with --backend model --device-profile b200",
            gpu.info.name
        )));
    }
    Ok(())
}

/// The point's dimensions, or why this module cannot run here.
fn dims(bp: &BenchPoint, opt: &MeasureOptions) -> Result<buffers::Dims, BenchError> {
    let s = &bp.spec;
    let (k, n, g) = (s.in_features, s.out_features, u64::from(s.num_gemms));
    let norm = if s.module_kind == ModuleKind::LayernormColumn {
        s.norm.or(Some(Norm::RmsNorm))
    } else {
        None
    };
    if norm.is_some() && !k.is_multiple_of(8) {
        return Err(BenchError::Unsupported(format!(
            "norm over {k} features: needs a multiple of 8"
        )));
    }
    let fp8_ok = k.is_multiple_of(16) && n.is_multiple_of(16);
    if opt.fp8 && !fp8_ok {
        return Err(BenchError::Unsupported(format!(
            "FP8 needs in/out features that are multiples of 16 ({k} x {n}); TE asserts the same, so this module cannot run FP8"
        )));
    }
    let offsets = bp
        .splits
        .iter()
        .scan(0, |at, r| {
            let o = *at;
            *at += r;
            Some(o)
        })
        .collect();
    Ok(buffers::Dims {
        k,
        n,
        g,
        rows: bp.rows(),
        splits: bp.splits.clone(),
        offsets,
        norm,
    })
}
