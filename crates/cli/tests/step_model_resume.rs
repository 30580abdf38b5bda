//! `fp8sel gen-policy --resume` with the stand-in worker: a layout's inputs an earlier run left
//! are reused and only the check runs; inputs measured otherwise are refused, naming the file,
//! the field and the fix.

#![allow(clippy::unwrap_used)]

mod common;

use common::err;

const EAGER: [&str; 6] = ["--backend", "step", "--tp", "1", "--execution", "eager"];
const INPUTS: &str = "reports/llama3_2_1b_tp1_ep1_etp1_inputs_step.json";

fn run(dir: &std::path::Path, extra: &[&str]) -> std::process::Output {
    run_with(dir, extra, &[])
}

/// [`run`] with the stand-in's `env`.
fn run_with(dir: &std::path::Path, extra: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut args = EAGER.to_vec();
    args.extend_from_slice(extra);
    common::gen_with_stand_ins(dir, &args, env)
}

fn rules(dir: &std::path::Path) -> serde_json::Value {
    let p = std::fs::read_to_string(dir.join("llama3_2_1b.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&p).unwrap()["rules"].clone()
}

#[test]
fn a_resumed_layout_reuses_its_inputs_and_runs_its_check() {
    let dir = tempfile::tempdir().unwrap();
    let first = run(dir.path(), &[]);
    assert_eq!(first.status.code(), Some(0), "{}", err(&first));
    let inputs = std::fs::read(dir.path().join(INPUTS)).unwrap();
    let made = rules(dir.path());
    std::fs::remove_file(dir.path().join("llama3_2_1b.json")).unwrap();

    let again = run(dir.path(), &["--resume"]);
    let e = err(&again);
    assert_eq!(again.status.code(), Some(0), "{e}");
    assert!(
        e.contains(
            "--resume: the inputs an earlier run measured on stand-in, host Stand-in CPU, 16 CPUs ("
        ),
        "{e}"
    );
    // The worker ran checks only: its inputs line never, the file as it was.
    assert!(!e.contains("stand-in step_inputs: tp 1\n"), "{e}");
    assert!(e.contains("stand-in step_inputs: tp 1 check"), "{e}");
    assert_eq!(std::fs::read(dir.path().join(INPUTS)).unwrap(), inputs);
    assert_eq!(rules(dir.path()), made);

    // Without inputs to reuse, they are measured, and said so.
    let fresh = tempfile::tempdir().unwrap();
    let o = run(fresh.path(), &["--resume"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    assert!(err(&o).contains("--resume: no inputs at "), "{}", err(&o));
    assert!(
        err(&o).contains("stand-in step_inputs: tp 1\n"),
        "{}",
        err(&o)
    );
}

#[test]
fn inputs_measured_otherwise_are_refused_naming_the_file_the_field_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let first = run(dir.path(), &[]);
    assert_eq!(first.status.code(), Some(0), "{}", err(&first));
    let file = dir.path().join(INPUTS);
    let refused = |extra: &[&str], field: &str| {
        let o = run(dir.path(), extra);
        let e = err(&o);
        assert_eq!(o.status.code(), Some(2), "{e}");
        assert!(
            e.contains(&file.display().to_string())
                && e.contains(&format!("field `{field}`"))
                && e.contains("fix: run without --resume"),
            "{field}: {e}"
        );
    };
    // Another sweep, another depth.
    refused(
        &["--resume", "--tokens", "1024,2048,4096"],
        "modules[].tokens",
    );
    refused(&["--resume", "--layers", "4"], "layers");
    // Another format or amax history of the same recipe.
    let delayed = tempfile::tempdir().unwrap();
    let o = run(delayed.path(), &["--recipe", "delayed"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    for (flags, field) in [
        (&["--fp8-format", "e4m3"][..], "fp8_format"),
        (&["--amax-history-len", "16"][..], "amax_history_len"),
        (
            &["--amax-compute-algo", "most_recent"][..],
            "amax_compute_algo",
        ),
    ] {
        let o = run(
            delayed.path(),
            &[&["--resume", "--recipe", "delayed"][..], flags].concat(),
        );
        let e = err(&o);
        assert_eq!(o.status.code(), Some(2), "{field}: {e}");
        assert!(e.contains(&format!("field `{field}`")), "{field}: {e}");
    }
    let o = run(delayed.path(), &["--resume", "--recipe", "delayed"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    // Another GPU: found by the first check the worker runs.
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        text.replace("\"stand-in\"", "\"NVIDIA H100 80GB HBM3\""),
    )
    .unwrap();
    refused(&["--resume"], "device");
    // Measured with FP8 weights (a document that predates the field held them): today's worker
    // measures BF16 ones.
    std::fs::write(
        &file,
        text.replace("\"fp8_param\": false", "\"fp8_param\": true"),
    )
    .unwrap();
    refused(&["--resume"], "fp8_param");
    let mut older: serde_json::Value = serde_json::from_str(&text).unwrap();
    older.as_object_mut().unwrap().remove("fp8_param").unwrap();
    std::fs::write(&file, older.to_string()).unwrap();
    refused(&["--resume"], "fp8_param");
    // Stopped before they ended.
    std::fs::write(
        &file,
        text.replace("\"complete\": true", "\"complete\": false"),
    )
    .unwrap();
    refused(&["--resume"], "complete");
    // The oracle measures no inputs.
    let o = run(dir.path(), &["--resume", "--step-tuner", "oracle"]);
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        err(&o).contains("--resume reuses the step model's inputs"),
        "{}",
        err(&o)
    );
}

#[test]
fn a_resumed_layout_still_says_where_its_inputs_settling_stopped_getting_faster() {
    let dir = tempfile::tempdir().unwrap();
    let first = run_with(dir.path(), &[], &[("FAKE_STEP_UNSETTLED", "inputs")]);
    assert_eq!(first.status.code(), Some(0), "{}", err(&first));
    let again = run(dir.path(), &["--resume"]);
    let e = err(&again);
    assert_eq!(again.status.code(), Some(0), "{e}");
    assert!(
        e.contains("--resume: the inputs an earlier run measured"),
        "{e}"
    );
    assert!(
        e.contains("the inputs's steps still got faster after 12.1 s of settling"),
        "{e}"
    );
}
