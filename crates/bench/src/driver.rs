//! The sweep driver shared by `fp8sel bench` and `cargo xtask gen-policy`: which points to
//! measure (all of them, or this rank's share under torchrun/Slurm), what `--resume` keeps, one
//! worker per device, and the report that comes out.
//!
//! It prints nothing: progress goes through [`Progress`], so the CLI can draw a bar and tests can
//! stay quiet.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use fp8_report::{Point, PointId, Provenance, Report, ReportError, Status};

use crate::cuda::MeasureOptions;
use crate::runner::{Backend, BackendInfo, run_parallel};
use crate::shard::{RankEnv, assign, loads, rank_share};
use crate::sweep::BenchPoint;

/// Opens the backend of one device (called inside that device's worker thread).
pub type MakeBackend<'a> = dyn Fn(usize) -> Result<Box<dyn Backend>, String> + Sync + 'a;

/// What measures the points.
pub enum Workers<'a> {
    /// One backend, already open (the xtask keeps one open across layouts).
    One(&'a mut dyn Backend),
    /// One worker per device, each opening its own backend with `make`.
    Devices {
        /// Opens a device's backend.
        make: &'a MakeBackend<'a>,
        /// The device ordinals.
        devices: &'a [usize],
    },
}

/// Progress of a sweep. Every method has a do-nothing default.
pub trait Progress: Sync {
    /// Measuring starts: `todo` points remain after `--resume`.
    fn start(&self, _todo: usize) {}
    /// One point is done.
    fn point(&self, _point: &BenchPoint, _result: &Point) {}
    /// Something worth telling the user.
    fn note(&self, _message: &str) {}
}

/// Progress that shows nothing.
pub struct Silent;

impl Progress for Silent {}

/// One sweep to run.
pub struct Sweep<'a> {
    /// Every point of the sweep (a rank measures its share of them).
    pub points: &'a [BenchPoint],
    /// How to measure.
    pub opt: &'a MeasureOptions,
    /// The report's provenance; device and timing are filled in from the backend.
    pub provenance: Provenance,
    /// This process's rank under torchrun/Slurm; `None` measures every point.
    pub rank: Option<RankEnv>,
    /// `--resume`: keep the points this earlier report measured (ok or failed).
    pub resume_from: Option<&'a Path>,
}

/// Why a sweep could not run.
#[derive(Debug)]
#[non_exhaustive]
pub enum DriverError {
    /// The report to resume from is unreadable or of another sweep.
    Resume(ReportError),
    /// The report to resume from belongs to another model.
    ResumeOtherModel {
        /// The report.
        file: PathBuf,
        /// Its model.
        found: String,
        /// This sweep's model.
        expected: String,
    },
    /// No device could be opened.
    NoDevice(String),
}

