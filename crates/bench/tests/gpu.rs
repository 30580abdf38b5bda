//! GPU tests, ignored by default: `cargo test` on a machine without a CUDA device lists them as
//! ignored, never as passed. On the device machine (build with `cargo test --release -p
//! fp8-bench --test gpu --no-run`, carry the binary, run it with `--ignored`) they check every
//! kernel and GEMM path end to end, and fail where no device opens.

#![allow(clippy::unwrap_used)]

use fp8_bench::cuda::{Gpu, MeasureOptions, measure_point, perf};
use fp8_bench::recipe::{AmaxAlgo, Fp8Format, Recipe, RecipeOptions};
use fp8_bench::sweep::{BenchPoint, SplitMode, split_rows};
use fp8_engine::ModuleSpec;
use fp8_engine::classify::TeClass;
use fp8_engine::model::{Norm, Role};
use fp8_policy::ModuleKind;
use fp8_report::Status;

/// The device the tests run on; a test run with `--ignored` where none opens fails, naming why.
fn gpu() -> Gpu {
    Gpu::open(0)
        .unwrap_or_else(|e| panic!("no CUDA device ({e}): run these tests on the GPU machine"))
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

/// One point of every module kind, at shapes that are not multiples of 128 (but of 16, as FP8
/// needs), grouped kinds with skewed and empty experts.
fn kind_cases() -> Vec<(ModuleSpec, Vec<u64>)> {
    vec![
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
    ]
}

#[test]
#[ignore = "needs a CUDA device: run with --ignored on the GPU machine"]
fn every_kind_passes_its_checks_and_is_timed() {
    let mut g = gpu();
    let cases = kind_cases();
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
#[ignore = "needs a CUDA device: run with --ignored on the GPU machine"]
fn weight_casts_per_step_are_counted_without_fp8_params() {
    let mut g = gpu();
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
#[ignore = "needs a CUDA device: run with --ignored on the GPU machine"]
fn shapes_fp8_cannot_run_are_skipped_with_the_reason() {
    let mut g = gpu();
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
#[ignore = "needs a CUDA device: run with --ignored on the GPU machine"]
fn kernel_rates_are_plausible() {
    let mut g = gpu();
    let copy = perf::copy_bandwidth(&g).unwrap();
    assert!(copy.rate > 1.0, "copy {} TB/s", copy.rate);
    let figs = perf::gemm_throughput(
        &mut g,
        4096,
        4096,
        4096,
        fp8_bench::cuda::AlgoSearch::Heuristic(16),
    )
    .unwrap();
    let bf = &figs[0];
    for f8 in &figs[1..] {
        println!(
            "{}: {:.0} TFLOP/s ({:.2}x bf16)",
            f8.name,
            f8.rate,
            f8.rate / bf.rate
        );
        assert!(
            bf.rate > 100.0 && f8.rate > bf.rate,
            "bf16 {} {} {}",
            bf.rate,
            f8.name,
            f8.rate
        );
    }
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
#[ignore = "needs a CUDA device: run with --ignored on the GPU machine"]
fn exhaustive_search_keeps_the_heuristic_or_something_faster_that_agrees_with_it() {
    use fp8_bench::cuda::AlgoSearch;
    let mut g = gpu();
    let figs = perf::gemm_throughput(&mut g, 2048, 2048, 4096, AlgoSearch::Exhaustive).unwrap();
    for f in &figs {
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

fn recipe(
    r: Recipe,
    fmt: Option<Fp8Format>,
    len: Option<u32>,
    algo: Option<AmaxAlgo>,
) -> RecipeOptions {
    RecipeOptions::new(r, fmt, len, algo).unwrap()
}

#[test]
#[ignore = "needs a CUDA device: run with --ignored on the GPU machine"]
fn per_tensor_recipes_pass_their_checks_on_every_kind() {
    let mut g = gpu();
    let recipes = [
        recipe(Recipe::Tensorwise, None, None, None),
        recipe(Recipe::Tensorwise, Some(Fp8Format::Hybrid), None, None),
        recipe(Recipe::Delayed, None, None, None),
        recipe(
            Recipe::Delayed,
            Some(Fp8Format::E4m3),
            Some(1),
            Some(AmaxAlgo::MostRecent),
        ),
    ];
    // Every kind but the duplicated one (the same code path as row under these recipes).
    let cases: Vec<_> = kind_cases()
        .into_iter()
        .filter(|(s, _)| s.module_kind != ModuleKind::Duplicated)
        .collect();
    for r in recipes {
        for (s, splits) in &cases {
            let p = BenchPoint {
                tokens: splits.iter().sum(),
                spec: s.clone(),
                splits: splits.clone(),
                split_mode: None,
            };
            for (pow2, fp8_param) in [(true, true), (false, false)] {
                let opt = MeasureOptions {
                    pow2_scales: pow2,
                    fp8_param,
                    recipe: r,
                    ..quick()
                };
                let point = measure_point(&mut g, &p, &opt);
                assert_eq!(
                    point.status,
                    Status::Ok,
                    "{r} {} pow2={pow2} fp8_param={fp8_param}: {:?}",
                    s.module_kind,
                    point.reason
                );
                assert!(point.speedup.is_some_and(|x| x.is_finite() && x > 0.0));
                assert!(
                    point.errors.contains_key("fp8_quant_w_tensor"),
                    "{:?}",
                    point.errors
                );
                println!(
                    "{r} | {} pow2={pow2} fp8_param={fp8_param} speedup {:.3} launches {} errors {:?}",
                    s.module_kind,
                    point.speedup.unwrap_or(0.0),
                    point.fp8.map_or(0, |t| t.launches),
                    point.errors
                );
            }
        }
    }
}

#[test]
#[ignore = "needs a CUDA device: run with --ignored on the GPU machine"]
fn per_tensor_kernels_match_host_references_on_whole_tensors() {
    use fp8_bench::cuda::selftest;
    let g = gpu();
    for (e5, pow2) in [(false, true), (false, false), (true, true), (true, false)] {
        println!(
            "{}",
            selftest::check_tensor_cast(&g, &[300, 0, 16, 128], 520, e5, pow2).unwrap()
        );
    }
    println!(
        "{}",
        selftest::check_tensor_cast(&g, &[1024], 4096, false, true).unwrap()
    );
    for (len, algo_max) in [(1, true), (4, true), (4, false), (1024, true)] {
        println!("{}", selftest::check_delayed(&g, len, algo_max).unwrap());
    }
}

#[test]
#[ignore = "needs a CUDA device: run with --ignored on the GPU machine"]
fn mxfp8_is_refused_below_sm100_with_the_way_out() {
    let mut g = gpu();
    let s = spec(ModuleKind::Row, TeClass::RowParallelLinear, 2048, 1024, 1);
    let p = BenchPoint {
        tokens: 1024,
        spec: s,
        splits: vec![1024],
        split_mode: None,
    };
    let point = measure_point(
        &mut g,
        &p,
        &MeasureOptions {
            recipe: recipe(Recipe::Mxfp8, None, None, None),
            ..quick()
        },
    );
    if g.info.compute_capability.starts_with('9') {
        assert_eq!(point.status, Status::Skipped);
        let why = point.reason.unwrap();
        assert!(
            why.contains("10.0") && why.contains("--device-profile b200"),
            "{why}"
        );
        println!("mxfp8 on {}: {why}", g.info.compute_capability);
    }
}
