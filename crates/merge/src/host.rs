//! Host profiles: what an eager trainer's host pays per module step, per kind and precision (and
//! per local expert for grouped modules), as `python -m adaptive_fp8.bench.probe_host` measures it on
//! the user's machine. The merge turns each module's times into `max(gpu, host)` with it: in an
//! eager step the host enqueues a module while the GPU runs the previous ones, so a module costs
//! whichever of the two is longer (docs/POLICY.md says why, with the step measurements behind it).

use std::collections::BTreeMap;

use fp8_policy::ModuleKind;
use serde::Deserialize;

use crate::error::MergeError;

/// Value of the `format` field of a host profile.
pub const HOST_PROFILE_FORMAT: &str = "adaptive-fp8-host-profile";
/// Largest host profile a reader should accept (a few hundred bytes in practice).
pub const MAX_HOST_PROFILE_BYTES: u64 = 1 << 20;
/// Largest host time a profile may state per module step, ms: more is a broken measurement.
const MAX_HOST_MS: f64 = 1000.0;

/// Host cost of one module kind's step.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KindHost {
    /// BF16 step, ms.
    pub bf16_ms: f64,
    /// FP8 step, ms.
    pub fp8_ms: f64,
    /// Added per local expert (grouped kinds), BF16, ms.
    #[serde(default)]
    pub bf16_per_expert_ms: f64,
    /// Added per local expert (grouped kinds), FP8, ms.
    #[serde(default)]
    pub fp8_per_expert_ms: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    format: String,
    version: u32,
    #[serde(default)]
    device: String,
    #[serde(default)]
    te_version: String,
    #[serde(default)]
    recipe: String,
    kinds: BTreeMap<String, KindHost>,
}

/// A validated host profile.
#[derive(Debug, Clone, PartialEq)]
pub struct HostProfile {
    /// Where it came from, for provenance: `<file> (<device>, TE <version>, <recipe>)`.
    pub source: String,
    kinds: BTreeMap<ModuleKind, KindHost>,
}

impl HostProfile {
    /// Parses and validates a profile; errors name the file, the field and the fix.
    pub fn parse(text: &str, origin: &str) -> Result<HostProfile, MergeError> {
        let bad = |what: String| {
            MergeError::Options(format!(
                "host profile {origin}: {what}; fix: measure it again with `python -m adaptive_fp8.bench.probe_host --out FILE`"
            ))
        };
        let f: File =
            serde_json::from_str(text).map_err(|e| bad(format!("not a host profile ({e})")))?;
        if f.format != HOST_PROFILE_FORMAT {
            return Err(bad(format!(
                "format is `{}`, expected `{HOST_PROFILE_FORMAT}`",
                f.format
            )));
        }
        if f.version != 1 {
            return Err(bad(format!("version {} is not 1", f.version)));
        }
        if f.kinds.is_empty() {
            return Err(bad("kinds is empty".into()));
        }
        let mut kinds = BTreeMap::new();
        for (name, k) in f.kinds {
            let kind: ModuleKind = name
                .parse()
                .map_err(|_| bad(format!("kinds.{name}: not a module kind")))?;
            for (field, v) in [
                ("bf16_ms", k.bf16_ms),
                ("fp8_ms", k.fp8_ms),
                ("bf16_per_expert_ms", k.bf16_per_expert_ms),
                ("fp8_per_expert_ms", k.fp8_per_expert_ms),
            ] {
                if !(v.is_finite() && (0.0..=MAX_HOST_MS).contains(&v)) {
                    return Err(bad(format!(
                        "kinds.{name}.{field} is {v}; host times are between 0 and {MAX_HOST_MS} ms"
                    )));
                }
            }
            kinds.insert(kind, k);
        }
        let mut what: Vec<&str> = [f.device.as_str(), f.te_version.as_str(), f.recipe.as_str()]
            .into_iter()
            .filter(|s| !s.is_empty())
            .collect();
        if what.is_empty() {
            what.push("no device recorded");
        }
        Ok(HostProfile {
            source: format!("{origin} ({})", what.join(", ")),
            kinds,
        })
    }

    /// The host floors `(bf16 ms, fp8 ms)` of a module of `kind` with `experts` local experts
    /// (1 for dense kinds); `None` when the profile has no figure for the kind.
    pub fn floors(&self, kind: ModuleKind, experts: u32) -> Option<(f64, f64)> {
        let k = self.kinds.get(&kind)?;
        let extra = f64::from(experts.saturating_sub(1));
        Some((
            k.bf16_ms + extra * k.bf16_per_expert_ms,
            k.fp8_ms + extra * k.fp8_per_expert_ms,
        ))
    }

    /// The kinds the profile covers.
    pub fn kinds(&self) -> impl Iterator<Item = ModuleKind> + '_ {
        self.kinds.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"format": "adaptive-fp8-host-profile", "version": 1, "device": "NVIDIA H200",
        "te_version": "2.20.2", "recipe": "blockwise",
        "kinds": {"row": {"bf16_ms": 0.6, "fp8_ms": 1.1},
                  "row_grouped": {"bf16_ms": 0.7, "fp8_ms": 1.2, "bf16_per_expert_ms": 0.05, "fp8_per_expert_ms": 0.09}}}"#;

    #[test]
    fn floors_scale_with_local_experts() {
        let p = HostProfile::parse(GOOD, "h.json").unwrap();
        assert_eq!(p.floors(ModuleKind::Row, 1), Some((0.6, 1.1)));
        let (b, f) = p.floors(ModuleKind::RowGrouped, 9).unwrap();
        assert!((b - 1.1).abs() < 1e-12 && (f - 1.92).abs() < 1e-12);
        assert_eq!(p.floors(ModuleKind::Column, 1), None);
        assert!(p.source.contains("NVIDIA H200") && p.source.contains("2.20.2"));
    }

    #[test]
    fn bad_profiles_name_the_field_and_the_fix() {
        for (text, words) in [
            (
                GOOD.replace("adaptive-fp8-host-profile", "x"),
                "format is `x`",
            ),
            (
                GOOD.replace("\"version\": 1", "\"version\": 2"),
                "version 2",
            ),
            (
                GOOD.replace("\"row\":", "\"rows\":"),
                "kinds.rows: not a module kind",
            ),
            (GOOD.replace("0.6", "-1"), "kinds.row.bf16_ms is -1"),
            (GOOD.replace("0.6", "1e9"), "between 0 and"),
            (
                GOOD.replace("\"fp8_ms\": 1.1", "\"fp8_ms\": 1.1, \"extra\": 1"),
                "unknown field",
            ),
            ("[]".to_owned(), "not a host profile"),
        ] {
            let e = HostProfile::parse(&text, "h.json").unwrap_err().to_string();
            assert!(
                e.contains(words) && e.contains("h.json") && e.contains("probe_host"),
                "{e}"
            );
        }
    }
}
