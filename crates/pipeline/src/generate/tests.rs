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
