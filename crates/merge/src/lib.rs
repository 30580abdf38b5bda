//! `fp8-merge` turns benchmark reports into adaptive-FP8 policies, soundly: a rule says "FP8 from
//! `min_tokens` up" only when every measured token count from there up clears the threshold plus a
//! noise margin, for every module that shares the rule's key.
//!
//! It reads our report format (owned by `fp8-report`) and the reference Python tool's list of results
//! (pairing its padded FP8 token counts with the logical BF16 ones), never pools the LLM and ViT
//! of a VLM, and writes byte-deterministic policies through `fp8-policy`.
//!
//! It measures nothing and touches no GPU: `fp8-bench` produces the reports.

mod checks;
pub mod error;
pub mod fold;
pub mod host;
pub mod load;
pub mod merge;
mod merge_provenance;
pub mod model;
pub mod module_recipes;
#[cfg(test)]
mod module_recipes_tests;
pub mod numerics;
pub mod options;
mod reference;
pub mod refine;
pub mod sample;
pub mod step;

pub use error::{MergeError, Setting};
pub use load::{load, parse};
pub use merge::{Merged, RuleOutcome, merge, module_of, rule_key, speeds_of, threshold_of};
pub use options::{MergeOptions, SharedKey};
pub use sample::{GroupKey, Loaded, Origin, ParKey, Sample, ShardInfo};
