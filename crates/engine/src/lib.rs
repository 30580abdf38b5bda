//! `fp8-engine` is the adaptive-FP8 decision engine: it turns a model config and a training
//! layout into the list of Transformer Engine linear modules the model builds, and decides each
//! one FP8 or BF16 from a policy, with the reason.
//!
//! Key design choice: every module is classified exactly once from an explicit inventory, and
//! every count that feeds a decision (tokens, `num_gemms`, TP/ETP) is computed here from the
//! config, never defaulted. The reference's defects (experts decided with `num_gemms = 1`, row
//! modules reclassified as `duplicated`, CP ignored) are each ruled out by construction and by a
//! test.
//!
//! It does no GPU work, runs no benchmark, and writes no policy; `fp8-policy` owns the file
//! format and `fp8-merge` builds policies from measurements.

pub mod classify;
pub mod config;
pub mod inventory;
pub mod model;
pub mod plan;
pub mod render;
pub mod request;
pub mod tokens;

pub use classify::{Classified, ClassifyError, KindSource, TeClass, classify};
pub use config::{ConfigError, LoadOptions, load_model, load_model_with};
pub use inventory::{LayoutError, ModuleSpec, Parallel, inventory};
pub use model::{Arch, Component, ModelDesc, Role, TokenOverrides};
pub use plan::{
    DecideError, ModuleDecision, ModuleQuery, Plan, PlanConfig, PlanError, PlannedModule, Summary,
    decide, decide_module, plan,
};
pub use request::{NoTokens, PlanRequest, Resolved, config_policy_path};
pub use tokens::{TokenConfig, TokenOverflow, TokenSource};
