//! The shipped policy of a model from the step model's committed reports: it replaces the folded
//! file only once it covers every key the folded file has a rule for, names its sources as
//! repository paths, and is the policy `merge-policy --step-model` makes from the same files.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use fp8_pipeline::build::Files;
use fp8_pipeline::shipped::{STEP_MODEL_DIR, step_model_files};
use fp8_policy::Recipe;

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

/// The blockwise step-model files of `models` from `root`'s reports, into `files` (notes dropped).
fn blockwise_files(root: &Path, models: &[PathBuf], files: &mut Files) {
    step_model_files(root, Recipe::Blockwise, models, files, &Notes::default()).unwrap();
}

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
        step_model_files(root.path(), Recipe::Blockwise, &models, files, &notes).unwrap()
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

/// Rewrites `file`'s GPU as an H100's.
fn relabel_h100(file: &Path) {
    let text = std::fs::read_to_string(file).unwrap();
    let t = text.replacen(
        "\"device\": \"NVIDIA H200\"",
        "\"device\": \"NVIDIA H100 80GB HBM3\"",
        1,
    );
    assert_ne!(
        t,
        text,
        "{}: its device is as the test expects",
        file.display()
    );
    std::fs::write(file, t).unwrap();
}

#[test]
fn another_gpus_reports_are_refused_beside_the_h200s_and_in_its_folder() {
    let root = root_with_reports();
    let dir = root.path().join(STEP_MODEL_DIR);
    let f = |n: &str| dir.join(format!("llama3_2_1b_tp1_ep1_etp1_{n}_step.json"));
    let models = [repo().join("fixtures/models/llama3_2_1b.yaml")];
    let run = || {
        step_model_files(
            root.path(),
            Recipe::Blockwise,
            &models,
            &mut Files::new(),
            &Notes::default(),
        )
    };
    assert!(run().is_ok(), "the H200's own reports ship");
    // A check timed on another GPU cannot judge the H200's inputs.
    relabel_h100(&f("recheck"));
    let e = fp8_pipeline::step::saved::layout_models(
        &[f("inputs")],
        &[f("check"), f("recheck")],
        None,
        &[],
    )
    .unwrap_err();
    assert!(
        e.contains("recheck_step.json: field `device`: timed on NVIDIA H100 80GB HBM3")
            && e.contains("inputs_step.json on NVIDIA H200")
            && e.contains("fix:"),
        "{e}"
    );
    // Two layouts measured on two GPUs are not one policy.
    let h200 = fp8_pipeline::step::saved::layout_models(&[f("inputs")], &[], None, &[]).unwrap();
    relabel_h100(&f("inputs"));
    let h100 = fp8_pipeline::step::saved::layout_models(&[f("inputs")], &[], None, &[]).unwrap();
    let both: Vec<_> = h200.into_iter().chain(h100).collect();
    let e = fp8_pipeline::step::saved::saved_policy(&both, &[]).unwrap_err();
    assert!(
        e.contains("a policy is one machine's") && e.contains("fix:"),
        "{e}"
    );
    // The whole layout measured on an H100 (inputs and checks alike): a user's policy, never the
    // shipped H200 file.
    relabel_h100(&f("check"));
    let e = run().unwrap_err();
    assert!(
        e.contains("field `device`: measured on NVIDIA H100 80GB HBM3")
            && e.contains("fix: keep another GPU's reports out of reports/h200"),
        "{e}"
    );
}

/// A root with Qwen3-VL's language-model reports from the H200, and with `vit` its vision
/// encoder's (also the H200's).
fn vlm_root(vit: bool) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join(STEP_MODEL_DIR);
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(repo().join(STEP_MODEL_DIR)).unwrap() {
        let p = e.unwrap().path();
        let n = p.file_name().unwrap().to_string_lossy().into_owned();
        if n.starts_with("qwen3_vl_235b_a22b_")
            && (vit || !n.starts_with("qwen3_vl_235b_a22b_vit_"))
        {
            std::fs::copy(&p, dir.join(&n)).unwrap();
        }
    }
    root
}

