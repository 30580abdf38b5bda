//! The cost model's prediction error on our measured H200 reports, stated and enforced.
//! Recorded in docs/PERFORMANCE.md; `cargo test -p fp8-bench --test costmodel -- --ignored
//! --nocapture calibrate` searches the profile's free parameters again.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;

use fp8_bench::costmodel::{DeviceProfile, prediction_error, profile};
use fp8_bench::cuda::MeasureOptions;
use fp8_report::{Point, Report};

fn measured_points() -> Vec<Point> {
    points_in("")
}

fn points_in(sub: &str) -> Vec<Point> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../reports/h200")).join(sub);
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    for f in files {
        let r: Report = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
        out.extend(r.points);
    }
    out
}

/// The stated bounds. The model is a planning aid, not a substitute for measuring.
const MAX_MEDIAN_REL_ERR: f64 = 0.10;
const MIN_CHOICE_AGREEMENT: f64 = 0.85;

/// Prints and enforces the prediction error of the H200 profile on `points`.
fn check_prediction_error(points: &[Point], what: &str, min_points: usize) {
    check_recipe_error(points, what, min_points, &MeasureOptions::default());
}

fn check_recipe_error(points: &[Point], what: &str, min_points: usize, opt: &MeasureOptions) {
    let (err, agree, n) = prediction_error(&profile("h200").unwrap(), points, opt);
    println!(
        "h200 cost model on {n} {what} points: median |rel err| of speedup {err:.3}, FP8/BF16 choice agreement {agree:.3}"
    );
    assert!(
        n > min_points,
        "expected the committed H200 reports, found {n} points"
    );
    assert!(
        err <= MAX_MEDIAN_REL_ERR,
        "median relative error {err:.3} above {MAX_MEDIAN_REL_ERR}"
    );
    assert!(
        agree >= MIN_CHOICE_AGREEMENT,
        "choice agreement {agree:.3} below {MIN_CHOICE_AGREEMENT}"
    );
}

#[test]
fn h200_profile_prediction_error_on_measured_reports() {
    check_prediction_error(&measured_points(), "measured", 500);
}

#[test]
fn h200_profile_prediction_error_on_held_out_token_counts() {
    // The held-out sweeps were not used to calibrate: an out-of-sample check.
    check_prediction_error(&points_in("heldout"), "held-out", 300);
}

/// The per-tensor recipes' measured points of one model (by report file name), with the
/// options that estimate them.
fn per_tensor_sets(model: &str) -> Vec<(Vec<Point>, MeasureOptions, &'static str)> {
    use fp8_bench::recipe::{Recipe, RecipeOptions};
    [
        ("tensorwise", Recipe::Tensorwise),
        ("delayed", Recipe::Delayed),
    ]
    .into_iter()
    .map(|(sub, recipe)| {
        let opt = MeasureOptions {
            recipe: RecipeOptions::new(recipe, None, None, None).unwrap(),
            ..MeasureOptions::default()
        };
        (points_of(sub, model), opt, sub)
    })
    .collect()
}

fn points_of(sub: &str, model: &str) -> Vec<Point> {
    let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../reports/h200")).join(sub);
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let f = e.unwrap().path();
        let name = f.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with(model) && name.ends_with(".json") {
            let r: Report = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
            out.extend(r.points);
        }
    }
    out
}

#[test]
fn h200_profile_prediction_error_on_the_per_tensor_recipes() {
    // The per-tensor parameters were fitted to the Qwen2.5-72B sweeps (`calibrate_per_tensor`);
    // DeepSeek-V3's points (MLA, experts, shared experts) are out of sample for them.
    for (model, what, min) in [
        ("qwen2_5_72b", "calibration set", 100),
        ("deepseek_v3", "out of sample", 500),
    ] {
        for (pts, opt, sub) in per_tensor_sets(model) {
            check_recipe_error(&pts, &format!("{sub} {model} ({what})"), min, &opt);
        }
    }
}

