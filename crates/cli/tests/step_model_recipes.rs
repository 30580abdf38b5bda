//! `fp8sel gen-policy --recipes blockwise,tensorwise` with the step model, end to end with the
//! stand-in workers (`tests/fake_te/adaptive_fp8/bench/step_inputs.py`: under tensorwise fc1 and
//! fc2 pay more in FP8 and qkv less; `numerics.py`: each module's error, one over the bound on
//! request).

#![allow(clippy::unwrap_used)]

mod common;

use common::{err, root};

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn gen_policy(out: &Path, extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut args = vec!["--tp", "1", "--execution", "eager"];
    args.extend_from_slice(extra);
    common::gen_with_stand_ins(out, &args, env)
}

fn read(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// Each key's eager recipe steps: (ub_name, [(from, recipe)]).
fn eager_steps(p: &Value) -> Vec<(String, Vec<(u64, String)>)> {
    p["recipes"]["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let steps = k["eager"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| {
                    let r = s["recipe"].as_str().unwrap_or("bf16").to_owned();
                    (s["from"].as_u64().unwrap(), r)
                })
                .collect();
            (k["key"]["ub_name"].as_str().unwrap().to_owned(), steps)
        })
        .collect()
}

const BOTH: [&str; 4] = ["--backend", "step", "--recipes", "blockwise,tensorwise"];

#[test]
fn each_recipe_is_measured_probed_and_chosen_per_module() {
    let dir = tempfile::tempdir().unwrap();
    let o = gen_policy(dir.path(), &BOTH, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let e = err(&o);
    for said in [
        "the same in tensorwise",
        "the numerics probe in blockwise",
        "the numerics probe in tensorwise",
    ] {
        assert!(e.contains(said), "{said}: {e}");
    }
    let reports = dir.path().join("reports");
    let argv = |f: &str| std::fs::read_to_string(reports.join(f)).unwrap();
    assert!(
        argv("llama3_2_1b_tp1_ep1_etp1_tensorwise_inputs_step.json.argv")
            .contains("--recipe tensorwise")
    );
    assert!(argv("llama3_2_1b_tp1_ep1_etp1_inputs_step.json.argv").contains("--recipe blockwise"));
    assert!(
        argv("llama3_2_1b_tensorwise_numerics.json.argv")
            .contains("--recipe tensorwise --layers 2 --seq-length 4096 --steps 2")
    );
    let p = read(&dir.path().join("llama3_2_1b.json"));
    let md = std::fs::read_to_string(dir.path().join("llama3_2_1b.md")).unwrap();
    assert!(md.contains("## Recipes per module"), "{md}");
    assert_eq!(p["recipes"]["base"], "blockwise", "{p}");
    assert_eq!(p["recipes"]["max_quant_error"], 0.05, "{p}");
    let steps = eager_steps(&p);
    let of = |ub: &str| &steps.iter().find(|s| s.0 == ub).unwrap().1;
    // fc1 and fc2 pay more in tensorwise: they run it; qkv pays less there: never tensorwise.
    for ub in ["fc1", "fc2"] {
        assert!(
            of(ub).iter().any(|s| s.1 == "tensorwise"),
            "{ub}: {steps:?}"
        );
    }
    assert!(of("qkv").iter().all(|s| s.1 != "tensorwise"), "{steps:?}");
    // The rules are the base recipe's alone: the same as a blockwise run's.
    let single = tempfile::tempdir().unwrap();
    let o = gen_policy(single.path(), &["--backend", "step"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert_eq!(
        read(&single.path().join("llama3_2_1b.json"))["rules"],
        p["rules"]
    );
    // explain shows a module's recipe from the plan.
    let from = of("fc1").iter().find(|s| s.1 == "tensorwise").unwrap().0;
    let x = Command::new(env!("CARGO_BIN_EXE_fp8sel"))
        .current_dir(root())
        .args([
            "explain",
            "--json",
            "--model",
            "fixtures/models/llama3_2_1b.yaml",
            "--seq-length",
        ])
        .arg(from.to_string())
        .arg("--policy")
        .arg(dir.path().join("llama3_2_1b.json"))
        .output()
        .unwrap();
    assert_eq!(x.status.code(), Some(0), "{}", err(&x));
    let v: Value = serde_json::from_slice(&x.stdout).unwrap();
    let fc1 = v["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["ub_name"] == "fc1")
        .unwrap();
    assert_eq!(fc1["recipe"], "tensorwise", "{fc1}");
}

#[test]
fn a_module_over_the_bound_keeps_off_that_recipe_and_a_given_report_is_not_probed_again() {
    let dir = tempfile::tempdir().unwrap();
    let o = gen_policy(
        dir.path(),
        &BOTH,
        &[("FAKE_NUMERICS_OVER", "fc1:tensorwise")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let p = read(&dir.path().join("llama3_2_1b.json"));
    let steps = eager_steps(&p);
    let fc1 = &steps.iter().find(|s| s.0 == "fc1").unwrap().1;
    assert!(fc1.iter().all(|s| s.1 != "tensorwise"), "{steps:?}");
    // The probe's tensorwise report, given back: tensorwise is not probed again.
    let given = dir.path().join("given.json");
    std::fs::copy(
        dir.path()
            .join("reports/llama3_2_1b_tensorwise_numerics.json"),
        &given,
    )
    .unwrap();
    let again = tempfile::tempdir().unwrap();
    let mut extra = BOTH.to_vec();
    extra.extend(["--numerics", given.to_str().unwrap()]);
    let o = gen_policy(again.path(), &extra, &[]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(
        !err(&o).contains("the numerics probe in tensorwise"),
        "{}",
        err(&o)
    );
    assert!(
        err(&o).contains("the numerics probe in blockwise"),
        "{}",
        err(&o)
    );
    let q = read(&again.path().join("llama3_2_1b.json"));
    assert_eq!(
        q["recipes"], p["recipes"],
        "the given report bounds as the probe's did"
    );
}

#[test]
fn recipes_are_refused_where_no_choice_can_be_made() {
    let dir = tempfile::tempdir().unwrap();
    for (extra, says) in [
        (
            vec!["--backend", "step", "--recipes", "blockwise"],
            "needs two recipes",
        ),
        (
            vec!["--backend", "step", "--recipes", "blockwise,delayed"],
            "--recipes delayed",
        ),
        (
            vec!["--backend", "step", "--recipes", "tensorwise,tensorwise"],
            "twice",
        ),
        (
            vec![
                "--backend",
                "step",
                "--step-tuner",
                "oracle",
                "--recipes",
                "blockwise,tensorwise",
            ],
            "not the oracle",
        ),
        (
            vec![
                "--backend",
                "step",
                "--recipe",
                "tensorwise",
                "--recipes",
                "blockwise,tensorwise",
            ],
            "leave out --recipe",
        ),
    ] {
        let o = gen_policy(dir.path(), &extra, &[]);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", err(&o));
        assert!(err(&o).contains(says), "{extra:?}: {}", err(&o));
    }
    // A probe that writes nothing stops the run and says how to give its report instead.
    let o = gen_policy(dir.path(), &BOTH, &[("FAKE_NUMERICS_FAIL", "1")]);
    assert_ne!(o.status.code(), Some(0));
    assert!(
        err(&o).contains("wrote no report") && err(&o).contains("--numerics"),
        "{}",
        err(&o)
    );
    assert!(!dir.path().join("llama3_2_1b.json").exists());
}
