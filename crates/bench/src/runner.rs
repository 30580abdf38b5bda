//! Backends (the GPU, the cost model) and running shards of a sweep on several devices.

use fp8_report::{DeviceInfo, Point, Status};

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
    /// The Transformer Engine version, for backends that measure through TE.
    fn te_version(&self) -> Option<String> {
        None
    }
}

/// What a backend says about itself, for the report.
#[derive(Debug, Clone, PartialEq)]
pub struct BackendInfo {
    /// The device (or profile).
    pub device: DeviceInfo,
    /// `gpu` or `model`.
    pub timing: &'static str,
    /// Whether results are estimates.
    pub estimated: bool,
    /// The TE version, for the TE backend.
    pub te_version: Option<String>,
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

/// Runs shards of `points` on several devices at once, one worker thread per device, each with
/// its own backend (CUDA context and stream) made by `make` inside the thread. A device that
/// fails to open, or whose worker dies, reports its points as skipped with the reason: they are
/// never silently dropped. Returns every assigned point index with its result, and what the
/// first backend that opened says about itself.
pub fn run_parallel(
    make: &(dyn Fn(usize) -> Result<Box<dyn Backend>, String> + Sync),
    devices: &[usize],
    points: &[BenchPoint],
    shards: &[Vec<usize>],
    opt: &MeasureOptions,
    progress: &(dyn Fn(&BenchPoint, &Point) + Sync),
) -> (Vec<(usize, Point)>, Option<BackendInfo>) {
    let results = std::thread::scope(|scope| {
        let handles: Vec<_> = devices
            .iter()
            .zip(shards)
            .map(|(&dev, shard)| {
                let h = scope.spawn(
                    move || -> Result<(Vec<(usize, Point)>, BackendInfo), String> {
                        let mut backend = make(dev)?;
                        let info = BackendInfo {
                            device: backend.device(),
                            timing: backend.timing(),
                            estimated: backend.estimated(),
                            te_version: backend.te_version(),
                        };
                        let mut out = Vec::with_capacity(shard.len());
                        for &i in shard {
                            let p = backend.measure(&points[i], opt);
                            progress(&points[i], &p);
                            out.push((i, p));
                        }
                        Ok((out, info))
                    },
                );
                (dev, shard, h)
            })
            .collect();
        handles
            .into_iter()
            .map(|(dev, shard, h)| (dev, shard, h.join()))
            .collect::<Vec<_>>()
    });
    let mut all = Vec::new();
    let mut info = None;
    for (dev, shard, r) in results {
        let failure = match r {
            Ok(Ok((pts, i))) => {
                info.get_or_insert(i);
                all.extend(pts);
                continue;
            }
            Ok(Err(e)) => format!("device {dev} failed: {e}"),
            Err(_) => format!("device {dev} failed: its worker panicked"),
        };
        for &i in shard {
            let mut p = points[i].report_point(opt.pad);
            p.status = Status::Skipped;
            p.reason = Some(format!("{failure}; re-run with --resume to measure it"));
            all.push((i, p));
        }
    }
    all.sort_by_key(|(i, _)| *i);
    (all, info)
}