#[test]
#[ignore = "parameter search; run by hand when the reports change"]
fn calibrate_per_tensor() {
    let base = profile("h200").unwrap();
    let sets: Vec<_> = per_tensor_sets("qwen2_5_72b")
        .into_iter()
        .map(|(pts, opt, _)| (pts, opt))
        .collect();
    let mut best: Option<(f64, f64, DeviceProfile)> = None;
    for eff in [1.05, 1.09, 1.15, 1.2, 1.25, 1.3] {
        for share in [0.55, 0.7, 0.8, 0.9, 1.0] {
            for small in [2.0, 4.0, 6.0, 10.0, 20.0] {
                {
                    // launch_us stays the blockwise calibration's: it is shared by every kernel.
                    let p = DeviceProfile {
                        fp8_tensor_eff: base.fp8_eff * eff,
                        tensor_cast_share: share,
                        small_kernel_us: small,
                        ..base.clone()
                    };
                    let (mut e, mut a) = (0.0, 0.0);
                    for (pts, opt) in &sets {
                        let (ei, ai, _) = prediction_error(&p, pts, opt);
                        e += ei / sets.len() as f64;
                        a += ai / sets.len() as f64;
                    }
                    if best.as_ref().is_none_or(|b| e - 0.2 * a < b.0 - 0.2 * b.1) {
                        best = Some((e, a, p));
                    }
                }
            }
        }
    }
    let (e, a, p) = best.unwrap();
    println!("best: err {e:.3} agree {a:.3}: {p:?}");
}

#[test]
#[ignore = "parameter search; run by hand when the reports change"]
fn calibrate() {
    let points = measured_points();
    let opt = MeasureOptions::default();
    let base = profile("h200").unwrap();
    let mut best: Option<(f64, f64, DeviceProfile)> = None;
    for bf16_eff in [0.76, 0.78, 0.80] {
        for fp8_eff in [0.58, 0.60, 0.62, 0.66] {
            for k_half in [48.0, 64.0, 96.0] {
                for m_half in [8.0, 16.0, 24.0] {
                    for cast_share in [0.45, 0.55, 0.65, 0.75, 0.85] {
                        for launch_us in [5.0, 10.0, 15.0, 20.0, 25.0] {
                            let p = DeviceProfile {
                                bf16_eff,
                                fp8_eff,
                                k_half,
                                m_half,
                                cast_share,
                                launch_us,
                                ..base.clone()
                            };
                            let (e, a, _) = prediction_error(&p, &points, &opt);
                            let score = e - 0.2 * a;
                            if best.as_ref().is_none_or(|b| score < b.0 - 0.2 * b.1) {
                                best = Some((e, a, p));
                            }
                        }
                    }
                }
            }
        }
    }
    let (e, a, p) = best.unwrap();
    println!("best: err {e:.3} agree {a:.3}: {p:?}");
}

#[test]
fn h200_profile_against_the_measured_gemm_ceilings() {
    // shared/anchors/h200_gemm_ceiling.json (PyTorch on an H200), copied into fixtures/anchors.
    let path = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/anchors/h200_gemm_ceiling.json"
    ));
    let anchors: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let h = profile("h200").unwrap();
    let mut errs = Vec::new();
    for a in &anchors {
        let (m, k, n) = (
            a["M"].as_u64().unwrap(),
            a["K"].as_u64().unwrap(),
            a["N"].as_u64().unwrap(),
        );
        let flops = 2.0 * (m * k * n) as f64;
        for (fp8, key) in [(false, "bf16_tflops"), (true, "fp8_block_tflops")] {
            let predicted = flops / h.gemm_ms(m, n, k, fp8) / 1e9;
            let measured = a[key].as_f64().unwrap();
            errs.push(((predicted - measured) / measured).abs());
        }
    }
    errs.sort_by(f64::total_cmp);
    let median = errs[errs.len() / 2];
    println!(
        "h200 cost model vs {} anchor GEMMs: median |rel err| of TFLOP/s {median:.3}, max {:.3}",
        errs.len(),
        errs[errs.len() - 1]
    );
    assert!(median <= 0.15, "median {median}");
}
