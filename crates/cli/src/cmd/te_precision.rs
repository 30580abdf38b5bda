//! `fp8sel te-precision-config`: the policy as Megatron's own per-module precision file.

use std::path::PathBuf;

use fp8_engine::native::te_precision_config;
use fp8_policy::{Fp8Format, Recipe};

use super::explain::make_plan;
use super::model_args::{ModelArgs, PolicyArgs};
use super::recipe_args::TrainerRecipe;
use crate::error::{CliError, CliResult};

/// Write the YAML that Megatron-core's --te-precision-config-file reads, for one layout.
///
/// Every module is decided exactly as `fp8sel explain` decides it (the same engine call), and
/// written as one glob matcher per module group (`decoder.layers.*.mlp.linear_fc1`) with the
/// reason beside it, then a BF16 catch-all, so every TE module is matched whatever the outer
/// FP8 region. The Megatron flags to launch with are printed: when no module runs FP8 that is
/// the plain BF16 model (no --fp8-format); when FP8 modules are all dense and the steps eager
/// they enter FP8 themselves (no --fp8-format either); routed experts in FP8 need the global FP8
/// region, and so do FP8 modules in CUDA-graphed steps (--execution graphed, or the config's
/// cuda_graph_impl): megatron-core's graphs quantize cached FP8 weights again only there. One
/// exception to "as explain decides": graphed FP8 modules beside BF16 routed experts are written
/// BF16 (that region would pad the experts' tokens, measured slower than BF16; the hook keeps
/// them FP8), and the launch lines say so. Delayed scaling is refused (Megatron's per-module
/// config does not take it): use the hook, adaptive_fp8.megatron.enable.
///
/// A module whose key has no rule at this layout is refused (exit 2), naming the missing keys
/// and the command that makes a policy for the layout: the policy does not cover it, which is
/// not the same as FP8 losing there. --allow-missing writes those modules BF16 and says how many.
///
/// Examples:
///   fp8sel te-precision-config --model fixtures/models/qwen2_5_72b.yaml \
///       --policy policies/qwen2_5_72b.json --tp 8 --seq-length 4096 --output te_precision.yaml
///   fp8sel te-precision-config --model fixtures/models/deepseek_v3.yaml \
///       --policy policies/deepseek_v3.json --tp 8 --ep 64 --etp 1 --seq-length 4096
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
pub struct Args {
    #[command(flatten)]
    model: ModelArgs,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    recipe: TrainerRecipe,
    /// FP8 format of the FP8 modules, as --fp8-format [default: the model config's (its fp8, a
    /// launch script's --fp8-format), else e4m3]. Hybrid with blockwise or mxfp8 is written as the
    /// trainer runs it, with a note: fp8sel measures those recipes in E4M3.
    #[arg(long, value_name = "FORMAT")]
    fp8_format: Option<Fp8Format>,
    /// Where to write the YAML [default: stdout, with the launch flags on stderr].
    #[arg(long, short = 'o', value_name = "FILE")]
    output: Option<PathBuf>,
    /// Write BF16 for modules the policy has no rule for at this layout, instead of refusing.
    #[arg(long)]
    allow_missing: bool,
}

