//! What the step worker runs for one layout, and its command line.

use std::path::Path;
use std::time::Duration;

use fp8_engine::ModelDesc;
use fp8_policy::Execution;

use crate::generate::GenOptions;
pub use crate::module_mix::RecipeMix;

/// How `--backend step` turns the step into thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StepTuner {
    /// The step model (`fp8_merge::model`): module groups measured alone, calibrated on a few
    /// real steps, its choice checked in the step.
    #[default]
    Model,
    /// The greedy per-group oracle of `step_bench`, by trying (slow and noisy: a judge).
    Oracle,
}

/// What the step worker runs.
#[derive(Debug, Clone, PartialEq)]
pub struct StepJob {
    /// The model or the oracle.
    pub tuner: StepTuner,
    /// Token counts to sweep (sequence length at micro-batch 1).
    pub tokens: Vec<u64>,
    /// Executions to sweep.
    pub executions: Vec<Execution>,
    /// Micro-batches per optimizer step.
    pub grad_accum: u32,
    /// `te` (the toolkit's TE blocks) or `megatron` (upstream GPTModel, its oracle's candidates
    /// each a model build; graphed in Megatron's own CUDA graphs).
    pub trainer: String,
    /// Transformer layers per step.
    pub layers: u32,
    /// Of `layers`, how many have a dense MLP (an MoE model with dense layers, DeepSeek-V3);
    /// `None`: the worker's default. [`gen_policy_step`] sets it per model
    /// ([`dense_layers_for`]).
    pub dense_layers: Option<u32>,
    /// Rounds of refinement: each times the midpoints `fp8_merge::refine` asks for, so a
    /// threshold can land between the sweep's counts; 0 is the sweep alone.
    pub refine: u32,
    /// The whole run's wall-clock bound: at it the worker is stopped and the policy is written
    /// from the counts it finished (each one saved as it ends); refinements and layouts not
    /// begun by then are skipped, with a note. `None`: unbounded.
    pub time_limit: Option<Duration>,
    /// With the step model: choose each module's recipe among the measured recipe (the base)
    /// and these ([`RecipeMix`]); `None`: the measured recipe alone.
    pub mix: Option<RecipeMix>,
    /// Python's garbage collector off while steps are timed (the workers' `--manual-gc`, as
    /// Megatron-LM's flag): for a trainer that runs so.
    pub manual_gc: bool,
    /// A VLM's vision encoder: tokens of one image (its attention runs within each image, the
    /// workers' `--image-tokens`); not read for a language model.
    pub image_tokens: u32,
    /// The step model's check times the smallest calibrated count again
    /// (`fp8_merge::model::timed_in_inputs`): the step's own repeatability where it is most
    /// host-bound, recorded beside the model's error.
    pub anchor: bool,
    /// A layout's inputs an earlier run left (`<layout>_inputs_step.json`, measured as this job
    /// asks) are reused and only its check runs (`--resume`).
    pub resume: bool,
}

/// Tokens of one image by default: a 512 x 512 image at patch 16 (the workers' default too).
pub const IMAGE_TOKENS: u32 = 1024;

/// The worker's command line for one layout, writing `json`: its oracle search, or with
/// `judge` the judge of that policy (no oracle).
pub(super) fn command(
    o: &GenOptions,
    job: &StepJob,
    config: &Path,
    p: fp8_engine::Parallel,
    json: &Path,
    judge: Option<&Path>,
) -> Vec<String> {
    // The Megatron judge at TP > 1 is one process per TP rank (its world is the TP group);
    // the TE blocks time one rank's GEMMs in one process.
    let mut a = if job.trainer == "megatron" && p.tp > 1 {
        vec![
            "-m".to_owned(),
            "torch.distributed.run".to_owned(),
            "--standalone".to_owned(),
            format!("--nproc-per-node={}", p.tp),
        ]
    } else {
        Vec::new()
    };
    a.extend(layout_args(
        "adaptive_fp8.bench.step_bench",
        o,
        job,
        config,
        p,
    ));
    a.extend(["--trainer".to_owned(), job.trainer.clone()]);
    a.extend(layer_args(job));
    match judge {
        // The oracle is what the thresholds come from; the Megatron judge skips it by default.
        None => a.extend(["--oracle".to_owned(), "greedy".to_owned()]),
        Some(policy) => a.extend([
            "--oracle".to_owned(),
            "none".to_owned(),
            "--policy".to_owned(),
            policy.display().to_string(),
        ]),
    }
    a.extend(recipe_args(o.measure.recipe));
    a.extend(["--json".to_owned(), json.display().to_string()]);
    if let Some(r) = &o.config_root {
        a.extend(["--config-root".to_owned(), r.display().to_string()]);
    }
    a
}

