//! The bound a merge applies with a numerics report (`fp8_report::numerics`, re-exported here):
//! a module whose FP8 quantize-dequantize error is over the bound runs BF16 whatever its
//! speedup; and the per-module recipe choices' use of one report per recipe.

use std::path::Path;

use fp8_policy::RuleKey;
pub use fp8_report::numerics::{
    MAX_NUMERICS_BYTES, ModuleNumerics, NUMERICS_FORMAT, NUMERICS_VERSION, NumericsReport,
    OperandError,
};

use crate::error::MergeError;

/// The bound when none is given: E4M3's round trip of a well-scaled tensor has a relative RMS
/// error of about 0.027 (measured on the H200 for Llama-3.2-1B's modules, blockwise and
/// tensorwise alike: docs/device-logs/numerics/num6), so 0.05 admits that and refuses a module
/// with about twice that error (outliers, underflow).
pub const DEFAULT_MAX_QUANT_ERROR: f64 = 0.05;
/// The bound a merge applies.
#[derive(Debug, Clone, PartialEq)]
pub struct NumericsBound {
    /// The report.
    pub report: NumericsReport,
    /// The largest relative RMS error a module may have and run FP8.
    pub max_quant_error: f64,
}

/// Whether two keys name the same modules at any layout: a dense key's kind and `ub_name`, a
/// grouped key's kind. A module's quantization error is a property of its tensors, not of how
/// they are split: blockwise scales the same blocks at any TP, and a per-tensor scale of a shard
/// has at most the whole tensor's amax, so the error the probe measured at its own layout bounds
/// the module's error at every layout (the probe runs one GPU; the policy's keys carry the TP).
pub fn same_module(a: &RuleKey, b: &RuleKey) -> bool {
    match (a, b) {
        (
            RuleKey::Dense {
                kind: ka,
                ub_name: ua,
                ..
            },
            RuleKey::Dense {
                kind: kb,
                ub_name: ub,
                ..
            },
        ) => ka == kb && ua == ub,
        (RuleKey::Grouped { kind: ka, .. }, RuleKey::Grouped { kind: kb, .. }) => ka == kb,
        _ => false,
    }
}

impl NumericsBound {
    /// The module on `key`'s modules (of `component`, at any layout: [`same_module`]) with the
    /// worst error over the bound, if any: `(module, operand, error)`.
    pub fn overrule(&self, component: &str, key: &RuleKey) -> Option<(&str, &str, f64)> {
        self.of(component, key)
            .filter_map(|m| m.worst().map(|(op, e)| (m.name.as_str(), op, e)))
            .filter(|(_, _, e)| *e > self.max_quant_error)
            .max_by(|a, b| a.2.total_cmp(&b.2))
    }

    /// Whether the report measured `key`'s modules (of `component`) at all.
    pub fn covers(&self, component: &str, key: &RuleKey) -> bool {
        self.of(component, key).next().is_some()
    }

    fn of(&self, component: &str, key: &RuleKey) -> std::vec::IntoIter<&ModuleNumerics> {
        self.report
            .modules
            .iter()
            .filter(|m| m.component == component && same_module(&m.key, key))
            .collect::<Vec<_>>()
            .into_iter()
    }
}

/// Parses a numerics report (the caller reads the file, bounded by [`MAX_NUMERICS_BYTES`]):
/// [`fp8_report::numerics::parse_numerics`], its error a merge error.
pub fn parse_numerics(text: &str, file: &Path) -> Result<NumericsReport, MergeError> {
    Ok(fp8_report::numerics::parse_numerics(text, file)?)
}

/// The per-module recipe choices' use of the numerics reports (`model::recipes` and
/// `module_recipes`): one report per recipe, each bounding a key's modules.
pub mod per_recipe {
    use fp8_policy::{Recipe, RuleKey};

    use super::NumericsBound;
    use crate::MergeError;

    /// Refuses a recipe beside `base` without a report of its own: its error is unknown, so it
    /// cannot be chosen per module. `what` names its measurements (`the reports of`, ...).
    pub fn require(
        base: Recipe,
        recipes: &[Recipe],
        bounds: &[NumericsBound],
        what: &str,
    ) -> Result<(), MergeError> {
        match recipes
            .iter()
            .find(|r| **r != base && !bounds.iter().any(|b| b.report.recipe == Some(**r)))
        {
            Some(r) => Err(MergeError::Record(format!(
                "{what} {r} have no numerics report of {r}: its quantization error is unknown, \
                 so it cannot be chosen per module; fix: measure it (python -m \
                 adaptive_fp8.bench.numerics --recipe {r}, which emulates {r} on any GPU) and pass \
                 it, or leave out {r}"
            ))),
            None => Ok(()),
        }
    }

    /// Refuses a report of `r` that measured none of `key`'s modules (of `component`): a
    /// report of another model. `of` names where the key comes from.
    pub fn covers(
        bounds: &[NumericsBound],
        r: Recipe,
        component: &str,
        key: &RuleKey,
        of: &str,
    ) -> Result<(), MergeError> {
        match bounds
            .iter()
            .filter(|b| b.report.recipe == Some(r))
            .find(|b| !b.covers(component, key))
        {
            Some(b) => Err(MergeError::Record(format!(
                "{}: the numerics report of {r} measured no module of {key} ({component}){of}: it \
                 is a report of another model; fix: probe this model (python -m \
                 adaptive_fp8.bench.numerics --model ... --recipe {r})",
                b.report.file.display()
            ))),
            None => Ok(()),
        }
    }

    /// Whether every report of `r` puts every module of `key` within its bound.
    pub fn allows(bounds: &[NumericsBound], component: &str, key: &RuleKey, r: Recipe) -> bool {
        bounds
            .iter()
            .filter(|b| b.report.recipe == Some(r))
            .all(|b| b.overrule(component, key).is_none())
    }
}
