use super::*;
use serde_json::{Value, json};

/// A typed results document of `header` over defaults and `rows`, each mode's missing figures
/// filled (the ms band its median, the ratios 1, the verdict `-`).
fn doc(header: Value, rows: Value) -> StepResults {
    let mut d = json!({"format": "adaptive-fp8-step-results", "version": 1, "model": "m.yaml",
        "component": "llm", "trainer": "te", "recipe": "r", "device": "d", "te_version": "t",
        "tp": 1, "layers": 2, "steps": 1, "repeats": 1, "execution": "eager"});
    for (k, v) in header.as_object().into_iter().flatten() {
        d[k] = v.clone();
    }
    let mut rows = rows;
    for r in rows.as_array_mut().into_iter().flatten() {
        let modes = r.get_mut("modes").and_then(Value::as_object_mut);
        for m in modes.into_iter().flatten().map(|(_, m)| m) {
            let ms = m.get("ms_median").cloned().unwrap_or(json!(10.0));
            let ratio = m.get("vs_bf16_median").cloned().unwrap_or(json!(1.0));
            for (k, v) in [
                ("fp8_groups", json!([])),
                ("ms_median", ms.clone()),
                ("ms_p10", ms.clone()),
                ("ms_p90", ms),
                ("vs_bf16_p10", ratio.clone()),
                ("vs_bf16_p90", ratio.clone()),
                ("vs_best_of_bf16_fp8", ratio.clone()),
                ("vs_bf16_median", ratio),
                ("verdict_vs_bf16", json!("-")),
            ] {
                m.as_object_mut().unwrap().entry(k).or_insert(v);
            }
        }
    }
    d["results"] = rows;
    serde_json::from_value(d).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn judge_rows_name_the_trainer_and_keep_failed_counts() {
    let v = doc(
        json!({"model": "scripts/device/heldout/m7/config.json", "tp": 1, "ep": 8, "layers": 2, "trainer": "megatron"}),
        json!([
          {"tokens": 1536, "execution": "graphed", "modes": {
            "bf16": {"vs_bf16_median": 1.0},
            "fp8": {"vs_bf16_median": 1.2},
            "hook:p.json": {"fp8_groups": ["a"], "vs_bf16_median": 0.9, "vs_bf16_p10": 0.8,
                            "vs_bf16_p90": 0.95, "verdict_vs_bf16": "faster", "vs_best_of_bf16_fp8": 0.9}}},
          {"tokens": 3072, "execution": "graphed", "error": "AssertionError: capture"}]),
    );
    let t = judge(&[("f.json".to_owned(), v)]);
    assert!(
        t.contains("| m7, TP 1 EP 8, 2 layer(s) | graphed (Megatron, hook) | 1536 | 1 | 0.900 (0.800-0.950) | faster | 1.200 | - | 0.900 |"),
        "{t}"
    );
    assert!(
        t.contains("| 3072 | - | error: AssertionError: capture |"),
        "{t}"
    );
}

#[test]
fn judge_rows_name_a_recipe_other_than_blockwise() {
    let label = |recipe: &str| {
        judge_label(&doc(
            json!({"model": "fixtures/models/q.yaml", "tp": 8, "layers": 2, "fp8_recipe": recipe}),
            json!([]),
        ))
    };
    assert_eq!(label("delayed"), "q, TP 8, 2 layer(s), delayed");
    assert_eq!(label("blockwise"), "q, TP 8, 2 layer(s)");
}

#[test]
fn judge_errors_keep_their_kind_and_first_sentences() {
    let oom = "OutOfMemoryError: CUDA out of memory. Tried to allocate 1.80 GiB. GPU 0 has a total capacity";
    assert_eq!(
        error_head(oom),
        "OutOfMemoryError: CUDA out of memory. Tried to allocate 1.80 GiB."
    );
    assert_eq!(
        error_head("AssertionError: capture"),
        "AssertionError: capture"
    );
    let long = "x".repeat(150);
    assert_eq!(error_head(&long).chars().count(), 100);
}

/// A Megatron judge's row that searched the oracle (9.0 ms, the fastest).
fn oracle_row() -> Value {
    json!({"tokens": 1536, "execution": "eager", "modes": {
        "bf16": {"ms_median": 10.0, "vs_bf16_median": 1.0},
        "fp8": {"ms_median": 11.0, "vs_bf16_median": 1.1},
        "hook:p.json": {"ms_median": 9.9, "fp8_groups": [], "vs_bf16_median": 0.99, "vs_bf16_p10": 0.9,
                        "vs_bf16_p90": 1.1, "verdict_vs_bf16": "tie", "vs_best_of_bf16_fp8": 0.99},
        "oracle": {"ms_median": 9.0, "vs_bf16_median": 0.9}}})
}

fn megatron() -> Value {
    json!({"model": "fixtures/models/l1.yaml", "tp": 1, "layers": 4, "trainer": "megatron"})
}

#[test]
fn judge_minimum_includes_the_oracle_where_the_row_searched_one() {
    let t = judge(&[("f.json".to_owned(), doc(megatron(), json!([oracle_row()])))]);
    // 9.9 ms over the oracle's 9.0, not over BF16's 10.0: a miss the BF16/FP8 minimum hides.
    assert!(t.contains("| tie | 1.100 | 0.900 | 1.100 |"), "{t}");
}

#[test]
fn a_later_run_of_a_failed_row_takes_its_place() {
    let ran = |tokens: u64| {
        json!({"tokens": tokens, "execution": "graphed", "modes": {
            "bf16": {"ms_median": 10.0, "vs_bf16_median": 1.0},
            "fp8": {"ms_median": 9.0, "vs_bf16_median": 0.9},
            "hook:p.json": {"ms_median": 9.5, "fp8_groups": ["a"], "vs_bf16_median": 0.95, "vs_bf16_p10": 0.9,
                            "vs_bf16_p90": 1.0, "verdict_vs_bf16": "faster", "vs_best_of_bf16_fp8": 1.055}}})
    };
    let oom = json!({"tokens": 3072, "execution": "graphed", "error": "OutOfMemoryError: CUDA out of memory."});
    let first = doc(megatron(), json!([ran(1536), oom, ran(6144)]));
    let again = doc(megatron(), json!([ran(3072)]));
    let t = judge(&[
        ("a.json".to_owned(), first.clone()),
        ("b.json".to_owned(), again),
    ]);
    let lines: Vec<&str> = t.lines().skip(2).collect();
    assert_eq!(lines.len(), 3, "{t}");
    assert!(lines[0].contains("| 1536 |"), "{t}");
    assert!(lines[1].contains("| 3072 (re-run) | 1 | 0.950"), "{t}");
    assert!(lines[2].contains("| 6144 |"), "{t}");
    assert!(!t.contains("error"), "{t}");
    // Another layout's run is not a re-run of this row.
    let mut other = megatron();
    other["layers"] = json!(2);
    let other = doc(other, json!([ran(3072)]));
    let t = judge(&[("a.json".to_owned(), first), ("c.json".to_owned(), other)]);
    assert!(
        t.contains("error: OutOfMemoryError")
            && t.contains("2 layer(s) | graphed (Megatron, hook) | 3072 |"),
        "{t}"
    );
}

#[test]
fn judge_minimum_is_paired_with_its_band_where_the_judge_wrote_it() {
    let mut row = oracle_row();
    let hook = &mut row["modes"]["hook:p.json"];
    hook["vs_min_of"] = json!("oracle");
    hook["vs_min_median"] = json!(1.08);
    hook["vs_min_p10"] = json!(1.02);
    hook["vs_min_p90"] = json!(1.15);
    let t = judge(&[("f.json".to_owned(), doc(megatron(), json!([row])))]);
    // The paired median (1.08), not the ratio of medians (9.9 / 9.0 = 1.100).
    assert!(t.contains("| 0.900 | 1.080 (1.020-1.150) |"), "{t}");
}

#[test]
fn modes_give_every_policy_its_row_hook_and_native_side_by_side() {
    let v = doc(
        json!({"model": "x/L8/config.json", "trainer": "megatron"}),
        json!([
          {"tokens": 8192, "execution": "eager", "modes": {
            "bf16": {"vs_bf16_median": 1.0},
            "fp8": {"vs_bf16_median": 0.84},
            "hook:a.json": {"fp8_groups": ["fc1", "fc2"], "vs_bf16_median": 0.866,
                            "vs_bf16_p10": 0.864, "vs_bf16_p90": 0.872, "verdict_vs_bf16": "faster"},
            "native:a.json": {"fp8_groups": ["fc1", "fc2"], "vs_bf16_median": 0.870,
                              "vs_bf16_p10": 0.860, "vs_bf16_p90": 0.873, "verdict_vs_bf16": "faster"},
            "native:b.json": {"fp8_groups": [], "vs_bf16_median": 1.0}}},
          {"tokens": 4096, "execution": "eager", "error": "boom"}]),
    );
    let t = modes(&[("f.json".to_owned(), v)]);
    assert!(
        t.contains("| L8, TP 1, 2 layer(s) | eager | 8192 | a.json | fc1,fc2 | 0.866 (0.864-0.872) faster | 0.870 (0.860-0.873) faster | 0.840 |"),
        "{t}"
    );
    // A policy judged through one integration only: the other's cell is empty.
    assert!(t.contains("| b.json | - | - | 1.000"), "{t}");
    assert!(!t.contains("4096"), "{t}");
    assert_eq!(t.lines().count(), 4, "{t}");
}
