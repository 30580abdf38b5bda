"""The numerics probe: what FP8 would do to each GEMM operand of a model's TE modules, measured in
real BF16 training steps of its megatron-core ``GPTModel`` on the synthetic corpus.

    python -m adaptive_fp8.bench.numerics --model fixtures/models/llama3_2_1b.yaml --layers 2 \\
        --seq-length 4096 --steps 4 --recipe blockwise --out numerics.json

For every TE module (grouped by the plan's name, layers together) and every operand of its GEMM
(``input``: what the GEMM reads, after the module's own norm; ``weight``; ``grad_output``: the
gradient the backward GEMMs read), the probe takes the BF16 tensor of each probed step through
the recipe's FP8 round trip (``adaptive_fp8.bench.quant_error``) and sums the error. The report
(``fp8sel-numerics`` version 1, read by ``fp8sel merge-policy --numerics``) gives per module and
operand the relative RMS error over all its tensors, the share of non-zero elements that
underflow to zero and the share at the format's largest magnitude. A markdown table, worst
first, goes to stdout.

The seed's ``FP8_QUANT_*_AMAX_EPS`` variables set the emulated recipe's ``amax_epsilon``, as they
do for the toolkit's TE recipes. Needs a CUDA device, Transformer Engine and megatron-core; the
report and table helpers are pure.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import Any, Callable, Optional

from adaptive_fp8.bench.gpt_train import add_model_args, check_model_args
from adaptive_fp8.bench.quant_error import OPERANDS, ErrorSums, OperandRule, error_sums, recipe_rules

FORMAT = "fp8sel-numerics"
VERSION = 1


# -- pure half ----------------------------------------------------------------------------------


def report(model: str, recipe: str, fp8_format: str, rows: list[dict], sums: dict[tuple[str, str], ErrorSums], settings: dict) -> dict:
    """The report: one entry per planned module group the probe saw, in the plan's order."""
    modules = []
    for r in rows:
        ops = {op: sums[(r["name"], op)].summary() for op in OPERANDS if (r["name"], op) in sums}
        if ops:
            modules.append({"component": r["component"], "name": r["name"], "key": r["key"], "operands": ops})
    note = "delayed scaling emulated with each tensor's current amax (the history's best case)" if recipe == "delayed" else None
    out = {"format": FORMAT, "version": VERSION, "model": model, "recipe": recipe, "fp8_format": fp8_format, "settings": settings, "modules": modules}
    if note:
        out["notes"] = [note]
    return out


def worst(module: dict) -> tuple[str, float]:
    """The operand with the largest relative RMS error of a report module."""
    return max(((op, e["rel_rms"]) for op, e in module["operands"].items()), key=lambda x: x[1])


def table(rep: dict) -> str:
    """Markdown, modules worst first, one row per operand."""
    lines = [
        f"# FP8 numerics: {rep['model']}, recipe {rep['recipe']} ({rep['fp8_format']})",
        "",
        "| module | operand | rel. RMS error | underflow | saturated | tensors |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for m in sorted(rep["modules"], key=lambda m: -worst(m)[1]):
        for op, e in m["operands"].items():
            lines.append(f"| {m['name']} | {op} | {e['rel_rms']:.4f} | {e['underflow']:.2e} | {e['saturated']:.2e} | {e['tensors']} |")
    lines.append("")
    return "\n".join(lines)


# -- torch half ---------------------------------------------------------------------------------


def _normalized(torch: Any, m: Any, x: Any) -> Any:
    """What a fused norm + linear module's GEMM reads: its norm applied to ``x`` (float32)."""
    x = x.float()
    w = m.layer_norm_weight.float()
    if getattr(m, "zero_centered_gamma", False):
        w = w + 1
    eps = float(getattr(m, "eps", 1e-5))
    if getattr(m, "normalization", "LayerNorm") == "RMSNorm":
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w
    b = getattr(m, "layer_norm_bias", None)
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, None if b is None else b.float(), eps)


def _weights(m: Any) -> list:
    if hasattr(m, "weight0"):
        return [getattr(m, f"weight{i}") for i in range(getattr(m, "num_gemms", 1))]
    return [m.weight] if getattr(m, "weight", None) is not None else []


