//! One sweep job: a model, a layout and the token counts, turned into bench points and the
//! report's provenance. Shared by `fp8sel bench` and `cargo xtask gen-policy`.

use fp8_engine::{ModelDesc, Parallel, Role, inventory};
use fp8_merge::report::{ParallelInfo, Provenance};

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

/// The layout for the given sizes, unset ones from the config (ETP defaults to TP, as in
/// Megatron). Sequence parallelism is on whenever TP > 1.
pub fn layout(model: &ModelDesc, tp: Option<u32>, ep: Option<u32>, etp: Option<u32>) -> Parallel {
    let rec = model
        .component(Role::Llm)
        .or(model.components.first())
        .map(|c| c.recommended.clone())
        .unwrap_or_default();
    let tp = tp.or(rec.tp).unwrap_or(1);
    Parallel {
        tp,
        ep: ep.or(rec.ep).unwrap_or(1),
        etp: etp.or(rec.etp).unwrap_or(tp),
        cp: rec.cp.unwrap_or(1),
        sequence_parallel: tp > 1,
    }
}

/// The configured run's token count of a component: `seq x mbs / cp`, or its
/// `fp8_dynamic_num_tokens`.
pub fn run_tokens(model: &ModelDesc, role: Role, job: &SweepJob) -> Option<u64> {
    let c = model.component(role)?;
    let llm = model
        .component(Role::Llm)
        .map(|l| l.recommended.clone())
        .unwrap_or_default();
    let seq = job
        .seq_length
        .or(c.recommended.seq_length)
        .or(llm.seq_length)?;
    let mbs = job
        .micro_batch_size
        .or(c.recommended.micro_batch_size)
        .or(llm.micro_batch_size)
        .unwrap_or(1);
    c.fp8
        .num_tokens
        .or(Some(seq * mbs / u64::from(job.parallel.cp.max(1))))
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
        out.extend(build_points(&modules, &tokens, topk, &job.splits));
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
        recipe: "blockwise".to_owned(),
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
