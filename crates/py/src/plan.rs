//! Plans of a whole model for Python: `plan_json` (what `fp8sel explain --json` prints) and
//! `te_precision_config_json` (what `fp8sel te-precision-config` writes), over the engine's plan.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fp8_engine::config::model_from_value;
use fp8_engine::native::te_precision_config;
use fp8_engine::{
    LoadOptions, PlanConfig, PlanRequest, Role, config_policy_path, load_model_with, plan, render,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::{ConfigError, MissingRulesError, PlanError, execution_arg, policy_arg, policy_err};

/// The model of a plan call: a config file, or config text (JSON) with a name.
fn load_model_arg(
    model: &Bound<'_, PyAny>,
    config_root: Option<PathBuf>,
) -> PyResult<(fp8_engine::ModelDesc, String)> {
    if let Ok(d) = model.cast::<PyDict>() {
        let json = model
            .py()
            .import("json")?
            .call_method1("dumps", (d,))?
            .extract::<String>()?;
        let v: serde_json::Value = serde_json::from_str(&json)
            .map_err(|e| ConfigError::new_err(format!("<config dict>: {e}")))?;
        let desc = model_from_value(&v, Path::new("<config dict>"), "megatron_config", false)
            .map_err(|e| ConfigError::new_err(e.to_string()))?;
        return Ok((desc, "<config dict>".to_owned()));
    }
    let path: PathBuf = model.extract().map_err(|_| {
        PyValueError::new_err("a model is the path of a model config or a dict of config fields")
    })?;
    let opt = match config_root {
        Some(r) => LoadOptions::with_config_root(r),
        None => LoadOptions::default(),
    };
    let desc = load_model_with(&path, &opt).map_err(|e| ConfigError::new_err(e.to_string()))?;
    Ok((desc, path.display().to_string()))
}

/// The layout and token arguments every plan call takes.
struct PlanArgs {
    tp: Option<u32>,
    ep: Option<u32>,
    etp: Option<u32>,
    cp: Option<u32>,
    seq_length: Option<u64>,
    micro_batch_size: Option<u64>,
    num_tokens: Option<u64>,
    vit_num_tokens: Option<u64>,
    topk: Option<u64>,
    no_sequence_parallel: bool,
    /// `None`: the config's CUDA-graph setting (Megatron's rule), else eager.
    execution: Option<fp8_policy::Execution>,
}

/// The plan `fp8sel explain` makes for the same arguments. Policies default to each
/// component's `fp8_dynamic_policy_path` (when `selective_fp8` is on), relative to `root`.
fn make_plan(
    model: &Bound<'_, PyAny>,
    policy: Option<&Bound<'_, PyAny>>,
    vit_policy: Option<&Bound<'_, PyAny>>,
    a: &PlanArgs,
    root: Option<PathBuf>,
    config_root: Option<PathBuf>,
) -> PyResult<(fp8_engine::Plan, Gaps)> {
    for (name, v) in [("tp", a.tp), ("ep", a.ep), ("etp", a.etp), ("cp", a.cp)] {
        if v == Some(0) {
            return Err(PlanError::new_err(format!("{name} starts at 1")));
        }
    }
    // As the CLI's flags: a count of 0 tokens plans nothing real (every module BF16 by it).
    for (name, v) in [
        ("seq_length", a.seq_length),
        ("micro_batch_size", a.micro_batch_size),
        ("num_tokens", a.num_tokens),
        ("vit_num_tokens", a.vit_num_tokens),
    ] {
        if v == Some(0) {
            return Err(PlanError::new_err(format!("{name} starts at 1")));
        }
    }
    let root_shown = config_root.as_ref().map(|r| r.display().to_string());
    let (desc, shown) = load_model_arg(model, config_root)?;
    let mut req = PlanRequest::default();
    req.tp = a.tp;
    req.ep = a.ep;
    req.etp = a.etp;
    req.cp = a.cp;
    req.no_sequence_parallel = a.no_sequence_parallel;
    req.seq_length = a.seq_length;
    req.micro_batch_size = a.micro_batch_size;
    req.num_tokens = a.num_tokens;
    req.vit_num_tokens = a.vit_num_tokens;
    let resolved = desc.resolve(&req).map_err(|e| {
        PlanError::new_err(format!(
            "{shown}: {e} (seq_length=, or num_tokens= / vit_num_tokens=)"
        ))
    })?;
    let root = root.unwrap_or_else(|| PathBuf::from("."));
    let mut policies = BTreeMap::new();
    for c in &desc.components {
        let given = match c.role {
            Role::Llm => policy_arg(policy)?,
            Role::Vit => policy_arg(vit_policy)?,
        };
        let p = match given {
            Some(p) => Some(p),
            None => match config_policy_path(c, &root) {
                Some(path) => Some(fp8_policy::Policy::load(&path).map_err(policy_err)?),
                None => None,
            },
        };
        if let Some(p) = p {
            policies.insert(c.role, p);
        }
    }
    let cfg = PlanConfig {
        parallel: resolved.parallel,
        tokens: resolved.tokens,
        topk: a.topk,
        policies: policies.iter().map(|(k, v)| (*k, v)).collect(),
        execution: a
            .execution
            .or_else(|| desc.components.iter().find_map(|c| c.fp8.execution))
            .unwrap_or_default(),
    };
    let p = plan(&desc, &cfg).map_err(|e| PlanError::new_err(e.to_string()))?;
    let gaps = Gaps {
        model: (shown != "<config dict>").then_some(shown),
        config_root: root_shown,
        parallel: resolved.parallel,
        moe: desc.components.iter().any(|c| c.arch.moe.is_some()),
    };
    Ok((p, gaps))
}

/// What the refusal of an uncovered plan needs besides the plan: the fill command's inputs.
struct Gaps {
    model: Option<String>,
    config_root: Option<String>,
    parallel: fp8_engine::Parallel,
    moe: bool,
}

impl Gaps {
    /// `Err(MissingRulesError)` when the plan leaves modules of `roles` uncovered and
    /// `allow_missing` is off.
    fn refuse(
        &self,
        p: &fp8_engine::Plan,
        roles: &[Role],
        allow_missing: bool,
        recipe: Option<&str>,
    ) -> PyResult<()> {
        let Some(u) = p.uncovered(roles) else {
            return Ok(());
        };
        if allow_missing {
            return Ok(());
        }
        let fill = fp8_engine::fill_command(
            self.model.as_deref(),
            self.config_root.as_deref(),
            self.parallel,
            recipe,
            self.moe,
        );
        Err(MissingRulesError::new_err(format!(
            "{}\nor pass allow_missing=True to plan them BF16",
            u.message(&fill)
        )))
    }
}

/// The plan of a whole model as JSON text: exactly what `fp8sel explain --json` prints for the
/// same arguments. `model` is a config file's path or a dict of Megatron config fields.
#[pyfunction]
#[pyo3(signature = (
    model, policy = None, *, vit_policy = None, tp = None, ep = None, etp = None, cp = None,
    seq_length = None, micro_batch_size = None, num_tokens = None, vit_num_tokens = None,
    topk = None, no_sequence_parallel = false, root = None, config_root = None,
    execution = None, allow_missing = false
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn plan_json(
    model: &Bound<'_, PyAny>,
    policy: Option<&Bound<'_, PyAny>>,
    vit_policy: Option<&Bound<'_, PyAny>>,
    tp: Option<u32>,
    ep: Option<u32>,
    etp: Option<u32>,
    cp: Option<u32>,
    seq_length: Option<u64>,
    micro_batch_size: Option<u64>,
    num_tokens: Option<u64>,
    vit_num_tokens: Option<u64>,
    topk: Option<u64>,
    no_sequence_parallel: bool,
    root: Option<PathBuf>,
    config_root: Option<PathBuf>,
    execution: Option<&str>,
    allow_missing: bool,
) -> PyResult<String> {
    let a = PlanArgs {
        tp,
        ep,
        etp,
        cp,
        seq_length,
        micro_batch_size,
        num_tokens,
        vit_num_tokens,
        topk,
        no_sequence_parallel,
        execution: execution.map(execution_arg).transpose()?,
    };
    let (p, gaps) = make_plan(model, policy, vit_policy, &a, root, config_root)?;
    gaps.refuse(&p, &[Role::Llm, Role::Vit], allow_missing, None)?;
    Ok(format!("{:#}", render::plan_json(&p)))
}

/// Megatron's per-module precision config for the plan of the same arguments, as JSON text:
/// `{"config": {"configs": ..., "matchers": ...}, "yaml": text, "region": "bf16"|"fp8",
/// "fp8_need": null|"routed_experts"|"graphed_weights", "fp8_need_why": text, "fp8_instances": n,
/// "bf16_because": null|"padded_experts" (the plan's FP8 modules written BF16), its "_why" and
/// "_instances",
/// "launch": [lines]}` (what `fp8sel te-precision-config` writes and prints).
#[pyfunction]
#[pyo3(signature = (
    model, policy = None, *, recipe = "blockwise", fp8_format = "e4m3", tp = None, ep = None,
    etp = None, cp = None, seq_length = None, micro_batch_size = None, num_tokens = None,
    topk = None, no_sequence_parallel = false, root = None, config_root = None,
    execution = None, allow_missing = false
))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn te_precision_config_json(
    model: &Bound<'_, PyAny>,
    policy: Option<&Bound<'_, PyAny>>,
    recipe: &str,
    fp8_format: &str,
    tp: Option<u32>,
    ep: Option<u32>,
    etp: Option<u32>,
    cp: Option<u32>,
    seq_length: Option<u64>,
    micro_batch_size: Option<u64>,
    num_tokens: Option<u64>,
    topk: Option<u64>,
    no_sequence_parallel: bool,
    root: Option<PathBuf>,
    config_root: Option<PathBuf>,
    execution: Option<&str>,
    allow_missing: bool,
) -> PyResult<String> {
    let recipe: fp8_policy::Recipe = recipe
        .parse()
        .map_err(|e: fp8_policy::UnknownRecipe| PlanError::new_err(e.to_string()))?;
    let format: fp8_policy::Fp8Format = fp8_format.parse().map_err(PlanError::new_err)?;
    let a = PlanArgs {
        tp,
        ep,
        etp,
        cp,
        seq_length,
        micro_batch_size,
        num_tokens,
        vit_num_tokens: None,
        topk,
        no_sequence_parallel,
        execution: execution.map(execution_arg).transpose()?,
    };
    let (p, gaps) = make_plan(model, policy, None, &a, root, config_root)?;
    gaps.refuse(&p, &[Role::Llm], allow_missing, Some(recipe.name()))?;
    let missing = p.uncovered(&[Role::Llm]).map_or(0, |u| u.instances);
    let header = vec![format!(
        "Megatron-core per-module precision, written by adaptive_fp8 for {}",
        p.model
    )];
    let cfg = te_precision_config(&p, recipe, format, header)
        .map_err(|e| PlanError::new_err(e.to_string()))?;
    let out = serde_json::json!({
        "config": cfg.to_json(), "yaml": cfg.to_yaml(), "region": cfg.region, "fp8_need": cfg.fp8_need,
        "fp8_need_why": cfg.fp8_need.map(|n| n.why()),
        "bf16_because": cfg.bf16_because.map(|(b, _)| b),
        "bf16_because_why": cfg.bf16_because.map(|(b, _)| b.why()),
        "bf16_because_instances": cfg.bf16_because.map_or(0, |(_, n)| n),
        "fp8_instances": cfg.fp8_instances, "launch": cfg.launch_flags("te_precision.yaml"),
        "bf16_groups": cfg.bf16_groups(),
        "missing_instances": missing,
        "warnings": p.summary.warnings,
    });
    Ok(format!("{out:#}"))
}
