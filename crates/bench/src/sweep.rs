//! What a sweep measures: module x token count, with expert splits and FP8 padding.

use std::collections::BTreeMap;

use fp8_engine::{ModuleSpec, TokenConfig, TokenOverflow};
use fp8_report::{Point, PointId, Status};

use crate::layout::{Segments, round_up};

/// How routed tokens are split across a rank's experts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SplitMode {
    /// Equal shares.
    Uniform,
    /// Zipf-distributed shares with the given skew (1.2 in the reference), fixed seed.
    Zipf(f64),
}

impl SplitMode {
    /// Name recorded in reports.
    pub fn name(&self) -> String {
        match self {
            SplitMode::Uniform => "uniform".to_owned(),
            SplitMode::Zipf(s) => format!("zipf{s}"),
        }
    }
}

/// One measurement to make.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchPoint {
    /// The module (per-rank shapes).
    pub spec: ModuleSpec,
    /// Logical tokens the decision compares (x topk for experts).
    pub tokens: u64,
    /// Logical rows per GEMM (one entry for dense modules, one per expert for grouped).
    pub splits: Vec<u64>,
    /// Expert split mode (grouped modules only).
    pub split_mode: Option<SplitMode>,
}

impl BenchPoint {
    /// The FP8 segments: each split padded to `pad`.
    pub fn segments(&self, pad: u64) -> Segments {
        Segments::new(&self.splits, pad)
    }

    /// Logical rows over all GEMMs.
    pub fn rows(&self) -> u64 {
        self.splits.iter().sum()
    }

    /// The point's identity, equal to [`Point::id`] of the point the sweep writes for it.
    pub fn id(&self) -> PointId {
        let s = &self.spec;
        PointId {
            component: s.component.to_string(),
            module: s.name.clone(),
            split: self.split_mode.map(|m| m.name()),
            tokens: self.tokens,
            in_features: s.in_features,
            out_features: s.out_features,
            num_gemms: s.num_gemms,
        }
    }

    /// The report point for this measurement, with no timing yet (status `ok`).
    pub fn report_point(&self, pad: u64) -> Point {
        let s = &self.spec;
        Point {
            component: s.component.to_string(),
            module: s.name.clone(),
            te_class: s.te_class.to_string(),
            module_kind: s.module_kind,
            ub_name: s.ub_name.clone(),
            tp: s.tp,
            etp: s.etp,
            num_gemms: s.num_gemms,
            tokens: self.tokens,
            gemm_rows: self.rows(),
            padded_rows: self.segments(pad).total_padded(),
            splits: if s.module_kind.is_grouped() {
                self.splits.clone()
            } else {
                Vec::new()
            },
            split_mode: self.split_mode.map(|m| m.name()),
            instances: Some(s.layers),
            in_features: s.in_features,
            out_features: s.out_features,
            status: Status::Ok,
            reason: None,
            bf16: None,
            fp8: None,
            speedup: None,
            errors: BTreeMap::new(),
        }
    }
}

/// Largest token count a sweep accepts (2^32): far beyond any GPU's memory for one module, and
/// small enough that padding and byte counts stay inside 64 bits.
pub const MAX_TOKENS: u64 = 1 << 32;

/// The default dense token counts: powers of two from 256 to `max_tokens`, plus the configured
/// run's count, sorted and deduplicated.
pub fn default_token_counts(max_tokens: u64, run_tokens: Option<u64>) -> Vec<u64> {
    token_counts(max_tokens, run_tokens, 1)
}

/// Token counts from 256 to `max_tokens` with `per_doubling` geometric steps per doubling
/// (1: powers of two; 2: also the points in between at x1.41, ...), each rounded to a multiple of
/// 16 (the FP8 row multiple), plus the configured run's count. A denser sweep lets a rule start
/// closer to where FP8 starts to win, for proportionally more device time.
pub fn token_counts(max_tokens: u64, run_tokens: Option<u64>, per_doubling: u32) -> Vec<u64> {
    let steps = per_doubling.max(1);
    let max = max_tokens.clamp(256, MAX_TOKENS);
    let mut v = Vec::new();
    for i in 0u32.. {
        let t = 256.0 * 2f64.powf(f64::from(i) / f64::from(steps));
        let t = ((t / 16.0).round() as u64) * 16;
        if t > max {
            break;
        }
        v.push(t);
    }
    if let Some(t) = run_tokens.filter(|t| *t > 0) {
        v.push(t.min(MAX_TOKENS));
    }
    v.sort_unstable();
    v.dedup();
    v
}

