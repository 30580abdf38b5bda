//! `fp8sel gen-policy`'s flags: the command's one definition of them (its job is in `gen_policy`).

use std::path::PathBuf;

use fp8_bench::cuda::{DEFAULT_ITERS, DEFAULT_WARMUP};

/// Make policies for your own model(s): measure each layout, write policies, plots, a summary.
///
/// On a GPU where this package and Transformer Engine are installed, the default (--backend auto) is
/// the step model (--backend step) for a language model: per layout, each module group's host
/// and GPU time alone, BF16 vs FP8, at --tokens; a few real training steps in all-BF16 and
/// all-FP8 that calibrate the model; the plan it predicts fastest at each count; that plan
/// checked in whole steps (a count where step and model disagree is timed again), whose
/// all-BF16 and all-FP8 steps then refit the model (a plan that moves is timed again) (results
/// under <reports-dir>/step/; docs/POLICY.md has the formula).
/// A VLM gets the step model twice: its language model (<model>.llm.json), then its vision
/// encoder from steps of its own layers (<model>.vit.json, in the TE blocks), one folder, one
/// summary.
///
/// Otherwise, for each model config (Megatron/LoongForge YAML, Megatron-LM launch script or HF
/// config.json) and each requested layout (every TP x EP x ETP that divides the model), every
/// TE module is measured at per-rank shapes on this GPU, BF16 vs FP8, forward + backward. Each
/// distinct per-rank shape is measured once and reused by the layouts that share it (the experts
/// of TP 1, 2, 4 under one EP/ETP); reports say which points were reused. Without a GPU (or with
/// --backend model) the cost model ESTIMATES instead, and the outputs go to
/// <policies-dir>/estimated/<profile>/ so an estimate never overwrites a measured policy.
///
/// Every rule gets both thresholds: min_tokens_graphed (CUDA-graphed steps) from the GPU times,
/// min_tokens (eager steps, Megatron's default) from eager times: the TE backend's own, else the
/// GPU times raised to a host profile: --host-profile FILE; else, on a GPU where this package
/// and Transformer Engine import, this machine's, measured first by the host probe (about 15 s,
/// written beside the reports; --no-host-probe skips it); else the shipped profile of the same
/// GPU (H200), or of the cost model's --device-profile. With none (another GPU without TE) the
/// eager thresholds are GPU time alone: provenance says so (eager_source: gpu_time) and every
/// command that reads the policy for eager steps warns.
///
/// Writes: <reports-dir>/<gpu>/<model>_tp<T>[_ep<E>].json (the reports),
/// <policies-dir>/<model>.json (or <model>.llm.json and <model>.vit.json for a VLM),
/// <policies-dir>/<model>.md (rules, warnings, the step time of the module set) and
/// <policies-dir>/plots/*.svg (speedup against tokens per module, threshold and min_tokens).
/// A recipe other than blockwise gets its own folders (<policies-dir>/<recipe>/,
/// <reports-dir>/<gpu>/<recipe>/): policies of different recipes never overwrite each other.
///
/// Examples:
///   fp8sel gen-policy --model my_model.yaml --tp 1,2,4 --ep 8
///   fp8sel gen-policy --model config.json --tensor-model-parallel-size 8 --backend model
///   fp8sel gen-policy --model my_model.yaml --tp 8 --backend te --trainer eager
///   fp8sel gen-policy --model my_model.yaml --tp 1,2,4,8 --recipe tensorwise
///   fp8sel gen-policy --model my_model.yaml --tp 8 --tokens 1024,4096,16384   (on a GPU with TE)
///   fp8sel gen-policy --model my_model.yaml --tp 8 --backend cuda           (GEMMs + host profile)
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    /// Model configs (repeat for several): a Megatron/LoongForge/NeMo YAML, a Megatron-LM or
    /// LoongForge launch script (`.sh`), or a HuggingFace config.json or its checkout's directory.
    /// Its policy is `<name>.json`: the file's name, else (a `config.json`, or a script named for
    /// how it runs, as `train.sh`) its folder's. [`cargo xtask gen-policy`: the repository's models]
    #[arg(long = "model", value_name = "CONFIG")]
    pub models: Vec<PathBuf>,
    /// Hydra's search path, tried after each config's own directory [default: the nearest
    /// ancestor named `configs`, else the checkout's root, else the config's directory].
    #[arg(long, value_name = "DIR")]
    pub config_root: Option<PathBuf>,
    /// Only this part of a VLM: llm (its language model, <model>.llm.json) or vit (its vision
    /// encoder, <model>.vit.json), e.g. to make one part again [default: both].
    #[arg(long)]
    pub component: Option<fp8_engine::Role>,
    /// TP sizes [default: the config's tensor_model_parallel_size (a launch script's
    /// --tensor-model-parallel-size, the layout it trains) first, then the others of 1,2,4,8
    /// that divide the model].
    #[arg(
        long,
        alias = "tensor-model-parallel-size",
        value_delimiter = ',',
        value_name = "LIST",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub tp: Option<Vec<u32>>,
    /// EP sizes [default: the config's for MoE models (else 1, as Megatron), 1 for dense models].
    #[arg(
        long,
        alias = "expert-model-parallel-size",
        value_delimiter = ',',
        value_name = "LIST",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub ep: Option<Vec<u32>>,
    /// ETP sizes [default: the config's expert_tensor_parallel_size, else each TP, as Megatron].
    #[arg(
        long,
        alias = "expert-tensor-parallel-size",
        value_delimiter = ',',
        value_name = "LIST",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub etp: Option<Vec<u32>>,
    /// Speedup FP8 must reach.
    #[arg(long, alias = "threshold", default_value_t = 1.0)]
    pub speedup_threshold: f64,
    /// Noise margin added to the threshold.
    #[arg(long, default_value_t = 0.02)]
    pub margin: f64,
    /// The trainer the policies are for (graphed: GPU time; eager: the eager step, which needs
    /// TE-backend reports or --host-profile) [default: both in one file, min_tokens eager and
    /// min_tokens_graphed graphed, where the backend gives an eager objective (te, or
    /// --host-profile); else GPU time].
    #[arg(long, value_parser = ["graphed", "eager"])]
    pub trainer: Option<String>,
    /// The merge objective (--shared-key, --host-profile, --numerics).
    #[command(flatten)]
    pub objective: super::objective_args::ObjectiveArgs,
    /// auto: the GPU when one opens, else the cost model; cuda; model; te: Transformer Engine
    /// itself through `python -m adaptive_fp8.bench.te_worker` (reports to <reports-dir>/<gpu>/te/; the
    /// policy holds both executions: TE's eager step times as min_tokens, its GPU times as
    /// min_tokens_graphed, unless --trainer picks one; cuda does the same with --host-profile);
    /// step: the training step itself (--step-tuner model: each module group's host and GPU time
    /// alone, calibrated on a few real steps in all-BF16 and all-FP8 and checked in whole steps,
    /// through `python -m adaptive_fp8.bench.step_inputs`; eager sets min_tokens, graphed
    /// min_tokens_graphed; results under <reports-dir>/step/). auto picks step on a GPU where
    /// this package and Transformer Engine are installed (a VLM: step for its language model and
    /// its vision encoder; a model with Gated DeltaNet or gated attention, which the step does not
    /// build: per-module timing, said).
    #[arg(long, default_value = "auto", value_parser = ["auto", "cuda", "model", "te", "step"])]
    pub backend: String,
    /// --backend step: model (the step model, checked in the step) or oracle (step_bench's
    /// greedy per-group search by trying: slow and noisy at short steps, kept as a judge).
    #[arg(long, default_value = "model", value_parser = ["model", "oracle"])]
    pub step_tuner: String,
    /// --backend step: token counts to sweep (sequence length at micro-batch 1).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "LIST",
        default_value = "1024,2048,4096,8192,16384",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub tokens: Vec<u64>,
    /// --backend step: executions to sweep (eager, graphed).
    #[arg(
        long,
        value_delimiter = ',',
        value_name = "LIST",
        default_value = "eager,graphed"
    )]
    pub execution: Vec<fp8_policy::Execution>,
    /// --backend step: micro-batches per optimizer step.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub grad_accum: u32,
    /// --backend step: te (the toolkit's TE blocks, fast) or megatron (upstream GPTModel: with
    /// the step model, its policy judged there at the check's counts after the TE-block check,
    /// a key FP8 where the judge measured it slower than BF16 moved above that count; with the
    /// oracle, each candidate a model build; graphed in Megatron's own CUDA graphs; a layout at
    /// TP > 1 runs under torchrun, one process and one GPU per rank).
    #[arg(long, default_value = "te", value_parser = ["te", "megatron"])]
    pub step_trainer: String,
    /// --backend step: keep Python's garbage collector off while steps are timed, as
    /// Megatron-LM's --manual-gc does; give it where your trainer runs with --manual-gc. Without
    /// it the collector runs as in a default trainer, and the reports note full collections that
    /// ran inside timed rounds (on the H200 none did, and the spread was the same either way:
    /// docs/PERFORMANCE.md).
    #[arg(long)]
    pub manual_gc: bool,
    /// --backend step, a VLM's vision encoder: tokens of one image. The encoder attends within
    /// each image, so its attention grows with the image, not with the step's image tokens; give
    /// your data's typical image in patches (the default: 512 x 512 at patch 16).
    #[arg(long, value_name = "N", default_value_t = fp8_pipeline::step::IMAGE_TOKENS, value_parser = clap::value_parser!(u32).range(1..))]
    pub image_tokens: u32,
    /// --backend step --step-tuner oracle: rounds of refinement. Each times, per execution, the geometric midpoint
    /// (on the 16-token grid) of the two counts a key's threshold falls between, so a threshold
    /// can land between the counts of a coarse sweep; about one count per round and execution.
    /// 0: the sweep alone.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(0..=4))]
    pub refine: u32,
    /// --backend step: transformer layers per step. The step model is fitted on steps this
    /// deep, and a fixed host part weighs less in a deeper one; in upstream GPTModel on an H200,
    /// Llama-3.2-1B's plan fitted on 2 layers stayed at or ahead of all-FP8 at 4 and 8 layers
    /// (docs/RESULTS.md, "Depth"); more layers cost more time per step.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub layers: u32,
    /// --backend step: of --layers, how many have a dense MLP, for an MoE model with dense
    /// layers (DeepSeek-V3). [default: 1 where the model has both kinds and --layers >= 2, so
    /// the step measures the dense keys too]
    #[arg(long, value_name = "N")]
    pub dense_layers: Option<u32>,
    /// --backend step: the check also times the smallest calibrated count again (all-BF16 and
    /// all-FP8, each execution): how far the same step moved between the inputs and the check
    /// where steps are most host-bound, the floor under the model's error (`repeats` in the
    /// policy's provenance and <model>.md). About 10% more time (the 64-expert MoE: 11 s).
    #[arg(long)]
    pub check_anchor: bool,
    /// --backend step: a layout whose inputs an earlier run of this command left in the reports
    /// folder (stopped by --time-limit or cut while checking) reuses them and runs its check,
    /// instead of measuring them again; refused where they were measured otherwise (another
    /// sweep, layout, recipe or GPU). A layout without them is measured.
    #[arg(long)]
    pub resume: bool,
    /// --backend step: the run's wall-clock bound in seconds. At it the worker is stopped and
    /// the policy is written from the counts it finished (each saved as it ends); refinements
    /// and layouts not begun are skipped, with a note. [default: none]
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    pub time_limit: Option<u64>,
    /// The TE worker's interpreter and settings.
    #[command(flatten)]
    pub te: super::te_args::TeArgs,
    /// The FP8 recipe and its options.
    #[command(flatten)]
    pub recipe: super::recipe_args::RecipeArgs,
    /// Choose each module's recipe among these (blockwise, tensorwise, mxfp8, nvfp4). With the step
    /// model (a GPU where adaptive_fp8 and Transformer Engine are installed) each recipe is measured
    /// and checked in the step and probed for each module's quantization error (`python -m
    /// adaptive_fp8.bench.numerics`, unless --numerics gives its report), and a module runs the
    /// recipe the model predicts fastest within --max-quant-error. With a per-module backend
    /// (cuda, te, or model: the cost model's estimates, e.g. mxfp8 with --device-profile b200)
    /// each recipe's modules are timed alone, the fastest per module wins, and --numerics must
    /// give every recipe's report. The first is the base: the policy's rules are its (what the
    /// reference's loader reads), the plan (`recipes`) gives each module its own. Megatron
    /// applies it with `fp8sel te-precision-config`.
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub recipes: Vec<fp8_policy::Recipe>,
    /// Cost-model profile: h200 (calibrated on measured H200 reports), h100, b200.
    #[arg(long, default_value = "h200")]
    pub device_profile: String,
    /// Where policies, summaries and plots go.
    #[arg(long, default_value = "policies", value_name = "DIR")]
    pub policies_dir: PathBuf,
    /// Where measured reports go (one folder per GPU), and the earlier ones a model's policy is
    /// folded with [default: reports; with --out, <out>/reports].
    #[arg(long, value_name = "DIR")]
    pub reports_dir: Option<PathBuf>,
    /// Write everything here instead of --policies-dir (and its estimated/ folder).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// Timed steps per point.
    #[arg(long, default_value_t = DEFAULT_ITERS, value_parser = clap::value_parser!(u32).range(1..))]
    pub iters: u32,
    /// Untimed steps per point.
    #[arg(long, default_value_t = DEFAULT_WARMUP)]
    pub warmup: u32,
    /// On a GPU, use the shipped host profile of this GPU (if any) instead of measuring this
    /// machine's for the eager thresholds.
    #[arg(long)]
    pub no_host_probe: bool,
    /// Errors and the final summary line only.
    #[arg(long)]
    pub quiet: bool,
    /// Print one JSON object instead: {"estimated", "out", "reports", "files"}.
    #[arg(long)]
    pub json: bool,
}
