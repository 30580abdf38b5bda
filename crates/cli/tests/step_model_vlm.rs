//! A VLM under the step model: its language model, then its vision encoder from steps of its own
//! layers, through the step workers' stand-ins (`tests/fake_te`); `--component` makes one part.

#![allow(clippy::unwrap_used)]

mod common;

use common::err;

/// `fp8sel gen-policy` of Qwen3-VL under `--backend step` at TP 1, through the stand-ins, into
/// `dir`, with `extra` flags.
fn gen_vlm(dir: &std::path::Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["--backend", "step", "--tp", "1"];
    args.extend_from_slice(extra);
    common::gen_model_with_stand_ins("fixtures/models/qwen3_vl_235b_a22b.yaml", dir, &args, &[])
}

#[test]
fn a_vlm_gets_its_language_model_and_its_vision_encoder_from_the_step_model() {
    let dir = tempfile::tempdir().unwrap();
    let o = gen_vlm(dir.path(), &["--ep", "8,4", "--step-trainer", "megatron"]);
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let e = err(&o);
    assert!(
        e.contains("the vision encoder by the step model too"),
        "{e}"
    );
    // The Megatron judge builds the language model only: the vision encoder's steps are TE's.
    assert!(
        e.contains("vision encoder: its steps and its check are the TE blocks'"),
        "{e}"
    );
    let read = |f: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.path().join(f)).unwrap()).unwrap()
    };
    // Each part is the step model's, with its own component, checked in the step.
    for (file, component) in [
        ("qwen3_vl_235b_a22b.llm.json", "llm"),
        ("qwen3_vl_235b_a22b.vit.json", "vit"),
    ] {
        let p = read(file);
        assert_eq!(p["provenance"]["component"], component, "{file}");
        assert!(
            p["provenance"]["step"]["model"][0]["check"].is_array(),
            "{file}: {}",
            p["provenance"]
        );
    }
    // The vision encoder has no experts: one layout for both EPs, its worker told whose layers.
    let reports = dir.path().join("reports");
    let vit: Vec<String> = std::fs::read_dir(&reports)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("qwen3_vl_235b_a22b_vit_") && n.ends_with("_inputs_step.json"))
        .collect();
    assert_eq!(
        vit,
        ["qwen3_vl_235b_a22b_vit_tp1_ep1_etp1_inputs_step.json"]
    );
    let argv = std::fs::read_to_string(reports.join(format!("{}.argv", vit[0]))).unwrap();
    assert!(
        argv.contains("--component vit")
            && argv.contains("--ep 1")
            && argv.contains("--image-tokens 1024"),
        "{argv}"
    );
    let llm_argv = std::fs::read_to_string(
        reports.join("qwen3_vl_235b_a22b_tp1_ep8_etp1_inputs_step.json.argv"),
    )
    .unwrap();
    assert!(
        !llm_argv.contains("--component") && !llm_argv.contains("--image-tokens"),
        "{llm_argv}"
    );
    // One summary, the vision encoder's part first, then the language model's.
    let md = std::fs::read_to_string(dir.path().join("qwen3_vl_235b_a22b.md")).unwrap();
    let (v, s) = (
        md.find("# qwen3_vl_235b_a22b's vision encoder: the step model's policy")
            .unwrap(),
        md.find("# qwen3_vl_235b_a22b: the step model's policy")
            .unwrap(),
    );
    assert!(v < s, "{md}");
    // Pictures: the step model's for both parts.
    let plots: Vec<String> = std::fs::read_dir(dir.path().join("plots/qwen3_vl_235b_a22b"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        plots.iter().any(|p| p.starts_with("step-tp1-ep8-")),
        "{plots:?}"
    );
    assert!(
        plots.iter().any(|p| p.starts_with("vit-step-tp1-")),
        "{plots:?}"
    );
    assert!(!plots.iter().any(|p| p.starts_with("llm-")), "{plots:?}");
}

#[test]
fn component_makes_one_part_of_a_vlm_and_refuses_a_language_model() {
    for (part, made, not) in [
        (
            "vit",
            "qwen3_vl_235b_a22b.vit.json",
            "qwen3_vl_235b_a22b.llm.json",
        ),
        (
            "llm",
            "qwen3_vl_235b_a22b.llm.json",
            "qwen3_vl_235b_a22b.vit.json",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let o = gen_vlm(dir.path(), &["--ep", "8", "--component", part]);
        assert_eq!(o.status.code(), Some(0), "{}", err(&o));
        assert!(dir.path().join(made).is_file(), "{part}");
        assert!(!dir.path().join(not).exists(), "{part}");
        let reports: Vec<String> = std::fs::read_dir(dir.path().join("reports"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with("_inputs_step.json"))
            .collect();
        let want = if part == "vit" {
            "qwen3_vl_235b_a22b_vit_tp1_ep1_etp1_inputs_step.json"
        } else {
            "qwen3_vl_235b_a22b_tp1_ep8_etp1_inputs_step.json"
        };
        assert_eq!(reports, [want]);
    }
    let e = refused_for_a_language_model(&["--component", "vit"]);
    assert!(
        e.contains("--component vit") && e.contains("not a VLM") && e.contains("fix:"),
        "{e}"
    );
}

/// `gen-policy --backend step` of Llama-3.2-1B (no vision encoder) with `extra`: refused, nothing
/// written; its stderr.
fn refused_for_a_language_model(extra: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec!["--backend", "step", "--tp", "1"];
    args.extend_from_slice(extra);
    let o = common::gen_model_with_stand_ins(
        "fixtures/models/llama3_2_1b.yaml",
        dir.path(),
        &args,
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", err(&o));
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "nothing written"
    );
    err(&o)
}

#[test]
fn image_tokens_reach_the_vision_encoders_worker_and_are_refused_without_a_vlm() {
    let dir = tempfile::tempdir().unwrap();
    let o = gen_vlm(
        dir.path(),
        &["--ep", "8", "--component", "vit", "--image-tokens", "2304"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", err(&o));
    let argv = std::fs::read_to_string(
        dir.path()
            .join("reports/qwen3_vl_235b_a22b_vit_tp1_ep1_etp1_inputs_step.json.argv"),
    )
    .unwrap();
    assert!(argv.contains("--image-tokens 2304"), "{argv}");

    let e = refused_for_a_language_model(&["--image-tokens", "2304"]);
    assert!(
        e.contains("--image-tokens 2304")
            && e.contains("no model given is a VLM")
            && e.contains("fix: leave"),
        "{e}"
    );
}
