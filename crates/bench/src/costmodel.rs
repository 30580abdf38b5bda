//! The offline cost model: an analytic estimate of one module step in BF16 and FP8, for machines
//! without a GPU.
//!
//! GEMM time is FLOPs over an efficiency that depends on the shape (wave quantization of 128x128
//! output tiles over the SMs, and a pipeline-fill term for short K), floored by the bytes the GEMM
//! must move; cast time is bytes over a share of the copy bandwidth; every kernel pays a launch
//! overhead. The H200 profile is calibrated against our measured H200 reports
//! (`reports/h200/`); `tests/costmodel.rs` states and enforces its error there.

use fp8_policy::ModuleKind;
use fp8_report::{DeviceInfo, Point, Stat, Status, Timing};

use crate::cuda::MeasureOptions;
use crate::layout::round_up;
use crate::recipe::Recipe;
use crate::runner::Backend;
use crate::sweep::BenchPoint;

/// A device's rates.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceProfile {
    /// Name (`h200`).
    pub name: &'static str,
    /// Where the numbers come from.
    pub source: &'static str,
    /// Dense BF16 tensor-core peak, TFLOP/s.
    pub bf16_tflops: f64,
    /// Dense FP8 tensor-core peak, TFLOP/s.
    pub fp8_tflops: f64,
    /// Dense FP4 tensor-core peak, TFLOP/s (0: no FP4 tensor cores).
    pub fp4_tflops: f64,
    /// Device-to-device copy bandwidth (read + write), TB/s.
    pub copy_tbs: f64,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Best fraction of the BF16 peak cuBLASLt reaches on large shapes.
    pub bf16_eff: f64,
    /// Best fraction of the FP8 peak the blockwise GEMM reaches on large shapes.
    pub fp8_eff: f64,
    /// The same for per-tensor scaled FP8 GEMMs (tensorwise, delayed) and MXFP8.
    pub fp8_tensor_eff: f64,
    /// K at which a GEMM reaches half of its K-efficiency (pipeline fill).
    pub k_half: f64,
    /// Rows at which a GEMM reaches half of its M-efficiency (small-M tiles are underused).
    pub m_half: f64,
    /// Share of the copy bandwidth the casts reach.
    pub cast_share: f64,
    /// The same for the per-tensor casts (no per-block maxima: close to a copy).
    pub tensor_cast_share: f64,
    /// Cost of a tiny kernel (memset, scale kernel, amax-history update), microseconds.
    pub small_kernel_us: f64,
    /// Per-kernel launch and tail overhead, microseconds.
    pub launch_us: f64,
}

// The per-tensor parameters, calibrated on the Qwen2.5-72B tensorwise and delayed sweeps
// (`tests/costmodel.rs`, `calibrate_per_tensor`) and checked on DeepSeek-V3's, which they were not
// fitted to.
const TENSOR_EFF: f64 = 0.60 * 1.25;
const TENSOR_CAST_SHARE: f64 = 0.8;
const SMALL_KERNEL_US: f64 = 2.0;

/// The H200 profile: datasheet peaks, and efficiencies and overheads calibrated on our measured
/// H200 reports (`tests/costmodel.rs`).
fn h200() -> DeviceProfile {
    DeviceProfile {
        name: "h200",
        source: "H200 SXM: datasheet peaks; efficiencies and overheads calibrated on reports/h200 (see docs/PERFORMANCE.md)",
        bf16_tflops: 989.0,
        fp8_tflops: 1979.0,
        fp4_tflops: 0.0,
        copy_tbs: 4.27,
        sm_count: 132,
        bf16_eff: 0.78,
        fp8_eff: 0.60,
        // Fitted: 1.25x blockwise's efficiency. The anchors' `_scaled_mm` ratio is 1.09x at the
        // median, but TE's per-tensor fprop runs with fast accumulation (up to 1.6x blockwise in
        // docs/device-logs/recipes/kernels.txt) and the sweeps' shapes are smaller.
        fp8_tensor_eff: TENSOR_EFF,
        k_half: 48.0,
        m_half: 24.0,
        cast_share: 0.55,
        tensor_cast_share: TENSOR_CAST_SHARE,
        small_kernel_us: SMALL_KERNEL_US,
        launch_us: 20.0,
    }
}