/// The most processes a layout's Megatron judge runs (its TP), where that is more than one:
/// each rank takes a GPU. `None` for the TE blocks, or at TP 1.
pub(super) fn megatron_ranks(job: &StepJob, layouts: &[fp8_engine::Parallel]) -> Option<u32> {
    (job.trainer == "megatron")
        .then(|| layouts.iter().map(|p| p.tp).max())
        .flatten()
        .filter(|&tp| tp > 1)
}

pub(super) fn gpus_error(tp: u32, have: usize) -> String {
    format!(
        "--step-trainer megatron runs each layout over TP processes, one GPU each; TP {tp} needs \
         {tp} GPUs and this machine has {have}; fix: --tp with the sizes its GPUs allow (--tp 1 \
         on one GPU), or run on a node with {tp} GPUs"
    )
}

/// The dense layers a step of `layers` builds for `model`: one, where its language model has
/// both dense-MLP and MoE layers and the step has room for both, so the oracle measures the
/// dense keys too (the workers' default follows the model's share: a 2-layer step of
/// DeepSeek-V3, 3 dense of 61 layers, would build no dense layer and leave its dense `fc1` and
/// `fc2` keys unmeasured); else the worker's default.
pub fn dense_layers_for(model: &ModelDesc, layers: u32) -> Option<u32> {
    let arch = &model.components.first()?.arch;
    let moe = arch.moe?;
    (moe.dense_layers > 0 && moe.dense_layers < arch.num_layers && layers >= 2).then_some(1)
}

/// Why the step's workers cannot build `model`'s language model, or `None`: their layer types are
/// attention (MHA, GQA or MLA) and a dense or MoE MLP (`adaptive_fp8.bench.step_spec`), so a
/// model with Gated DeltaNet or gated attention (Qwen3-Next, Qwen3.5) is timed per module.
pub fn step_cannot_build(model: &ModelDesc) -> Option<&'static str> {
    let llm = model
        .components
        .iter()
        .find(|c| c.role == fp8_engine::Role::Llm)?;
    let arch = &llm.arch;
    if arch.linear_attention.is_some() {
        Some("Gated DeltaNet linear attention")
    } else if arch.attention_output_gate {
        Some("gated attention (an output gate on the QKV projection)")
    } else {
        None
    }
}

/// `-m <module>` and the layout, counts, executions and micro-batches both workers take, and
/// `--component vit` where `o` asks for a VLM's vision encoder (its layers, image tokens).
fn layout_args(
    module: &str,
    o: &GenOptions,
    job: &StepJob,
    config: &Path,
    p: fp8_engine::Parallel,
) -> Vec<String> {
    vec![
        "-m".to_owned(),
        module.to_owned(),
        "--model".to_owned(),
        config.display().to_string(),
        "--tp".to_owned(),
        p.tp.to_string(),
        "--ep".to_owned(),
        p.ep.to_string(),
        "--etp".to_owned(),
        p.etp.to_string(),
        "--tokens".to_owned(),
        list_counts(&job.tokens),
        "--execution".to_owned(),
        job.executions
            .iter()
            .map(|e| e.name())
            .collect::<Vec<_>>()
            .join(","),
        "--grad-accum".to_owned(),
        job.grad_accum.to_string(),
    ]
    .into_iter()
    .chain(job.manual_gc.then(|| "--manual-gc".to_owned()))
    .chain(
        o.vision_encoder()
            .then(|| {
                [
                    "--component".to_owned(),
                    "vit".to_owned(),
                    "--image-tokens".to_owned(),
                    job.image_tokens.to_string(),
                ]
            })
            .into_iter()
            .flatten(),
    )
    .collect()
}

/// `--layers` and, where set, `--dense-layers`.
fn layer_args(job: &StepJob) -> Vec<String> {
    let mut a = vec!["--layers".to_owned(), job.layers.to_string()];
    if let Some(d) = job.dense_layers {
        a.extend(["--dense-layers".to_owned(), d.to_string()]);
    }
    a
}

