//! The shipped policy of a model from the step model's committed reports: it replaces the folded
//! file only once it covers every key the folded file has a rule for, names its sources as
//! repository paths, and is the policy `merge-policy --step-model` makes from the same files.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use fp8_pipeline::build::Files;
use fp8_pipeline::shipped::{STEP_MODEL_DIR, step_model_files};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Notes, kept.
#[derive(Default)]
struct Notes(Mutex<Vec<String>>);

impl fp8_bench::driver::Progress for Notes {
    fn note(&self, m: &str) {
        self.0.lock().unwrap().push(m.to_owned());
    }
}
impl fp8_pipeline::progress::Progress for Notes {}

/// A root whose step-model folder holds Llama-3.2-1B's TP 1 reports from the H200 (and a file
/// of another kind, which is not read).
fn root_with_reports() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(STEP_MODEL_DIR);
    std::fs::create_dir_all(&dir).unwrap();
    let from = repo().join("docs/device-logs/step_model/shipped/llama3_2_1b/reports");
    for name in [
        "llama3_2_1b_tp1_ep1_etp1_inputs_step.json",
        "llama3_2_1b_tp1_ep1_etp1_check_step.json",
        "llama3_2_1b_tp1_ep1_etp1_recheck_step.json",
        "llama3_2_1b_tp1_ep1_etp1_check_plans_step.json",
    ] {
        std::fs::copy(from.join(name), dir.join(name)).unwrap();
    }
    root
}

#[test]
fn the_step_models_file_replaces_the_fold_only_where_it_covers_every_key() {
    let root = root_with_reports();
    let models = [repo().join("fixtures/models/llama3_2_1b.yaml")];
    let name = PathBuf::from("llama3_2_1b.json");
    let notes = Notes::default();
    let run = |files: &mut Files| {
        step_model_files(
            root.path(),
            Path::new(STEP_MODEL_DIR),
            &models,
            files,
            &notes,
        )
        .unwrap()
    };

    // The shipped file has TP 1 and TP 2 rules; the reports measured TP 1: the fold stays.
    let shipped = std::fs::read(repo().join("policies/llama3_2_1b.json")).unwrap();
    let mut files: Files = [(name.clone(), shipped.clone())].into();
    run(&mut files);
    assert_eq!(files[&name], shipped);
    let said = notes.0.lock().unwrap().join("\n");
    assert!(
        said.contains("stays the fold") && said.contains("tp=2"),
        "{said}"
    );

    // No folded file: the step model's, with its summary.
    let mut files = Files::new();
    run(&mut files);
    let text = String::from_utf8(files[&name].clone()).unwrap();
    assert!(files.contains_key(Path::new("llama3_2_1b.md")));
    assert!(
        text.contains("reports/h200/step_model/llama3_2_1b_tp1_ep1_etp1_inputs_step.json"),
        "sources as repository paths"
    );
    assert!(
        !text.contains(&root.path().display().to_string()),
        "no machine path"
    );
    // The same policy merge-policy --step-model makes from those files.
    let dir = root.path().join(STEP_MODEL_DIR);
    let f = |n: &str| dir.join(format!("llama3_2_1b_tp1_ep1_etp1_{n}_step.json"));
    let direct = fp8_pipeline::step::saved::layout_models(
        &[f("inputs")],
        &[f("check"), f("recheck")],
        None,
        &[],
    )
    .unwrap();
    let direct = fp8_pipeline::step::saved::saved_policy(&direct, &[]).unwrap();
    let ours = fp8_policy::Policy::from_json_str(&text, "p.json").unwrap();
    assert_eq!(ours.rules(), direct.rules());

    // A folded file whose keys it covers: replaced.
    let mut files: Files = [(name.clone(), direct.to_json().into_bytes())].into();
    run(&mut files);
    assert_eq!(files[&name], text.into_bytes());
}
