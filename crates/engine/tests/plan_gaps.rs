//! What a plan calls a gap (a key the policy has no rule for) and what an answer (a key
//! measured or modelled without an FP8 win, a module TE cannot run in FP8).

#![allow(clippy::unwrap_used)]

use fp8_engine::{Parallel, Role, TokenConfig, plan};
use fp8_policy::Policy;

mod common;
use common::{cfg, missing_keys, model, policy};

#[test]
fn missing_rules_are_listed_with_their_modules() {
    let m = model("deepseek_v3.yaml");
    let pol = policy("test_mixed.json");
    let p = Parallel {
        tp: 4,
        ep: 8,
        etp: 1,
        cp: 1,
        sequence_parallel: true,
    };
    let pl = plan(
        &m,
        &cfg(
            p,
            &[(Role::Llm, TokenConfig::new(4096, 1))],
            &[(Role::Llm, &pol)],
        ),
    )
    .unwrap();
    let keys = missing_keys(&pl, None);
    assert!(
        keys.contains(&"(kind=duplicated, ub_name=kv_down_proj, tp=4)".to_owned()),
        "{keys:?}"
    );
    assert!(
        keys.contains(&"(kind=column_grouped, etp=1, num_gemms=32)".to_owned()),
        "{keys:?}"
    );
    let share = pl.summary.fp8_flop_share;
    assert!((0.0..=1.0).contains(&share));
}

/// Qwen2.5-72B at TP 8, 4096 tokens, under a policy with no rules whose provenance is
/// `provenance`: the plan, and its fc2's row (whether FP8, and why).
fn fc2_under(provenance: &str) -> (fp8_engine::Plan, bool, String) {
    let pol = Policy::from_json_str(
        &format!(r#"{{"version": 1, "speedup_threshold": 1.0, "rules": {{}}, "provenance": {provenance}}}"#),
        "p.json",
    )
    .unwrap();
    let pl = plan(
        &model("qwen2_5_72b.yaml"),
        &cfg(
            Parallel::tp(8),
            &[(Role::Llm, TokenConfig::new(4096, 1))],
            &[(Role::Llm, &pol)],
        ),
    )
    .unwrap();
    let fc2 = pl
        .modules
        .iter()
        .find(|x| x.spec.name.ends_with("linear_fc2"))
        .unwrap();
    let (on, why) = (fc2.use_fp8, fc2.reason.clone());
    (pl, on, why)
}

#[test]
fn keys_measured_without_an_fp8_win_are_answers_not_gaps() {
    // A policy written by an older merge-policy: keys as display strings.
    let (pl, on, why) = fc2_under(r#"{"measured_bf16_keys": ["(kind=row, ub_name=fc2, tp=8)"]}"#);
    assert!(!on);
    assert!(why.contains("measured, FP8 never won"), "{why}");
    let keys = missing_keys(&pl, None);
    assert!(
        !keys.contains(&"(kind=row, ub_name=fc2, tp=8)".to_owned()),
        "{keys:?}"
    );
    assert_eq!(keys.len(), 3, "{keys:?}");
    // A cost-model policy's key was modelled, not measured, and says so.
    let (_, on, why) = fc2_under(
        r#"{"estimated": true, "measured_bf16_keys": ["(kind=row, ub_name=fc2, tp=8)"]}"#,
    );
    assert!(
        !on && why.contains("ESTIMATED by the cost model, FP8 never won")
            && !why.contains("measured"),
        "{why}"
    );
}

#[test]
fn a_module_te_cannot_run_in_fp8_needs_no_rule() {
    // Qwen3-VL's vision MLP at TP 2: 4304 / 2 = 2152 features a rank, not a multiple of 16.
    let m = model("qwen3_vl_235b_a22b.yaml");
    let empty = Policy::from_json_str(
        r#"{"version": 1, "speedup_threshold": 1.0, "rules": {}}"#,
        "empty.json",
    )
    .unwrap();
    let at = |tp: u32| {
        plan(
            &m,
            &cfg(
                Parallel::tp(tp),
                &[
                    (Role::Llm, TokenConfig::new(4096, 1)),
                    (Role::Vit, TokenConfig::new(2304, 1)),
                ],
                &[(Role::Vit, &empty)],
            ),
        )
        .unwrap()
    };
    let pl = at(2);
    let fc1 = pl
        .modules
        .iter()
        .find(|x| x.spec.component == Role::Vit && x.spec.name.ends_with("linear_fc1"))
        .unwrap();
    assert!(!fc1.spec.fp8_capable() && !fc1.use_fp8);
    assert!(
        fc1.reason.contains("TE cannot run it in FP8"),
        "{}",
        fc1.reason
    );
    let missing = missing_keys(&pl, Some(Role::Vit));
    // qkv and proj can run FP8: still gaps; fc1 and fc2 are not.
    assert_eq!(
        missing,
        [
            "(kind=layernorm_column, ub_name=qkv, tp=2)",
            "(kind=row, ub_name=proj, tp=2)"
        ],
        "{missing:?}"
    );
    // At TP 1 (4304 a rank) every module can: four gaps.
    let at_tp1 = missing_keys(&at(1), Some(Role::Vit)).len();
    assert_eq!(at_tp1, 4);
}
