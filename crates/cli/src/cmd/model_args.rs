//! Arguments shared by the commands that work on a whole model: explain, check (and bench).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use fp8_engine::{
    LoadOptions, ModelDesc, Parallel, PlanConfig, PlanRequest, Role, TokenConfig,
    config_policy_path, load_model_with,
};
use fp8_policy::Policy;

use crate::error::{CliError, CliResult};

/// A model, a layout and the token settings.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// Model config: Megatron/LoongForge YAML (Hydra defaults resolved relative to it; NeMo's
    /// and Megatron-Bridge's model configs alike), a Megatron-LM or LoongForge launch script
    /// (`.sh`: the model, layout and sequence length it trains), or a HuggingFace config.json
    /// (or the checkout's directory that holds it).
    #[arg(long, value_name = "CONFIG")]
    pub model: PathBuf,
    /// Hydra's search path: the directory `defaults` entries may reach, tried after the config's
    /// own directory (and the one `/`-rooted entries resolve against) [default: the nearest
    /// ancestor named `configs`, as LoongForge's hydra.searchpath, else the checkout's root,
    /// else the config's own directory].
    #[arg(long, value_name = "DIR")]
    pub config_root: Option<PathBuf>,
    /// The layout (--tp/--ep/--etp).
    #[command(flatten)]
    pub layout: super::layout_args::LayoutArgs,
    /// Context-parallel size: divides the tokens each rank's GEMMs see [default: config, else 1].
    #[arg(long, alias = "context-parallel-size", value_parser = clap::value_parser!(u32).range(1..))]
    pub cp: Option<u32>,
    /// Turn sequence parallelism off (it is on by default whenever TP > 1).
    #[arg(long)]
    pub no_sequence_parallel: bool,
    /// Sequence length [default: the config's seq_length].
    #[arg(long, value_name = "S", value_parser = clap::value_parser!(u64).range(1..))]
    pub seq_length: Option<u64>,
    /// Micro-batch size [default: the config's micro_batch_size, else 1].
    #[arg(long, value_name = "B", value_parser = clap::value_parser!(u64).range(1..))]
    pub micro_batch_size: Option<u64>,
    /// Token override for the LLM (fp8_dynamic_num_tokens) [default: the config's].
    #[arg(long, value_name = "T", value_parser = clap::value_parser!(u64).range(1..))]
    pub num_tokens: Option<u64>,
    /// Token override for the ViT of a VLM [default: the config's image_encoder value].
    #[arg(long, value_name = "T", value_parser = clap::value_parser!(u64).range(1..))]
    pub vit_num_tokens: Option<u64>,
    /// moe_router_topk override [default: the config's].
    #[arg(long, alias = "moe-router-topk", value_name = "K", value_parser = clap::value_parser!(u64).range(1..))]
    pub topk: Option<u64>,
}

/// Policy selection for the components.
#[derive(Debug, Clone, clap::Args)]
pub struct PolicyArgs {
    /// Policy for the LLM (or the only component). Default: the config's
    /// fp8_dynamic_policy_path when selective_fp8 is true.
    #[arg(long, value_name = "P")]
    pub policy: Option<PathBuf>,
    /// Policy for the ViT of a VLM. Default: the image_encoder's fp8_dynamic_policy_path.
    #[arg(long, value_name = "P")]
    pub vit_policy: Option<PathBuf>,
    /// Project root that relative fp8_dynamic_policy_path values resolve against.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub root: PathBuf,
}

/// The model with its resolved layout and tokens.
pub struct Resolved {
    /// The model.
    pub model: ModelDesc,
    /// The layout.
    pub parallel: Parallel,
    /// Tokens per component.
    pub tokens: BTreeMap<Role, TokenConfig>,
}

impl ModelArgs {
    /// The request these flags make.
    pub fn request(&self) -> PlanRequest {
        let mut r = PlanRequest::default();
        r.tp = self.layout.tp;
        r.ep = self.layout.ep;
        r.etp = self.layout.etp;
        r.cp = self.cp;
        r.no_sequence_parallel = self.no_sequence_parallel;
        r.seq_length = self.seq_length;
        r.micro_batch_size = self.micro_batch_size;
        r.num_tokens = self.num_tokens;
        r.vit_num_tokens = self.vit_num_tokens;
        r
    }

    /// Loads the model and fills every unset value from the config.
    pub fn resolve(&self) -> CliResult<Resolved> {
        let model = load_config(&self.model, self.config_root.as_deref())?;
        if self.vit_num_tokens.is_some() && !model.components.iter().any(|c| c.role == Role::Vit) {
            return Err(CliError::input(format!(
                "--vit-num-tokens: {} has no vision encoder (a language model only); fix: leave it out",
                self.model.display()
            )));
        }
        let r = model.resolve(&self.request()).map_err(|e| {
            CliError::input(format!(
                "{}: {e} (--seq-length, or --num-tokens / --vit-num-tokens)",
                self.model.display()
            ))
        })?;
        Ok(Resolved {
            model,
            parallel: r.parallel,
            tokens: r.tokens,
        })
    }
}