/// Runs `te-precision-config`.
pub fn run(args: &Args) -> CliResult {
    let (plan, r, cx) = make_plan(&args.model, &args.policy, &args.recipe)?;
    // The vision encoder is not a GPTModel decoder path: it falls to the catch-all (below).
    let uncovered = plan.uncovered(&[fp8_engine::Role::Llm]);
    if let Some(u) = &uncovered
        && !args.allow_missing
    {
        super::explain::print_diagnostics(&plan);
        let fill = super::explain::fill_command(&args.model, &r, cx.recipe);
        return Err(CliError::input(format!(
            "{}\nor write those modules BF16 with --allow-missing",
            u.message(&fill)
        )));
    }
    // Unset, the recipe is the policy's (its recipe plan's base, else the one it was measured
    // with), else blockwise: never a recipe other than the one its thresholds are for.
    let (recipe, from) = cx.launch_recipe();
    if cx.recipe.is_none() && recipe != Recipe::Blockwise {
        eprintln!(
            "note: recipe {recipe}, {from}: the config names none; --recipe sets the trainer's"
        );
    }
    let format = launch_format(args, &r, recipe)?;
    if format == Fp8Format::Hybrid && recipe == Recipe::Nvfp4 {
        return Err(CliError::input(
            "--fp8-format hybrid: TE's NVFP4BlockScaling takes E4M3 only; fix: drop --fp8-format or use --recipe tensorwise".to_owned(),
        ));
    }
    if format == Fp8Format::Hybrid && matches!(recipe, Recipe::Blockwise | Recipe::Mxfp8) {
        eprintln!(
            "note: fp8_format hybrid kept, as the trainer runs it (TE trains {recipe} in HYBRID: E5M2 gradients); the policy's thresholds are E4M3's: fp8sel measured in E4M3 (or estimated so), the only format it measures {recipe} in"
        );
    }
    let p = r.parallel;
    let policy = args.policy.policy.as_ref().map_or_else(
        || "the config's fp8_dynamic_policy_path".to_owned(),
        |p| p.display().to_string(),
    );
    let s = &plan.summary;
    let tokens = s
        .tokens
        .get(&fp8_engine::Role::Llm)
        .cloned()
        .unwrap_or_default();
    let header = vec![
        "Megatron-core per-module precision (--te-precision-config-file), written by fp8sel te-precision-config".to_owned(),
        format!("model: {} ({})", plan.model, args.model.model.display()),
        format!("policy: {policy}"),
        format!(
            "layout: tp {} ep {} etp {} cp {}, sequence parallel {}",
            p.tp,
            p.ep,
            p.etp,
            p.cp,
            if p.sequence_parallel { "on" } else { "off" }
        ),
        format!("tokens: {tokens}"),
        format!("recipe: {recipe} {}", format.name()),
        format!("execution: {} (the rules' thresholds for it)", cx.execution),
        "decided as `fp8sel explain` decides; the first matching enabled matcher wins".to_owned(),
    ];
    let mut cfg = te_precision_config(&plan, recipe, format, header).map_err(CliError::input)?;
    let fp8 = cfg.fp8_instances;
    let total: u64 = cfg.matchers.iter().map(|m| m.instances).sum();
    cfg.header.insert(
        7,
        format!(
            "{fp8} of {total} module instances run FP8; launch region: {}",
            cfg.region.name()
        ),
    );
    let file = args.output.as_ref().map_or_else(
        || "te_precision.yaml".to_owned(),
        |o| o.display().to_string(),
    );
    let flags = cfg.launch_flags(&file);
    for f in &flags {
        cfg.header.push(format!("launch: {f}"));
    }
    let yaml = cfg.to_yaml();
    super::explain::print_diagnostics(&plan);
    for n in &cx.notes {
        eprintln!("note: {n}");
    }
    if let Some(u) = &uncovered {
        eprintln!(
            "warning: --allow-missing: {} module instance(s) have no rule at this layout and are written BF16 (a gap in the policy, not a measured answer); fp8sel check lists them",
            u.instances
        );
    }
    // The vision encoder's modules are not GPTModel decoder paths: the catch-all runs them BF16.
    let vision = |fp8: bool| -> u64 {
        plan.modules
            .iter()
            .filter(|m| m.spec.component != fp8_engine::Role::Llm && (m.use_fp8 || !fp8))
            .map(|m| m.spec.layers)
            .sum()
    };
    let (vit, vit_fp8) = (vision(false), vision(true));
    if vit_fp8 > 0 {
        eprintln!(
            "warning: the vision encoder's policy runs {vit_fp8} of its {vit} module instances FP8 at this count; this file runs them BF16 (its matchers are the language model's decoder paths); decide them with adaptive_fp8.megatron.enable"
        );
    } else if vit > 0 {
        eprintln!(
            "note: the vision encoder's {vit} module instances fall to the BF16 catch-all (not GPTModel decoder paths), as its policy decides them at this count"
        );
    }
    let mut inputs = args.policy.paths(&r.model);
    inputs.push(args.model.model.clone());
    emit(args, &inputs, &yaml, &flags, (fp8, total, vit))
}

/// The YAML to `--output` (with the launch flags on stdout) or to stdout (flags on stderr).
/// `inputs`: the files read (the model and every policy, a config's included), none of which
/// the output may be.
fn emit(
    args: &Args,
    inputs: &[PathBuf],
    yaml: &str,
    flags: &[String],
    (fp8, total, vit): (u64, u64, u64),
) -> CliResult {
    match &args.output {
        Some(out) => {
            fp8_io::refuse_same_file(out, inputs.iter().map(PathBuf::as_path))?;
            fp8_io::write_atomic(out, yaml.as_bytes())?;
            let vision = if vit > 0 {
                format!(" of the language model; the vision encoder's {vit} BF16")
            } else {
                String::new()
            };
            println!(
                "wrote {} ({fp8} of {total} module instances FP8{vision})",
                out.display()
            );
            println!("launch Megatron with:");
            for f in flags {
                println!("  {f}");
            }
        }
        None => {
            print!("{yaml}");
            for f in flags {
                eprintln!("launch: {f}");
            }
        }
    }
    Ok(())
}

/// The format the FP8 modules are written in: --fp8-format, else the model config's (`fp8`, a
/// launch script's `--fp8-format`: the format the trainer runs, E4M3 for nvfp4, which TE runs in
/// no other), else E4M3.
fn launch_format(
    args: &Args,
    r: &super::model_args::Resolved,
    recipe: Recipe,
) -> CliResult<Fp8Format> {
    if let Some(f) = args.fp8_format {
        return Ok(f);
    }
    let Some(given) = r
        .model
        .components
        .iter()
        .find_map(|c| c.fp8.format.as_deref())
    else {
        return Ok(Fp8Format::E4m3);
    };
    let f = given.parse::<Fp8Format>().map_err(|e| {
        CliError::input(format!(
            "{}: fp8: {e}; fix: give a format Megatron takes, or pass --fp8-format",
            args.model.model.display()
        ))
    })?;
    if f == Fp8Format::Hybrid && recipe == Recipe::Nvfp4 {
        eprintln!(
            "note: {}: fp8 hybrid: the nvfp4 modules are written E4M3, the only format TE's NVFP4BlockScaling takes",
            args.model.model.display()
        );
        return Ok(Fp8Format::E4m3);
    }
    Ok(f)
}
