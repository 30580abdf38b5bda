//! The native core of the `adaptive_fp8` Python package (`adaptive_fp8._core`): a thin binding
//! over `fp8-policy` and `fp8-engine`, so a Python trainer decides exactly as `fp8sel` does.
//!
//! - `Policy` (load, parse, decide) and `Decision`;
//! - `plan_json`: the plan of a whole model, the same JSON `fp8sel explain --json` prints;
//! - exceptions that map the Rust error kinds: `PolicyError`, `ConfigError`, `PlanError`, all
//!   `ValueError`s whose message names the file, the field and the fix.
//!
//! It holds no logic of its own: classification, token math, lookups and plans are the engine's.
//! The Megatron and TE integrations are pure Python (`adaptive_fp8.megatron`, `adaptive_fp8.te`).

mod plan;

use std::path::PathBuf;

use fp8_engine::{ModuleName, OneError, OneModule, TokenConfig, decide_one};
use fp8_policy::RuleKey;
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The engine's reason in this API's argument names.
fn one_error(e: &OneError) -> String {
    match e {
        OneError::NoTokens => {
            "give num_tokens, or seq_length (with micro_batch_size and cp)".into()
        }
        other => other.to_string(),
    }
}

create_exception!(
    _core,
    PolicyError,
    PyValueError,
    "A policy file could not be read or is invalid; the message names the file, the JSON path and the fix."
);
create_exception!(
    _core,
    ConfigError,
    PyValueError,
    "A model config could not be read or describes an impossible model; the message names the file, the field and the fix."
);
create_exception!(
    _core,
    PlanError,
    PyValueError,
    "A module or a model could not be decided with the values given (a missing num_gemms or topk, no sequence length, a layout that does not divide the model)."
);

create_exception!(
    _core,
    MissingRulesError,
    PlanError,
    "The policy has no rule for some modules of the model at this layout: they would run BF16 because of the gap, not because FP8 loses there. The message names the missing keys and the command that makes a policy for the layout; pass allow_missing=True to plan them BF16."
);

/// An adaptive-FP8 policy (format version 1), validated on load.
#[pyclass(frozen, module = "adaptive_fp8")]
struct Policy {
    inner: fp8_policy::Policy,
    origin: String,
}

/// One module's answer: FP8 or BF16, and why.
#[pyclass(frozen, get_all, module = "adaptive_fp8")]
struct Decision {
    /// True when the module runs FP8.
    fp8: bool,
    /// Why, in words (the same text as `fp8sel decide`).
    reason: String,
    /// The rule key looked up: `{"kind", "ub_name", "tp"}` or `{"kind", "etp", "num_gemms"}`;
    /// `None` for a dense module without a ub_name.
    key: Option<Py<PyDict>>,
    /// The matched rule's `min_tokens`, when a rule matched.
    min_tokens: Option<u64>,
    /// The matched rule's measured speedup, when recorded.
    measured_speedup: Option<f64>,
    /// True when the policy comes from cost-model estimates, not measurements.
    estimated: bool,
    /// The kind looked up (after expert promotion).
    kind: String,
    /// The token count compared (x topk for experts).
    num_tokens: u64,
    /// Under the policy's per-module recipe plan, the recipe an FP8 module runs (`None` for a
    /// BF16 one); without a plan `None` (an FP8 module runs the trainer's recipe).
    recipe: Option<String>,
}

#[pymethods]
impl Decision {
    fn __bool__(&self) -> bool {
        self.fp8
    }

    fn __repr__(&self) -> String {
        let est = if self.estimated { ", estimated" } else { "" };
        format!(
            "Decision({}, {:?}{est})",
            if self.fp8 { "fp8" } else { "bf16" },
            self.reason
        )
    }
}

fn policy_err(e: fp8_policy::PolicyError) -> PyErr {
    PolicyError::new_err(e.to_string())
}

