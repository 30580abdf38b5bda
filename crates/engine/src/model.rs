//! The model description every config reader produces.

use std::fmt;

use serde::Serialize;

use crate::parallel::Parallel;
use crate::tokens::TokenConfig;

/// Which part of a (possibly multimodal) model a component is. Components never share a policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The language model (the `foundation` of a VLM).
    Llm,
    /// The vision encoder (the `image_encoder` of a VLM).
    Vit,
}

impl Role {
    /// `llm` or `vit`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Role::Llm => "llm",
            Role::Vit => "vit",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "llm" | "foundation" => Ok(Role::Llm),
            "vit" | "image_encoder" => Ok(Role::Vit),
            other => Err(format!("unknown component `{other}`; expected llm or vit")),
        }
    }
}

/// The norm fused into `layernorm_column` modules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Norm {
    /// RMSNorm.
    RmsNorm,
    /// LayerNorm (with bias).
    LayerNorm,
}

/// Multi-latent attention dimensions (DeepSeek-V2/V3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mla {
    /// Rank of the query down projection; `None` means a direct `q_proj`.
    pub q_lora_rank: Option<u64>,
    /// Rank of the key/value down projection.
    pub kv_lora_rank: u64,
    /// Per-head query/key dimension without the rotary part.
    pub qk_head_dim: u64,
    /// Per-head rotary dimension.
    pub qk_pos_emb_head_dim: u64,
    /// Per-head value dimension.
    pub v_head_dim: u64,
}

/// Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5; Megatron's
/// `experimental_attention_variant: gated_delta_net`): every layer that is not a full-attention
/// layer runs it, with its input projection (`in_proj`, a norm-fused column module Megatron
/// names `fc1`) and its output projection (`out_proj`, a row module named `fc2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LinearAttention {
    /// Per-head key (and query) dimension.
    pub key_head_dim: u64,
    /// Per-head value dimension.
    pub value_head_dim: u64,
    /// Key (and query) heads.
    pub num_key_heads: u64,
    /// Value heads.
    pub num_value_heads: u64,
    /// Layers with full (softmax) attention; the other layers run Gated DeltaNet.
    pub full_attention_layers: u64,
}

/// Mixture-of-experts dimensions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Moe {
    /// Routed experts in the model.
    pub num_experts: u64,
    /// Hidden size of one expert's FFN.
    pub moe_ffn_hidden_size: u64,
    /// Experts each token is routed to.
    pub router_topk: u64,
    /// Hidden size of the shared expert(s) FFN, if any (all shared experts together).
    pub shared_expert_ffn_hidden_size: Option<u64>,
    /// Layers that use a dense MLP instead of experts (DeepSeek-V3's first three, or the
    /// dense layers of an interleaved `moe_layer_freq`).
    pub dense_layers: u64,
}

/// The architecture of one component, as the inventory needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Arch {
    /// Transformer layers.
    pub num_layers: u64,
    /// Model width.
    pub hidden_size: u64,
    /// Dense MLP hidden size (also the first dense layers' of an MoE model).
    pub ffn_hidden_size: u64,
    /// Attention heads.
    pub num_attention_heads: u64,
    /// Key/value groups (GQA); equal to heads for MHA.
    pub num_query_groups: u64,
    /// Per-head dimension (`kv_channels`).
    pub head_dim: u64,
    /// Gated MLP (SwiGLU / GeGLU): FC1 produces twice the FFN width.
    pub gated_mlp: bool,
    /// The norm type.
    pub norm: Norm,
    /// MLA, when the model uses it.
    pub mla: Option<Mla>,
    /// Gated DeltaNet in the layers without full attention, when the model has it.
    pub linear_attention: Option<LinearAttention>,
    /// Full attention with an output gate (Megatron's `attention_output_gate`, Qwen3-Next's
    /// gated attention): the QKV projection also produces one gate per query channel.
    pub attention_output_gate: bool,
    /// MoE, when the model has experts.
    pub moe: Option<Moe>,
    /// Multi-token-prediction layers (`mtp_num_layers`; DeepSeek-V3 has 1). Each is a
    /// transformer layer like the last decoder layer, plus an `eh_proj` column-parallel linear.
    pub mtp_layers: u64,
}

