//! A sweep: every point through a backend, into one report.

use fp8_merge::report::{DeviceInfo, Point, Provenance, Report, Status};

use crate::cuda::MeasureOptions;
use crate::sweep::BenchPoint;

/// Something that can measure a point: the GPU, or the cost model.
pub trait Backend {
    /// The device (or profile) for the report.
    fn device(&self) -> DeviceInfo;
    /// `gpu` or `model`.
    fn timing(&self) -> &'static str;
    /// Whether results are estimates.
    fn estimated(&self) -> bool;
    /// Measures one point; failures are reported in the point, never as a panic.
    fn measure(&mut self, point: &BenchPoint, opt: &MeasureOptions) -> Point;
}

/// Runs every point and returns the report. `progress` is called after each point.
pub fn run_sweep(
    backend: &mut dyn Backend,
    points: &[BenchPoint],
    opt: &MeasureOptions,
    mut provenance: Provenance,
    progress: &mut dyn FnMut(usize, &BenchPoint, &Point),
) -> Report {
    provenance.device = backend.device();
    provenance.timing = backend.timing().to_owned();
    let mut report = Report::new(provenance, backend.estimated());
    for (i, p) in points.iter().enumerate() {
        let point = backend.measure(p, opt);
        progress(i, p, &point);
        report.points.push(point);
    }
    report
}

/// Counts of ok / failed / skipped points.
pub fn status_counts(r: &Report) -> (usize, usize, usize) {
    let c = |s: Status| r.points.iter().filter(|p| p.status == s).count();
    (c(Status::Ok), c(Status::Failed), c(Status::Skipped))
}

/// The CUDA backend.
pub struct CudaBackend(pub crate::cuda::Gpu);

impl Backend for CudaBackend {
    fn device(&self) -> DeviceInfo {
        self.0.info.clone()
    }
    fn timing(&self) -> &'static str {
        "gpu"
    }
    fn estimated(&self) -> bool {
        false
    }
    fn measure(&mut self, point: &BenchPoint, opt: &MeasureOptions) -> Point {
        crate::cuda::measure_point(&mut self.0, point, opt)
    }
}