class Probe:
    """Hooks on the selected modules of ``model`` that add each operand's round-trip error to
    ``sums[(group, operand)]`` while ``active``."""

    def __init__(self, model: Any, rules: dict[str, OperandRule], select: Callable[[Any], bool], group_of: Callable[[str], str]) -> None:
        import torch

        self.torch, self.rules, self.active = torch, rules, False
        self.sums: dict[tuple[str, str], ErrorSums] = {}
        self.modules: list[tuple[str, Any]] = []
        self.handles = []
        for path, m in model.named_modules():
            if select(m):
                g = group_of(path)
                self.modules.append((g, m))
                self.handles.append(m.register_forward_pre_hook(self._pre(g)))
                self.handles.append(m.register_forward_hook(self._post(g)))

    def _add(self, group: str, op: str, t: Any) -> None:
        self.sums.setdefault((group, op), ErrorSums()).add(error_sums(t, self.rules[op]))

    def _pre(self, group: str):
        def hook(m, args):
            if self.active and args and self.torch.is_tensor(args[0]):
                x = args[0]
                self._add(group, "input", _normalized(self.torch, m, x) if hasattr(m, "layer_norm_weight") else x)

        return hook

    def _post(self, group: str):
        def hook(m, args, out):
            t = out[0] if isinstance(out, (tuple, list)) else out
            if self.active and self.torch.is_tensor(t) and t.requires_grad:
                t.register_hook(lambda g: self._add(group, "grad_output", g) if self.active else None)

        return hook

    def record_weights(self) -> None:
        """The weights as the next forward reads them (once per probed step)."""
        for g, m in self.modules:
            for w in _weights(m):
                self._add(g, "weight", w)

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def run(args: Any, log=print) -> dict:
    """Trains the BF16 model ``--warmup`` steps, then probes ``--steps`` more."""
    import adaptive_fp8 as af8
    from adaptive_fp8.bench.corpus import Corpus
    from adaptive_fp8.bench.gpt_train import GptTrainer, Schedule, model_kwargs, token_batches
    from adaptive_fp8.bench.megatron_step import TE_CLASSES, plan_name
    from adaptive_fp8.amax_eps import amax_epsilons

    kw, plan, notes = model_kwargs(af8, args)
    rows = [r for r in plan["modules"] if r["component"] == "llm"]
    trainer = GptTrainer(args, kw)
    rules = recipe_rules(args.recipe, args.fp8_format, amax_epsilons(dict(os.environ)))
    model, _ = trainer.build("bf16", None, args.seed)
    opt = trainer.optimizer(model)
    probe = Probe(model, rules, lambda m: type(m).__name__ in TE_CLASSES, plan_name)
    total = args.warmup + args.steps
    sched = Schedule(args.lr, total, max(1, args.warmup))
    corpus = Corpus(seed=args.seed, vocab=args.vocab)
    for i, batch in enumerate(token_batches(corpus, args.seq_length, args.micro_batch_size, total, stream=0)):
        probe.active = i >= args.warmup
        if probe.active:
            probe.record_weights()
        loss, _ = trainer.train_step(model, opt, batch, sched.at(i))
        log(f"  step {i + 1}/{total}: loss {loss:.4f}{' (probed)' if probe.active else ''}", file=sys.stderr)
    probe.close()
    seen = {g for g, _ in probe.sums}
    missing = sorted({r["name"] for r in rows} - seen)
    notes += [f"{n}: planned, not built in {args.layers} layer(s)" for n in missing if not n.startswith("mtp.")]
    settings = {
        "layers": args.layers, "seq_length": args.seq_length, "micro_batch_size": args.micro_batch_size,
        "warmup_steps": args.warmup, "probed_steps": args.steps, "ep": args.ep or 1, "seed": args.seed,
        "rules": {op: dataclasses.asdict(r) for op, r in rules.items()},
        "emulation": "adaptive_fp8.bench.quant_error (torch round trip of the recipe's documented rules)",
        "device": trainer.torch.cuda.get_device_name(),
    }
    out = report(plan["model"], args.recipe, args.fp8_format, rows, probe.sums, settings)
    out.setdefault("notes", []).extend(notes)
    return out


def parser() -> argparse.ArgumentParser:
    head, rest = __doc__.split("\n\n", 1)
    ap = argparse.ArgumentParser(prog="python -m adaptive_fp8.bench.numerics", description=head, epilog=rest, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_args(ap)
    ap.add_argument("--steps", type=int, default=4, help="probed training steps (default 4)")
    ap.add_argument("--warmup", type=int, default=2, help="BF16 steps before the probe (default 2)")
    ap.add_argument("--out", help="write the numerics report (JSON) here")
    ap.add_argument("--md", help="write the markdown table here")
    return ap


def main(argv: Optional[list[str]] = None) -> int:
    from adaptive_fp8._common import emit
    from adaptive_fp8.bench.step_spec import StepBenchError

    args = parser().parse_args(argv)
    bad = check_model_args(args) or (None if args.steps >= 1 and args.warmup >= 0 else "--steps must be >= 1 and --warmup >= 0")
    if bad:
        print(f"numerics: {bad}", file=sys.stderr)
        return 2
    try:
        import adaptive_fp8 as af8

        from adaptive_fp8.bench.gpt_train import plan_kwargs

        af8._plan(args.model, None, plan_kwargs(args))  # a bad config fails first
        out = run(args)
    except (StepBenchError, ValueError) as e:
        print(f"numerics: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"numerics: skipped: Transformer Engine / torch / megatron-core not importable ({e})", file=sys.stderr)
        return 2
    emit(out, table(out), args.out, args.md)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("NVTE_FLASH_ATTN", "1")
    sys.exit(main())
