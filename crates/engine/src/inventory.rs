//! Every TE linear module a component builds, with its per-rank shapes.
//!
//! The names and classes follow Megatron-Core's TE layer specs: `linear_qkv` is a
//! `TELayerNormColumnParallelLinear` with `ub_name` `qkv`, MoE experts are `TEGroupedMLP`
//! (`TEColumnParallelGroupedLinear` / `TERowParallelGroupedLinear`), shared experts and the MLA
//! up projections are column/row parallel, and the MLA down projections are unsplit `TELinear`s.
//! Identical layers are grouped with a count, so a 94-layer model has a handful of entries.

use fp8_policy::{KindFamily, Lookup, ModuleKind};
use serde::Serialize;

use crate::classify::{TeClass, promote_expert};
use crate::model::{Component, LinearAttention, Mla, Moe, Norm, Role};
use crate::parallel::Parallel;

/// One TE linear module (or a group of identical ones across layers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModuleSpec {
    /// Megatron module path without the layer index, e.g. `decoder.layers.mlp.linear_fc1`.
    pub name: String,
    /// LLM or ViT.
    pub component: Role,
    /// How many layers have this module.
    pub layers: u64,
    /// The TE class Megatron instantiates.
    pub te_class: TeClass,
    /// The kind the policy is looked up with (experts promoted).
    pub module_kind: ModuleKind,
    /// TE tp-comm buffer name.
    pub ub_name: Option<String>,
    /// Whether the module is a routed MoE expert.
    pub is_expert: bool,
    /// Input features one rank's GEMM sees.
    pub in_features: u64,
    /// Output features one rank's GEMM sees.
    pub out_features: u64,
    /// GEMMs per module (local experts for grouped kinds, else 1).
    pub num_gemms: u32,
    /// The norm fused into a `layernorm_column` module.
    pub norm: Option<Norm>,
    /// TP size of the lookup key.
    pub tp: u32,
    /// Expert TP size of the lookup key.
    pub etp: u32,
    /// Rows divisor for unsplit (`duplicated`) modules under sequence parallelism: they run on
    /// the rank's sequence shard before the all-gather.
    pub row_divisor: u32,
}

impl ModuleSpec {
    /// Whether TE can run this module's GEMMs in FP8: both of one rank's dimensions multiples
    /// of 16 (TE asserts it; Qwen3-VL's vision MLP at TP 2, 4304 / 2 = 2152, is not).
    pub fn fp8_capable(&self) -> bool {
        self.in_features.is_multiple_of(16) && self.out_features.is_multiple_of(16)
    }

    /// The policy lookup key of this module.
    pub fn lookup(&self) -> Lookup<'_> {
        match self.module_kind.family() {
            KindFamily::Dense(kind) => Lookup::Dense {
                kind,
                ub_name: self.ub_name.as_deref(),
                tp: self.tp,
            },
            KindFamily::Grouped(kind) => Lookup::Grouped {
                kind,
                etp: self.etp,
                num_gemms: self.num_gemms,
            },
        }
    }

    /// Rows of this rank's GEMM (all experts together for grouped kinds), given the token count
    /// the decision compares.
    pub fn gemm_rows(&self, decision_tokens: u64) -> u64 {
        decision_tokens.div_ceil(u64::from(self.row_divisor.max(1)))
    }

    /// Forward + backward GEMM FLOPs of one layer's module at `decision_tokens`: three GEMMs
    /// (fprop, dgrad, wgrad) of `2 * rows * in * out` each.
    pub fn step_flops(&self, decision_tokens: u64) -> f64 {
        6.0 * self.gemm_rows(decision_tokens) as f64
            * self.in_features as f64
            * self.out_features as f64
    }
}

