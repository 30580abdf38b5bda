//! `fp8sel explain` and `fp8sel check`: the plan for a whole model.

use fp8_engine::{Plan, Role, plan, render};
use serde_json::json;

use fp8_policy::Recipe;

use super::model_args::{ModelArgs, PolicyArgs, Resolved, plan_config};
use super::recipe_args::TrainerRecipe;
use crate::error::{CliError, CliResult};

/// Show, module by module, which TE modules of a model run FP8 and why.
///
/// One row per module group (identical layers are counted together): name, TE class, kind,
/// ub_name, per-rank shapes, tokens compared, precision, reason. A summary follows: the share
/// of modules and of GEMM FLOPs that run FP8, and every rule the policy is missing.
///
/// Examples:
///   fp8sel explain --model fixtures/models/qwen2_5_72b.yaml --policy policies/qwen2_5_72b.json \
///       --tp 4 --seq-length 4096 --micro-batch-size 1
///   fp8sel explain --model fixtures/models/sel/qwen3_vl_235b_a22b_fp8_sel.yaml \
///       --config-root fixtures/models --json
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct ExplainArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    recipe: TrainerRecipe,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Check that the policy has a rule for every module under this layout.
///
/// Exits 0 when every module matched a rule, and 1 listing the gaps otherwise: the seed's
/// troubleshooting case "the policy has no rule for the current TP/EP". Re-run the benchmark
/// at that layout and merge it into the policy to close a gap. A launch (script or config) that
/// decides modules with Megatron's --te-precision-config-file but lacks the --fp8-format its
/// plan needs (FP8 routed experts, or FP8 modules in CUDA-graphed steps) fails too, naming it.
///
/// Example:
///   fp8sel check --model fixtures/models/deepseek_v3.yaml --policy policies/deepseek_v3.json \
///       --tp 8 --ep 32 --etp 1 --seq-length 32768
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct CheckArgs {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    recipe: TrainerRecipe,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// What `check` learns besides the plan: the reports the policies were made from, the trainer's
/// recipe, and notes (not gaps).
pub(super) struct Context {
    /// The trainer's execution: the flag, else the config's, else eager.
    pub(super) execution: fp8_policy::Execution,
    pub(super) recipe: Option<Recipe>,
    /// The base recipe of the policies' per-module recipe plan, if they carry one.
    pub(super) plan_base: Option<Recipe>,
    /// The one recipe every policy was measured with, if they say and agree.
    pub(super) measured: Option<Recipe>,
    pub(super) notes: Vec<String>,
}

impl Context {
    /// The recipe the launch runs: the trainer's (`--recipe`, else the config's), else the
    /// policies' recipe plan's base, else the recipe they were measured with, else blockwise
    /// (the seed's). The second value says which.
    pub(super) fn launch_recipe(&self) -> (Recipe, &'static str) {
        launch_recipe(self.recipe, self.plan_base, self.measured)
    }
}

/// [`Context::launch_recipe`], before there is a context.
fn launch_recipe(
    trainer: Option<Recipe>,
    plan_base: Option<Recipe>,
    measured: Option<Recipe>,
) -> (Recipe, &'static str) {
    match (trainer, plan_base, measured) {
        (Some(r), _, _) => (r, "the trainer's"),
        (None, Some(r), _) => (r, "the policy's recipe plan's base"),
        (None, None, Some(r)) => (r, "the one the policy was measured with"),
        (None, None, None) => (Recipe::Blockwise, "the default"),
    }
}

/// The one recipe the policies were measured with (`provenance.recipe`), if they say and agree.
fn measured_recipe(
    policies: &std::collections::BTreeMap<Role, fp8_policy::Policy>,
) -> Option<Recipe> {
    let mut made: Vec<Recipe> = policies.values().flat_map(|p| p.recipes()).collect();
    made.sort();
    made.dedup();
    match made[..] {
        [one] => Some(one),
        _ => None,
    }
}

/// The plan, with a warning for every policy made for another recipe than the trainer's
/// (`--recipe`, else the config's `fp8_recipe`).
pub(super) fn make_plan(
    model: &ModelArgs,
    policy: &PolicyArgs,
    recipe: &TrainerRecipe,
) -> CliResult<(Plan, Resolved, Context)> {
    let r = model.resolve()?;
    let policies = policy.load(&r.model)?;
    // The flag, else the config's cuda_graph_impl (Megatron's rule, `fp8_engine::execution`).
    let execution = recipe
        .execution
        .or_else(|| r.model.components.iter().find_map(|c| c.fp8.execution))
        .unwrap_or_default();
    let mut p = plan(&r.model, &plan_config(&r, &policies, model.topk, execution))
        .map_err(CliError::input)?;
    if recipe.execution.is_none() && execution == fp8_policy::Execution::Graphed {
        p.summary.notes.push(
            "execution graphed, from the model config's CUDA-graph setting (cuda_graph_impl): the \
             rules' min_tokens_graphed apply; pass --execution eager to read the eager ones"
                .to_owned(),
        );
    }
    let config_recipe = r
        .model
        .components
        .iter()
        .find_map(|c| c.fp8.recipe.as_deref());
    let trainer = recipe.resolve(config_recipe)?;
    p.summary.warnings.extend(TrainerRecipe::warnings(
        trainer,
        policies
            .iter()
            .map(|(role, pol)| (format!("the {role} policy"), pol)),
        true,
    ));
    // Measured rules at TP > 1 that did not have the TP communication in their times.
    let tp = r.parallel.tp;
    let one_rank = tp > 1
        && policies.values().any(|pol| {
            !pol.estimated()
                && pol.provenance().is_some_and(|v| {
                    // A folded policy's graphed thresholds from GPU time are one rank's: the
                    // TP group's times are in its eager ones only (`provenance.sources`).
                    let graphed_apart = execution == fp8_policy::Execution::Graphed
                        && v.sources
                            .iter()
                            .any(|k| k.graphed == Some(fp8_policy::ThresholdSource::GpuTime));
                    !v.timing.iter().any(|t| t == "model")
                        && (!v.tp_comm.contains(&tp) || graphed_apart)
                })
        });
    let mut notes = if one_rank {
        vec![super::tp_comm::one_rank_note(tp)]
    } else {
        Vec::new()
    };
    let plan_base = policies
        .values()
        .find_map(|pol| pol.recipe_plan().map(|plan| plan.base));
    let measured = measured_recipe(&policies);
    let runs_fp8 = p.summary.fp8_modules > 0;
    if let Some(n) = epsilon_note(launch_recipe(trainer, plan_base, measured).0, runs_fp8) {
        notes.push(n);
    }
    for (role, pol) in &policies {
        let tokens = r.tokens.get(role).and_then(|t| t.dense_tokens().ok());
        if let Some(n) = tokens.and_then(|(t, _)| outside_step_note(pol, *role, tp, execution, t)) {
            notes.push(n);
        }
        if let Some(n) = proxy_graphed_note(pol, *role, tp, execution) {
            notes.push(n);
        }
    }
    Ok((
        p,
        r,
        Context {
            execution,
            recipe: trainer,
            plan_base,
            measured,
            notes,
        },
    ))
}

/// Where the request's tokens lie outside the counts the training step timed for a policy at
/// this TP and execution (`provenance.step`): the step has no verdict there. Above its largest
/// count, a key it kept BF16 stays BF16 unless the default it was folded into has a threshold
/// above the sweep; below its smallest, a key it found FP8 there follows the default's
/// threshold where that lies below the sweep (`fp8_merge::fold`, rule 2; docs/POLICY.md,
/// "How sources fold").
fn outside_step_note(
    pol: &fp8_policy::Policy,
    role: Role,
    tp: u32,
    execution: fp8_policy::Execution,
    tokens: u64,
) -> Option<String> {
    let counts = step_counts(pol, tp, execution);
    let (smallest, largest) = (*counts.iter().min()?, *counts.iter().max()?);
    let timed = format!("the {role} policy at TP {tp} ({execution}: {smallest}-{largest})");
    let to_time = format!(
        "To time it: fp8sel gen-policy --backend step --tp {tp} --execution {execution} --tokens"
    );
    if tokens > largest {
        Some(format!(
            "{tokens} tokens: beyond the largest count the training step timed for {timed}, \
             which has no verdict above it: a key it found FP8 at {largest} stays FP8, one it \
             kept BF16 there stays BF16 unless the per-module threshold the policy was folded \
             with lies above {largest}. {to_time} {largest},{tokens}"
        ))
    } else if tokens < smallest {
        Some(format!(
            "{tokens} tokens: below the smallest count the training step timed for {timed}, \
             which has no verdict below it: a key it kept BF16 at {smallest} stays BF16, one it \
             found FP8 there follows the per-module threshold the policy was folded with where \
             that lies below {smallest}. {to_time} {tokens},{smallest}"
        ))
    } else {
        None
    }
}

/// The token counts a policy's training step (`provenance.step`: the oracle's runs, the step
/// model's layouts) timed at this TP in this execution (none where no step ran there, or where
/// the record does not read).
fn step_counts(pol: &fp8_policy::Policy, tp: u32, execution: fp8_policy::Execution) -> Vec<u64> {
    match fp8_merge::step::StepRecord::of(pol) {
        Some(Ok(r)) => r.counts_at(tp, execution),
        _ => Vec::new(),
    }
}

/// A CUDA-graphed step at TP > 1 read from per-module GPU time (no training step at that TP):
/// on the shipped models the step put the FP8 crossovers well above that proxy's.
fn proxy_graphed_note(
    pol: &fp8_policy::Policy,
    role: Role,
    tp: u32,
    execution: fp8_policy::Execution,
) -> Option<String> {
    // Per-module GPU time among the policy's sources (`provenance.timing`, typed names), and
    // no training step at this TP: the graphed thresholds there are that proxy's.
    let prov = pol.provenance()?;
    let gpu_time = prov.timing.iter().any(|t| t == "gpu");
    let proxy = execution == fp8_policy::Execution::Graphed
        && tp > 1
        && !pol.estimated()
        && gpu_time
        && step_counts(pol, tp, execution).is_empty();
    proxy.then(|| {
        format!(
            "the {role} policy's graphed thresholds at TP {tp} are per-module GPU time, not a \
             training step: at TP > 1 the step's FP8 crossovers can lie well above that proxy's \
             (docs/RESULTS.md, \"What the folds say about the graphed proxy\"), so a graphed \
             step of a few thousand tokens may run FP8 where BF16 is faster. To tune by the \
             step, on a GPU with Transformer Engine: \
             fp8sel gen-policy --backend step --tp {tp} --execution graphed"
        )
    })
}

/// The seed's epsilon guard, as its launch scripts set it (environment variables of the
/// reference's own TE build; adaptive_fp8's recipe builders map them to upstream TE's
/// `amax_epsilon`).
const AMAX_EPS_VARS: [&str; 3] = [
    "FP8_QUANT_FWD_INP_AMAX_EPS",
    "FP8_QUANT_FWD_WEIGHT_AMAX_EPS",
    "FP8_QUANT_BWD_GRAD_AMAX_EPS",
];

/// A note when a blockwise or tensorwise launch (`recipe`: [`Context::launch_recipe`]'s) has FP8
/// modules and none of the seed's epsilon variables is set in this environment.
fn epsilon_note(recipe: Recipe, runs_fp8: bool) -> Option<String> {
    let per_tensor_or_block = matches!(recipe, Recipe::Blockwise | Recipe::Tensorwise);
    let set = AMAX_EPS_VARS.iter().any(|v| std::env::var_os(v).is_some());
    (per_tensor_or_block && !set && runs_fp8).then(|| {
        format!(
            "{recipe} scaling without the seed's epsilon guard: none of {} is set here. The seed \
             sets them to 1e-12 against NaN/Inf from all-zero blocks; upstream TE reads no such \
             variable, adaptive_fp8's recipe builders (the hook, the TE worker, the step \
             benchmark) set them as amax_epsilon (docs/POLICY.md)",
            AMAX_EPS_VARS.join(", ")
        )
    })
}

/// The one command that makes a policy covering every module of this model at this layout
/// (`fp8_engine::fill_command`: measured on a GPU, estimated without one, never over a shipped
/// file).
pub(super) fn fill_command(args: &ModelArgs, r: &Resolved, recipe: Option<Recipe>) -> String {
    let model = args.model.display().to_string();
    let root = args.config_root.as_ref().map(|d| d.display().to_string());
    let moe = r.model.components.iter().any(|c| c.arch.moe.is_some());
    fp8_engine::fill_command(
        Some(&model),
        root.as_deref(),
        r.parallel,
        recipe.map(Recipe::name),
        moe,
    )
}

/// Runs `explain`.
pub fn explain(args: &ExplainArgs) -> CliResult {
    let (p, _, _) = make_plan(&args.model, &args.policy, &args.recipe)?;
    if args.json {
        println!("{:#}", render::plan_json(&p));
    } else {
        print!("{}", render::table(&p));
    }
    print_diagnostics(&p);
    Ok(())
}

/// The plan's warnings, notes and defaults on stderr, whatever the output format (the JSON
/// carries them too, as `warnings`).
pub(super) fn print_diagnostics(p: &Plan) {
    for line in render::diagnostics(p) {
        eprintln!("{line}");
    }
}

/// Runs `check`; returns exit code 1 (as an error) when a rule is missing.
pub fn check(args: &CheckArgs) -> CliResult {
    let (p, r, cx) = make_plan(&args.model, &args.policy, &args.recipe)?;
    let s = &p.summary;
    let covered = s.missing_rules.is_empty() && s.components_without_policy.is_empty();
    let policy_ok = covered && s.other_model.is_empty();
    let ok = policy_ok && s.launch_problems.is_empty();
    let fill = fill_command(&args.model, &r, cx.recipe);
    if args.json {
        println!(
            "{:#}",
            json!({"ok": ok, "missing_rules": s.missing_rules, "components_without_policy": s.components_without_policy,
                   "other_model": s.other_model, "launch_problems": s.launch_problems,
                   "estimated_policies": s.estimated_policies,
                   "warnings": render::diagnostics(&p), "notes": cx.notes,
                   "fill_commands": if policy_ok { Vec::new() } else { vec![fill] }})
        );
    } else if ok {
        println!(
            "ok: the policy covers every module ({} module instances, {} run FP8)",
            s.modules, s.fp8_modules
        );
    } else {
        for role in &s.components_without_policy {
            println!(
                "no policy for the {role} component (pass --policy/--vit-policy or set fp8_dynamic_policy_path)"
            );
        }
        for m in &s.missing_rules {
            println!(
                "missing rule {} {}: {}",
                m.component,
                m.key,
                m.modules.join(", ")
            );
        }
        for w in &s.other_model {
            println!("another model's policy: {w}");
        }
        for w in &s.launch_problems {
            println!("the launch: {w}");
        }
        if !policy_ok {
            print_fill(&fill, &p, r.model.components.len() > 1);
        }
    }
    print_diagnostics(&p);
    if !args.json {
        for n in &cx.notes {
            eprintln!("note: {n}");
        }
    }
    if ok {
        Ok(())
    } else if policy_ok {
        Err(CliError {
            code: 1,
            message: format!(
                "the policy covers every module, but {} launch problem(s): fix the launch (above)",
                s.launch_problems.len()
            ),
        })
    } else {
        Err(CliError {
            code: 1,
            message: format!(
                "{} missing rule(s), {} component(s) without a policy, {} component(s) with another model's policy: make a policy for this model and layout (the command above)",
                s.missing_rules.len(),
                s.components_without_policy.len(),
                s.other_model.len()
            ),
        })
    }
}

/// The command that makes a policy for the model and layout, and the files to pass then.
fn print_fill(fill: &str, p: &fp8_engine::Plan, vlm: bool) {
    let fill_dir = fp8_engine::FILL_DIR;
    println!(
        "to make a policy for this model at this layout (a GPU measures, else the cost model estimates):"
    );
    println!("  {fill}");
    let file = if vlm {
        format!(
            "--policy {fill_dir}/{0}.llm.json --vit-policy {fill_dir}/{0}.vit.json",
            p.model
        )
    } else {
        format!("--policy {fill_dir}/{}.json", p.model)
    };
    println!("then pass {file}");
}