#[test]
fn a_vlms_vision_encoder_from_the_step_model_replaces_its_fold_beside_its_language_model() {
    let models = [repo().join("fixtures/models/qwen3_vl_235b_a22b.yaml")];
    let (llm, vit, md) = (
        PathBuf::from("qwen3_vl_235b_a22b.llm.json"),
        PathBuf::from("qwen3_vl_235b_a22b.vit.json"),
        PathBuf::from("qwen3_vl_235b_a22b.md"),
    );
    let fold_plot = PathBuf::from("plots/qwen3_vl_235b_a22b/vit-fold.svg");
    // The folded files, as the fold made them before the vision encoder's step model ran
    // (`tests/data/vlm_fold`; its summary describes both parts).
    let folded = || -> Files {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/vlm_fold");
        let mut f: Files = [&llm, &vit, &md]
            .into_iter()
            .map(|n| {
                // The language model's file is today's (the step model's since before).
                let from = if *n == llm {
                    repo().join("policies")
                } else {
                    data.clone()
                };
                (n.clone(), std::fs::read(from.join(n)).unwrap())
            })
            .collect();
        f.insert(fold_plot.clone(), b"<svg/>".to_vec());
        f
    };
    let run = |root: &tempfile::TempDir| {
        let mut files = folded();
        blockwise_files(root.path(), &models, &mut files);
        files
    };
    let text = |f: &Files, n: &Path| String::from_utf8(f[n].clone()).unwrap();

    // The language model's reports alone: the vision encoder keeps its fold and its pictures,
    // and the summary its folded part, the step model's after it.
    let before = run(&vlm_root(false));
    assert_eq!(before[&vit], folded()[&vit]);
    assert!(before.contains_key(&fold_plot));
    let summary = text(&before, &md);
    assert!(summary.starts_with(&text(&folded(), &md)), "{summary}");
    assert!(summary.contains("# qwen3_vl_235b_a22b: the step model's policy"));

    // With the vision encoder's: its file is the step model's, its own component, the fold's
    // pictures and summary gone; the language model's file is the same.
    let after = run(&vlm_root(true));
    let policy = fp8_policy::Policy::from_json_str(&text(&after, &vit), "vit.json").unwrap();
    assert_eq!(policy.provenance().unwrap().component, "vit");
    assert_ne!(after[&vit], before[&vit]);
    assert_eq!(after[&llm], before[&llm]);
    assert!(!after.contains_key(&fold_plot));
    assert!(after.contains_key(Path::new("plots/qwen3_vl_235b_a22b/vit-step-tp1-eager.svg")));
    let summary = text(&after, &md);
    let (v, l) = (
        summary.find("# qwen3_vl_235b_a22b's vision encoder: the step model's policy"),
        summary.find("# qwen3_vl_235b_a22b: the step model's policy"),
    );
    assert!(v == Some(0) && l.is_some(), "{summary}");
    assert!(!summary.contains("Thresholds by execution"), "{summary}");
}

#[test]
fn a_vision_encoders_inputs_are_not_merged_with_the_language_models() {
    let root = vlm_root(true);
    let dir = Path::new(STEP_MODEL_DIR);
    let f = |n: &str| dir.join(format!("qwen3_vl_235b_a22b_{n}_step.json"));
    // The vision encoder's check is its own inputs', not a language model's at the same layout
    // (here its own check relabelled `llm`, at other counts: 1024 -> 11024).
    let own = std::fs::read_to_string(root.path().join(f("vit_tp1_ep1_etp1_check"))).unwrap();
    let other = own
        .replacen("\"component\": \"vit\"", "\"component\": \"llm\"", 1)
        .replace("\"tokens\": ", "\"tokens\": 1");
    assert_ne!(own, other);
    std::fs::write(root.path().join(f("llm_relabelled_check")), other).unwrap();
    let rows = |checks: &[PathBuf]| {
        fp8_pipeline::step::saved::layout_models(
            &[f("vit_tp1_ep1_etp1_inputs")],
            checks,
            Some(root.path()),
            &[],
        )
        .unwrap()[0]
            .1
            .check
            .len()
    };
    let alone = rows(&[f("vit_tp1_ep1_etp1_check")]);
    assert!(alone > 0);
    assert_eq!(
        rows(&[f("vit_tp1_ep1_etp1_check"), f("llm_relabelled_check")]),
        alone
    );
    let both = fp8_pipeline::step::saved::layout_models(
        &[f("tp1_ep8_etp1_inputs"), f("vit_tp1_ep1_etp1_inputs")],
        &[],
        Some(root.path()),
        &[],
    )
    .unwrap();
    let e = fp8_pipeline::step::saved::saved_policy(&both, &[]).unwrap_err();
    assert!(
        e.contains("2 components (llm, vit)") && e.contains("fix:"),
        "{e}"
    );
}

