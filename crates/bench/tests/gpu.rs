//! GPU tests. On a machine without a CUDA device they print `skipped: no CUDA device (...)` and
//! pass; on the device machine (build with `cargo test --release -p fp8-bench --test gpu
//! --no-run` and carry the binary) they check every kernel and GEMM path end to end.

#![allow(clippy::unwrap_used)]

use fp8_bench::cuda::{Gpu, MeasureOptions, measure_point, perf};
use fp8_bench::sweep::{BenchPoint, SplitMode, split_rows};
use fp8_engine::ModuleSpec;
use fp8_engine::classify::TeClass;
use fp8_engine::model::{Norm, Role};
use fp8_policy::ModuleKind;
use fp8_report::Status;

fn gpu() -> Option<Gpu> {
    match Gpu::open(0) {
        Ok(g) => Some(g),
        Err(e) => {
            // Straight to the stderr handle: the test harness captures `println!`, and CI logs
            // should show why the GPU path did not run.
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "skipped: no CUDA device ({e})");
            None
        }
    }
}

fn spec(kind: ModuleKind, class: TeClass, k: u64, n: u64, gemms: u32) -> ModuleSpec {
    ModuleSpec {
        name: format!("test.{kind}"),
        component: Role::Llm,
        layers: 1,
        te_class: class,
        module_kind: kind,
        ub_name: Some("fc1".into()),
        is_expert: kind.is_grouped(),
        in_features: k,
        out_features: n,
        num_gemms: gemms,
        norm: (kind == ModuleKind::LayernormColumn).then_some(Norm::RmsNorm),
        tp: 1,
        etp: 1,
        row_divisor: 1,
    }
}

fn quick() -> MeasureOptions {
    MeasureOptions {
        warmup: 1,
        iters: 3,
        ..MeasureOptions::default()
    }
}

#[test]
fn every_kind_passes_its_checks_and_is_timed() {
    let Some(mut g) = gpu() else { return };
    let cases = [
        // Non-multiples of 128 in every dimension (but multiples of 16, as FP8 needs).
        (
            spec(
                ModuleKind::LayernormColumn,
                TeClass::LayerNormColumnParallelLinear,
                1152,
                1728,
                1,
            ),
            vec![1008],
        ),
        (
            spec(ModuleKind::Row, TeClass::RowParallelLinear, 3696, 1024, 1),
            vec![2000],
        ),
        (
            spec(ModuleKind::Duplicated, TeClass::Linear, 2048, 576, 1),
            vec![4096],
        ),
        (
            spec(
                ModuleKind::ColumnGrouped,
                TeClass::ColumnParallelGroupedLinear,
                1024,
                768,
                8,
            ),
            split_rows(6000, 8, SplitMode::Zipf(1.2), 3),
        ),
        (
            spec(
                ModuleKind::RowGrouped,
                TeClass::RowParallelGroupedLinear,
                384,
                1024,
                4,
            ),
            vec![0, 17, 1000, 333],
        ),
    ];
    for (s, splits) in cases {
        let p = BenchPoint {
            tokens: splits.iter().sum(),
            spec: s.clone(),
            splits,
            split_mode: None,
        };
        for scales in [true, false] {
            let point = measure_point(
                &mut g,
                &p,
                &MeasureOptions {
                    pow2_scales: scales,
                    ..quick()
                },
            );
            assert_eq!(
                point.status,
                Status::Ok,
                "{}: {:?}",
                s.module_kind,
                point.reason
            );
            assert!(point.speedup.is_some_and(|x| x.is_finite() && x > 0.0));
            for (name, err) in &point.errors {
                assert!(*err < 0.08, "{} {name}: {err}", s.module_kind);
            }
            println!(
                "{} scales={} speedup {:.3} errors {:?}",
                s.module_kind,
                if scales { "pow2" } else { "fp32" },
                point.speedup.unwrap_or(0.0),
                point.errors
            );
        }
    }
}

#[test]
fn weight_casts_per_step_are_counted_without_fp8_params() {
    let Some(mut g) = gpu() else { return };
    let s = spec(
        ModuleKind::Column,
        TeClass::ColumnParallelLinear,
        2048,
        2048,
        1,
    );
    let p = BenchPoint {
        tokens: 2048,
        spec: s,
        splits: vec![2048],
        split_mode: None,
    };
    let with = measure_point(&mut g, &p, &quick());
    let without = measure_point(
        &mut g,
        &p,
        &MeasureOptions {
            fp8_param: false,
            ..quick()
        },
    );
    assert_eq!(with.status, Status::Ok);
    assert_eq!(without.status, Status::Ok);
    assert_eq!(
        without.fp8.unwrap().launches,
        with.fp8.unwrap().launches + 1
    );
}

#[test]
fn shapes_fp8_cannot_run_are_skipped_with_the_reason() {
    let Some(mut g) = gpu() else { return };
    let s = spec(ModuleKind::Row, TeClass::RowParallelLinear, 2152, 1152, 1);
    let p = BenchPoint {
        tokens: 1024,
        spec: s,
        splits: vec![1024],
        split_mode: None,
    };
    let point = measure_point(&mut g, &p, &quick());
    assert_eq!(point.status, Status::Skipped);
    assert!(point.reason.unwrap().contains("multiples of 16"));
}

#[test]
fn kernel_rates_are_plausible() {
    let Some(mut g) = gpu() else { return };
    let copy = perf::copy_bandwidth(&g).unwrap();
    assert!(copy.rate > 1.0, "copy {} TB/s", copy.rate);
    let [bf, f8] = perf::gemm_throughput(
        &mut g,
        4096,
        4096,
        4096,
        fp8_bench::cuda::AlgoSearch::Heuristic(16),
    )
    .unwrap();
    assert!(
        bf.rate > 100.0 && f8.rate > bf.rate,
        "bf16 {} fp8 {}",
        bf.rate,
        f8.rate
    );
    for f in perf::quant_bandwidth(&g, 8192, 4096, copy.rate).unwrap() {
        println!(
            "{}: {:.2} TB/s ({:.2} of copy)",
            f.name,
            f.rate,
            f.relative.unwrap_or(0.0)
        );
        assert!(f.rate > 0.3 * copy.rate, "{}", f.name);
    }
}

#[test]
fn exhaustive_search_keeps_the_heuristic_or_something_faster_that_agrees_with_it() {
    use fp8_bench::cuda::AlgoSearch;
    let Some(mut g) = gpu() else { return };
    let [bf, f8] = perf::gemm_throughput(&mut g, 2048, 2048, 4096, AlgoSearch::Exhaustive).unwrap();
    for f in [&bf, &f8] {
        assert!(f.rate > 50.0, "{}: {} TFLOP/s", f.name, f.rate);
        let t = f.tuning.as_deref().unwrap();
        println!("{}: {t}", f.name);
        // "N timed (C configs checked); heuristic H ms, chosen B ms: ..."
        let num = |after: &str| -> f64 {
            let rest = &t[t.find(after).unwrap() + after.len()..];
            rest.split_whitespace()
                .next()
                .unwrap()
                .trim_matches(|c| c == '(' || c == ',')
                .parse()
                .unwrap()
        };
        assert!(num("") >= 1.0, "{t}");
        assert!(num("timed (") > 0.0, "no configuration was checked: {t}");
        assert!(num("chosen ") <= num("heuristic "), "{t}");
        if let Some(i) = t.find("output diff vs heuristic ") {
            let d: f64 = t[i + 25..].trim().parse().unwrap();
            assert!(d <= 1e-2, "{t}");
        }
    }
}