/// Loads a model config, with `defaults` bounded by `config_root`.
pub fn load_config(path: &Path, config_root: Option<&Path>) -> CliResult<ModelDesc> {
    let opt = match config_root {
        Some(r) => LoadOptions::with_config_root(r),
        None => LoadOptions::default(),
    };
    load_model_with(path, &opt).map_err(|e| match e {
        fp8_engine::ConfigError::File(f) => CliError::from(f),
        other => CliError::input(other),
    })
}

/// Whether `model` is a VLM (a vision encoder beside its language model).
fn is_vlm(model: &Path, config_root: Option<&Path>) -> CliResult<bool> {
    Ok(load_config(model, config_root)?.components.len() >= 2)
}

/// Refuses, for `flag`, models none of which is a VLM (the flag would be read by none).
pub fn some_vlm(models: &[PathBuf], config_root: Option<&Path>, flag: &str) -> CliResult {
    for m in models {
        if is_vlm(m, config_root)? {
            return Ok(());
        }
    }
    Err(CliError::input(format!(
        "{flag}: no model given is a VLM (none has a vision encoder); fix: leave {flag} out"
    )))
}

/// Refuses, for `flag`, a model among `models` that is not a VLM (no vision encoder).
pub fn each_a_vlm(models: &[PathBuf], config_root: Option<&Path>, flag: &str) -> CliResult {
    for m in models {
        if !is_vlm(m, config_root)? {
            return Err(CliError::input(format!(
                "{flag}: {} is not a VLM (it has no vision encoder); fix: leave {flag} out",
                m.display()
            )));
        }
    }
    Ok(())
}

impl PolicyArgs {
    /// The policy files [`PolicyArgs::load`] reads for `model`: each component's flag, else the
    /// config's path when selective_fp8 is on (what an output must not overwrite).
    pub fn paths(&self, model: &ModelDesc) -> Vec<PathBuf> {
        model
            .components
            .iter()
            .filter_map(|c| {
                let flag = match c.role {
                    Role::Llm => self.policy.clone(),
                    Role::Vit => self.vit_policy.clone(),
                };
                flag.or_else(|| config_policy_path(c, &self.root))
            })
            .collect()
    }

    /// Loads the policy of each component: the flag, else the config's path when
    /// selective_fp8 is on. A component with neither has none (and runs BF16).
    pub fn load(&self, model: &ModelDesc) -> CliResult<BTreeMap<Role, Policy>> {
        if self.vit_policy.is_some() && !model.components.iter().any(|c| c.role == Role::Vit) {
            return Err(CliError::input(
                "--vit-policy: the model has no vision encoder (a language model only); fix: leave it out",
            ));
        }
        let mut out = BTreeMap::new();
        for c in &model.components {
            let flag = match c.role {
                Role::Llm => self.policy.as_ref(),
                Role::Vit => self.vit_policy.as_ref(),
            };
            match (flag, &c.fp8.policy_path) {
                (Some(p), _) => {
                    let policy = Policy::load(p).map_err(|e| match split_vlm_files(p) {
                        Some((llm, vit)) => CliError::input(format!(
                            "{e}\n  (gen-policy writes a VLM's policies one per component: pass --policy {} --vit-policy {})",
                            llm.display(),
                            vit.display()
                        )),
                        None => e.into(),
                    })?;
                    out.insert(c.role, policy);
                }
                (None, Some(p)) if c.fp8.selective_fp8 => {
                    let path = config_policy_path(c, &self.root).unwrap_or_default();
                    let policy = Policy::load(&path).map_err(|e| {
                        CliError::input(format!(
                            "{e}\n  (the {} policy comes from fp8_dynamic_policy_path `{p}` in the model config, \
                             resolved against --root {}; pass --root or --policy to change it)",
                            c.role,
                            self.root.display()
                        ))
                    })?;
                    out.insert(c.role, policy);
                }
                _ => {}
            }
        }
        Ok(out)
    }
}

/// Where `p` (`<dir>/<stem>.json`) does not exist but gen-policy's files for a VLM do beside it
/// (`<stem>.llm.json`, `<stem>.vit.json`), those two.
fn split_vlm_files(p: &Path) -> Option<(PathBuf, PathBuf)> {
    if p.exists() {
        return None;
    }
    let stem = p.file_name()?.to_str()?.strip_suffix(".json")?;
    let [llm, vit] = ["llm", "vit"].map(|c| p.with_file_name(format!("{stem}.{c}.json")));
    (llm.exists() && vit.exists()).then_some((llm, vit))
}

/// Builds the plan configuration.
pub fn plan_config<'a>(
    r: &Resolved,
    policies: &'a BTreeMap<Role, Policy>,
    topk: Option<u64>,
    execution: fp8_policy::Execution,
) -> PlanConfig<'a> {
    PlanConfig {
        parallel: r.parallel,
        tokens: r.tokens.clone(),
        topk,
        policies: policies.iter().map(|(k, v)| (*k, v)).collect(),
        execution,
    }
}