/// Per-component FP8 settings from a Megatron/LoongForge YAML.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Fp8Settings {
    /// `selective_fp8`.
    pub selective_fp8: bool,
    /// `fp8_dynamic_policy_path`, as written (relative to the project root unless absolute).
    pub policy_path: Option<String>,
    /// `fp8_dynamic_num_tokens`, when > 0.
    pub num_tokens: Option<u64>,
    /// `fp8_recipe`, when given; Megatron's default (`delayed`) where FP8 is on without one.
    pub recipe: Option<String>,
    /// True when [`Self::recipe`] is Megatron's default, not the config's `fp8_recipe`.
    #[serde(skip)]
    pub recipe_by_default: bool,
    /// The FP8 format the config trains with (`fp8` / a launch script's `--fp8-format`, as
    /// written: `e4m3`, `hybrid`), when FP8 is on with a format named.
    #[serde(skip)]
    pub format: Option<String>,
    /// Delayed scaling's `fp8_amax_history_len`, when given (Megatron's default is 1).
    #[serde(skip)]
    pub amax_history_len: Option<u64>,
    /// Delayed scaling's `fp8_amax_compute_algo`, when given (Megatron's default is
    /// `most_recent`).
    #[serde(skip)]
    pub amax_compute_algo: Option<String>,
    /// The step's execution by Megatron's rule ([`crate::execution::execution_of`]), when the
    /// config sets `cuda_graph_impl`, `enable_cuda_graph` or `external_cuda_graph`.
    #[serde(skip)]
    pub execution: Option<fp8_policy::Execution>,
    /// `te_precision_config_file` (`--te-precision-config-file`): the launch decides modules with
    /// Megatron's own per-module config.
    #[serde(skip)]
    pub native_config: Option<String>,
}

/// A training layout a config recommends (the seed's example runs). Every field is optional.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RecommendedRun {
    /// `seq_length`.
    pub seq_length: Option<u64>,
    /// `micro_batch_size`.
    pub micro_batch_size: Option<u64>,
    /// `tensor_model_parallel_size`.
    pub tp: Option<u32>,
    /// `expert_model_parallel_size`.
    pub ep: Option<u32>,
    /// `expert_tensor_parallel_size`.
    pub etp: Option<u32>,
    /// `context_parallel_size`.
    pub cp: Option<u32>,
}

/// One component of a model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Component {
    /// LLM or ViT.
    pub role: Role,
    /// Dimensions.
    pub arch: Arch,
    /// FP8 settings from the config.
    pub fp8: Fp8Settings,
    /// Layout the config recommends.
    pub recommended: RecommendedRun,
    /// Defaults that were applied because a field was absent, in words, for explanations.
    pub defaults_applied: Vec<String>,
    /// Things in the config worth a warning (a likely typo of a field the engine reads).
    pub warnings: Vec<String>,
}

/// A model: one component, or an LLM and a ViT.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelDesc {
    /// A short name (the config's file stem unless the config names it).
    pub name: String,
    /// The components, LLM first.
    pub components: Vec<Component>,
    /// What reading the config left aside, in words (resolvers kept as written), for stderr.
    pub notes: Vec<String>,
}

impl ModelDesc {
    /// The component with the given role.
    pub fn component(&self, role: Role) -> Option<&Component> {
        self.components.iter().find(|c| c.role == role)
    }

    /// The run the config recommends for the model as a whole: the LLM's (the first
    /// component's for a lone ViT).
    fn recommended(&self) -> RecommendedRun {
        self.component(Role::Llm)
            .or(self.components.first())
            .map(|c| c.recommended.clone())
            .unwrap_or_default()
    }

    /// The layout for the given sizes; each one not given comes from the config, else 1, and
    /// ETP defaults to TP, as in Megatron. Sequence parallelism follows [`Parallel::new`].
    pub fn layout(
        &self,
        tp: Option<u32>,
        ep: Option<u32>,
        etp: Option<u32>,
        cp: Option<u32>,
    ) -> Parallel {
        let rec = self.recommended();
        let tp = tp.or(rec.tp).unwrap_or(1);
        Parallel::new(
            tp,
            ep.or(rec.ep).unwrap_or(1),
            etp.or(rec.etp).unwrap_or(tp),
            cp.or(rec.cp).unwrap_or(1),
        )
    }

    /// The token settings of one component: each value given wins, then the component's config,
    /// then the LLM's (a VLM's ViT shares the LLM's run); micro-batch size defaults to 1.
    /// `None` when neither a sequence length nor a token override is known.
    pub fn token_config(&self, role: Role, given: &TokenOverrides, cp: u32) -> Option<TokenConfig> {
        let c = self.component(role)?;
        let rec = self.recommended();
        let seq = given
            .seq_length
            .or(c.recommended.seq_length)
            .or(rec.seq_length);
        let mbs = given
            .micro_batch_size
            .or(c.recommended.micro_batch_size)
            .or(rec.micro_batch_size)
            .unwrap_or(1);
        let num_tokens = given.num_tokens.or(c.fp8.num_tokens).filter(|t| *t > 0);
        if seq.is_none() && num_tokens.is_none() {
            return None;
        }
        Some(TokenConfig {
            seq_length: seq.unwrap_or(0),
            micro_batch_size: mbs,
            context_parallel_size: u64::from(cp.max(1)),
            fp8_dynamic_num_tokens: num_tokens,
        })
    }
}

/// Token values given on a command line (or by a launcher), each overriding the config's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenOverrides {
    /// `seq_length`.
    pub seq_length: Option<u64>,
    /// `micro_batch_size`.
    pub micro_batch_size: Option<u64>,
    /// `fp8_dynamic_num_tokens` for this component.
    pub num_tokens: Option<u64>,
}
