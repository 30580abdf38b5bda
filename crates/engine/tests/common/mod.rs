//! Helpers the engine's tests share: a config written to a temporary folder, a field error's
//! parts, one HuggingFace config's language model; the fixtures' models and policies, a plan's
//! configuration and its missing keys.

#![allow(dead_code, clippy::unwrap_used)]

use std::path::PathBuf;

use fp8_engine::{
    ConfigError, ModelDesc, Parallel, Plan, PlanConfig, Role, TokenConfig, load_model,
};
use fp8_policy::Policy;

pub fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> PathBuf {
    let p = dir.path().join(name);
    if let Some(parent) = p.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&p, text).unwrap();
    p
}

pub fn field_error(e: ConfigError) -> (String, String) {
    match e {
        ConfigError::Field { field, problem, .. } => (field, problem),
        other => panic!("expected a field error, got {other}"),
    }
}

/// The field an HF config's error names (the config must be refused with a field error).
#[allow(dead_code)] // each test binary compiles this module; not every one refuses a config
pub fn hf_refused_field(json: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "config.json", json);
    field_error(load_model(&p).unwrap_err()).0
}

/// The LLM arch of one HF config.
pub fn hf_llm(json: &str) -> fp8_engine::model::Arch {
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "config.json", json);
    load_model(&p).unwrap().components[0].arch.clone()
}

pub fn root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

pub fn model(p: &str) -> ModelDesc {
    load_model(root().join("fixtures/models").join(p)).unwrap()
}

pub fn policy(p: &str) -> Policy {
    Policy::load(root().join("fixtures/policies").join(p)).unwrap()
}

/// The plan's missing rule keys, of one component or of all.
pub fn missing_keys(pl: &Plan, role: Option<Role>) -> Vec<String> {
    pl.summary
        .missing_rules
        .iter()
        .filter(|r| role.is_none_or(|c| r.component == c))
        .map(|r| r.key.to_string())
        .collect()
}

pub fn cfg<'a>(
    p: Parallel,
    tokens: &[(Role, TokenConfig)],
    pols: &[(Role, &'a Policy)],
) -> PlanConfig<'a> {
    PlanConfig {
        parallel: p,
        tokens: tokens.iter().copied().collect(),
        topk: None,
        policies: pols.iter().copied().collect(),
        execution: fp8_policy::Execution::Eager,
    }
}