/// The built-in profiles. The H100 and B200 take the H200's calibrated efficiencies (the H100
/// has the same SMs; the B200 is not calibrated) with their own datasheet peaks.
pub fn profiles() -> Vec<DeviceProfile> {
    vec![
        h200(),
        DeviceProfile {
            name: "h100",
            source: "H100 SXM: datasheet peaks and 3.35 TB/s HBM3; efficiencies taken from the H200 calibration (same SMs)",
            copy_tbs: 3.0,
            ..h200()
        },
        DeviceProfile {
            name: "b200",
            source: "B200: datasheet dense peaks (2.25 PF BF16, 4.5 PF FP8, 9 PF FP4) and 8 TB/s; efficiencies assumed like Hopper (uncalibrated)",
            bf16_tflops: 2250.0,
            fp8_tflops: 4500.0,
            fp4_tflops: 9000.0,
            copy_tbs: 7.2,
            sm_count: 148,
            ..h200()
        },
    ]
}

/// Looks a profile up by name.
pub fn profile(name: &str) -> Option<DeviceProfile> {
    profiles()
        .into_iter()
        .find(|p| p.name.eq_ignore_ascii_case(name))
}

impl DeviceProfile {
    /// Estimated time of one GEMM `D[m, n] = A[m, k] B[k, n]` in ms (`m` rows of tokens), in
    /// BF16 or blockwise FP8.
    pub fn gemm_ms(&self, m: u64, n: u64, k: u64, fp8: bool) -> f64 {
        self.gemm_ms_with(m, n, k, fp8.then_some(self.fp8_eff))
    }

    /// [`DeviceProfile::gemm_ms`] with the FP8 efficiency given (`None`: BF16).
    fn gemm_ms_with(&self, m: u64, n: u64, k: u64, fp8_eff: Option<f64>) -> f64 {
        match fp8_eff {
            Some(e) => self.gemm_ms_at(m, n, k, (self.fp8_tflops, e, 1.0)),
            None => self.gemm_ms_at(m, n, k, (self.bf16_tflops, self.bf16_eff, 2.0)),
        }
    }

    /// One GEMM at `(peak TFLOP/s, best efficiency, bytes per operand element)`.
    fn gemm_ms_at(&self, m: u64, n: u64, k: u64, (peak, cap, bytes_per): (f64, f64, f64)) -> f64 {
        if m == 0 || n == 0 || k == 0 {
            return 0.0;
        }
        // Output tiles of 128x128 spread over the SMs: the last wave is partly idle.
        let tiles = m.div_ceil(128) * n.div_ceil(128);
        let waves = tiles.div_ceil(u64::from(self.sm_count));
        let wave_eff = tiles as f64 / (waves * u64::from(self.sm_count)) as f64;
        let small = |x: u64, half: f64| x as f64 / (x as f64 + half);
        let eff = cap * wave_eff * small(k, self.k_half) * small(m.min(n), self.m_half);
        let flops = 2.0 * m as f64 * n as f64 * k as f64;
        let compute = flops / (peak * 1e9 * eff);
        let bytes = bytes_per * (m * k + k * n) as f64 + 2.0 * (m * n) as f64;
        let memory = bytes / (self.copy_tbs * 1e9);
        compute.max(memory) + self.launch_us * 1e-3
    }

    /// Estimated time of a memory-bound cast moving `bytes` (read + written), in ms.
    pub fn cast_ms(&self, bytes: f64) -> f64 {
        bytes / (self.copy_tbs * 1e9 * self.cast_share) + self.launch_us * 1e-3
    }

