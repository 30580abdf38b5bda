//! Sharding on the CPU: balance by estimated cost, determinism, full coverage.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use fp8_bench::job::{SweepJob, points};
use fp8_bench::shard::{assign, cost, loads, sweep_digest};
use fp8_bench::sweep::SplitMode;
use fp8_engine::load_model;

fn sweep(config: &str, tp: u32, ep: u32) -> Vec<fp8_bench::sweep::BenchPoint> {
    let m = load_model(
        PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/models"
        ))
        .join(config),
    )
    .unwrap();
    let job = SweepJob {
        component: None,
        parallel: m.layout(Some(tp), Some(ep), Some(1), None),
        tokens: None,
        max_tokens: 32768,
        per_doubling: 1,
        seq_length: None,
        micro_batch_size: None,
        splits: vec![SplitMode::Uniform, SplitMode::Zipf(1.2)],
        modules: None,
    };
    points(&m, &job).unwrap()
}

#[test]
fn every_point_is_assigned_exactly_once() {
    let p = sweep("deepseek_v3.yaml", 8, 64);
    for n in [1, 2, 3, 4, 8] {
        let shards = assign(&p, n);
        assert_eq!(shards.len(), n);
        let all: Vec<usize> = shards.iter().flatten().copied().collect();
        assert_eq!(all.len(), p.len());
        assert_eq!(all.iter().copied().collect::<BTreeSet<_>>().len(), p.len());
        assert!(
            shards.iter().all(|s| s.windows(2).all(|w| w[0] < w[1])),
            "each shard keeps sweep order"
        );
    }
}

#[test]
fn shards_are_balanced_by_cost_not_count() {
    for (config, tp, ep) in [
        ("qwen2_5_72b.yaml", 1, 1),
        ("deepseek_v3.yaml", 1, 8),
        ("qwen3_vl_235b_a22b.yaml", 1, 8),
    ] {
        let p = sweep(config, tp, ep);
        let total: f64 = p.iter().map(cost).sum();
        let biggest = p.iter().map(cost).fold(0.0, f64::max);
        for n in [2, 4] {
            let l = loads(&p, &assign(&p, n));
            let max = l.iter().copied().fold(0.0, f64::max);
            // Greedy longest-first: within one point of the ideal.
            assert!(
                max <= total / n as f64 + biggest + 1e-9,
                "{config} n={n}: {l:?}"
            );
            assert!(max < 0.6 * total || n == 1, "{config} n={n}: {l:?}");
        }
        // Counting points would be far off: one shard gets most of the cost.
        let half = p.len() / 2;
        let by_count: f64 = p.iter().take(half).map(cost).sum();
        assert!((by_count / total - 0.5).abs() > 0.01 || config != "qwen2_5_72b.yaml");
    }
}

#[test]
fn assignment_and_digest_are_deterministic() {
    let p = sweep("qwen2_5_72b.yaml", 4, 1);
    assert_eq!(assign(&p, 3), assign(&p, 3));
    let mut q = p.clone();
    q.reverse();
    assert_eq!(
        sweep_digest(&p),
        sweep_digest(&q),
        "the digest does not depend on order"
    );
    let other = sweep("qwen2_5_72b.yaml", 8, 1);
    assert_ne!(sweep_digest(&p), sweep_digest(&other));
    let ids: BTreeSet<fp8_report::PointId> =
        p.iter().map(fp8_bench::sweep::BenchPoint::id).collect();
    assert_eq!(ids.len(), p.len(), "point ids are unique");
}
