//! `fp8sel bench --backend te --tp-comm`: the TE backend's torchrun mode. The one-GPU mode times
//! one rank's GEMMs alone; this one launches `python -m torch.distributed.run --nproc-per-node TP
//! -m adaptive_fp8.bench.te_tp` on this node, which times each dense module as a TE tensor-parallel
//! module over a real TP group with sequence parallelism (the all-gathers and reduce-scatters in
//! the times) and writes the report (`provenance.tp_comm`). fp8sel checks the report it gets
//! back and prints the usual summary. Grouped (expert) modules are not in it: their communication
//! is an all-to-all, not TP.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use fp8_bench::sweep::BenchPoint;

use crate::error::{CliError, CliResult};

/// What one rank alone leaves out at TP > 1, and how to measure it (pure; `bench` says it before a
/// one-GPU sweep at TP > 1, `check` when a policy's rules at the layout's TP were made that way).
pub fn one_rank_note(tp: u32) -> String {
    format!(
        "at TP {tp} the times are one rank's GEMMs alone: the all-gathers and reduce-scatters of \
         sequence parallelism are not in them. On two H200s they moved the FP8 crossovers of qkv, proj and fc2 to \
         larger token counts, and policies made one rank alone lost to BF16 at short sequences \
         (docs/RESULTS.md, \"TP 2 with communication\"). To have them in the rules: on a node with \
         {tp} GPUs, fp8sel bench --backend te --tp-comm --tp {tp} ..."
    )
}

/// The sequence lengths to measure: the dense points' token counts (grouped points are left
/// out, with a note).
pub fn tokens(points: &[BenchPoint]) -> (Vec<u64>, usize) {
    let mut t = BTreeSet::new();
    let mut grouped = 0;
    for p in points {
        if p.spec.module_kind.is_grouped() {
            grouped += 1;
        } else {
            t.insert(p.tokens);
        }
    }
    (t.into_iter().collect(), grouped)
}

/// The torchrun command line (pure, for the tests and the `--quiet`-less echo).
pub fn command_line(
    tp: u32,
    model: &Path,
    tokens: &[u64],
    report: &Path,
    recipe: &str,
    warmup: u32,
    iters: u32,
) -> Vec<String> {
    let list: Vec<String> = tokens.iter().map(u64::to_string).collect();
    vec![
        "-m".into(),
        "torch.distributed.run".into(),
        "--standalone".into(),
        format!("--nproc-per-node={tp}"),
        "-m".into(),
        "adaptive_fp8.bench.te_tp".into(),
        "--model".into(),
        model.display().to_string(),
        "--tokens".into(),
        list.join(","),
        "--report".into(),
        report.display().to_string(),
        "--recipe".into(),
        recipe.into(),
        "--warmup".into(),
        warmup.to_string(),
        "--iters".into(),
        iters.to_string(),
    ]
}

/// Runs the torchrun measurement and returns the report it wrote.
#[allow(clippy::too_many_arguments)]
pub fn run(
    python: &str,
    tp: u32,
    model: &Path,
    points: &[BenchPoint],
    report: &Path,
    recipe: &str,
    warmup: u32,
    iters: u32,
    quiet: bool,
) -> CliResult<fp8_report::Report> {
    if tp < 2 {
        return Err(CliError::input(
            "--tp-comm needs --tp 2 or more: at TP 1 there is no communication; use the one-GPU mode",
        ));
    }
    if !matches!(recipe, "blockwise" | "tensorwise") {
        return Err(CliError::input(format!(
            "--tp-comm measures blockwise and tensorwise, not `{recipe}`; drop --tp-comm or pick another --recipe"
        )));
    }
    let (toks, grouped) = tokens(points);
    if toks.is_empty() {
        return Err(CliError::input(
            "--tp-comm: no dense module to measure (grouped experts communicate by all-to-all, not TP)",
        ));
    }
    if grouped > 0 && !quiet {
        eprintln!(
            "note: --tp-comm leaves out {grouped} grouped (expert) point(s): their communication is an all-to-all; measure them with the one-GPU mode"
        );
    }
    let argv = command_line(tp, model, &toks, report, recipe, warmup, iters);
    if !quiet {
        eprintln!("running: {python} {}", argv.join(" "));
    }
    let status = Command::new(python).args(&argv).status().map_err(|e| {
        CliError::input(format!(
            "--tp-comm: cannot start `{python}` ({e}); fix: --python with torch, transformer_engine and adaptive_fp8"
        ))
    })?;
    if !status.success() {
        return Err(CliError::input(format!(
            "--tp-comm: `{python} -m torch.distributed.run ... adaptive_fp8.bench.te_tp` failed ({status}); its messages are above"
        )));
    }
    let text = fp8_report::read_text(report).map_err(CliError::input)?;
    let r = fp8_report::parse(&text, report).map_err(CliError::input)?;
    if !r.provenance.tp_comm {
        return Err(CliError::input(format!(
            "{}: the report te_tp wrote is not marked tp_comm; is adaptive_fp8 older than this fp8sel?",
            report.display()
        )));
    }
    Ok(r)
}
