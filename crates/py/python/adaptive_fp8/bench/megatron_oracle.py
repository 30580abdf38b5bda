"""The per-module oracle in the Megatron judge (``step_bench --trainer megatron --oracle greedy``,
what ``fp8sel gen-policy --backend step --step-trainer megatron`` runs): the two greedy passes of
:func:`adaptive_fp8.bench.step_common.search_oracle`, each candidate an upstream ``GPTModel``
built through the hook with a policy that runs exactly the candidate's groups FP8.

The search is over policy keys: groups that share one key (DeepSeek-V3's dense and shared-expert
fc2) are one unit, because no policy can run them apart. Eager candidates are built once and
kept while the search needs them; graphed ones are built in pairs, because Megatron's CUDA-graph
record is one per process: each pair records, is captured together and is deleted before the
next pair.

The top half is pure (tested on the CPU); :func:`search` drives a ``megatron_step.Judge``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# The units are the TE-block oracle's too (``step_bench``): one definition.
from adaptive_fp8.bench.step_common import search_units, selection  # noqa: F401


def forced_policy(group_keys: dict[str, dict], fp8_groups: set[str]) -> dict:
    """A policy that runs exactly ``fp8_groups`` FP8, at every token count and in both
    executions (every other key has no rule: BF16)."""
    dense: dict[str, dict[str, dict]] = {}
    grouped: dict[str, dict] = {}
    for g in sorted(fp8_groups):
        k = dict(group_keys[g]["key"])
        kind = k.pop("kind")
        if "ub_name" in k:
            ub = k.pop("ub_name")
            dense.setdefault(kind, {}).setdefault(ub, {})[json.dumps(k, sort_keys=True)] = dict(k, min_tokens=1)
        else:
            grouped.setdefault(kind, {})[json.dumps(k, sort_keys=True)] = dict(k, min_tokens=1)
    rules: dict = {kind: {ub: list(r.values()) for ub, r in ubs.items()} for kind, ubs in dense.items()}
    rules.update({kind: list(r.values()) for kind, r in grouped.items()})
    return {"version": 1, "speedup_threshold": 1.0, "rules": rules}


class Candidates:
    """Builds, keeps and times the search's candidate models: ``build(groups)`` gives a model's
    step (``judge``'s), written as a forced policy under ``tmp``."""

    def __init__(self, judge, args, tokens: int, execution: str, kw: dict, recipe: str, group_keys: dict, tmp: Path):
        self.judge, self.args, self.tokens, self.execution = judge, args, tokens, execution
        self.kw, self.recipe, self.group_keys, self.tmp = kw, recipe, group_keys, tmp
        self.steps: dict[frozenset, object] = {}
        self.warm: set[frozenset] = set()
        self.pair_of: tuple = ()

    def policy_path(self, groups: frozenset) -> str:
        name = "oracle_" + ("_".join(sorted(groups)).replace(".", "-") or "none") + ".json"
        path = self.tmp / name
        path.write_text(json.dumps(forced_policy(self.group_keys, set(groups))))
        return str(path)

    def build(self, groups: frozenset):
        model, _ = self.judge.build(self.kw, "hook", self.policy_path(groups), "auto", self.recipe, self.tokens, self.execution)
        step = self.judge.step_fn(model, self.tokens, self.args.vocab, self.args.grad_accum, self.execution)
        step()  # eager: a warm-up step; graphed: the recording step
        return step

    def ready(self, a: frozenset, b: frozenset) -> None:
        """Both models built (graphed: this pair alone, captured together) and warmed up."""
        if self.execution == "graphed":
            if self.pair_of != (a, b):
                self.clear()
                self.steps = {a: self.build(a), b: self.build(b)}
                self.judge.capture_graphs()
                self.pair_of = (a, b)
        else:
            for s in (a, b):
                if s not in self.steps:
                    self.steps[s] = self.build(s)
        for s in (a, b):
            if s not in self.warm:
                for _ in range(self.args.warmup):
                    self.steps[s]()
                self.steps[s].losses.clear()
                self.warm.add(s)

    def ratio(self, a: frozenset, b: frozenset) -> float:
        """ms(a) / ms(b), timed back to back once (``search_oracle``'s ``pair``)."""
        self.ready(a, b)
        tb = self.judge.time_ms(self.steps[b], self.args.steps)
        return self.judge.time_ms(self.steps[a], self.args.steps) / tb

    def release(self, groups: frozenset) -> None:
        """An eager candidate the search no longer needs is dropped (graphed ones go with their
        pair)."""
        if self.execution == "eager":
            step = self.steps.pop(groups, None)
            if step is not None:
                self.judge.drop(step)
            self.warm.discard(groups)

    def clear(self) -> None:
        """Every candidate dropped, and Megatron's graphs with them."""
        self.steps.clear()
        self.warm.clear()
        self.pair_of = ()
        self.judge.release_graphs(self.execution)


def search(cands: Candidates, units: dict[str, list[str]], repeats: int, log=print) -> tuple[frozenset, list[dict]]:
    """The oracle's FP8 groups and its trials (``search_oracle``'s, over ``units``)."""
    from adaptive_fp8.bench.step_common import search_oracle

    where = f"tokens {cands.tokens} {cands.execution}"

    def say(t: dict) -> None:
        log(f"  {where}: oracle {t['search']} {t['group']}: {t['ratio_median']:.3f} ({'kept' if t['kept'] else 'not kept'})", file=sys.stderr)

    found, trials = search_oracle(
        lambda a, b: cands.ratio(selection(units, a), selection(units, b)),
        repeats, list(units), say, lambda m: cands.release(selection(units, m)),
    )
    cands.clear()
    return selection(units, found), trials