/// Parses the seed's `TE_LAYER_PERF_SHAPE_SWEEP` form, `1024x1,4096x2` (seq x mbs), into token
/// counts.
pub fn parse_shape_sweep(s: &str) -> Result<Vec<u64>, String> {
    let mut out = Vec::new();
    for item in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
        let (seq, mbs) = item.split_once(['x', 'X']).unwrap_or((item, "1"));
        let parse = |v: &str, what: &str| {
            v.trim()
                .parse::<u64>()
                .ok()
                .filter(|n| *n > 0)
                .ok_or_else(|| {
                    format!(
                        "`{item}`: {what} `{v}` is not a positive integer (form: 1024x1,4096x2)"
                    )
                })
        };
        let t = parse(seq, "sequence length")?
            .checked_mul(parse(mbs, "micro-batch size")?)
            .filter(|t| *t <= MAX_TOKENS)
            .ok_or_else(|| format!("`{item}`: more than {MAX_TOKENS} tokens"))?;
        out.push(t);
    }
    if out.is_empty() {
        return Err("empty shape sweep (form: 1024x1,4096x2)".to_owned());
    }
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Splits `total` rows over `n` experts.
pub fn split_rows(total: u64, n: u32, mode: SplitMode, seed: u64) -> Vec<u64> {
    let n = n.max(1) as usize;
    let weights: Vec<f64> = match mode {
        SplitMode::Uniform => vec![1.0; n],
        SplitMode::Zipf(skew) => {
            // Rank r gets 1/r^skew; a seeded shuffle decides which expert holds which rank.
            let mut ranks: Vec<usize> = (1..=n).collect();
            let mut state = seed ^ 0x9e37_79b9_7f4a_7c15;
            for i in (1..n).rev() {
                state = splitmix(state);
                ranks.swap(i, (state % (i as u64 + 1)) as usize);
            }
            ranks.iter().map(|&r| 1.0 / (r as f64).powf(skew)).collect()
        }
    };
    let sum: f64 = weights.iter().sum();
    let mut out: Vec<u64> = weights
        .iter()
        .map(|w| (total as f64 * w / sum).floor() as u64)
        .collect();
    // Hand the remainder out by largest fractional part, then by index: deterministic and exact.
    let mut rest = total - out.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        let fa = total as f64 * weights[a] / sum - out[a] as f64;
        let fb = total as f64 * weights[b] / sum - out[b] as f64;
        fb.total_cmp(&fa).then(a.cmp(&b))
    });
    for &i in order.iter().cycle() {
        if rest == 0 {
            break;
        }
        out[i] += 1;
        rest -= 1;
    }
    out
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Builds the points of a sweep: every module at every dense token count. Grouped modules are
/// measured with both split modes; their token count is the routed count (x `topk`).
pub fn build_points(
    modules: &[ModuleSpec],
    dense_tokens: &[u64],
    topk: u64,
    splits: &[SplitMode],
) -> Result<Vec<BenchPoint>, TokenOverflow> {
    let mut out = Vec::new();
    for spec in modules {
        for &t in dense_tokens {
            // `t` is already the per-rank decision count (seq x mbs / cp).
            let tokens_cfg = TokenConfig::new(t, 1);
            if spec.module_kind.is_grouped() {
                let tokens = tokens_cfg.expert_tokens(topk)?;
                let rows = spec.gemm_rows(tokens);
                for (i, &mode) in splits.iter().enumerate() {
                    out.push(BenchPoint {
                        spec: spec.clone(),
                        tokens,
                        splits: split_rows(rows, spec.num_gemms, mode, 1234 + i as u64),
                        split_mode: Some(mode),
                    });
                }
            } else {
                let tokens = tokens_cfg.dense_tokens()?.0;
                out.push(BenchPoint {
                    spec: spec.clone(),
                    tokens,
                    splits: vec![spec.gemm_rows(tokens)],
                    split_mode: None,
                });
            }
        }
    }
    Ok(out)
}

