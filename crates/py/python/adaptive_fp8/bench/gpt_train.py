"""Training a few layers of a model's megatron-core ``GPTModel`` on the synthetic corpus: what the
numerics probe and the convergence check share.

The architecture is the model config's (any form ``fp8sel`` reads) at ``layers`` layers; an MoE
model at EP > 1 holds one EP rank's experts, as the Megatron judge builds it. Modes:

- ``bf16``: ``config.fp8`` unset (``bf16-repeat``: the same again, for the run-to-run band);
- ``fp8``: every TE module FP8 (``--fp8-format e4m3 --fp8-recipe R``);
- ``adaptive``: the policy's plan through :func:`adaptive_fp8.megatron.enable`.

The top half is pure; :class:`GptTrainer` imports torch and Megatron.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any, Iterator, Optional

from adaptive_fp8.bench.corpus import Corpus
from adaptive_fp8.bench.recipe_names import RECIPES

MODES = ("bf16", "bf16-repeat", "fp8", "adaptive")


@dataclass(frozen=True)
class Schedule:
    """Linear warm-up to ``lr``, then cosine to ``lr * floor`` at ``steps``."""

    lr: float
    steps: int
    warmup: int
    floor: float = 0.1

    def at(self, step: int) -> float:
        if step < self.warmup:
            return self.lr * (step + 1) / self.warmup
        span = max(1, self.steps - self.warmup)
        t = min(1.0, (step - self.warmup) / span)
        return self.lr * (self.floor + (1 - self.floor) * 0.5 * (1 + math.cos(math.pi * t)))


def token_batches(corpus: Corpus, seq: int, mbs: int, count: int, stream: int) -> Iterator[list[list[int]]]:
    """``count`` micro-batches of ``mbs`` sequences of ``seq + 1`` tokens (inputs and the labels
    one place on)."""
    it = corpus.sequences(seq + 1, count * mbs, stream)
    for _ in range(count):
        yield [next(it) for _ in range(mbs)]


def plan_kwargs(args: Any) -> dict:
    """The layout and tokens of ``args`` as the engine's plan takes them (a step's tokens are
    sequence length x micro-batch size)."""
    kwp = dict(tp=args.tp, seq_length=args.seq_length * args.micro_batch_size, micro_batch_size=1, config_root=args.config_root)
    if args.ep:
        kwp["ep"] = args.ep
    return kwp


def model_kwargs(af8: Any, args: Any) -> tuple[dict, dict, list[str]]:
    """``(TransformerConfig kwargs, plan, notes)`` for ``args.layers`` layers of ``args.model``
    (the plan's architecture; its rows give each module group's policy key)."""
    from adaptive_fp8.bench.megatron_step import config_kwargs, dense_layers, one_rank_experts

    plan = af8._plan(args.model, None, plan_kwargs(args))
    arch = plan["architecture"]["llm"]
    kw = config_kwargs(arch, args.layers, dense_layers(arch, args.layers, args.dense_layers), args.vocab)
    notes = []
    if one_rank_experts(kw, args.ep or 1):
        notes.append(f"EP {args.ep} on one GPU: the model holds one EP rank's {kw['num_moe_experts']} experts")
        if kw.get("moe_router_topk", 1) > kw["num_moe_experts"]:
            kw["moe_router_topk"] = kw["num_moe_experts"]
            notes.append(f"router top-k lowered to the rank's {kw['num_moe_experts']} experts")
    return kw, plan, notes


def add_model_args(ap: argparse.ArgumentParser) -> None:
    """The model, layout and training flags the probe and the convergence check share."""
    ap.add_argument("--model", required=True, help="model config (any form fp8sel reads)")
    ap.add_argument("--config-root", help="how far Hydra defaults may reach (as in fp8sel)")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel size (one process per rank; default 1)")
    ap.add_argument("--ep", type=int, help="expert-parallel size: the model holds one EP rank's experts (default: 1)")
    ap.add_argument("--layers", type=int, default=2, help="transformer layers (default 2)")
    ap.add_argument("--dense-layers", type=int, help="of --layers, how many have a dense MLP in an MoE model (default 0)")
    ap.add_argument("--seq-length", type=int, default=4096, help="tokens per sequence (default 4096)")
    ap.add_argument("--micro-batch-size", type=int, default=1, help="sequences per step (default 1)")
    ap.add_argument("--recipe", choices=list(RECIPES), default="blockwise", help="the FP8 recipe, as Megatron's --fp8-recipe (default blockwise)")
    ap.add_argument("--fp8-format", choices=["e4m3", "hybrid"], default="e4m3", help="as Megatron's --fp8-format (default e4m3)")
    ap.add_argument("--vocab", type=int, default=4096, help="the corpus's vocabulary (default 4096)")
    ap.add_argument("--lr", type=float, default=3e-4, help="peak learning rate (default 3e-4)")
    ap.add_argument("--seed", type=int, default=0, help="weights and corpus seed (default 0)")


def check_model_args(args: Any) -> Optional[str]:
    """The first bad value in words, or None (before torch is imported)."""
    for name in ("tp", "layers", "seq_length", "micro_batch_size", "vocab"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} {getattr(args, name)}: must be at least 1"
    if args.ep is not None and args.ep < 1:
        return f"--ep {args.ep}: must be at least 1"
    if not (args.lr > 0):
        return f"--lr {args.lr}: must be positive"
    return None


def judge_args(args: Any) -> Any:
    """The tools' arguments completed with what the judge reads and they do not take: BF16
    master weights, eager steps, the config's experts, one micro-batch, and the layout planned
    at the tool's own token count. Returns ``args``."""
    args.fp8_param = False  # FP8 weights need Megatron's optimizer; the masters stay fp32
    if not getattr(args, "tokens", None):
        args.tokens = [args.seq_length * args.micro_batch_size]
    for name, default in (("execution", ["eager"]), ("etp", None), ("grad_accum", 1)):
        if not hasattr(args, name):
            setattr(args, name, default)
    return args


