//! The step model's policies against their own inputs: no module group runs FP8 at a count where
//! it was measured slower alone in both GPU and host time (issue 46), a key its groups share
//! judged by their sum. The shipped files and the H200 runs' own
//! (`docs/device-logs/regen_shipped/<row>/`, `step_model/cost/{,again/}policies/`), each read with the
//! `*_inputs_step.json` its provenance lists (found where it was committed). And the shipped
//! summaries of both executions say so.

use std::path::{Path, PathBuf};

use fp8_merge::model::curve::median;
use fp8_policy::{Execution, Policy, RuleKey};
use fp8_report::step_inputs::{StepInputs, read_step_inputs};
use xtask::root;

/// A key's groups at one count, FP8 against BF16, each summed over its groups' modules of one
/// step (medians of the rounds): (GPU ms, host ms) slower, or `None` where one cannot run FP8.
fn key_change(doc: &StepInputs, key: &RuleKey, tokens: u64) -> Option<(f64, f64)> {
    let mut d = (0.0, 0.0);
    for g in doc.groups.iter().filter(|g| g.key == *key) {
        let m = doc
            .modules
            .iter()
            .find(|m| m.group == g.group && m.tokens == tokens)?;
        let f = m.fp8.as_ref()?;
        let n = f64::from(g.instances);
        d.0 += n * (median(&f.gpu_ms) - median(&m.bf16.gpu_ms));
        d.1 += n * (median(&f.host_ms) - median(&m.bf16.host_ms));
    }
    Some(d)
}

#[test]
fn no_shipped_step_model_policy_runs_a_group_fp8_where_it_is_slower_alone_in_both_times() {
    let root = root();
    let mut audited = 0;
    let mut bad = Vec::new();
    for path in policy_files(&root) {
        let policy = Policy::load(&path).unwrap_or_else(|e| panic!("{e}"));
        let Some(prov) = policy.provenance() else {
            continue;
        };
        let inputs = prov
            .reports
            .iter()
            .filter(|r| r.ends_with("_inputs_step.json"));
        // The recipe it was made in (`tensorwise`, `blockwise fp8_format=e4m3`: the first word).
        let recipe: fp8_policy::Recipe = prov
            .recipe
            .first()
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or("blockwise")
            .parse()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        for report in inputs {
            let doc = read_step_inputs(&committed(&root, &path, recipe, report))
                .unwrap_or_else(|e| panic!("{e}"));
            let counts: std::collections::BTreeSet<u64> =
                doc.modules.iter().map(|m| m.tokens).collect();
            for (key, t) in policy.rules() {
                let Some(g) = doc.groups.iter().find(|g| g.key == key) else {
                    continue;
                };
                for &c in &counts {
                    // A key its groups share (a dense fc2 and a shared expert's fc2) is one
                    // decision: judged by their sum.
                    let Some((gpu, host)) = key_change(&doc, &key, c) else {
                        continue;
                    };
                    if gpu <= 0.0 || host <= 0.0 {
                        continue;
                    }
                    let tokens = c * g.scale;
                    for (ex, th) in [
                        (Execution::Eager, t.eager),
                        (Execution::Graphed, t.graphed.unwrap_or(t.eager)),
                    ] {
                        audited += 1;
                        if th.allows(tokens) {
                            bad.push(format!(
                                "{}: {key} at {c} ({ex:?}, from {th})",
                                path.display()
                            ));
                        }
                    }
                }
            }
        }
    }
    // The step model's files are shipped (Llama-3.2-1B, Qwen2.5-72B): the audit is not empty.
    assert!(audited > 0, "no step-model inputs were audited");
    assert!(
        bad.is_empty(),
        "FP8 where slower alone in both GPU and host time:\n{}",
        bad.join("\n")
    );
}

/// The shipped policies (every recipe's) and the H200 runs' step-model policies.
fn policy_files(root: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![
        root.join("docs/device-logs/step_model/cost/policies"),
        root.join("docs/device-logs/step_model/cost/again/policies"),
    ];
    let recipes = fp8_pipeline::shipped::RECIPE_DIRS;
    let shipped = root.join("policies");
    dirs.extend(recipes.iter().map(|r| shipped.join(r.name())));
    dirs.push(shipped);
    let rows = root.join("docs/device-logs/regen_shipped");
    // A row: a folder with its gen-policy log (not the judge's); another recipe's rows are in
    // its own folder (`<recipe>/<row>/`), and write their policy under `<recipe>/` there.
    let mut row_dirs: Vec<PathBuf> = entries(&rows);
    for r in recipes {
        row_dirs.extend(entries_if_any(&rows.join(r.name())));
    }
    for row in row_dirs.into_iter().filter(|p| p.join("gen.log").is_file()) {
        dirs.extend(
            recipes
                .iter()
                .map(|r| row.join(r.name()))
                .filter(|d| d.is_dir()),
        );
        dirs.push(row);
    }
    let mut out: Vec<PathBuf> = dirs
        .iter()
        .flat_map(|d| entries(d))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    out.sort();
    out
}

/// `dir`'s entries, none where there is no such folder.
fn entries_if_any(dir: &Path) -> Vec<PathBuf> {
    if dir.is_dir() {
        entries(dir)
    } else {
        Vec::new()
    }
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let rd = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    rd.map(|e| {
        e.unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .path()
    })
    .collect()
}

/// A report a policy names, where the repository keeps it: the named path, else by its file name
/// among the shipped step-model reports of its recipe (`reports/h200/step_model/`, another
/// recipe's `reports/h200/<recipe>/step_model/`: a shipped row's) or beside the policy
/// (`../reports/step/`).
fn committed(root: &Path, policy: &Path, recipe: fp8_policy::Recipe, report: &str) -> PathBuf {
    let name = Path::new(report).file_name().unwrap_or_default();
    let dir = policy.parent().unwrap_or(root);
    [
        root.join(report),
        root.join(fp8_pipeline::shipped::step_model_dir(recipe))
            .join(name),
        dir.join("../reports/step").join(name),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .unwrap_or_else(|| {
        panic!(
            "{}: its report {report} is not in the repository",
            policy.display()
        )
    })
}

#[test]
fn a_shipped_summary_of_both_executions_never_sends_an_eager_trainer_elsewhere() {
    // A file that carries eager thresholds of their own (a fold's summary's "Thresholds by
    // execution", the step model's per-layout tables of both executions) is for an eager
    // trainer too: its summary may not say to make another.
    let root = root();
    let mut read = 0;
    for dir in ["policies", "policies/tensorwise", "policies/delayed"] {
        for md in entries(&root.join(dir))
            .into_iter()
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
        {
            let text = std::fs::read_to_string(&md).unwrap();
            if text.contains("## Thresholds by execution")
                || text.contains("| key | groups | eager | graphed |")
            {
                read += 1;
                assert!(
                    !text.contains("make its policy with `--backend te --trainer eager`"),
                    "{}",
                    md.display()
                );
            }
        }
    }
    assert!(read >= 3, "only {read} summaries of both executions");
}
