//! Decision and plan speed. Targets (docs/PERFORMANCE.md): one decision < 50 ns; a full plan of
//! Qwen3-VL-235B-A22B (94 MoE layers + 27 ViT layers) < 1 ms.

#![allow(missing_docs, clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, criterion_group, criterion_main};
use fp8_engine::{Parallel, PlanConfig, Role, TokenConfig, decide, inventory, load_model, plan};
use fp8_policy::Execution;
use fp8_policy::Policy;

fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn benches(c: &mut Criterion) {
    let policy = Policy::load(root().join("fixtures/policies/test_mixed.json")).unwrap();
    let vit_policy = Policy::load(root().join("fixtures/policies/test_vit.json")).unwrap();
    let model = load_model(root().join("fixtures/models/qwen3_vl_235b_a22b.yaml")).unwrap();
    let parallel = Parallel {
        tp: 1,
        ep: 16,
        etp: 1,
        cp: 1,
        sequence_parallel: false,
    };
    let llm = model.component(Role::Llm).unwrap();
    let modules = inventory(llm, parallel).unwrap();
    let tokens = TokenConfig::new(4096, 1);
    let dense = &modules[0];
    let expert = modules.iter().find(|m| m.is_expert).unwrap();
    c.bench_function("decide/dense", |b| {
        b.iter(|| {
            decide(
                black_box(dense),
                &tokens,
                8,
                Some(&policy),
                Execution::Eager,
            )
        })
    });
    c.bench_function("decide/expert", |b| {
        b.iter(|| {
            decide(
                black_box(expert),
                &tokens,
                8,
                Some(&policy),
                Execution::Eager,
            )
        })
    });
    let cfg = PlanConfig {
        parallel,
        tokens: BTreeMap::from([(Role::Llm, tokens), (Role::Vit, TokenConfig::new(16384, 1))]),
        topk: None,
        policies: BTreeMap::from([(Role::Llm, &policy), (Role::Vit, &vit_policy)]),
        execution: Execution::Eager,
    };
    c.bench_function("plan/qwen3_vl_235b_a22b", |b| {
        b.iter(|| plan(black_box(&model), &cfg).unwrap())
    });
}

criterion_group!(decide_benches, benches);
criterion_main!(decide_benches);
