//! Timing a step: warmups, then timed steps queued behind a spin kernel, phases from CUDA
//! events.

use cudarc::driver::{CudaEvent, sys::CUevent_flags};
use fp8_report::{Stat, Timing};

use super::super::Gpu;
use crate::error::BenchError;

use super::buffers::Set;
use super::ctx::{Ctx, EventMarks, NoMarks, Phase, Step};

/// Times `step`: the warmups, then the timed steps, rotating over `rot`; the phases from the
/// events each step records.
pub(super) fn time(
    gpu: &mut Gpu,
    ctx: &Ctx<'_>,
    rot: &[Set],
    step: &dyn Step,
) -> Result<Timing, BenchError> {
    let opt = ctx.opt;
    let mut launches = 0;
    let mut host = std::time::Duration::ZERO;
    for i in 0..opt.warmup as usize {
        let t = std::time::Instant::now();
        launches = step.step(gpu, ctx, &rot[i % rot.len()], &mut NoMarks)?;
        host = host.max(t.elapsed());
    }
    let iters = opt.iters.max(1) as usize;
    // The timed steps are queued behind a spin kernel that outlasts their enqueueing, so that
    // on small points the events measure the GPU, not how fast this process launches kernels.
    let spin_ns = (host.as_nanos() as u64)
        .saturating_mul(iters as u64 * 5 / 4)
        .saturating_add(20_000)
        .min(50_000_000);
    gpu.spin(spin_ns)?;
    let events: Vec<CudaEvent> = (0..Phase::COUNT * iters)
        .map(|_| {
            gpu.ctx
                .new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
                .map_err(BenchError::driver)
        })
        .collect::<Result<_, _>>()?;
    for i in 0..iters {
        launches = step.step(
            gpu,
            ctx,
            &rot[i % rot.len()],
            &mut EventMarks(&events[Phase::COUNT * i..Phase::COUNT * (i + 1)]),
        )?;
    }
    gpu.sync()?;
    let mut fwd = Vec::new();
    let mut bwd = Vec::new();
    let mut total = Vec::new();
    let mut cast = Vec::new();
    for i in 0..iters {
        let e = &events[Phase::COUNT * i..Phase::COUNT * (i + 1)];
        let el = |a: Phase, b: Phase| {
            e[a.index()]
                .elapsed_ms(&e[b.index()])
                .map(f64::from)
                .map_err(BenchError::driver)
        };
        fwd.push(el(Phase::Start, Phase::Forward)?);
        bwd.push(el(Phase::Forward, Phase::Backward)?);
        total.push(el(Phase::Start, Phase::Backward)?);
        cast.push(
            el(Phase::Start, Phase::ForwardCasts)? + el(Phase::Forward, Phase::BackwardCasts)?,
        );
    }
    let st = |v: &[f64]| Stat::of(v).unwrap_or_default();
    Ok(Timing {
        fwd_ms: st(&fwd),
        bwd_ms: st(&bwd),
        total_ms: st(&total),
        cast_ms: st(&cast),
        launches,
        gpu_total_ms: None,
    })
}
