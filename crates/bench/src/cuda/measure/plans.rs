//! The cuBLASLt plans of a point: one per distinct GEMM shape, and per expert the three shapes
//! (fprop, dgrad, wgrad) of each precision.

use std::collections::HashMap;

use super::super::Gpu;
use super::super::gemm::{Dt, Plan, ScaleMode, Shape};
use super::buffers::Dims;
use crate::error::BenchError;
use crate::layout::Segments;

/// fprop, dgrad and wgrad shapes of one expert; `None` for an expert with no rows.
pub(super) type StepShapes = Vec<Option<(Shape, Shape, Shape)>>;

/// The plans, and the shapes of every expert's step in BF16 and (when `fp8`) FP8.
pub(super) fn build(
    gpu: &Gpu,
    d: &Dims,
    seg: &Segments,
    fp8: bool,
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
        shapes(&seg.padded, &|p| fp8_shapes(k, n, p))?
    } else {
        Vec::new()
    };
    Ok((plans, bf16, fp8))
}

/// BF16: fprop Y = X W^T (TN), dgrad dX = dY W (NN), wgrad dW = dY^T X (NT), column-major.
fn bf16_shapes(k: u64, n: u64, r: u64) -> [Shape; 3] {
    let sh = |m, nn, kk, ta, tb| Shape {
        m,
        n: nn,
        k: kk,
        ta,
        tb,
        dt: Dt::Bf16,
        scales: None,
    };
    [
        sh(n, r, k, true, false),
        sh(k, r, n, false, false),
        sh(k, n, r, false, true),
    ]
}

/// FP8 blockwise: every GEMM is TN (Hopper's FP8 layout); weights are 128x128-scaled, activations
/// and gradients 1x128, and wgrad contracts two 1x128 operands over the rows.
fn fp8_shapes(k: u64, n: u64, p: u64) -> [Shape; 3] {
    let sh = |m, nn, kk, a, b| Shape {
        m,
        n: nn,
        k: kk,
        ta: true,
        tb: false,
        dt: Dt::E4m3,
        scales: Some((a, b)),
    };
    [
        sh(n, p, k, ScaleMode::Blk128, ScaleMode::Vec128),
        sh(k, p, n, ScaleMode::Blk128, ScaleMode::Vec128),
        sh(k, n, p, ScaleMode::Vec128, ScaleMode::Vec128),
    ]
}
