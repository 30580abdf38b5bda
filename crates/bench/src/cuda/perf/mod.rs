//! Device microbenchmarks for docs/PERFORMANCE.md: copy bandwidth (here), GEMM-only throughput
//! on the anchor shapes (`gemm_rate`), and the quantization kernels' achieved bandwidth
//! (`casts`).

mod casts;
mod gemm_rate;

pub use casts::quant_bandwidth;
pub use gemm_rate::gemm_throughput;

use cudarc::driver::sys::CUevent_flags;
use serde::Serialize;

use super::Gpu;
use super::gemm::TuneInfo;
use crate::error::BenchError;

/// One measured figure.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// What was measured.
    pub name: String,
    /// Median time in ms.
    pub ms: f64,
    /// TFLOP/s for GEMMs, TB/s for memory-bound kernels.
    pub rate: f64,
    /// `TFLOP/s` or `TB/s`.
    pub unit: &'static str,
    /// Rate relative to the copy bandwidth (memory-bound kernels) or BF16 (FP8 GEMMs).
    pub relative: Option<f64>,
    /// How a GEMM's algorithm was found (candidates timed, the heuristic's time, the winner).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tuning: Option<String>,
    /// A target this figure is held to, and whether it was met in this run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Times `f` (`reps` runs after 3 warmups) with events; median ms.
pub(super) fn time_ms(
    gpu: &Gpu,
    reps: usize,
    f: impl FnMut() -> Result<(), BenchError>,
) -> Result<f64, BenchError> {
    time_on(&gpu.ctx, &gpu.stream, &gpu.k.spin, reps, f)
}

/// Each timed run is queued behind a spin kernel that outlasts the host's enqueueing of it
/// (measured in the warmups), so the events bracket GPU work only, as a profiler would see it.
pub(super) fn time_on(
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
    stream: &std::sync::Arc<cudarc::driver::CudaStream>,
    spin: &cudarc::driver::CudaFunction,
    reps: usize,
    mut f: impl FnMut() -> Result<(), BenchError>,
) -> Result<f64, BenchError> {
    let mut host = std::time::Duration::ZERO;
    for _ in 0..3 {
        let t = std::time::Instant::now();
        f()?;
        host = host.max(t.elapsed());
    }
    let spin_ns: u64 = (2 * host.as_nanos() as u64 + 50_000).min(20_000_000);
    let mut v = Vec::with_capacity(reps);
    let ev = || {
        ctx.new_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(BenchError::driver)
    };
    for _ in 0..reps {
        let (a, b) = (ev()?, ev()?);
        super::launch_spin(stream, spin, spin_ns)?;
        a.record(stream).map_err(BenchError::driver)?;
        f()?;
        b.record(stream).map_err(BenchError::driver)?;
        v.push(f64::from(a.elapsed_ms(&b).map_err(BenchError::driver)?));
    }
    Ok(median(v))
}

/// Copy bandwidth: a large device-to-device copy, bytes read + written over time (TB/s).
pub fn copy_bandwidth(gpu: &Gpu) -> Result<Figure, BenchError> {
    let bytes: u64 = 4 << 30;
    let (a, b) = (gpu.alloc(bytes)?, gpu.alloc(bytes)?);
    gpu.fill_normal(&a, bytes / 2, 1, 1.0)?;
    let ms = time_ms(gpu, 10, || {
        // SAFETY: both buffers are `bytes` long.
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(
                b.ptr(),
                a.ptr(),
                bytes as usize,
                gpu.stream.cu_stream(),
            )
        }
        .map_err(BenchError::driver)
    })?;
    Ok(Figure {
        name: "device-to-device copy 4 GiB".into(),
        ms,
        rate: 2.0 * bytes as f64 / ms / 1e9,
        unit: "TB/s",
        relative: None,
        tuning: None,
        target: None,
    })
}

/// How a GEMM's algorithm was found, in one line.
pub(super) fn describe_tuning(t: &TuneInfo) -> String {
    let diff = t.diff_vs_heuristic.map_or(String::new(), |d| {
        format!(", output diff vs heuristic {d:.1e}")
    });
    format!(
        "{} timed ({} configs checked); heuristic {:.4} ms, chosen {:.4} ms: {}{diff}",
        t.timed, t.checked, t.heuristic_ms, t.best_ms, t.best
    )
}

/// A memory-bound figure: `bytes` read + written in `ms`, relative to the copy bandwidth.
pub(super) fn bandwidth(name: String, ms: f64, bytes: f64, copy_tbs: f64) -> Figure {
    let tbs = bytes / ms / 1e9;
    Figure {
        name,
        ms,
        rate: tbs,
        unit: "TB/s",
        relative: Some(tbs / copy_tbs),
        tuning: None,
        target: None,
    }
}