/// A layout the model cannot be split into.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// A dimension the layout splits is not a multiple of the parallel size.
    #[error(
        "{component}: {what} = {value} is not divisible by {by_name} = {by}; fix: choose {by_name} that divides {what}"
    )]
    Indivisible {
        /// Component.
        component: Role,
        /// The dimension being split.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The parallel size's name.
        by_name: &'static str,
        /// The parallel size.
        by: u64,
    },
    /// Expert parallelism on a language model without experts, which Megatron refuses
    /// (`expert_model_parallel_size > 1` needs `num_experts`).
    #[error(
        "{component}: ep = {ep} on a model without experts (Megatron refuses expert parallelism without num_experts); fix: ep 1, or the MoE model's config"
    )]
    NoExperts {
        /// Component.
        component: Role,
        /// The expert-parallel size asked for.
        ep: u32,
    },
}

struct Builder<'a> {
    c: &'a Component,
    p: Parallel,
    out: Vec<ModuleSpec>,
}

impl Builder<'_> {
    fn split(
        &self,
        what: &'static str,
        value: u64,
        by_name: &'static str,
        by: u32,
    ) -> Result<u64, LayoutError> {
        let by = u64::from(by.max(1));
        if !value.is_multiple_of(by) {
            return Err(LayoutError::Indivisible {
                component: self.c.role,
                what,
                value,
                by_name,
                by,
            });
        }
        Ok(value / by)
    }

    #[allow(clippy::too_many_arguments)]
    fn push(
        &mut self,
        name: &str,
        layers: u64,
        class: TeClass,
        ub: &str,
        expert: bool,
        in_f: u64,
        out_f: u64,
        num_gemms: u32,
    ) {
        if layers == 0 {
            return;
        }
        let base = class.kind();
        let kind = if expert { promote_expert(base) } else { base };
        let prefix = match self.c.role {
            Role::Llm => "decoder.layers",
            Role::Vit => "image_encoder.layers",
        };
        let duplicated_sp =
            kind == ModuleKind::Duplicated && self.p.sequence_parallel && self.p.tp > 1;
        self.out.push(ModuleSpec {
            name: format!("{prefix}.{name}"),
            component: self.c.role,
            layers,
            te_class: class,
            module_kind: kind,
            ub_name: Some(ub.to_owned()),
            is_expert: expert,
            in_features: in_f,
            out_features: out_f,
            num_gemms,
            norm: (class == TeClass::LayerNormColumnParallelLinear).then_some(self.c.arch.norm),
            tp: self.p.tp,
            etp: self.p.etp,
            row_divisor: if duplicated_sp { self.p.tp } else { 1 },
        });
    }
}

/// Lists every TE linear module the component builds on one rank under `parallel`.
pub fn inventory(c: &Component, parallel: Parallel) -> Result<Vec<ModuleSpec>, LayoutError> {
    let a = &c.arch;
    if c.role == Role::Llm && a.moe.is_none() && parallel.ep > 1 {
        return Err(LayoutError::NoExperts {
            component: c.role,
            ep: parallel.ep,
        });
    }
    let mut b = Builder {
        c,
        p: parallel,
        out: Vec::new(),
    };
    let n = a.num_layers;
    let full = a
        .linear_attention
        .map_or(n, |l| l.full_attention_layers.min(n));
    match a.mla {
        None => attention(&mut b, full)?,
        Some(m) => mla_attention(&mut b, m, full)?,
    }
    if let Some(l) = a.linear_attention {
        gated_delta_net(&mut b, l, n - full)?;
    }
    let dense_layers = a.moe.map_or(n, |m| m.dense_layers.min(n));
    dense_mlp(&mut b, dense_layers)?;
    if let Some(m) = a.moe {
        moe_mlp(&mut b, m, n - dense_layers)?;
    }
    if a.mtp_layers > 0 && c.role == Role::Llm {
        mtp(&mut b, a.mtp_layers, a.moe.is_some() && dense_layers < n)?;
    }
    Ok(b.out)
}