/// The step model's worker for one layout: its measurements, writing `json` (served: the checks
/// are asked on its stdin, `super::serve`).
pub(super) fn inputs_command(
    o: &GenOptions,
    job: &StepJob,
    config: &Path,
    p: fp8_engine::Parallel,
    json: &Path,
) -> Vec<String> {
    let mut a = inputs_args(o, job, config, p);
    a.extend(["--json".to_owned(), json.display().to_string()]);
    a
}

/// The recipe as the workers take it, every option spelled out (their defaults are TE's, which
/// need not be the run's): `--recipe`, `--fp8-format`, and delayed scaling's amax options.
fn recipe_args(r: fp8_bench::recipe::RecipeOptions) -> Vec<String> {
    let mut a = vec![
        "--recipe".to_owned(),
        r.recipe().name().to_owned(),
        "--fp8-format".to_owned(),
        r.format().name().to_owned(),
    ];
    if r.recipe() == fp8_policy::Recipe::Delayed {
        a.extend([
            "--amax-history-len".to_owned(),
            r.history_len().to_string(),
            "--amax-compute-algo".to_owned(),
            r.algo().name().to_owned(),
        ]);
    }
    a
}

/// [`inputs_command`] without its `--json`: what a resumed layout's first check runs with.
pub(super) fn inputs_args(
    o: &GenOptions,
    job: &StepJob,
    config: &Path,
    p: fp8_engine::Parallel,
) -> Vec<String> {
    let mut a = layout_args("adaptive_fp8.bench.step_inputs", o, job, config, p);
    a.extend(layer_args(job));
    a.extend(recipe_args(o.measure.recipe));
    if let Some(r) = &o.config_root {
        a.extend(["--config-root".to_owned(), r.display().to_string()]);
    }
    a
}

