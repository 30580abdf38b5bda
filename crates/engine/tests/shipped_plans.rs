//! The decisions of every shipped policy (`policies/`, each recipe's folder) for its fixture
//! model, at every layout it was made for, three token counts and both executions: a snapshot,
//! so a change of any shipped decision (a refactor's, or a regenerated file's) shows in review
//! as a named diff of FP8 module lists.

#![allow(clippy::unwrap_used)]

use std::fmt::Write as _;
use std::path::PathBuf;

use fp8_engine::{Parallel, PlanConfig, Role, TokenConfig, load_model, plan};
use fp8_policy::{Execution, Policy};

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// (model config, its policies by role, its layouts as (TP, EP)).
type Case = (
    &'static str,
    &'static [(Role, &'static str)],
    &'static [(u32, u32)],
);

const CASES: &[Case] = &[
    (
        "llama3_2_1b.yaml",
        &[(Role::Llm, "llama3_2_1b.json")],
        &[(1, 1), (2, 1)],
    ),
    (
        "qwen2_5_72b.yaml",
        &[(Role::Llm, "qwen2_5_72b.json")],
        &[(1, 1), (2, 1), (4, 1), (8, 1)],
    ),
    (
        "deepseek_v3.yaml",
        &[(Role::Llm, "deepseek_v3.json")],
        &[(1, 8), (2, 16), (4, 32), (8, 64)],
    ),
    (
        "qwen3_vl_235b_a22b.yaml",
        &[
            (Role::Llm, "qwen3_vl_235b_a22b.llm.json"),
            (Role::Vit, "qwen3_vl_235b_a22b.vit.json"),
        ],
        &[(1, 4), (2, 8), (4, 16)],
    ),
];

/// One line per layout, count and execution: the FP8 modules (`-` for none), `(gap)` where the
/// policy has no rule for a module there.
fn decisions(config: &str, policies: &[(Role, Policy)], layouts: &[(u32, u32)]) -> String {
    let m = load_model(root().join("fixtures/models").join(config)).unwrap();
    let mut s = String::new();
    for &(tp, ep) in layouts {
        for t in [1024u64, 4096, 16384] {
            for e in [Execution::Eager, Execution::Graphed] {
                let roles: Vec<Role> = m.components.iter().map(|c| c.role).collect();
                let cfg = PlanConfig {
                    parallel: Parallel::new(tp, ep, 1, 1),
                    tokens: roles.iter().map(|r| (*r, TokenConfig::new(t, 1))).collect(),
                    topk: None,
                    policies: policies.iter().map(|(r, p)| (*r, p)).collect(),
                    execution: e,
                };
                let pl = plan(&m, &cfg).unwrap();
                let fp8: Vec<String> = pl
                    .modules
                    .iter()
                    .filter(|x| x.use_fp8)
                    .map(|x| {
                        let tail: Vec<&str> = x.spec.name.rsplit('.').take(2).collect();
                        format!("{}:{}.{}", x.spec.component, tail[1], tail[0])
                    })
                    .collect();
                let gap = if pl.uncovered(&roles).is_some() {
                    " (gap)"
                } else {
                    ""
                };
                let list = if fp8.is_empty() {
                    "-".to_owned()
                } else {
                    fp8.join(" ")
                };
                let _ = writeln!(s, "tp{tp} ep{ep} {t} {e}{gap}: {list}");
            }
        }
    }
    s
}

#[test]
fn every_shipped_policys_decisions() {
    let mut taken = 0;
    for folder in ["", "tensorwise/", "delayed/"] {
        for (config, files, layouts) in CASES {
            let paths: Vec<(Role, PathBuf)> = files
                .iter()
                .map(|(r, f)| (*r, root().join("policies").join(folder).join(f)))
                .collect();
            if !paths.iter().all(|(_, p)| p.exists()) {
                continue;
            }
            let policies: Vec<(Role, Policy)> = paths
                .iter()
                .map(|(r, p)| (*r, Policy::load(p).unwrap()))
                .collect();
            let name = format!(
                "{}{}",
                folder.replace('/', "_"),
                config.trim_end_matches(".yaml")
            );
            insta::assert_snapshot!(name, decisions(config, &policies, layouts));
            taken += 1;
        }
    }
    // Every model's default, and the tensorwise and delayed files of Qwen2.5-72B and DeepSeek-V3.
    assert_eq!(taken, 8, "a shipped policy file is missing");
}
