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
//!
//! A Rust launcher uses it in two ways. A whole model: config in, plan out.
//!
//! ```
//! use fp8_engine::{PlanConfig, PlanRequest, load_model, plan};
//! # let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
//! let model = load_model(format!("{root}/fixtures/models/qwen2_5_72b.yaml"))?;
//! let policy = fp8_policy::Policy::load(format!("{root}/policies/qwen2_5_72b.json"))?;
//! let mut req = PlanRequest::default();
//! req.tp = Some(8);
//! req.seq_length = Some(4096);
//! let r = model.resolve(&req)?;
//! let cfg = PlanConfig {
//!     parallel: r.parallel,
//!     tokens: r.tokens,
//!     topk: None,
//!     policies: [(fp8_engine::Role::Llm, &policy)].into(),
//!     execution: fp8_policy::Execution::Eager,
//! };
//! let p = plan(&model, &cfg)?;
//! for m in &p.modules {
//!     println!("{} {}: {}", m.spec.name, if m.use_fp8 { "fp8" } else { "bf16" }, m.reason);
//! }
//! assert_eq!(p.summary.modules, 4 * 80);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! One module, as a build-time callback sees it:
//!
//! ```
//! use fp8_engine::{ModuleQuery, TokenConfig, classify, decide_module};
//! # let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
//! let policy = fp8_policy::Policy::load(format!("{root}/policies/deepseek_v3.json"))?;
//! // A routed-expert FC1 at EP 32 (8 local experts), ETP 1, top-8 routing, 4096 tokens.
//! let c = classify("TEColumnParallelGroupedLinear", Some("fc1"), true)?;
//! let q = ModuleQuery {
//!     kind: c.kind, ub_name: Some("fc1"), tp: 8, etp: 1, num_gemms: Some(8),
//!     execution: fp8_policy::Execution::Eager,
//! };
//! let d = decide_module(&q, &TokenConfig::new(4096, 1), Some(8), Some(&policy))?;
//! assert_eq!(d.num_tokens, 4096 * 8);
//! println!("{}: {}", if d.use_fp8() { "fp8" } else { "bf16" }, d.reason());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod classify;
pub mod config;
pub mod coverage;
pub mod execution;
pub mod identity;
pub mod inventory;
pub mod model;
pub mod native;
pub mod one;
pub mod parallel;
pub mod plan;
pub mod render;
pub mod request;
pub mod tokens;

pub use classify::{Classified, ClassifyError, KindSource, TeClass, classify};
pub use config::{ConfigError, LoadOptions, load_model, load_model_with};
pub use coverage::{FILL_DIR, Uncovered, fill_command};
pub use inventory::{LayoutError, ModuleSpec, inventory};
pub use model::{Arch, Component, ModelDesc, Role, TokenOverrides};
pub use one::{ModuleName, OneDecision, OneError, OneModule, decide_one};
pub use parallel::Parallel;
pub use plan::{
    DecideError, ModuleDecision, ModuleQuery, Plan, PlanConfig, PlanError, PlannedModule, Summary,
    decide, decide_module, plan,
};
pub use request::{NoTokens, PlanRequest, Resolved, config_policy_path};
pub use tokens::{TokenConfig, TokenOverflow, TokenSource};
