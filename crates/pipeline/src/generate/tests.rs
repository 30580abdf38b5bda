//! The job's layout defaults.

use super::default_layouts;

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
