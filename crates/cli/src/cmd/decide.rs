//! `fp8sel decide`: one module, one answer, with the reason.

use std::path::PathBuf;

use clap::ArgGroup;
use fp8_engine::classify::KindSource;
use fp8_engine::{ModuleName, OneError, OneModule, TeClass, TokenConfig, decide_one};
use fp8_policy::{ModuleKind, Policy};

use crate::error::{CliError, CliResult};

/// Decide FP8 or BF16 for one TE module, exactly as the trainer would at build time.
///
/// Prints `fp8` or `bf16` on the first line and the reason on the second (or one JSON object
/// with --json). Dense modules look up (kind, ub_name, tp); expert modules look up
/// (kind, etp, num_gemms) with tokens multiplied by --topk.
///
/// Examples:
///   fp8sel decide --policy p.json --te-class TERowParallelLinear --ub-name fc2 --tp 4 \
///       --seq-length 4096 --micro-batch-size 1
///   fp8sel decide --policy p.json --te-class TELayerNormColumnParallelLinear --expert \
///       --topk 8 --etp 1 --num-gemms 8 --tp 8 --num-tokens 4096 --json
#[derive(Debug, clap::Args)]
#[command(verbatim_doc_comment)]
#[command(group(ArgGroup::new("class").required(true).args(["te_class", "kind"])))]
#[command(group(ArgGroup::new("tokens").required(true).args(["num_tokens", "seq_length"])))]
pub struct Args {
    /// The policy JSON.
    #[arg(long)]
    pub policy: PathBuf,
    /// The module's TE class (TELayerNormColumnParallelLinear, TEColumnParallelLinear,
    /// TERowParallelLinear, TEColumnParallelGroupedLinear, TERowParallelGroupedLinear, TELinear).
    /// An unknown class falls back to the ub_name table, as the seed does.
    #[arg(long, value_name = "CLASS")]
    pub te_class: Option<String>,
    /// The module kind directly (layernorm_column, column, row, duplicated, column_grouped,
    /// row_grouped).
    #[arg(long, value_name = "KIND")]
    pub kind: Option<ModuleKind>,
    /// The module's TE tp-comm buffer name (qkv, proj, fc1, fc2, q_down_proj, ...). Dense
    /// modules without one always run BF16.
    #[arg(long, value_name = "NAME")]
    pub ub_name: Option<String>,
    /// The module is an MoE expert: column kinds become column_grouped, row becomes
    /// row_grouped, tokens are multiplied by --topk, and the lookup uses (etp, num_gemms).
    #[arg(long)]
    pub expert: bool,
    /// moe_router_topk; required for expert modules.
    #[arg(long, alias = "moe-router-topk", value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    pub topk: Option<u64>,
    /// Tensor-parallel size.
    #[arg(long, alias = "tensor-model-parallel-size", value_parser = clap::value_parser!(u32).range(1..))]
    pub tp: u32,
    /// Expert tensor-parallel size [default: --tp, as in Megatron].
    #[arg(long, alias = "expert-tensor-parallel-size", value_parser = clap::value_parser!(u32).range(1..))]
    pub etp: Option<u32>,
    /// Experts per rank (num_experts / ep); required for expert modules. Never defaulted: a
    /// default of 1 is why the reference never matched an expert rule.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub num_gemms: Option<u32>,
    /// Token count to compare (the fp8_dynamic_num_tokens override).
    #[arg(long, value_name = "T")]
    pub num_tokens: Option<u64>,
    /// Sequence length (tokens = seq x --micro-batch-size / --cp).
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..))]
    pub seq_length: Option<u64>,
    /// Micro-batch size.
    #[arg(long, value_name = "B", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub micro_batch_size: u64,
    /// Context-parallel size: divides seq x mbs (ignored with --num-tokens).
    #[arg(long, alias = "context-parallel-size", default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..))]
    pub cp: u64,
    /// The trainer's recipe and execution.
    #[command(flatten)]
    pub recipe: super::recipe_args::TrainerRecipe,
    /// Print one JSON object instead of two lines.
    #[arg(long)]
    pub json: bool,
}

/// Runs the command.
pub fn run(args: &Args) -> CliResult {
    let policy = Policy::load(&args.policy)?;
    let recipe_warning = super::recipe_args::TrainerRecipe::warnings(
        args.recipe.recipe,
        [(args.policy.display().to_string(), &policy)],
        args.json,
    );
    let ub = args.ub_name.as_deref();
    let name = match (&args.te_class, args.kind) {
        (Some(class), _) => ModuleName::Class(class),
        (None, Some(kind)) => ModuleName::Kind(kind),
        (None, None) => return Err(CliError::input("give --te-class or --kind")),
    };
    let module = OneModule {
        name,
        ub_name: ub,
        expert: args.expert,
        tp: args.tp,
        etp: args.etp,
        num_gemms: args.num_gemms,
        topk: args.topk,
        tokens: TokenConfig {
            seq_length: args.seq_length.unwrap_or(0),
            micro_batch_size: args.micro_batch_size,
            context_parallel_size: args.cp,
            fp8_dynamic_num_tokens: args.num_tokens,
        },
        execution: args.recipe.execution.unwrap_or_default(),
    };
    let one = decide_one(&module, &policy).map_err(|e| CliError::input(flags_for(&e)))?;
    let (classified, num_tokens, decision) = (one.classified, one.num_tokens, one.decision);
    if args.json {
        let out = serde_json::json!({
            "use_fp8": decision.use_fp8,
            "module_kind": classified.kind.as_str(),
            "num_tokens": num_tokens,
            "rule": decision.rule().map(|r| r.to_json_value()),
            "estimated": policy.estimated(),
            "reason": decision.reason.to_string(),
            "recipe_warning": recipe_warning.first(),
        });
        println!("{out}");
    } else {
        println!("{}", if decision.use_fp8 { "fp8" } else { "bf16" });
        let mut why = decision.reason.to_string();
        if classified.promoted {
            why.push_str(&format!(
                " [expert: {} promoted to {}]",
                classified.base_kind, classified.kind
            ));
        }
        if let KindSource::Class(TeClass::Linear) = classified.source {
            why.push_str(" [TELinear: duplicated]");
        }
        println!("{why}");
    }
    Ok(())
}

/// The engine's reason, with the flags that fix it.
fn flags_for(e: &OneError) -> String {
    match e {
        OneError::Decide(_) => format!("{e} (--num-gemms, --topk, --seq-length)"),
        OneError::NoTokens => format!("{e} (--seq-length or --num-tokens)"),
        _ => e.to_string(),
    }
}
