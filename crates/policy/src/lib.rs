//! `fp8-policy` reads, validates, queries and writes adaptive-FP8 policy files: the JSON that
//! tells a trainer, module by module, whether a Transformer Engine linear layer should run FP8
//! or BF16 for a given parallel layout and token count.
//!
//! The format is version 1 of the seed's policy (dense kinds nested as
//! `{ub_name: [{tp, min_tokens, measured_speedup}]}`, grouped MoE kinds as flat lists of
//! `{etp, num_gemms, min_tokens, measured_speedup}`), so files move freely between this crate
//! and the Python loader it replaces. A rule may also carry `min_tokens_graphed`, the threshold
//! for CUDA-graphed steps ([`Execution`]); `min_tokens` is the eager one, the one the reference
//! loader reads. The key design choice is strictness with good messages:
//! every problem the Python loader ignored (bad version, duplicate keys, zero parallel sizes,
//! the older flat format, NaN speedups) is a typed [`PolicyError`] that names the file, the JSON
//! path and the fix, and output is byte-deterministic and written atomically.
//!
//! This crate does not know about model configs, token math or benchmarks, and it never touches
//! a GPU: it answers one lookup at a time. The decision engine (`fp8-engine`) builds on it.
//!
//! ```
//! use fp8_policy::{DenseKind, Lookup, Policy};
//!
//! let policy = Policy::from_json_str(
//!     r#"{"version": 1, "speedup_threshold": 1.0,
//!         "rules": {"row": {"fc2": [{"tp": 1, "min_tokens": 8192, "measured_speedup": 1.23}]}}}"#,
//!     "example.json",
//! )?;
//! let fc2 = Lookup::Dense { kind: DenseKind::Row, ub_name: Some("fc2"), tp: 1 };
//! assert!(policy.decide(fc2, 8192).use_fp8);
//! assert!(!policy.decide(fc2, 8191).use_fp8);
//! # Ok::<(), fp8_policy::PolicyError>(())
//! ```

mod dupkeys;
mod error;
mod execution;
mod io;
mod kind;
mod lookup;
mod parse;
mod policy;
mod provenance;
mod recipe;
mod recipe_plan;
mod rule_key;
mod ser;
mod threshold;

pub use error::{MAX_POLICY_BYTES, PolicyError, Problem};
pub use execution::Execution;
pub use kind::{DenseKind, GroupedKind, KindFamily, ModuleKind, UnknownKind};
pub use lookup::{Decision, Lookup, MatchedRule, Reason};
pub use policy::{DenseRule, GroupedRule, POLICY_VERSION, Policy, Thresholds};
#[allow(deprecated)]
pub use provenance::EagerSource;
pub use provenance::{
    GemmShape, HostFloor, KeyShapes, KeySources, ModuleVerdict, NumericsBoundApplied,
    NumericsOverrule, Provenance, SharedKeyVerdict, ThresholdSource,
};
pub use recipe::{Fp8Format, Recipe, UnknownRecipe};
pub use recipe_plan::{KeyRecipes, PLAN_RECIPES, RecipeFrom, RecipePlan};
pub use rule_key::RuleKey;
pub use threshold::{NEVER, Threshold, threshold_words};