#[pymethods]
impl Policy {
    /// Loads and validates a policy file.
    #[staticmethod]
    fn load(path: PathBuf) -> PyResult<Self> {
        let inner = fp8_policy::Policy::load(&path).map_err(policy_err)?;
        Ok(Policy {
            inner,
            origin: path.display().to_string(),
        })
    }

    /// Parses and validates a policy from JSON text; `origin` names it in errors.
    #[staticmethod]
    #[pyo3(signature = (text, origin = "<string>"))]
    fn from_json(text: &str, origin: &str) -> PyResult<Self> {
        let inner = fp8_policy::Policy::from_json_str(text, origin).map_err(policy_err)?;
        Ok(Policy {
            inner,
            origin: origin.to_owned(),
        })
    }

    /// Decides one module, as the trainer does at build time. Give the TE class (or the kind),
    /// the ub_name, the layout, and the tokens: `num_tokens` (the `fp8_dynamic_num_tokens`
    /// override) or `seq_length` x `micro_batch_size` / `cp`. Expert modules (grouped classes,
    /// or `expert=True`) need `num_gemms` and `topk`: neither has a default.
    #[pyo3(signature = (
        te_class = None, *, kind = None, ub_name = None, tp = 1, etp = None, num_gemms = None,
        topk = None, seq_length = None, micro_batch_size = 1, cp = 1, num_tokens = None,
        expert = false, execution = "eager"
    ))]
    #[allow(clippy::too_many_arguments)]
    fn decide(
        &self,
        py: Python<'_>,
        te_class: Option<&str>,
        kind: Option<&str>,
        ub_name: Option<&str>,
        tp: u32,
        etp: Option<u32>,
        num_gemms: Option<u32>,
        topk: Option<u64>,
        seq_length: Option<u64>,
        micro_batch_size: u64,
        cp: u64,
        num_tokens: Option<u64>,
        expert: bool,
        execution: &str,
    ) -> PyResult<Decision> {
        let execution = execution_arg(execution)?;
        let name = match (te_class, kind) {
            (Some(c), _) => ModuleName::Class(c),
            (None, Some(k)) => {
                ModuleName::Kind(k.parse().map_err(|e| PlanError::new_err(format!("{e}")))?)
            }
            (None, None) => return Err(PlanError::new_err("give te_class or kind")),
        };
        let module = OneModule {
            name,
            ub_name,
            expert,
            tp,
            etp,
            num_gemms,
            topk,
            tokens: TokenConfig {
                seq_length: seq_length.unwrap_or(0),
                micro_batch_size,
                context_parallel_size: cp,
                fp8_dynamic_num_tokens: num_tokens,
            },
            execution,
        };
        let one =
            decide_one(&module, &self.inner).map_err(|e| PlanError::new_err(one_error(&e)))?;
        let (decision, key) = (&one.decision, &one.key);
        let (mut fp8, mut reason, mut recipe) =
            (decision.use_fp8, decision.reason.to_string(), None);
        if let Some(plan) = self.inner.recipe_plan() {
            let r = match key.as_ref().and_then(|k| plan.key(k)) {
                Some(k) => {
                    reason = format!("recipe plan: {execution}: {}", k.steps_in_words(execution));
                    k.at(one.num_tokens, execution)
                }
                None => fp8.then_some(plan.base),
            };
            fp8 = r.is_some();
            recipe = r.map(|r| r.name().to_owned());
        }
        Ok(Decision {
            fp8,
            reason,
            recipe,
            key: key.as_ref().map(|k| key_dict(py, k)).transpose()?,
            min_tokens: decision.rule().map(|r| r.threshold(execution).0.to_wire()),
            measured_speedup: decision.rule().and_then(|r| r.measured_speedup()),
            estimated: self.inner.estimated(),
            kind: one.classified.kind.to_string(),
            num_tokens: one.num_tokens,
        })
    }

    /// True when the policy comes from cost-model estimates, not measurements.
    #[getter]
    fn estimated(&self) -> bool {
        self.inner.estimated()
    }

    /// The speedup FP8 had to reach when the policy was built.
    #[getter]
    fn speedup_threshold(&self) -> f64 {
        self.inner.speedup_threshold()
    }

    /// The models the policy was measured on (its provenance), when it says.
    #[getter]
    fn models(&self) -> Vec<String> {
        self.inner
            .provenance()
            .map(|p| p.models.clone())
            .unwrap_or_default()
    }

    /// The FP8 recipes the policy was measured with (`blockwise`, `tensorwise`, `delayed`,
    /// `mxfp8`); empty when it does not say.
    #[getter]
    fn recipes(&self) -> Vec<&'static str> {
        self.inner.recipes().into_iter().map(|r| r.name()).collect()
    }

    /// A warning for a trainer that runs `recipe` (Megatron's `--fp8-recipe` names; `current` is
    /// tensorwise) when the policy was made for another one, else `None`. An unknown recipe is a
    /// `ValueError`.
    fn recipe_warning(&self, recipe: &str) -> PyResult<Option<String>> {
        let r: fp8_policy::Recipe = recipe
            .parse()
            .map_err(|e: fp8_policy::UnknownRecipe| PyValueError::new_err(e.to_string()))?;
        Ok(self.inner.recipe_warning(r))
    }

    /// A warning for a trainer on the GPU named `device` (`torch.cuda.get_device_name()`) when
    /// the policy was measured on another GPU, else `None` (also where the policy does not say).
    fn device_warning(&self, device: &str) -> Option<String> {
        self.inner.device_warning(device)
    }

    /// Where the policy came from (a path, or the origin given to `from_json`).
    #[getter]
    fn origin(&self) -> &str {
        &self.origin
    }

    /// The policy as canonical JSON (the bytes `fp8sel merge-policy` writes).
    fn to_json(&self) -> String {
        self.inner.to_json()
    }

    fn __len__(&self) -> usize {
        self.inner.rule_count()
    }

    fn __repr__(&self) -> String {
        let est = if self.inner.estimated() {
            ", estimated"
        } else {
            ""
        };
        format!(
            "Policy({:?}, {} rules{est})",
            self.origin,
            self.inner.rule_count()
        )
    }
}