class GptTrainer:
    """One process's Megatron state; builds, trains and evaluates ``GPTModel`` s of one
    architecture."""

    def __init__(self, args: Any, kw: dict) -> None:
        from adaptive_fp8.bench.megatron_step import Judge

        self.judge = Judge(judge_args(args))
        self.torch, self.args, self.kw = self.judge.torch, args, kw

    def build(self, mode: str, policy: Optional[str], seed: int):
        """``(model, plan or None)``: the same initial weights for the same seed in every mode."""
        from megatron.core.models.gpt import GPTModel
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
        from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

        import adaptive_fp8.megatron as af8m

        torch, a = self.torch, self.args
        integ = {"bf16": "bf16", "bf16-repeat": "bf16", "fp8": "fp8", "adaptive": "hook"}[mode]
        c = self.judge.config(self.kw, integ, a.recipe, policy if mode == "adaptive" else None, a.seq_length)
        c.seq_length, c.micro_batch_size = a.seq_length, a.micro_batch_size
        torch.manual_seed(seed)
        torch.cuda.manual_seed(seed)
        model_parallel_cuda_manual_seed(seed)
        plan = af8m.enable(c) if mode == "adaptive" else None
        try:
            spec = get_gpt_decoder_block_spec(c, use_transformer_engine=True)
            model = GPTModel(c, spec, vocab_size=self.kw["_vocab"], max_sequence_length=a.seq_length, position_embedding_type="rope")
        finally:
            af8m.disable()
        return model.cuda().bfloat16(), plan

    def optimizer(self, model):
        from transformer_engine.pytorch.optimizers import FusedAdam

        params = [p for p in model.parameters() if p.requires_grad]
        return FusedAdam(params, lr=self.args.lr, betas=(0.9, 0.95), weight_decay=0.1, master_weights=True)

    def tensors(self, batch: list[list[int]]):
        t = self.torch.tensor(batch, dtype=self.torch.long, device="cuda")
        pos = self.torch.arange(t.shape[1] - 1, device="cuda").unsqueeze(0)
        return t[:, :-1].contiguous(), t[:, 1:].contiguous(), pos

    def train_step(self, model, opt, batch: list[list[int]], lr: float) -> tuple[float, float]:
        """``(loss, gradient norm)`` of one step; the step is skipped (weights kept) when either
        is not finite, as Megatron skips an overflowed step."""
        from adaptive_fp8.bench.megatron_step import first_microbatch

        torch = self.torch
        ids, labels, pos = self.tensors(batch)
        first_microbatch(model)
        loss = model(ids, pos, None, labels=labels).float().mean()
        loss.backward()
        params = [p for p in model.parameters() if p.grad is not None]
        gnorm = float(torch.nn.utils.clip_grad_norm_(params, 1.0))
        value = float(loss)
        if math.isfinite(value) and math.isfinite(gnorm):
            for g in opt.param_groups:
                g["lr"] = lr
            opt.step()
        opt.zero_grad(set_to_none=True)
        return value, gnorm

    def eval_loss(self, model, batches: list[list[list[int]]]) -> float:
        from adaptive_fp8.bench.megatron_step import first_microbatch

        torch = self.torch
        total = 0.0
        first_microbatch(model)  # the weights of the last step, not of the last forward
        with torch.no_grad():
            for b in batches:
                ids, labels, pos = self.tensors(b)
                total += float(model(ids, pos, None, labels=labels).float().mean())
        return total / max(1, len(batches))
