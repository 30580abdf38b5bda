//! What a caller (the CLI, the Python package, a Rust launcher) asks for, resolved against a
//! model's config: the layout and each component's tokens, and where each component's policy is.
//! One resolution, so `fp8sel explain` and the Python `plan()` cannot disagree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::model::{Component, ModelDesc, Role, TokenOverrides};
use crate::parallel::Parallel;
use crate::tokens::TokenConfig;

/// The layout and token values a caller gives; every `None` comes from the config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlanRequest {
    /// Tensor-parallel size.
    pub tp: Option<u32>,
    /// Expert-parallel size.
    pub ep: Option<u32>,
    /// Expert tensor-parallel size.
    pub etp: Option<u32>,
    /// Context-parallel size.
    pub cp: Option<u32>,
    /// Turn sequence parallelism off (on by default whenever TP > 1).
    pub no_sequence_parallel: bool,
    /// Sequence length.
    pub seq_length: Option<u64>,
    /// Micro-batch size.
    pub micro_batch_size: Option<u64>,
    /// `fp8_dynamic_num_tokens` of the LLM (or the only component).
    pub num_tokens: Option<u64>,
    /// `fp8_dynamic_num_tokens` of a VLM's ViT.
    pub vit_num_tokens: Option<u64>,
}

/// A request resolved against a model.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    /// The layout.
    pub parallel: Parallel,
    /// Token settings per component.
    pub tokens: BTreeMap<Role, TokenConfig>,
}

/// A component with neither a sequence length nor a token override.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "no sequence length for the {0} component; fix: give the sequence length (or a token count override), or set seq_length in the config"
)]
pub struct NoTokens(pub Role);

impl ModelDesc {
    /// Resolves a request: the layout ([`ModelDesc::layout`]) and every component's tokens
    /// ([`ModelDesc::token_config`]).
    pub fn resolve(&self, r: &PlanRequest) -> Result<Resolved, NoTokens> {
        let mut parallel = self.layout(r.tp, r.ep, r.etp, r.cp);
        if r.no_sequence_parallel {
            parallel = parallel.with_sequence_parallel(false);
        }
        let mut tokens = BTreeMap::new();
        for c in &self.components {
            let given = TokenOverrides {
                seq_length: r.seq_length,
                micro_batch_size: r.micro_batch_size,
                num_tokens: match c.role {
                    Role::Llm => r.num_tokens,
                    Role::Vit => r.vit_num_tokens,
                },
            };
            let t = self
                .token_config(c.role, &given, parallel.cp)
                .ok_or(NoTokens(c.role))?;
            tokens.insert(c.role, t);
        }
        Ok(Resolved { parallel, tokens })
    }
}

/// Where a component's policy is, as the seed's trainer finds it: its `fp8_dynamic_policy_path`
/// when `selective_fp8` is on, relative to the project `root` unless absolute. `None` when the
/// config names none (the component runs BF16).
pub fn config_policy_path(c: &Component, root: &Path) -> Option<PathBuf> {
    let p = c
        .fp8
        .policy_path
        .as_deref()
        .filter(|_| c.fp8.selective_fp8)?;
    let p = Path::new(p);
    Some(if p.is_absolute() {
        p.to_path_buf()
    } else {
        root.join(p)
    })
}
