"""What the step benchmark builds, from the engine's plan: one rank's transformer layer of any
model the engine reads (pure Python; no torch).

A layer is an attention block and an MLP block:

- attention: `mha` (qkv `LayerNormLinear`, core attention, proj `Linear`; GQA and MHA) or `mla`
  (DeepSeek's multi-latent attention: q_down/q_up or q_proj, kv_down, kv_up, core attention with
  separate q/k and v head sizes, proj). MLA's down projections are *duplicated* modules: they run
  on the sequence-parallel shard (`gemm_rows` = tokens / TP), and their output is gathered to the
  full sequence before the up projections, as Megatron does.
- MLP: `dense` (fc1, activation, fc2) or `moe` (norm, router over every expert of the model, top-k,
  permutation with the token-count sync every dropless MoE trainer pays, grouped fc1/fc2 over the
  rank's local experts, unpermutation weighted by the router probabilities, shared experts).

Module groups are what the oracle switches and what a policy decides: `qkv`, `proj`, `fc1`,
`fc2` (dense MLP), `experts.fc1`, `experts.fc2`, `shared.fc1`, `shared.fc2`, and MLA's
`q_down_proj`, `q_up_proj`, `q_proj`, `kv_down_proj`, `kv_up_proj`. Every layer of one type decides
alike (the plan's rows are module groups over layers).

Not built: rotary embeddings, MoE auxiliary losses, and, by default, expert/tensor-parallel
communication (one rank's GEMMs only). The first two cost the same in every mode. Communication
does not: TE gathers FP8 inputs already quantized, and a gather or reduce-scatter next to a small
GEMM changes what FP8 wins. `tp_comm_layout` says when a step can run over a real TP group (see
`step_bench --tp-comm`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

EXPERT_KINDS = ("column_grouped", "row_grouped")
MLA_GROUPS = ("q_down_proj", "q_up_proj", "q_proj", "kv_down_proj", "kv_up_proj")


class StepBenchError(ValueError):
    """A model or option this benchmark cannot run; the message says which and why."""


@dataclass(frozen=True)
class Module:
    """One module group of one rank (a row of the plan)."""

    group: str
    kind: str
    in_features: int
    out_features: int
    rows: int
    gemms: int
    layers: int

    @property
    def fp8_capable(self) -> bool:
        """TE asserts FP8 GEMM dimensions are multiples of 16."""
        return self.in_features % 16 == 0 and self.out_features % 16 == 0


def group_of(row: dict) -> str:
    """The oracle/policy group of a plan row."""
    name = row["name"]
    if ".shared_experts." in name:
        return "shared." + row["ub_name"]
    if ".experts." in name:
        return "experts." + row["ub_name"]
    return row["ub_name"]


def component_rows(rows: list[dict], component: str) -> list[dict]:
    """The plan's rows of one component's transformer layers (no MTP layers)."""
    return [r for r in rows if r["component"] == component and not r["name"].split(".")[0] == "mtp" and ".mtp." not in r["name"]]


# Tokens of one image in a vision encoder's step, by default: a 512 x 512 image at patch 16
# (Qwen3-VL's), or 448 x 448 at patch 14. The encoder attends within each image (Megatron and
# Hugging Face pass each image's bounds), so its attention grows with the image, not the batch.
IMAGE_TOKENS = 1024


def image_notes(args) -> list[str]:
    """What a vision encoder's documents say of its images (none for a language model)."""
    if getattr(args, "component", "llm") != "vit":
        return []
    return [f"vision encoder: attention within each image of {args.image_tokens} tokens (--image-tokens)"]


