//! One sweep job: a model, a layout and the token counts, turned into bench points and the
//! report's provenance. Shared by `fp8sel bench` and `cargo xtask gen-policy`.

use fp8_engine::{ModelDesc, Parallel, Role, TokenOverrides, inventory};
use fp8_report::{ParallelInfo, Provenance};

use crate::cuda::MeasureOptions;
use crate::sweep::{BenchPoint, SplitMode, build_points, token_counts};

/// What to sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct SweepJob {
    /// Only this component (`None`: all).
    pub component: Option<Role>,
    /// The layout.
    pub parallel: Parallel,
    /// Explicit token counts; `None` for the default sweep.
    pub tokens: Option<Vec<u64>>,
    /// Largest count of the default sweep.
    pub max_tokens: u64,
    /// Default-sweep points per doubling of the token count (1: powers of two).
    pub per_doubling: u32,
    /// The configured run's sequence length (added to the default sweep).
    pub seq_length: Option<u64>,
    /// The configured run's micro-batch size.
    pub micro_batch_size: Option<u64>,
    /// Expert split modes.
    pub splits: Vec<SplitMode>,
    /// Only modules whose name contains this.
    pub modules: Option<String>,
}

/// The configured run's token count of a component (`seq x mbs / cp`, or its
/// `fp8_dynamic_num_tokens`), added to the default sweep.
pub fn run_tokens(model: &ModelDesc, role: Role, job: &SweepJob) -> Option<u64> {
    let given = TokenOverrides {
        seq_length: job.seq_length,
        micro_batch_size: job.micro_batch_size,
        num_tokens: None,
    };
    let t = model.token_config(role, &given, job.parallel.cp)?;
    t.dense_tokens().ok().map(|(n, _)| n)
}

/// Every point of the job.
pub fn points(model: &ModelDesc, job: &SweepJob) -> Result<Vec<BenchPoint>, String> {
    let mut out = Vec::new();
    for c in &model.components {
        if job.component.is_some_and(|r| r != c.role) {
            continue;
        }
        let tokens = match &job.tokens {
            Some(t) => t.clone(),
            None => token_counts(
                job.max_tokens,
                run_tokens(model, c.role, job),
                job.per_doubling,
            ),
        };
        let mut modules = inventory(c, job.parallel).map_err(|e| e.to_string())?;
        if let Some(f) = &job.modules {
            modules.retain(|m| m.name.contains(f.as_str()));
        }
        let topk = c.arch.moe.map_or(1, |m| m.router_topk);
        out.extend(
            build_points(&modules, &tokens, topk, &job.splits)
                .map_err(|e| format!("{}: {e}", c.role))?,
        );
    }
    Ok(out)
}

/// The report provenance of a job (device and timing are filled in by the backend).
pub fn provenance(
    model: &ModelDesc,
    config: &str,
    job: &SweepJob,
    opt: &MeasureOptions,
    scale_mode: &str,
) -> Provenance {
    let p = job.parallel;
    Provenance {
        tool_version: env!("CARGO_PKG_VERSION").to_owned(),
        recipe: opt.recipe.label(),
        scale_mode: scale_mode.to_owned(),
        fp8_param: opt.fp8_param,
        fp8_pad: opt.pad as u32,
        warmup: opt.warmup,
        iters: opt.iters,
        model: model.name.clone(),
        model_config: config.to_owned(),
        parallel: ParallelInfo {
            tp: p.tp,
            ep: p.ep,
            etp: p.etp,
            cp: p.cp,
        },
        expert_split: job
            .splits
            .iter()
            .map(SplitMode::name)
            .collect::<Vec<_>>()
            .join(","),
        ..Provenance::default()
    }
}