/// A root whose `recipe` step-model folder holds Qwen2.5-72B's H200 reports at every TP,
/// measured in blockwise and, with `relabel`, relabelled as measured in tensorwise.
fn recipe_root(recipe: Recipe, relabel: bool) -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let dir = root
        .path()
        .join(fp8_pipeline::shipped::step_model_dir(recipe));
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(repo().join(STEP_MODEL_DIR)).unwrap() {
        let p = e.unwrap().path();
        let n = p.file_name().unwrap().to_string_lossy().into_owned();
        if n.starts_with("qwen2_5_72b_tp") {
            let text = std::fs::read_to_string(&p).unwrap();
            let text = if relabel {
                let t = text
                    .replacen(
                        "\"fp8_recipe\": \"blockwise\"",
                        "\"fp8_recipe\": \"tensorwise\"",
                        1,
                    )
                    .replacen(
                        "\"recipe\": \"Float8BlockScaling\"",
                        "\"recipe\": \"Float8CurrentScaling\"",
                        1,
                    );
                assert_ne!(t, text, "{n}: its recipe fields are as the test expects");
                t
            } else {
                text
            };
            std::fs::write(dir.join(&n), text).unwrap();
        }
    }
    root
}

#[test]
fn a_recipes_shipped_file_is_its_step_model_once_its_reports_cover_the_fold() {
    let models = [repo().join("fixtures/models/qwen2_5_72b.yaml")];
    let name = PathBuf::from("qwen2_5_72b.json");
    let fold = std::fs::read(repo().join("policies/tensorwise/qwen2_5_72b.json")).unwrap();
    let run = |root: &tempfile::TempDir, recipe: Recipe| {
        let mut files: Files = [(name.clone(), fold.clone())].into();
        step_model_files(root.path(), recipe, &models, &mut files, &Notes::default())
            .map(|()| files)
    };
    // No tensorwise step-model reports: the fold stays.
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(run(&empty, Recipe::Tensorwise).unwrap()[&name], fold);
    // Reports measured in tensorwise, every TP: the step model's file, of that recipe, from
    // that recipe's folder.
    let files = run(&recipe_root(Recipe::Tensorwise, true), Recipe::Tensorwise).unwrap();
    let text = String::from_utf8(files[&name].clone()).unwrap();
    assert_ne!(files[&name], fold);
    assert!(
        text.contains(
            "reports/h200/tensorwise/step_model/qwen2_5_72b_tp8_ep1_etp8_inputs_step.json"
        ),
        "{text}"
    );
    let p = fp8_policy::Policy::from_json_str(&text, "p.json").unwrap();
    assert_eq!(p.provenance().unwrap().recipe, ["tensorwise"]);
    assert!(files.contains_key(Path::new("plots/qwen2_5_72b/step-tp8-eager.svg")));
    // Blockwise measurements in the tensorwise folder would ship as tensorwise's: refused.
    let e = run(&recipe_root(Recipe::Tensorwise, false), Recipe::Tensorwise).unwrap_err();
    assert!(
        e.contains("measured in blockwise")
            && e.contains("fix: move it to reports/h200/step_model"),
        "{e}"
    );
}

#[test]
fn a_layouts_re_timing_rounds_are_read_in_round_order() {
    // A second re-timing round (the first's steps again, 5% slower): by name it sorts before the
    // first (`recheck2` < `recheck`), in round order it comes after.
    let root = root_with_reports();
    let dir = root.path().join(STEP_MODEL_DIR);
    let f = |n: &str| dir.join(format!("llama3_2_1b_tp1_ep1_etp1_{n}_step.json"));
    let mut doc = fp8_report::step_inputs::read_step_inputs(&f("recheck")).unwrap();
    for s in &mut doc.step_times {
        s.wall_ms.iter_mut().for_each(|w| *w *= 1.05);
    }
    std::fs::write(f("recheck2"), doc.to_json()).unwrap();
    let mut files = Files::new();
    let models = [repo().join("fixtures/models/llama3_2_1b.yaml")];
    blockwise_files(root.path(), &models, &mut files);
    let ours: serde_json::Value =
        serde_json::from_slice(&files[Path::new("llama3_2_1b.json")]).unwrap();
    let checked = |order: &[&str]| {
        let files: Vec<PathBuf> = order.iter().map(|n| f(n)).collect();
        let lm = fp8_pipeline::step::saved::layout_models(&[f("inputs")], &files, None, &[]);
        let p = fp8_pipeline::step::saved::saved_policy(&lm.unwrap(), &[]).unwrap();
        let p: serde_json::Value = serde_json::from_str(&p.to_json()).unwrap();
        p["provenance"]["step"]["model"][0]["check"].clone()
    };
    let mine = &ours["provenance"]["step"]["model"][0]["check"];
    assert_eq!(mine, &checked(&["check", "recheck", "recheck2"]));
    assert_ne!(mine, &checked(&["check", "recheck2", "recheck"]));
}