impl fmt::Display for DriverError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DriverError::Resume(e) => write!(f, "--resume: {e}"),
            DriverError::ResumeOtherModel {
                file,
                found,
                expected,
            } => write!(
                f,
                "--resume: {} is a report of model `{found}`, not `{expected}`; fix: resume from \
                 this sweep's own report, or drop --resume",
                file.display()
            ),
            DriverError::NoDevice(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for DriverError {}

/// Runs a sweep and returns its report (not written: the caller chooses the path).
pub fn run(
    sweep: Sweep<'_>,
    workers: Workers<'_>,
    progress: &dyn Progress,
) -> Result<Report, DriverError> {
    let points = sweep.points;
    let (indices, shard) = match &sweep.rank {
        Some(r) => {
            let (mine, shard) = rank_share(points, r);
            (mine, Some(shard))
        }
        None => ((0..points.len()).collect::<Vec<_>>(), None),
    };
    let (mut kept, old_device) = match sweep.resume_from.filter(|p| p.exists()) {
        Some(path) => resumable(path, &sweep.provenance.model, progress)?,
        None => (HashMap::new(), None),
    };
    let todo: Vec<usize> = indices
        .iter()
        .copied()
        .filter(|&i| !kept.contains_key(&points[i].id()))
        .collect();
    progress.start(todo.len());
    let sub: Vec<BenchPoint> = todo.iter().map(|&i| points[i].clone()).collect();
    let several = match &workers {
        Workers::Devices { devices, .. } if devices.len() > 1 => devices.to_vec(),
        _ => Vec::new(),
    };
    let (measured, info) = match workers {
        Workers::One(backend) => (
            measure_all(backend, &sub, sweep.opt, progress),
            Some(info_of(backend)),
        ),
        Workers::Devices { make, devices } if devices.len() == 1 => {
            // One device: open it here so that a missing GPU is an error, not a report of skips.
            let mut backend = make(devices[0]).map_err(DriverError::NoDevice)?;
            let info = info_of(backend.as_mut());
            (
                measure_all(backend.as_mut(), &sub, sweep.opt, progress),
                Some(info),
            )
        }
        Workers::Devices { make, devices } => {
            let shards = assign(&sub, devices.len());
            let estimate: Vec<String> = loads(&sub, &shards)
                .iter()
                .map(|l| format!("{l:.0}"))
                .collect();
            progress.note(&format!(
                "{} devices, estimated shard loads (ms): {}",
                devices.len(),
                estimate.join(", ")
            ));
            let on_point = |p: &BenchPoint, r: &Point| progress.point(p, r);
            run_parallel(make, devices, &sub, &shards, sweep.opt, &on_point)
        }
    };
    let mut provenance = sweep.provenance;
    let estimated = match info {
        Some(i) => {
            provenance.device = i.device;
            provenance.timing = i.timing.to_owned();
            provenance.te_version = i.te_version;
            i.estimated
        }
        None if kept.is_empty() => {
            return Err(DriverError::NoDevice(
                "no device could be opened: every point is missing".into(),
            ));
        }
        None => {
            if let Some((device, timing, _)) = &old_device {
                provenance.device = device.clone();
                provenance.timing.clone_from(timing);
            }
            old_device.as_ref().is_some_and(|d| d.2)
        }
    };
    provenance.shard = shard;
    provenance.devices = several;
    let mut report = Report::new(provenance, estimated);
    let mut fresh: HashMap<usize, Point> =
        measured.into_iter().map(|(i, p)| (todo[i], p)).collect();
    for &i in &indices {
        if let Some(p) = fresh.remove(&i).or_else(|| kept.remove(&points[i].id())) {
            report.points.push(p);
        }
    }
    Ok(report)
}

type Kept = (
    HashMap<PointId, Point>,
    Option<(fp8_report::DeviceInfo, String, bool)>,
);

/// The points of an earlier report worth keeping: every one that was measured or failed its
/// check; skipped ones (a device that failed) are measured again.
fn resumable(path: &Path, model: &str, progress: &dyn Progress) -> Result<Kept, DriverError> {
    let old = fp8_report::read(path).map_err(DriverError::Resume)?;
    if old.provenance.model != model {
        return Err(DriverError::ResumeOtherModel {
            file: path.to_path_buf(),
            found: old.provenance.model,
            expected: model.to_owned(),
        });
    }
    let kept: HashMap<PointId, Point> = old
        .points
        .into_iter()
        .filter(|p| p.status != Status::Skipped)
        .map(|p| (p.id(), p))
        .collect();
    progress.note(&format!(
        "--resume: {} point(s) already measured in {}",
        kept.len(),
        path.display()
    ));
    let device = (old.provenance.device, old.provenance.timing, old.estimated);
    Ok((kept, Some(device)))
}

fn info_of(b: &mut dyn Backend) -> BackendInfo {
    BackendInfo {
        device: b.device(),
        timing: b.timing(),
        estimated: b.estimated(),
        te_version: b.te_version(),
    }
}

fn measure_all(
    backend: &mut dyn Backend,
    points: &[BenchPoint],
    opt: &MeasureOptions,
    progress: &dyn Progress,
) -> Vec<(usize, Point)> {
    points
        .iter()
        .enumerate()
        .map(|(i, bp)| {
            let p = backend.measure(bp, opt);
            progress.point(bp, &p);
            (i, p)
        })
        .collect()
}