/// MHA/GQA attention of `n` layers: the fused norm + QKV projection (with an output gate, one
/// more channel per query channel) and the output projection.
fn attention(b: &mut Builder<'_>, n: u64) -> Result<(), LayoutError> {
    use TeClass::*;
    if n == 0 {
        return Ok(());
    }
    let (a, tp) = (&b.c.arch, b.p.tp);
    let h = a.hidden_size;
    let heads = b.split("num_attention_heads", a.num_attention_heads, "tp", tp)?;
    let groups = b.split("num_query_groups", a.num_query_groups, "tp", tp)?;
    let q = if a.attention_output_gate { 2 } else { 1 };
    b.push(
        "self_attention.linear_qkv",
        n,
        LayerNormColumnParallelLinear,
        "qkv",
        false,
        h,
        a.head_dim * (q * heads + 2 * groups),
        1,
    );
    b.push(
        "self_attention.linear_proj",
        n,
        RowParallelLinear,
        "proj",
        false,
        a.head_dim * heads,
        h,
        1,
    );
    Ok(())
}

/// Gated DeltaNet of `n` layers, as megatron-core builds it: the norm-fused input projection to
/// q, k, v, the output gate z and the per-value-head beta and alpha (Megatron names it `fc1`),
/// and the output projection from the values (`fc2`).
fn gated_delta_net(b: &mut Builder<'_>, l: LinearAttention, n: u64) -> Result<(), LayoutError> {
    use TeClass::*;
    if n == 0 {
        return Ok(());
    }
    let (h, tp) = (b.c.arch.hidden_size, b.p.tp);
    let key_heads = b.split("linear_num_key_heads", l.num_key_heads, "tp", tp)?;
    let value_heads = b.split("linear_num_value_heads", l.num_value_heads, "tp", tp)?;
    let (qk, v) = (l.key_head_dim * key_heads, l.value_head_dim * value_heads);
    b.push(
        "self_attention.in_proj",
        n,
        LayerNormColumnParallelLinear,
        "fc1",
        false,
        h,
        2 * qk + 2 * v + 2 * value_heads,
        1,
    );
    b.push(
        "self_attention.out_proj",
        n,
        RowParallelLinear,
        "fc2",
        false,
        v,
        h,
        1,
    );
    Ok(())
}

/// Multi-latent attention of `n` layers (DeepSeek's): the down and up projections of q and kv,
/// and the output projection.
fn mla_attention(b: &mut Builder<'_>, m: Mla, n: u64) -> Result<(), LayoutError> {
    use TeClass::*;
    let (a, tp) = (&b.c.arch, b.p.tp);
    let h = a.hidden_size;
    let heads = b.split("num_attention_heads", a.num_attention_heads, "tp", tp)?;
    let q_head = m.qk_head_dim + m.qk_pos_emb_head_dim;
    match m.q_lora_rank {
        Some(r) => {
            b.push(
                "self_attention.linear_q_down_proj",
                n,
                Linear,
                "q_down_proj",
                false,
                h,
                r,
                1,
            );
            b.push(
                "self_attention.linear_q_up_proj",
                n,
                LayerNormColumnParallelLinear,
                "q_up_proj",
                false,
                r,
                heads * q_head,
                1,
            );
        }
        None => b.push(
            "self_attention.linear_q_proj",
            n,
            ColumnParallelLinear,
            "q_proj",
            false,
            h,
            heads * q_head,
            1,
        ),
    }
    b.push(
        "self_attention.linear_kv_down_proj",
        n,
        Linear,
        "kv_down_proj",
        false,
        h,
        m.kv_lora_rank + m.qk_pos_emb_head_dim,
        1,
    );
    b.push(
        "self_attention.linear_kv_up_proj",
        n,
        LayerNormColumnParallelLinear,
        "kv_up_proj",
        false,
        m.kv_lora_rank,
        heads * (m.qk_head_dim + m.v_head_dim),
        1,
    );
    b.push(
        "self_attention.linear_proj",
        n,
        RowParallelLinear,
        "proj",
        false,
        heads * m.v_head_dim,
        h,
        1,
    );
    Ok(())
}

