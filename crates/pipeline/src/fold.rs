//! One default policy file per model for both executions: the GPU-time policies (the graphed
//! thresholds) folded with the eager ones, each model's summary gaining a table of both.
//!
//! Pure, like `build`: it takes and returns the files a generation would write.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use fp8_merge::fold::{Source, both_thresholds, fold};
use fp8_policy::{DenseKind, Execution, GroupedKind, Policy, Threshold};

use crate::build::Files;

fn parse(bytes: &[u8], name: &Path) -> Result<Policy, String> {
    let text = std::str::from_utf8(bytes).map_err(|e| format!("{}: {e}", name.display()))?;
    Policy::from_json_str(text, name.display().to_string()).map_err(|e| e.to_string())
}

/// A top-level policy file (`<model>.json`, `<model>.<component>.json`) and its summary's name.
fn summary_of(path: &Path) -> Option<PathBuf> {
    if path.parent().is_some_and(|p| !p.as_os_str().is_empty()) {
        return None;
    }
    let name = path.file_name()?.to_str()?.strip_suffix(".json")?;
    let model = name.split('.').next()?;
    Some(PathBuf::from(format!("{model}.md")))
}

/// Every policy of `graphed` folded with its eager counterpart, by the one fold
/// (`fp8_merge::fold`) over its sources in order: the training step's policy (`step`, both
/// executions, where it has the file), the measured eager policy (`measured_eager`, TE's eager
/// times, where it has the file), the eager policy (`eager`: the host-profile objective, same
/// layouts), and the graphed one. A policy with no eager counterpart stays graphed only; a step
/// policy with no default to fold into is an error.
pub fn fold_files(
    graphed: &Files,
    eager: &Files,
    measured_eager: &Files,
    step: &Files,
) -> Result<Files, String> {
    if let Some(p) = step
        .keys()
        .find(|p| !graphed.contains_key(*p) || !eager.contains_key(*p))
    {
        return Err(format!(
            "a step policy for {} has no default policy of both executions to fold into",
            p.display()
        ));
    }
    let mut out = graphed.clone();
    for (path, bytes) in graphed {
        let Some(md) = summary_of(path) else { continue };
        let Some(e_bytes) = eager.get(path) else {
            continue;
        };
        let g = parse(bytes, path)?;
        let mut sources = Vec::new();
        if let Some(sp) = step.get(path) {
            sources.push(Source::of_step(&parse(sp, path)?).map_err(|e| e.to_string())?);
        }
        if let Some(m) = measured_eager.get(path) {
            sources.push(Source::of_policy(&parse(m, path)?, Execution::Eager));
        }
        sources.push(Source::of_policy(&parse(e_bytes, path)?, Execution::Eager));
        sources.push(Source::of_policy(&g, Execution::Graphed));
        let folded = fold(&sources, g.speedup_threshold()).map_err(|e| e.to_string())?;
        out.insert(path.clone(), folded.to_json().into_bytes());
        if let Some(text) = out.get_mut(&md) {
            text.extend_from_slice(section(path, &folded).as_bytes());
        }
    }
    Ok(out)
}

/// Keys the training step kept BF16 at its largest swept count that stay BF16 above it: the
/// step has no verdict there, so the rule is "never" for want of one, not by a measurement
/// (`key execution: largest count`). A sweep to larger counts can move them.
fn bf16_above_the_sweep(p: &Policy) -> Vec<String> {
    let Some(Ok(record)) = fp8_merge::step::StepRecord::of(p) else {
        return Vec::new();
    };
    // By the key's provenance spelling (`RuleKey`'s display): each execution's threshold.
    let rules: BTreeMap<String, [Threshold; 2]> = both_thresholds(p)
        .into_iter()
        .map(|(k, (e, g, _))| (k.to_string(), [e, g.unwrap_or(e)]))
        .collect();
    let mut out = Vec::new();
    for (key, v) in &record.verdicts {
        for (i, (e, timed)) in [("eager", &v.eager), ("graphed", &v.graphed)]
            .into_iter()
            .enumerate()
        {
            let Some(&(count, fp8)) = timed.as_ref().and_then(|t| t.last()) else {
                continue;
            };
            let never = rules.get(key).is_none_or(|t| t[i] == Threshold::Never);
            if !fp8 && never {
                out.push(format!("{key} {e}: {count}"));
            }
        }
    }
    out
}