    /// Estimated BF16 and FP8 timings of one point.
    pub fn estimate(&self, p: &BenchPoint, opt: &MeasureOptions) -> (Timing, Timing) {
        let s = &p.spec;
        let (k, n) = (s.in_features, s.out_features);
        let norm = s.module_kind == ModuleKind::LayernormColumn;
        let seg = p.segments(opt.pad);
        let mut b = (0.0, 0.0, 0u32); // fwd, bwd, launches
        let mut f = (0.0, 0.0, 0.0, 0u32); // fwd, bwd, cast, launches
        let rows = p.rows() as f64;
        if norm {
            b.0 += self.cast_ms(4.0 * rows * k as f64);
            b.2 += 1;
        }
        for &r in &p.splits {
            if r > 0 {
                b.0 += self.gemm_ms(r, n, k, false);
                b.1 += self.gemm_ms(r, k, n, false) + self.gemm_ms(k, n, r, false);
                b.2 += 3;
            }
        }
        let prow = seg.total_padded() as f64;
        let (kf, nf) = (k as f64, n as f64);
        let recipe = opt.recipe.recipe();
        let launch = self.launch_us * 1e-3;
        // Bytes per element and extra small kernels of one activation/gradient cast with its
        // transposed copy, per recipe:
        // - blockwise: read bf16 once, write both FP8 copies (scales are 1/128 of that);
        // - tensorwise: an amax pass reads it once more; memset + scale kernel are launches;
        // - delayed: one pass (the amax is recorded on the way); the history update is one
        //   launch per direction;
        // - mxfp8: like blockwise, with 1x32 scales;
        // - nvfp4: the per-tensor amax pass (read 2), then both FP4 copies (half a byte each)
        //   with 1x16 scales.
        let (cast_bytes, extra_launches, update_launches) = match recipe {
            Recipe::Tensorwise => (6.0, 2u32, 0u32),
            Recipe::Nvfp4 => (5.0, 1, 0),
            Recipe::Delayed => (4.0, 0, 1),
            _ => (4.0, 0, 0),
        };
        let small = self.small_kernel_us * 1e-3;
        let act_cast = |elems: f64| {
            if recipe.per_tensor() {
                cast_bytes * elems / (self.copy_tbs * 1e9 * self.tensor_cast_share)
                    + launch
                    + f64::from(extra_launches) * small
            } else {
                self.cast_ms(cast_bytes * elems)
            }
        };
        let x_cast = if norm {
            if recipe.per_tensor() {
                // bf16 norm, then the per-tensor cast of its output
                self.cast_ms(4.0 * prow * kf) + act_cast(prow * kf)
            } else {
                // fused norm + rowwise cast (read 2, write bf16 2 + fp8 1), then the columnwise cast
                self.cast_ms(5.0 * prow * kf) + self.cast_ms(3.0 * prow * kf)
            }
        } else {
            act_cast(prow * kf)
        };
        let w_cast = if opt.fp8_param {
            0.0
        } else {
            s.num_gemms as f64 * act_cast((n * k) as f64)
        };
        let dy_cast = act_cast(prow * nf);
        let update = f64::from(update_launches) * small;
        f.2 = x_cast + w_cast + dy_cast + 2.0 * update;
        f.0 += x_cast + w_cast + update;
        f.1 += dy_cast + update;
        let cast_launches = 1 + extra_launches;
        f.3 += if norm {
            cast_launches + 2
        } else {
            2 * cast_launches
        } + if opt.fp8_param {
            0
        } else {
            s.num_gemms * cast_launches
        } + 2 * update_launches;
        // The low-precision GEMM: FP8 at its efficiency per recipe, FP4 at the FP4 peak with
        // the per-tensor efficiency (uncalibrated: no FP4 measurement here).
        let low = match recipe {
            Recipe::Blockwise => (self.fp8_tflops, self.fp8_eff, 1.0),
            Recipe::Nvfp4 => (self.fp4_tflops, self.fp8_tensor_eff, 0.5),
            _ => (self.fp8_tflops, self.fp8_tensor_eff, 1.0),
        };
        for &pr in &seg.padded {
            if pr > 0 {
                f.0 += self.gemm_ms_at(pr, n, k, low);
                f.1 +=
                    self.gemm_ms_at(pr, k, n, low) + self.gemm_ms_at(k, n, round_up(pr, 16), low);
                f.3 += 3;
            }
        }
        let t = |fwd: f64, bwd: f64, cast: f64, launches: u32| Timing {
            fwd_ms: Stat::exact(fwd),
            bwd_ms: Stat::exact(bwd),
            total_ms: Stat::exact(fwd + bwd),
            cast_ms: Stat::exact(cast),
            launches,
            gpu_total_ms: None,
        };
        (t(b.0, b.1, 0.0, b.2), t(f.0, f.1, f.2, f.3))
    }
}

/// The cost-model backend.
pub struct ModelBackend(pub DeviceProfile);