/// Bytes of device memory one point needs (both precisions, one rotation set), for sizing
/// sweeps against free memory.
pub fn point_bytes(p: &BenchPoint, pad: u64) -> u64 {
    let k = p.spec.in_features;
    let n = p.spec.out_features;
    let g = u64::from(p.spec.num_gemms);
    let m = round_up(p.segments(pad).total_padded().max(p.rows()), 16);
    // Saturating: an absurd token count must read as "does not fit", not overflow.
    let act = m.saturating_mul(k).saturating_add(m.saturating_mul(n));
    let wgt = g.saturating_mul(n).saturating_mul(k);
    let bf16 = act.saturating_mul(4).saturating_add(wgt.saturating_mul(4)); // x, y, dy, dx; w, dw
    let fp8 = act.saturating_mul(2).saturating_add(wgt.saturating_mul(2)); // row + col copies; w, w^T
    bf16.saturating_add(fp8).saturating_add(act / 16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_and_dense_token_counts() {
        assert_eq!(
            default_token_counts(4096, Some(3000)),
            vec![256, 512, 1024, 2048, 3000, 4096]
        );
        assert_eq!(default_token_counts(100, None), vec![256]);
        assert_eq!(default_token_counts(1024, Some(1024)), vec![256, 512, 1024]);
        assert_eq!(
            token_counts(2048, None, 2),
            vec![256, 368, 512, 720, 1024, 1456, 2048]
        );
        assert_eq!(token_counts(1024, None, 4).len(), 9);
        assert!(token_counts(1 << 20, None, 3).iter().all(|t| t % 16 == 0));
    }

    #[test]
    fn shape_sweep_parsing() {
        assert_eq!(parse_shape_sweep("1024x1,4096x2"), Ok(vec![1024, 8192]));
        assert_eq!(parse_shape_sweep(" 424x1 , 2048 "), Ok(vec![424, 2048]));
        assert!(parse_shape_sweep("").is_err());
        assert!(parse_shape_sweep("1024x0").is_err());
        assert!(parse_shape_sweep("axb").unwrap_err().contains("axb"));
        assert!(parse_shape_sweep("18446744073709551615x2").is_err());
    }

    #[test]
    fn splits_sum_exactly_and_are_deterministic() {
        for total in [0u64, 1, 7, 1000, 65536, 262_144] {
            for n in [1u32, 3, 8, 32, 64] {
                for mode in [SplitMode::Uniform, SplitMode::Zipf(1.2)] {
                    let s = split_rows(total, n, mode, 7);
                    assert_eq!(s.len(), n as usize);
                    assert_eq!(s.iter().sum::<u64>(), total);
                    assert_eq!(s, split_rows(total, n, mode, 7));
                }
            }
        }
        let z = split_rows(10_000, 8, SplitMode::Zipf(1.2), 7);
        let max = *z.iter().max().unwrap_or(&0);
        let min = *z.iter().min().unwrap_or(&0);
        assert!(max > 4 * min, "zipf should be skewed: {z:?}");
        assert_eq!(split_rows(10, 4, SplitMode::Uniform, 0), vec![3, 3, 2, 2]);
    }

    #[test]
    fn planned_and_written_points_share_one_identity() {
        let model = fp8_engine::load_model(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../fixtures/models/deepseek_v3.yaml"
        )))
        .expect("fixture loads");
        let llm = &model.components[0];
        let mods = fp8_engine::inventory(llm, fp8_engine::Parallel::tp(2)).expect("layout");
        let pts = build_points(
            &mods,
            &[256, 4096],
            8,
            &[SplitMode::Uniform, SplitMode::Zipf(1.2)],
        )
        .expect("fits");
        assert!(pts.iter().any(|p| p.split_mode.is_some()));
        let mut ids = std::collections::BTreeSet::new();
        for p in &pts {
            assert_eq!(p.id(), p.report_point(16).id());
            assert!(ids.insert(p.id()), "two points share {}", p.id());
        }
    }
}