fn key_dict(py: Python<'_>, k: &RuleKey) -> PyResult<Py<PyDict>> {
    let d = PyDict::new(py);
    match k {
        RuleKey::Dense { kind, ub_name, tp } => {
            d.set_item("kind", kind.to_string())?;
            d.set_item("ub_name", ub_name)?;
            d.set_item("tp", tp)?;
        }
        RuleKey::Grouped {
            kind,
            etp,
            num_gemms,
        } => {
            d.set_item("kind", kind.to_string())?;
            d.set_item("etp", etp)?;
            d.set_item("num_gemms", num_gemms)?;
        }
    }
    Ok(d.unbind())
}

/// `eager` or `graphed`.
fn execution_arg(s: &str) -> PyResult<fp8_policy::Execution> {
    s.parse().map_err(PlanError::new_err)
}

/// A policy argument: a `Policy`, a path, or nothing.
fn policy_arg(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<fp8_policy::Policy>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    if let Ok(p) = v.cast::<Policy>() {
        return Ok(Some(p.get().inner.clone()));
    }
    let path: PathBuf = v.extract().map_err(|_| {
        PyValueError::new_err("a policy is an adaptive_fp8.Policy or the path of a policy file")
    })?;
    fp8_policy::Policy::load(&path)
        .map(Some)
        .map_err(policy_err)
}

/// The native module.
#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Policy>()?;
    m.add_class::<Decision>()?;
    m.add_function(wrap_pyfunction!(plan::plan_json, m)?)?;
    m.add_function(wrap_pyfunction!(plan::te_precision_config_json, m)?)?;
    m.add("PolicyError", m.py().get_type::<PolicyError>())?;
    m.add("ConfigError", m.py().get_type::<ConfigError>())?;
    m.add("PlanError", m.py().get_type::<PlanError>())?;
    m.add("MissingRulesError", m.py().get_type::<MissingRulesError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