/// Where one execution's thresholds came from, in words: each source and its count of keys
/// (`provenance.sources`).
fn sources_in_words(sources: &[fp8_policy::KeySources], e: Execution) -> String {
    let mut n: BTreeMap<&str, usize> = BTreeMap::new();
    for k in sources {
        let s = match e {
            Execution::Eager => k.eager,
            Execution::Graphed => k.graphed,
        };
        *n.entry(s.map_or("none named", |s| s.name())).or_default() += 1;
    }
    if n.is_empty() {
        return "no keys".to_owned();
    }
    n.iter()
        .map(|(s, c)| format!("{s} for {c} key(s)"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The summary's table of both thresholds of one folded policy.
fn section(path: &Path, p: &Policy) -> String {
    let mut s = format!(
        "\n## Thresholds by execution: `{}`\n\n`min_tokens` is for eager steps (what the \
         reference's loader reads), `min_tokens_graphed` for CUDA-graphed ones.\n",
        path.display()
    );
    if let Some(pr) = p.provenance() {
        for (field, e) in [
            ("min_tokens", Execution::Eager),
            ("min_tokens_graphed", Execution::Graphed),
        ] {
            let _ = writeln!(s, "- `{field}`: {}", sources_in_words(&pr.sources, e));
        }
        s.push_str(
            "\n(`provenance.sources`, key by key: `step` the training step's verdicts, \
             `eager_step` TE's eager module times, `host_profile` GPU time with the host profile, \
             `gpu_time` GPU time alone; none named: no source measured the key in that \
             execution, or its source did not say.)\n",
        );
    }
    s.push_str("\n| kind | key | min_tokens (eager) | min_tokens_graphed |\n|---|---|---:|---:|\n");
    for kind in DenseKind::ALL {
        for (ub, rules) in p.dense_rules(kind) {
            for r in rules {
                let g = r.min_tokens_graphed.unwrap_or(r.min_tokens);
                let _ = writeln!(
                    s,
                    "| {kind} | {ub} tp={} | {} | {} |",
                    r.tp, r.min_tokens, g
                );
            }
        }
    }
    for kind in GroupedKind::ALL {
        for r in p.grouped_rules(kind) {
            let g = r.min_tokens_graphed.unwrap_or(r.min_tokens);
            let _ = writeln!(
                s,
                "| {kind} | etp={} gemms={} | {} | {} |",
                r.etp, r.num_gemms, r.min_tokens, g
            );
        }
    }
    let capped = bf16_above_the_sweep(p);
    if !capped.is_empty() {
        s.push_str(
            "\nBF16 above the training step's sweep for want of a verdict (BF16 at its largest \
             count, the one given; a sweep to larger counts can move them):\n",
        );
        for c in capped {
            let _ = writeln!(s, "- {c}");
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(entries: &[(&str, &str)]) -> Files {
        entries
            .iter()
            .map(|(p, t)| (PathBuf::from(p), t.as_bytes().to_vec()))
            .collect()
    }

    const G: &str = r#"{"version": 1, "speedup_threshold": 1.0, "rules": {"row": {"fc2": [{"tp": 1, "min_tokens": 1024}]}}, "provenance": {"timing": ["gpu"], "eager_source": "gpu_time"}}"#;
    const E: &str = r#"{"version": 1, "speedup_threshold": 1.0, "rules": {"row": {"fc2": [{"tp": 1, "min_tokens": 4096}]}}, "provenance": {"timing": ["gpu"], "host_profile": "h.json", "eager_source": "host_profile"}}"#;
    const T: &str = r#"{"version": 1, "speedup_threshold": 1.0, "rules": {"row": {"fc2": [{"tp": 1, "min_tokens": 16384}]}}, "provenance": {"timing": ["te-eager"], "eager_source": "eager_step"}}"#;

    #[test]
    fn each_policy_gets_both_thresholds_and_its_summary_a_table() {
        let g = files(&[
            ("m.json", G),
            ("m.md", "# m\n"),
            ("plots/m/x.svg", "<svg/>"),
            ("v.llm.json", G),
        ]);
        let out = fold_files(
            &g,
            &files(&[("m.json", E), ("v.llm.json", E)]),
            &files(&[("m.json", T)]),
            &Files::new(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let m =
            parse(&out[Path::new("m.json")], Path::new("m.json")).unwrap_or_else(|e| panic!("{e}"));
        let r = &m.dense_rules(DenseKind::Row)["fc2"][0];
        // TE measured the key: its eager threshold wins over the host profile's.
        assert_eq!(
            (r.min_tokens, r.min_tokens_graphed),
            (Threshold::From(16384), Some(Threshold::From(1024)))
        );
        let v = parse(&out[Path::new("v.llm.json")], Path::new("v.llm.json"))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            v.dense_rules(DenseKind::Row)["fc2"][0].min_tokens,
            Threshold::From(4096)
        );
        let md = String::from_utf8_lossy(&out[Path::new("m.md")]);
        assert!(md.contains("| row | fc2 tp=1 | 16384 | 1024 |"), "{md}");
        assert!(
            md.contains("- `min_tokens`: eager_step for 1 key(s)\n"),
            "{md}"
        );
        assert!(
            md.contains("- `min_tokens_graphed`: gpu_time for 1 key(s)\n"),
            "{md}"
        );
        assert_eq!(out[Path::new("plots/m/x.svg")], b"<svg/>");
    }

    #[test]
    fn keys_bf16_at_the_top_of_the_sweep_and_never_above_are_named() {
        // fc2: FP8 from 2048 eager; graphed BF16 to the top (2048) and "never". proj: no rule,
        // BF16 at every count. qkv: BF16 at the top too, but the default's 8192 stood above it.
        let text = r#"{"version": 1, "speedup_threshold": 1.0, "rules": {
            "row": {"fc2": [{"tp": 1, "min_tokens": 2048, "min_tokens_graphed": 9007199254740992}]},
            "layernorm_column": {"qkv": [{"tp": 1, "min_tokens": 8192}]}},
          "provenance": {"step": {"verdicts": {
            "(kind=row, ub_name=fc2, tp=1)": {"eager": [[1024, false], [2048, true]], "graphed": [[1024, false], [2048, false]],
                "swept_from": {"eager": 1024, "graphed": 1024}, "swept_to": {"eager": 2048, "graphed": 2048}},
            "(kind=row, ub_name=proj, tp=1)": {"eager": [[1024, false], [2048, false]], "graphed": null,
                "swept_from": {"eager": 1024, "graphed": null}, "swept_to": {"eager": 2048, "graphed": null}},
            "(kind=layernorm_column, ub_name=qkv, tp=1)": {"eager": [[2048, false]],
                "swept_from": {"eager": 2048}, "swept_to": {"eager": 2048}}}}}}"#;
        let p = parse(text.as_bytes(), Path::new("m.json")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            bf16_above_the_sweep(&p),
            [
                "(kind=row, ub_name=fc2, tp=1) graphed: 2048",
                "(kind=row, ub_name=proj, tp=1) eager: 2048"
            ]
        );
        assert!(
            section(Path::new("m.json"), &p)
                .contains("- (kind=row, ub_name=proj, tp=1) eager: 2048")
        );
        let plain = parse(G.as_bytes(), Path::new("m.json")).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            bf16_above_the_sweep(&plain).is_empty(),
            "no step, nothing to name"
        );
    }

    #[test]
    fn a_policy_without_an_eager_counterpart_stays_as_it_is() {
        let g = files(&[("m.json", G)]);
        let out = fold_files(&g, &Files::new(), &Files::new(), &Files::new())
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out, g);
        assert_eq!(summary_of(Path::new("plots/m.json")), None);
        assert_eq!(
            summary_of(Path::new("q.vit.json")),
            Some(PathBuf::from("q.md"))
        );
    }
}