impl Backend for ModelBackend {
    fn device(&self) -> DeviceInfo {
        DeviceInfo {
            name: format!("model:{}", self.0.name),
            compute_capability: String::new(),
            sm_count: self.0.sm_count,
            ..DeviceInfo::default()
        }
    }
    fn timing(&self) -> &'static str {
        "model"
    }
    fn estimated(&self) -> bool {
        true
    }
    fn measure(&mut self, p: &BenchPoint, opt: &MeasureOptions) -> Point {
        let mut point = p.report_point(opt.pad);
        let recipe = opt.recipe.recipe();
        if opt.fp8 && recipe.blackwell_only() && self.0.name != "b200" {
            point.status = Status::Skipped;
            point.reason = Some(format!(
                "{recipe} runs on Blackwell only; the {} profile cannot estimate it (use --device-profile b200)",
                self.0.name
            ));
            return point;
        }
        let (k, n) = (p.spec.in_features, p.spec.out_features);
        if opt.fp8 && !(k.is_multiple_of(16) && n.is_multiple_of(16)) {
            point.status = Status::Skipped;
            point.reason = Some(format!(
                "FP8 needs in/out features that are multiples of 16 ({k} x {n})"
            ));
            return point;
        }
        let (b, f) = self.0.estimate(p, opt);
        point.bf16 = opt.bf16.then_some(b);
        point.fp8 = opt.fp8.then_some(f);
        if opt.bf16 && opt.fp8 {
            point.speedup = Some(b.total_ms.median / f.total_ms.median);
        }
        point
    }
}

/// Rebuilds the bench point of a report point (for re-estimating measured reports).
pub fn point_from_report(p: &Point) -> Option<BenchPoint> {
    use fp8_engine::model::Role;
    let spec = fp8_engine::ModuleSpec {
        name: p.module.clone(),
        component: p.component.parse::<Role>().ok()?,
        layers: 1,
        te_class: p.te_class.parse().ok()?,
        module_kind: p.module_kind,
        ub_name: p.ub_name.clone(),
        is_expert: p.module_kind.is_grouped(),
        in_features: p.in_features,
        out_features: p.out_features,
        num_gemms: p.num_gemms,
        norm: None,
        tp: p.tp,
        etp: p.etp,
        row_divisor: 1,
    };
    let splits = if p.splits.is_empty() {
        vec![p.gemm_rows]
    } else {
        p.splits.clone()
    };
    Some(BenchPoint {
        spec,
        tokens: p.tokens,
        splits,
        split_mode: None,
    })
}

