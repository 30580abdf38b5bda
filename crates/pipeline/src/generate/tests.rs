//! The job's layout defaults.

use super::{config_tp_note, default_layouts, layouts_left_out, no_layout};

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn etp_defaults_to_the_configs_else_to_each_tp_as_megatron() {
    // Mixtral's HF config names no ETP: each layout's ETP is its TP, the layout `explain`
    // and the trainer hooks resolve, so the policy has rules for what the trainer runs.
    let m = fp8_engine::load_model(root().join("examples/models/mixtral_8x7b.json")).unwrap();
    let l = default_layouts(&m, Some(&[1, 2, 4]), Some(&[8]), None);
    let got: Vec<_> = l.iter().map(|p| (p.tp, p.etp)).collect();
    assert_eq!(got, [(1, 1), (2, 2), (4, 4)]);
    // DeepSeek-V3's config says expert_tensor_parallel_size: 1.
    let d = fp8_engine::load_model(root().join("fixtures/models/deepseek_v3.yaml")).unwrap();
    assert!(
        default_layouts(&d, Some(&[2, 8]), Some(&[64]), None)
            .iter()
            .all(|p| p.etp == 1)
    );
    // Given ETPs win.
    assert!(
        default_layouts(&m, Some(&[2]), Some(&[8]), Some(&[1]))
            .iter()
            .all(|p| p.etp == 1)
    );
}

#[test]
fn tp_defaults_to_the_layout_the_config_trains_first_then_one_to_eight() {
    // Qwen2.5-72B's YAML trains at TP 4: that layout first (a time limit keeps it), then the
    // others, said; --tp wins, unsaid.
    let q = fp8_engine::load_model(root().join("fixtures/models/qwen2_5_72b.yaml")).unwrap();
    let tps = |m, tps: Option<&[u32]>| -> Vec<u32> {
        default_layouts(m, tps, None, None)
            .iter()
            .map(|p| p.tp)
            .collect()
    };
    assert_eq!(tps(&q, None), [4, 1, 2, 8]);
    assert!(config_tp_note(&q, None).is_some_and(|n| n.contains("TP 4")));
    assert_eq!(tps(&q, Some(&[1, 8])), [1, 8]);
    assert_eq!(config_tp_note(&q, Some(&[1, 8])), None);
    // An HF config names no TP: every TP of 1, 2, 4, 8 that divides the model.
    let l = fp8_engine::load_model(root().join("examples/models/llama3_8b.json")).unwrap();
    assert_eq!(tps(&l, None), [1, 2, 4, 8]);
    assert_eq!(config_tp_note(&l, None), None);
}

#[test]
fn layouts_the_model_does_not_divide_are_left_out_with_the_reason() {
    // A multi-query model (one key/value group) divides TP 1 only.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("config.json");
    std::fs::write(
        &cfg,
        r#"{"model_type": "gpt_bigcode", "n_embd": 1024, "n_head": 16, "n_layer": 2}"#,
    )
    .unwrap();
    let m = fp8_engine::load_model(&cfg).unwrap();
    let made: Vec<u32> = default_layouts(&m, None, None, None)
        .iter()
        .map(|p| p.tp)
        .collect();
    assert_eq!(made, [1]);
    let out = layouts_left_out(&m, None, None, None);
    assert_eq!(out.len(), 3, "{out:?}");
    assert!(
        out[0].contains("tp2")
            && out[0].contains("num_query_groups = 1 is not divisible by tp = 2"),
        "{out:?}"
    );
    // None made: the error names each one's reason.
    let left = layouts_left_out(&m, Some(&[2, 4]), None, None);
    assert!(default_layouts(&m, Some(&[2, 4]), None, None).is_empty());
    let e = no_layout(&cfg, &left);
    assert!(e.contains("tp = 2") && e.contains("tp = 4"), "{e}");
    // Expert parallelism on a dense model (one `--ep` for a dense and an MoE model): its EP 8
    // layouts are left out with Megatron's reason, its EP 1 ones made.
    let l = fp8_engine::load_model(root().join("examples/models/llama3_8b.json")).unwrap();
    let made = default_layouts(&l, Some(&[1]), Some(&[1, 8]), None);
    assert_eq!(made.iter().map(|p| p.ep).collect::<Vec<_>>(), [1]);
    let out = layouts_left_out(&l, Some(&[1]), Some(&[1, 8]), None);
    assert!(
        out.len() == 1 && out[0].contains("ep = 8 on a model without experts"),
        "{out:?}"
    );
}

#[test]
fn generated_files_no_longer_produced_are_named_and_others_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path();
    let mut files = crate::build::Files::new();
    files.insert("m.json".into(), b"{}".to_vec());
    super::write_files(out, &files).unwrap();
    for rel in [
        "plots/m/llm-row-fc2.svg",
        "old.md",
        "estimated/e.json",
        "README.txt",
    ] {
        fp8_io::create_parent_dir(&out.join(rel)).unwrap();
        std::fs::write(out.join(rel), b"x").unwrap();
    }
    let orphans = super::orphans(out, &files);
    assert_eq!(
        orphans,
        [
            std::path::PathBuf::from("old.md"),
            "plots/m/llm-row-fc2.svg".into()
        ]
    );
    let stale = super::stale(out, &files);
    assert_eq!(stale.len(), 2, "{stale:?}");
    files.insert("m.json".into(), b"{ }".to_vec());
    assert!(super::stale(out, &files).contains(&"m.json differs".to_string()));
}