/// The dense MLP of the first `dense_layers` layers (all of a dense model's).
fn dense_mlp(b: &mut Builder<'_>, dense_layers: u64) -> Result<(), LayoutError> {
    use TeClass::*;
    let (a, tp) = (&b.c.arch, b.p.tp);
    let (h, g) = (a.hidden_size, if a.gated_mlp { 2 } else { 1 });
    let ffn = b.split("ffn_hidden_size", a.ffn_hidden_size, "tp", tp)?;
    b.push(
        "mlp.linear_fc1",
        dense_layers,
        LayerNormColumnParallelLinear,
        "fc1",
        false,
        h,
        g * ffn,
        1,
    );
    b.push(
        "mlp.linear_fc2",
        dense_layers,
        RowParallelLinear,
        "fc2",
        false,
        ffn,
        h,
        1,
    );
    Ok(())
}

/// The MoE MLP of `moe_layers` layers: routed experts (grouped, one GEMM per local expert) and
/// the shared experts, if any.
fn moe_mlp(b: &mut Builder<'_>, m: Moe, moe_layers: u64) -> Result<(), LayoutError> {
    use TeClass::*;
    let (a, tp, parallel) = (&b.c.arch, b.p.tp, b.p);
    let (h, g) = (a.hidden_size, if a.gated_mlp { 2 } else { 1 });
    let local = b.split("num_experts", m.num_experts, "ep", parallel.ep)?;
    let num_gemms = u32::try_from(local).unwrap_or(u32::MAX);
    let eff = b.split(
        "moe_ffn_hidden_size",
        m.moe_ffn_hidden_size,
        "etp",
        parallel.etp,
    )?;
    b.push(
        "mlp.experts.linear_fc1",
        moe_layers,
        ColumnParallelGroupedLinear,
        "fc1",
        true,
        h,
        g * eff,
        num_gemms,
    );
    b.push(
        "mlp.experts.linear_fc2",
        moe_layers,
        RowParallelGroupedLinear,
        "fc2",
        true,
        eff,
        h,
        num_gemms,
    );
    if let Some(s) = m.shared_expert_ffn_hidden_size {
        let sff = b.split("moe_shared_expert_intermediate_size", s, "tp", tp)?;
        b.push(
            "mlp.shared_experts.linear_fc1",
            moe_layers,
            ColumnParallelLinear,
            "fc1",
            false,
            h,
            g * sff,
            1,
        );
        b.push(
            "mlp.shared_experts.linear_fc2",
            moe_layers,
            RowParallelLinear,
            "fc2",
            false,
            sff,
            h,
            1,
        );
    }
    Ok(())
}

/// Multi-token-prediction layers (Megatron's `mtp.layers.N`): each projects the concatenated
/// hidden state and embedding (`eh_proj`, column-parallel 2h -> h) and runs a transformer layer
/// built like the last decoder layer (its attention, and its MoE or dense MLP).
fn mtp(b: &mut Builder<'_>, k: u64, moe_last: bool) -> Result<(), LayoutError> {
    let h = b.c.arch.hidden_size;
    let out = b.split("hidden_size", h, "tp", b.p.tp)?;
    let layer: Vec<ModuleSpec> = b
        .out
        .iter()
        .filter(|m| {
            let name = m.name.trim_start_matches("decoder.layers.");
            name.starts_with("self_attention.")
                || (moe_last && name.starts_with("mlp.") && m.name.contains("experts"))
                || (!moe_last && name.starts_with("mlp.linear_fc"))
        })
        .cloned()
        .collect();
    b.push(
        "eh_proj",
        k,
        TeClass::ColumnParallelLinear,
        "mtp_eh_proj",
        false,
        2 * h,
        out,
        1,
    );
    if let Some(m) = b.out.last_mut() {
        m.name = "mtp.layers.eh_proj".to_owned();
    }
    for mut m in layer {
        m.layers = k;
        m.name = m
            .name
            .replacen("decoder.layers.", "mtp.layers.mtp_model_layer.", 1);
        b.out.push(m);
    }
    Ok(())
}
