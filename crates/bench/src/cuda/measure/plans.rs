//! The cuBLASLt plans of a point: one per distinct GEMM shape, and per expert the three shapes
//! (fprop, dgrad, wgrad) of each precision.

use std::collections::HashMap;

use super::super::Gpu;
use super::super::gemm::{Dt, Plan, ScaleMode, Shape};
use super::buffers::Dims;
use crate::error::BenchError;
use crate::layout::Segments;
use crate::recipe::{Recipe, RecipeOptions};

/// fprop, dgrad and wgrad shapes of one expert; `None` for an expert with no rows.
pub(super) type StepShapes = Vec<Option<(Shape, Shape, Shape)>>;

/// The plans, and the shapes of every expert's step in BF16 and (when `fp8`) FP8.
pub(super) fn build(
    gpu: &Gpu,
    d: &Dims,
    seg: &Segments,
    fp8: bool,
    recipe: &RecipeOptions,
) -> Result<(HashMap<Shape, Plan>, StepShapes, StepShapes), BenchError> {
    let mut plans: HashMap<Shape, Plan> = HashMap::new();
    let mut shapes =
        |rows: &[u64], make: &dyn Fn(u64) -> [Shape; 3]| -> Result<StepShapes, BenchError> {
            rows.iter()
                .map(|&r| {
                    if r == 0 {
                        return Ok(None);
                    }
                    let s = make(r);
                    for sh in s {
                        if let std::collections::hash_map::Entry::Vacant(e) = plans.entry(sh) {
                            e.insert(gpu.lt.plan(sh)?);
                        }
                    }
                    Ok(Some((s[0], s[1], s[2])))
                })
                .collect()
        };
    let (k, n) = (d.k, d.n);
    let bf16 = shapes(&d.splits, &|r| bf16_shapes(k, n, r))?;
    let fp8 = if fp8 {
        shapes(&seg.padded, &|p| fp8_shapes(k, n, p, recipe))?
    } else {
        Vec::new()
    };
    Ok((plans, bf16, fp8))
}

/// BF16: fprop Y = X W^T (TN), dgrad dX = dY W (NN), wgrad dW = dY^T X (NT), column-major.
fn bf16_shapes(k: u64, n: u64, r: u64) -> [Shape; 3] {
    [
        Shape::bf16(n, r, k, true, false),
        Shape::bf16(k, r, n, false, false),
        Shape::bf16(k, n, r, false, true),
    ]
}

/// FP8: every GEMM is TN (Hopper's FP8 layout). Blockwise: weights 128x128-scaled, activations
/// and gradients 1x128, wgrad contracts two 1x128 operands over the rows. Per-tensor recipes:
/// scalar scales, gradients E5M2 under HYBRID, fast accumulation in fprop only (as TE).
/// MXFP8: 1x32 E8M0 scales on every operand.
fn fp8_shapes(k: u64, n: u64, p: u64, r: &RecipeOptions) -> [Shape; 3] {
    let g = if r.grad_e5m2() { Dt::E5m2 } else { Dt::E4m3 };
    let e4 = Dt::E4m3;
    match r.recipe() {
        Recipe::Tensorwise | Recipe::Delayed => {
            let t = (ScaleMode::Tensor, ScaleMode::Tensor);
            let mut fprop = Shape::fp8_tn(n, p, k, (e4, e4), t);
            fprop.fast_accum = true;
            [
                fprop,
                Shape::fp8_tn(k, p, n, (e4, g), t),
                Shape::fp8_tn(k, n, p, (e4, g), t),
            ]
        }
        Recipe::Mxfp8 => {
            let m = (ScaleMode::Vec32Ue8m0, ScaleMode::Vec32Ue8m0);
            [
                Shape::fp8_tn(n, p, k, (e4, e4), m),
                Shape::fp8_tn(k, p, n, (e4, e4), m),
                Shape::fp8_tn(k, n, p, (e4, e4), m),
            ]
        }
        _ => [
            Shape::fp8_tn(n, p, k, (e4, e4), (ScaleMode::Blk128, ScaleMode::Vec128)),
            Shape::fp8_tn(k, p, n, (e4, e4), (ScaleMode::Blk128, ScaleMode::Vec128)),
            Shape::fp8_tn(k, n, p, (e4, e4), (ScaleMode::Vec128, ScaleMode::Vec128)),
        ],
    }
}
