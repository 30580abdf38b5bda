//! What every step and check of one point shares: the point's buffers and plans ([`Ctx`]), the
//! phase boundaries a step records ([`Phase`], [`Marks`]), and the two interfaces a precision
//! implements ([`Step`], and [`Fp8Recipe`] for the FP8 recipes).
//!
//! Architecture invariant: nothing here knows a recipe. The recipe's own state (per-tensor
//! scales, MXFP8 scales) lives in the value that implements [`Fp8Recipe`], chosen once by
//! `measure::run`.

use std::collections::HashMap;

use cudarc::driver::CudaEvent;
use fp8_report::Point;

use super::super::Gpu;
use super::super::gemm::{Plan, Shape};
use super::MeasureOptions;
use super::buffers::{Dims, Fp8Outs, Outs, Set};
use crate::error::BenchError;
use crate::layout::Segments;

/// The GEMM shapes of each expert: (fprop, dgrad, wgrad); `None` for an expert with no rows.
pub(super) type ExpertShapes = [Option<(Shape, Shape, Shape)>];

pub(super) struct Ctx<'a> {
    pub(super) d: &'a Dims,
    pub(super) seg: &'a Segments,
    pub(super) opt: &'a MeasureOptions,
    pub(super) outs: &'a Outs,
    pub(super) fp8: Option<&'a Fp8Outs>,
    pub(super) plans: &'a HashMap<Shape, Plan>,
    pub(super) bf16_shapes: &'a ExpertShapes,
    pub(super) fp8_shapes: &'a ExpertShapes,
}

impl Ctx<'_> {
    /// The FP8 outputs; an internal error when the point allocated none.
    pub(super) fn fp8_outs(&self) -> Result<&Fp8Outs, BenchError> {
        self.fp8
            .ok_or_else(|| BenchError::Internal("fp8 buffers missing".into()))
    }
}

/// The boundaries a step records, in the order it reaches them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Before anything of the step.
    Start,
    /// After the forward casts (FP8; right after `Start` in BF16).
    ForwardCasts,
    /// After the forward GEMM.
    Forward,
    /// After the backward casts.
    BackwardCasts,
    /// After the dgrad and wgrad GEMMs: the end of the step.
    Backward,
}

impl Phase {
    /// Boundaries per step.
    pub(super) const COUNT: usize = 5;

    /// Index into one step's events.
    pub(super) const fn index(self) -> usize {
        self as usize
    }
}

/// Where a step records its phase boundaries.
pub(super) trait Marks {
    /// Records the boundary `at`.
    fn mark(&mut self, gpu: &Gpu, at: Phase) -> Result<(), BenchError>;
}

/// Records nothing (warmups and checks).
pub(super) struct NoMarks;

impl Marks for NoMarks {
    fn mark(&mut self, _: &Gpu, _: Phase) -> Result<(), BenchError> {
        Ok(())
    }
}

/// Records CUDA events, one per [`Phase`].
pub(super) struct EventMarks<'a>(pub(super) &'a [CudaEvent]);

impl Marks for EventMarks<'_> {
    fn mark(&mut self, gpu: &Gpu, at: Phase) -> Result<(), BenchError> {
        self.0[at.index()]
            .record(&gpu.stream)
            .map_err(BenchError::driver)
    }
}

/// One training step of a module in one precision: the casts and the three GEMMs of forward
/// and backward, recording each [`Phase`]. Returns the kernel launches it made.
pub(super) trait Step {
    fn step(
        &self,
        gpu: &mut Gpu,
        ctx: &Ctx<'_>,
        set: &Set,
        marks: &mut dyn Marks,
    ) -> Result<u32, BenchError>;
}

/// An FP8 recipe: its step, and the checks one step must pass before it is timed.
pub(super) trait Fp8Recipe: Step {
    /// One step on poisoned outputs, then the recipe's checks; the errors go into `point`.
    fn verify(
        &self,
        gpu: &mut Gpu,
        ctx: &Ctx<'_>,
        set: &Set,
        point: &mut Point,
    ) -> Result<(), BenchError>;
}