pub(super) fn list_counts(tokens: &[u64]) -> String {
    tokens
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Options of the step path for tests: one model, `m.yaml`.
#[cfg(test)]
pub(super) fn test_options() -> GenOptions {
    GenOptions {
        models: vec![std::path::PathBuf::from("m.yaml")],
        config_root: Some(std::path::PathBuf::from("configs")),
        tp: None,
        ep: None,
        etp: None,
        merge: fp8_merge::MergeOptions::default(),
        backend: "step".into(),
        python: "python3".into(),
        recompute: false,
        device_profile: "h200".into(),
        probe_host: true,
        measure: fp8_bench::cuda::MeasureOptions::default(),
        policies_dir: std::path::PathBuf::from("policies"),
        reports_base: std::path::PathBuf::from("reports"),
        out: None,
        recipes: None,
        component: None,
    }
}

/// A job for tests: two counts, both executions, the oracle.
#[cfg(test)]
pub(super) fn test_job() -> StepJob {
    StepJob {
        tuner: StepTuner::Oracle,
        tokens: vec![1024, 4096],
        executions: vec![Execution::Eager, Execution::Graphed],
        grad_accum: 8,
        trainer: "te".into(),
        layers: 2,
        dense_layers: None,
        refine: 1,
        time_limit: None,
        mix: None,
        manual_gc: false,
        image_tokens: IMAGE_TOKENS,
        anchor: false,
        resume: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_gets_the_layout_the_sweep_and_the_recipe() {
        let o = test_options();
        let job = test_job();
        // One layout's command line, as one string.
        let line = |job: &StepJob, p| {
            command(&o, job, Path::new("m.yaml"), p, Path::new("r.json"), None).join(" ")
        };
        let a = line(&job, fp8_engine::Parallel::new(2, 8, 1, 1));
        assert_eq!(
            a,
            "-m adaptive_fp8.bench.step_bench --model m.yaml --tp 2 --ep 8 --etp 1 --tokens 1024,4096 \
             --execution eager,graphed --grad-accum 8 --trainer te --layers 2 --oracle greedy \
             --recipe blockwise --fp8-format e4m3 --json r.json --config-root configs"
        );
        // Delayed scaling: every option spelled out, the format and the amax history alike (the
        // workers' defaults are TE's, not necessarily the run's).
        let delayed = GenOptions {
            measure: fp8_bench::cuda::MeasureOptions {
                recipe: fp8_bench::recipe::RecipeOptions::new(
                    fp8_policy::Recipe::Delayed,
                    Some(fp8_policy::Fp8Format::E4m3),
                    Some(1),
                    Some(fp8_bench::recipe::AmaxAlgo::MostRecent),
                )
                .unwrap(),
                ..fp8_bench::cuda::MeasureOptions::default()
            },
            ..test_options()
        };
        let p = fp8_engine::Parallel::new(1, 1, 1, 1);
        let want = "--recipe delayed --fp8-format e4m3 --amax-history-len 1 --amax-compute-algo most_recent";
        for a in [
            command(
                &delayed,
                &job,
                Path::new("m.yaml"),
                p,
                Path::new("r.json"),
                None,
            ),
            inputs_command(&delayed, &job, Path::new("m.yaml"), p, Path::new("i.json")),
        ] {
            assert!(a.join(" ").contains(want), "{a:?}");
        }
        // The Megatron judge at TP 2: one process per rank, under torchrun; at TP 1 one process.
        let megatron = StepJob {
            trainer: "megatron".into(),
            ..job
        };
        let at = |tp| line(&megatron, fp8_engine::Parallel::new(tp, 1, tp, 1));
        assert!(
            at(2).starts_with(
                "-m torch.distributed.run --standalone --nproc-per-node=2 \
                 -m adaptive_fp8.bench.step_bench --model m.yaml --tp 2 "
            ),
            "{}",
            at(2)
        );
        assert!(
            at(1).starts_with("-m adaptive_fp8.bench.step_bench "),
            "{}",
            at(1)
        );
        let dense = StepJob {
            dense_layers: Some(1),
            ..megatron
        };
        let a = line(&dense, fp8_engine::Parallel::new(1, 16, 1, 1));
        assert!(
            a.contains("--layers 2 --dense-layers 1 --oracle greedy"),
            "{a}"
        );
        // A trainer that runs with --manual-gc: both workers time with the collector off.
        let manual = StepJob {
            manual_gc: true,
            ..dense
        };
        let p = fp8_engine::Parallel::new(1, 16, 1, 1);
        assert!(line(&manual, p).contains("--grad-accum 8 --manual-gc --trainer"));
        let inputs = inputs_command(&o, &manual, Path::new("m.yaml"), p, Path::new("i.json"));
        assert!(inputs.iter().any(|a| a == "--manual-gc"), "{inputs:?}");
        assert!(
            !inputs_command(
                &o,
                &job_of(&manual),
                Path::new("m.yaml"),
                p,
                Path::new("i.json")
            )
            .iter()
            .any(|a| a == "--manual-gc")
        );
    }

    /// The same job with the collector left on.
    fn job_of(job: &StepJob) -> StepJob {
        StepJob {
            manual_gc: false,
            ..job.clone()
        }
    }

    #[test]
    fn a_step_of_an_moe_model_with_dense_layers_builds_one() {
        let fixture = |m: &str| {
            let p = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../fixtures/models")
                .join(m);
            fp8_engine::load_model(&p).unwrap_or_else(|e| panic!("{e}"))
        };
        let dsv3 = fixture("deepseek_v3.yaml");
        assert_eq!(dense_layers_for(&dsv3, 2), Some(1));
        assert_eq!(dense_layers_for(&dsv3, 1), None, "no room for both kinds");
        assert_eq!(dense_layers_for(&fixture("llama3_2_1b.yaml"), 2), None);
    }

    #[test]
    fn the_megatron_judge_needs_a_gpu_per_tp_rank() {
        let job = |trainer: &str| StepJob {
            tuner: StepTuner::Oracle,
            tokens: vec![1024],
            executions: vec![Execution::Eager],
            grad_accum: 1,
            trainer: trainer.into(),
            layers: 2,
            dense_layers: None,
            refine: 0,
            time_limit: None,
            mix: None,
            manual_gc: false,
            image_tokens: IMAGE_TOKENS,
            anchor: false,
            resume: false,
        };
        let layouts: Vec<_> = [1, 4, 2]
            .map(|tp| fp8_engine::Parallel::new(tp, 1, tp, 1))
            .into();
        assert_eq!(megatron_ranks(&job("megatron"), &layouts), Some(4));
        assert_eq!(megatron_ranks(&job("megatron"), &layouts[..1]), None);
        assert_eq!(megatron_ranks(&job("te"), &layouts), None);
        let e = gpus_error(4, 1);
        assert!(
            e.contains("TP 4 needs 4 GPUs and this machine has 1") && e.contains("fix: --tp"),
            "{e}"
        );
    }
}