@dataclass(frozen=True)
class Spec:
    """One rank's layers of one component, from the plan and the architecture."""

    model: str
    component: str
    modules: dict[str, Module]
    hidden: int
    norm: str  # "RMSNorm" | "LayerNorm"
    gated: bool
    causal: bool
    attention: str  # "mha" | "mla"
    heads: int
    groups: int
    head_dim: int  # q/k head size (MLA: nope + rope)
    v_head_dim: int
    rope_dim: int  # MLA: rotary part of k, carried by kv_down
    tokens: int  # rows of the layer's activations (the sequence on this rank)
    dense_layers: int  # layers with a dense MLP in the whole model
    moe_layers: int
    num_experts: int = 0  # routed experts in the model (the router's width)
    topk: int = 0  # expert rows per token on this rank
    local_experts: int = 0
    # A vision encoder's attention runs per image: images of this many tokens (the last one
    # shorter), each attending to itself alone; 0: one sequence of all the tokens.
    image_tokens: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def group_names(self) -> list[str]:
        return list(self.modules)

    def fp8_capable(self) -> dict[str, bool]:
        return {g: m.fp8_capable for g, m in self.modules.items()}

    @staticmethod
    def from_plan(rows: list[dict], arch: dict, model: str, component: str = "llm") -> "Spec":
        rows = component_rows(rows, component)
        if not rows:
            raise StepBenchError(f"{model}: the plan has no {component} modules; pick --component llm or vit")
        if arch is None:
            raise StepBenchError(f"{model}: the engine gave no architecture for the {component} component")
        mods: dict[str, Module] = {}
        for r in rows:
            g = group_of(r)
            mods[g] = Module(g, r["module_kind"], r["in_features"], r["out_features"], r["gemm_rows"], r["num_gemms"], r["layers"])
        if arch.get("linear_attention") or arch.get("attention_output_gate"):
            raise StepBenchError(
                f"{model}: Gated DeltaNet or gated attention (Qwen3-Next, Qwen3.5) is not in the "
                "step benchmark's layer types; its in_proj/out_proj share the fc1/fc2 keys"
            )
        need = {"proj"}
        mla = arch.get("mla")
        moe = arch.get("moe")
        need |= {"kv_down_proj", "kv_up_proj"} if mla else {"qkv"}
        if moe:
            need |= {"experts.fc1", "experts.fc2"}
        if not moe or moe.get("dense_layers", 0):
            need |= {"fc1", "fc2"}
        missing = sorted(need - set(mods))
        if missing:
            raise StepBenchError(f"{model}: the plan's {component} rows lack {', '.join(missing)}; the step benchmark builds attention + MLP layers")
        unknown = sorted(set(mods) - need - set(MLA_GROUPS) - {"shared.fc1", "shared.fc2"})
        if unknown:
            raise StepBenchError(f"{model}: module groups {', '.join(unknown)} are not in the step benchmark's layer types")
        gated = bool(arch["gated_mlp"])
        tokens = mods["proj"].rows
        notes: list[str] = []
        kw: dict = {}
        if mla:
            v = mla["v_head_dim"]
            heads = mods["proj"].in_features // v
            if heads * v != mods["proj"].in_features:
                raise StepBenchError(f"{model}: proj in_features {mods['proj'].in_features} is not heads x v_head_dim {v}")
            rope = mla["qk_pos_emb_head_dim"]
            qk = mla["qk_head_dim"] + rope
            q_mod = mods.get("q_up_proj") or mods.get("q_proj")
            if q_mod is None or q_mod.out_features != heads * qk:
                raise StepBenchError(f"{model}: the MLA query projection does not give {heads} heads x {qk}")
            if mods["kv_up_proj"].out_features != heads * (mla["qk_head_dim"] + v):
                raise StepBenchError(f"{model}: kv_up_proj out_features {mods['kv_up_proj'].out_features} is not {heads} x ({mla['qk_head_dim']} + {v})")
            if mods["kv_down_proj"].out_features != mods["kv_up_proj"].in_features + rope:
                raise StepBenchError(f"{model}: kv_down_proj out_features is not kv_lora_rank + rotary dim")
            if "q_up_proj" in mods and "q_down_proj" not in mods:
                raise StepBenchError(f"{model}: q_up_proj without q_down_proj")
            for g in ("q_down_proj", "kv_down_proj"):
                if g in mods and (tokens % mods[g].rows or mods[g].rows > tokens):
                    raise StepBenchError(f"{model}: {g} rows {mods[g].rows} do not divide the sequence {tokens}")
            kw.update(attention="mla", heads=heads, groups=heads, head_dim=qk, v_head_dim=v, rope_dim=rope)
        else:
            hd = arch["head_dim"]
            q = mods["qkv"]
            if mods["proj"].in_features % hd or q.out_features % hd:
                raise StepBenchError(f"{model}: head_dim {hd} does not divide proj in {mods['proj'].in_features} / qkv out {q.out_features}")
            heads = mods["proj"].in_features // hd
            rest = q.out_features // hd - heads
            if rest <= 0 or rest % 2 or heads % (rest // 2):
                raise StepBenchError(f"{model}: qkv out_features {q.out_features} is not (heads + 2*groups) x {hd} with {heads} heads")
            kw.update(attention="mha", heads=heads, groups=rest // 2, head_dim=hd, v_head_dim=hd, rope_dim=0)
        for g in ("fc1", "shared.fc1"):
            f1, f2 = mods.get(g), mods.get(g.replace("fc1", "fc2"))
            if f1 and f2 and f1.out_features != (2 if gated else 1) * f2.in_features:
                raise StepBenchError(f"{model}: {g} out {f1.out_features} != {'2 x ' if gated else ''}fc2 in {f2.in_features}")
        total_layers = max(m.layers for m in mods.values())
        if moe:
            e1 = mods["experts.fc1"]
            if e1.out_features != (2 if gated else 1) * mods["experts.fc2"].in_features:
                raise StepBenchError(f"{model}: experts fc1/fc2 widths do not match (gated={gated})")
            if e1.rows % tokens:
                raise StepBenchError(f"{model}: expert rows {e1.rows} are not a multiple of the tokens {tokens}; give --topk or check the layout")
            kw.update(num_experts=moe["num_experts"], topk=e1.rows // tokens, local_experts=e1.gemms)
            moe_layers = e1.layers
            dense_layers = mods["fc1"].layers if "fc1" in mods else 0
            if kw["topk"] > moe["num_experts"]:
                raise StepBenchError(f"{model}: {kw['topk']} expert rows per token exceed {moe['num_experts']} experts")
        else:
            moe_layers, dense_layers = 0, total_layers
        return Spec(
            model=model,
            component=component,
            modules=mods,
            hidden=mods["proj"].out_features,
            norm="LayerNorm" if arch["norm"] == "LayerNorm" else "RMSNorm",
            gated=gated,
            causal=component != "vit",
            tokens=tokens,
            dense_layers=dense_layers,
            moe_layers=moe_layers,
            notes=notes,
            **kw,
        )


def composition(spec: Spec, layers: int, dense_layers: int | None = None) -> list[str]:
    """The layer types a step builds: `layers` in all, dense ones first (as in DeepSeek-V3).
    By default the dense share follows the model's (rounded; so a 2-layer step of DeepSeek-V3,
    3 dense of 61, builds two MoE layers)."""
    if layers <= 0:
        raise StepBenchError("--layers must be positive")
    if spec.moe_layers == 0:
        if dense_layers not in (None, layers):
            raise StepBenchError(f"{spec.model} has no MoE layers: --dense-layers must equal --layers or be left out")
        return ["dense"] * layers
    if dense_layers is None:
        dense_layers = round(layers * spec.dense_layers / (spec.dense_layers + spec.moe_layers))
    if dense_layers < 0 or dense_layers > layers:
        raise StepBenchError(f"--dense-layers {dense_layers} must be between 0 and --layers {layers}")
    if dense_layers and not spec.dense_layers:
        raise StepBenchError(f"{spec.model} has no dense MLP layers: leave --dense-layers out")
    return ["dense"] * dense_layers + ["moe"] * (layers - dense_layers)


def built_groups(spec: Spec, kinds: list[str]) -> list[str]:
    """The groups a step with these layer types contains (the oracle's search space)."""
    attn = ["qkv", "proj"] if spec.attention == "mha" else [g for g in MLA_GROUPS if g in spec.modules] + ["proj"]
    out = list(attn)
    if "dense" in kinds:
        out += ["fc1", "fc2"]
    if "moe" in kinds:
        out += ["experts.fc1", "experts.fc2"] + [g for g in ("shared.fc1", "shared.fc2") if g in spec.modules]
    return out


def group_keys(rows: list[dict], component: str, arch: dict | None, built: list[str] | None = None) -> dict[str, dict]:
    """Each group's policy key (the plan row's `key`) and its token scale (`moe_router_topk` for
    routed experts, whose rules compare routed tokens; else 1): what turns the oracle's verdicts
    into rules (`fp8sel merge-policy --step`). Only the `built` groups where given: a group of a
    layer type the step does not build has no verdict, and a key listed for it would read as
    measured BF16."""
    topk = int(((arch or {}).get("moe") or {}).get("router_topk") or 1)
    out: dict[str, dict] = {}
    for r in component_rows(rows, component):
        if r.get("key") is None:
            continue
        if built is not None and group_of(r) not in built:
            continue
        expert = r["module_kind"] in EXPERT_KINDS
        out[group_of(r)] = {"key": r["key"], "scale": topk if expert else 1}
    return out


def decisions(rows: list[dict], component: str = "llm") -> dict[str, bool]:
    """The plan's decision per group (all layers of one type decide alike)."""
    return {group_of(r): bool(r["use_fp8"]) for r in component_rows(rows, component)}


# Megatron's split of the dense modules over TP: column modules gather their sequence-parallel
# input, row modules reduce-scatter their output.
PARALLEL_MODE = {"qkv": "column", "fc1": "column", "proj": "row", "fc2": "row"}


def tp_comm_layout(spec: Spec, kinds: list[str], tp: int, world: int | None) -> None:
    """Refuses, with the fix, a step that cannot run over a real TP group (pure): the group must be
    the torchrun world, the sequence must split over it, and every module must be a dense TP module
    (MHA/GQA attention and dense MLPs; MLA's duplicated down projections and MoE's all-to-all are
    not built with communication)."""
    if world is None:
        raise StepBenchError(f"--tp-comm runs under torchrun: torchrun --nproc-per-node {tp} -m adaptive_fp8.bench.step_bench --tp-comm ...")
    if world != tp:
        raise StepBenchError(f"--tp-comm: the torchrun world has {world} rank(s) but --tp is {tp}; give --nproc-per-node {tp}")
    if tp < 2:
        raise StepBenchError("--tp-comm needs --tp 2 or more: at TP 1 there is no communication; drop --tp-comm")
    if spec.attention != "mha" or "moe" in kinds:
        raise StepBenchError(f"--tp-comm builds MHA/GQA attention and dense MLPs; {spec.model} has {spec.attention} attention and {'MoE' if 'moe' in kinds else 'dense'} layers: drop --tp-comm (one rank's GEMMs)")
    if spec.tokens % tp:
        raise StepBenchError(f"--tp-comm: {spec.tokens} tokens do not split over TP {tp} (sequence parallelism); pick a multiple of {tp}")


def full_features(m: Module, tp: int) -> tuple[int, int]:
    """A TP module's unsplit (in, out) features from its per-rank shape (pure)."""
    if PARALLEL_MODE[m.group] == "row":
        return m.in_features * tp, m.out_features
    return m.in_features, m.out_features * tp
