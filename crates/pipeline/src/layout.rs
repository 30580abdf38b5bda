//! One layout's sweep into one report: the job `fp8sel bench` runs (`generate::measure` runs
//! several for gen-policy, reusing shapes across them).

use std::fmt;
use std::path::Path;

use fp8_bench::cuda::MeasureOptions;
use fp8_bench::driver::{self, DriverError, Progress, Workers};
use fp8_bench::job::{SweepJob, points, provenance};
use fp8_bench::shard::RankEnv;
use fp8_bench::sweep::BenchPoint;
use fp8_engine::ModelDesc;
use fp8_report::Report;

/// What one layout's sweep measures, and how.
pub struct LayoutJob<'a> {
    /// The model.
    pub model: &'a ModelDesc,
    /// The config as the report names it.
    pub config: &'a str,
    /// The layout, tokens, splits and module filter.
    pub job: &'a SweepJob,
    /// How to measure.
    pub opt: &'a MeasureOptions,
    /// Scale rounding, as the report records it (`pow2` or `fp32`).
    pub scales: &'a str,
    /// The forward runs again in the backward (the TE backend's recompute mode).
    pub recompute: bool,
    /// This process's rank under a launcher; `None` measures every point.
    pub rank: Option<RankEnv>,
    /// A report of this sweep to resume.
    pub resume_from: Option<&'a Path>,
}

/// Why a layout has nothing to measure, or its sweep failed.
#[derive(Debug)]
#[non_exhaustive]
pub enum LayoutError {
    /// The job's points could not be made (the engine's words).
    Points(String),
    /// No module is left after the component and module filters.
    NoPoints,
    /// The sweep itself.
    Driver(DriverError),
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutError::Points(m) => f.write_str(m),
            LayoutError::NoPoints => {
                f.write_str("nothing to measure: no module matched the filters")
            }
            LayoutError::Driver(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for LayoutError {}

/// Every point of the job; refuses a job with none.
pub fn layout_points(model: &ModelDesc, job: &SweepJob) -> Result<Vec<BenchPoint>, LayoutError> {
    let pts = points(model, job).map_err(LayoutError::Points)?;
    if pts.is_empty() {
        return Err(LayoutError::NoPoints);
    }
    Ok(pts)
}

/// Measures `points` (from [`layout_points`]) with the workers into one report.
pub fn bench_layout(
    j: &LayoutJob<'_>,
    points: &[BenchPoint],
    workers: Workers<'_>,
    progress: &dyn Progress,
) -> Result<Report, LayoutError> {
    let mut prov = provenance(j.model, j.config, j.job, j.opt, j.scales);
    prov.recompute = j.recompute;
    driver::run(
        driver::Sweep {
            points,
            opt: j.opt,
            provenance: prov,
            rank: j.rank,
            resume_from: j.resume_from,
        },
        workers,
        progress,
    )
    .map_err(LayoutError::Driver)
}

#[cfg(test)]
mod tests {
    use fp8_bench::sweep::SplitMode;

    use super::*;

    fn job(modules: Option<&str>) -> SweepJob {
        SweepJob {
            component: None,
            parallel: fp8_engine::Parallel::new(1, 1, 1, 1),
            tokens: Some(vec![1024]),
            max_tokens: 1024,
            per_doubling: 1,
            seq_length: None,
            micro_batch_size: None,
            splits: vec![SplitMode::Uniform],
            modules: modules.map(str::to_owned),
        }
    }

    #[test]
    fn a_job_whose_filter_matches_nothing_is_refused_in_the_librarys_words() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let model = fp8_engine::load_model(root.join("fixtures/models/llama3_2_1b.yaml")).unwrap();
        let pts = layout_points(&model, &job(Some("linear_fc1"))).unwrap();
        assert!(!pts.is_empty() && pts.iter().all(|p| p.spec.name.contains("linear_fc1")));
        let err = layout_points(&model, &job(Some("no_such_module"))).unwrap_err();
        assert!(matches!(err, LayoutError::NoPoints));
        assert!(!err.to_string().contains("--"), "{err}");
    }
}