/// Prediction quality of a profile on measured points: (median relative error of the speedup,
/// share of points where the FP8/BF16 choice agrees, points compared).
pub fn prediction_error(
    profile: &DeviceProfile,
    points: &[Point],
    opt: &MeasureOptions,
) -> (f64, f64, usize) {
    let mut errs = Vec::new();
    let mut agree = 0usize;
    for p in points.iter().filter(|p| p.status == Status::Ok) {
        let (Some(measured), Some(bp)) = (p.speedup, point_from_report(p)) else {
            continue;
        };
        let (b, f) = profile.estimate(&bp, opt);
        let predicted = b.total_ms.median / f.total_ms.median;
        errs.push(((predicted - measured) / measured).abs());
        agree += usize::from((predicted > 1.0) == (measured > 1.0));
    }
    if errs.is_empty() {
        return (f64::NAN, f64::NAN, 0);
    }
    errs.sort_by(f64::total_cmp);
    let n = errs.len();
    (errs[n / 2], agree as f64 / n as f64, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_exist_and_are_sane() {
        for p in profiles() {
            assert!(p.fp8_tflops >= p.bf16_tflops);
            assert!(p.bf16_eff > 0.0 && p.bf16_eff <= 1.0);
        }
        assert!(profile("H200").is_some());
        assert!(profile("mi300").is_none());
    }

    #[test]
    fn gemm_estimates_scale_and_reflect_waves() {
        let h = profile("h200").unwrap_or_else(|| unreachable!());
        let big = h.gemm_ms(16384, 8192, 8192, false);
        let tf = 2.0 * 16384.0 * 8192.0 * 8192.0 / big / 1e9;
        assert!((500.0..800.0).contains(&tf), "{tf}");
        assert!(h.gemm_ms(16384, 8192, 8192, true) < big);
        // One tile more than a full wave costs a whole extra wave.
        let full = h.gemm_ms(128 * 132, 128, 4096, false);
        let over = h.gemm_ms(128 * 133, 128, 4096, false);
        assert!(over > 1.5 * full - 0.01);
        assert_eq!(h.gemm_ms(0, 1, 1, false), 0.0);
    }

    #[test]
    fn recipes_move_the_estimate_the_way_their_kernels_do() {
        use crate::recipe::{Recipe, RecipeOptions};
        use fp8_engine::ModuleSpec;
        use fp8_engine::classify::TeClass;
        use fp8_engine::model::Role;
        let spec = ModuleSpec {
            name: "x.fc2".into(),
            component: Role::Llm,
            layers: 1,
            te_class: TeClass::RowParallelLinear,
            module_kind: ModuleKind::Row,
            ub_name: Some("fc2".into()),
            is_expert: false,
            in_features: 3696,
            out_features: 8192,
            num_gemms: 1,
            norm: None,
            tp: 8,
            etp: 8,
            row_divisor: 1,
        };
        let h = profile("h200").unwrap_or_else(|| unreachable!());
        let at = |tokens: u64, r: Recipe| {
            let p = BenchPoint {
                spec: spec.clone(),
                tokens,
                splits: vec![tokens],
                split_mode: None,
            };
            let opt = MeasureOptions {
                recipe: RecipeOptions::new(r, None, None, None).unwrap_or_default(),
                ..MeasureOptions::default()
            };
            let (b, f) = h.estimate(&p, &opt);
            (
                b.total_ms.median,
                f.total_ms.median,
                f.cast_ms.median,
                f.launches,
            )
        };
        let (bb, bf, bc, bl) = at(16384, Recipe::Blockwise);
        let (tb, tf, tc, tl) = at(16384, Recipe::Tensorwise);
        let (_, df, dc, dl) = at(16384, Recipe::Delayed);
        assert_eq!(bb, tb, "BF16 does not depend on the recipe");
        // Current scaling reads every tensor once more and launches more kernels ...
        assert!(tc > bc && tc > dc && tl > bl, "{tc} {bc} {dc} {tl} {bl}");
        // ... delayed scaling adds only its history updates ...
        assert_eq!(dl, bl + 2);
        // ... and per-tensor GEMMs are faster, which wins at large token counts.
        assert!(df < bf && tf.is_finite(), "{df} {bf}");
        // MXFP8 is Blackwell's: the H200 profile refuses it, the B200 one estimates it.
        let p = BenchPoint {
            spec: spec.clone(),
            tokens: 4096,
            splits: vec![4096],
            split_mode: None,
        };
        let mx = MeasureOptions {
            recipe: RecipeOptions::new(Recipe::Mxfp8, None, None, None).unwrap_or_default(),
            ..MeasureOptions::default()
        };
        let refused = ModelBackend(h.clone()).measure(&p, &mx);
        assert_eq!(refused.status, Status::Skipped);
        assert!(refused.reason.unwrap_or_default().contains("b200"));
        let b200 = profile("b200").unwrap_or_else(|| unreachable!());
        let est = ModelBackend(b200.clone()).measure(&p, &mx);
        assert_eq!(est.status, Status::Ok);
        assert!(est.speedup.is_some_and(|s| s > 0.0));
        // NVFP4 likewise; on the B200 its GEMMs run at twice FP8's peak, so at a count where
        // the GEMMs dominate it is estimated ahead of MXFP8, and behind it where its extra amax
        // pass over the activations dominates.
        let fp4 = MeasureOptions {
            recipe: RecipeOptions::new(Recipe::Nvfp4, None, None, None).unwrap_or_default(),
            ..MeasureOptions::default()
        };
        let refused = ModelBackend(h.clone()).measure(&p, &fp4);
        assert_eq!(refused.status, Status::Skipped);
        let big = BenchPoint {
            tokens: 32768,
            splits: vec![32768],
            ..p.clone()
        };
        let speed = |o: &MeasureOptions, q: &BenchPoint| {
            ModelBackend(b200.clone())
                .measure(q, o)
                .speedup
                .unwrap_or(0.0)
        };
        assert!(
            speed(&fp4, &big) > speed(&mx, &big),
            "{} {}",
            speed(&fp4, &big),
            speed(&mx, &big)
        );
        let (_, ff, fc, fl) = {
            let (b, f) = b200.estimate(&big, &fp4);
            (b, f.total_ms.median, f.cast_ms.median, f.launches)
        };
        let (_, mf, mc, ml) = {
            let (b, f) = b200.estimate(&big, &mx);
            (b, f.total_ms.median, f.cast_ms.median, f.launches)
        };
        assert!(
            fc > mc && fl > ml && ff < mf,
            "cast {fc} {mc}, launches {fl} {ml}, total {ff} {mf}"
        );
    }
}
