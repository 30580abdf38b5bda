"""adaptive_fp8.bench.fp8_weights: the judge's look for FP8 modules that keep a stale FP8 weight
across a step (pure; modules and a step stand in for TE's and Megatron's)."""

from __future__ import annotations

from adaptive_fp8.bench import fp8_weights as fw
from adaptive_fp8.bench import megatron_step as ms
from test_megatron_step import _count_args, _FakeJudge


class Tensor:
    def __init__(self, v: float) -> None:
        self.v = v


class Module:
    """A TE module as the look sees it: weight parameters and a cache of FP8 weights."""

    def __init__(self, weights: int = 1, cached: bool = True) -> None:
        self.params = {("weight" if weights == 1 else f"weight{i}"): Tensor(1.0 + i) for i in range(weights)}
        self.params["bias"] = Tensor(0.0)
        self._fp8_workspaces = {k: Tensor(p.v) for k, p in self.params.items() if k.startswith("weight")} if cached else {}
        self._fp8_workspaces["input"] = Tensor(5.0)  # not a weight: never looked at

    def named_parameters(self, recurse: bool = True):
        assert recurse is False
        return iter(self.params.items())


def _fingerprint(t: Tensor) -> float:
    return t.v


def test_a_cache_the_step_refreshes_is_fresh_and_one_it_leaves_is_stale():
    fresh, stale, grouped, uncached, frozen = Module(), Module(), Module(weights=3), Module(cached=False), Module()

    def step():
        for m in (fresh, stale, grouped, uncached):
            for k, p in m.params.items():
                if k.startswith("weight"):
                    p.v += 0.5  # the optimizer moved every weight but frozen's
        for m in (fresh, grouped):
            for k in list(m._fp8_workspaces):
                if k.startswith("weight"):
                    m._fp8_workspaces[k] = Tensor(m.params[k].v)  # quantized again (a new object, too)
        grouped._fp8_workspaces["weight2"] = grouped._fp8_workspaces["weight2"]
        grouped._fp8_workspaces["weight2"].v -= 0.5  # one expert's cache left as it was
        stale._fp8_workspaces["input"].v += 1  # only the input cache moves

    mods = [("fresh", fresh), ("stale", stale), ("grouped", grouped), ("uncached", uncached), ("frozen", frozen)]
    out = fw.freshness(mods, step, _fingerprint)
    assert (out.cached, out.uncached) == (4, 1)
    assert out.stale == ["stale", "grouped"] and out.unmoved == ["frozen"]
    assert "2 kept a stale FP8 weight across the step (stale, grouped)" in str(out)
    assert ms.fp8_weights_json(out) == {"cached": 4, "uncached": 1, "stale": ["stale", "grouped"], "unmoved": ["frozen"]}


def test_a_look_that_could_not_be_made_says_why_and_none_is_absent():
    assert ms.fp8_weights_json("OutOfMemoryError: x") == {"not_checked": "OutOfMemoryError: x"}
    assert ms.fp8_weights_json(None) is None
    assert str(fw.Freshness(cached=2)) == "2 with a cached FP8 weight, 0 quantizing theirs every forward"


def test_the_look_fits_the_readers_schema_of_a_precision_check(root):
    import json

    import pytest
    from schema_check import check, schema

    s, defs = schema(root, "adaptive-fp8-step-results.v1.schema.json")
    doc = json.loads((root / "docs/device-logs/recipe_plans/mix/judge_L8_16384.json").read_text())
    out = fw.Freshness(cached=1, uncached=1, stale=["decoder.layers.0.mlp.linear_fc1"])
    for look in (ms.fp8_weights_json(out), ms.fp8_weights_json("OutOfMemoryError: x"), None):
        doc["precision_checks"][0]["fp8_weights"] = look
        check(doc, s, defs)
    doc["precision_checks"][0]["fp8_weights"] = {"cached": 1, "fresh": 1}
    with pytest.raises(ValueError, match="fresh"):
        check(doc, s, defs)


def test_a_model_that_keeps_stale_fp8_weights_is_noted_and_each_check_records_the_look(root):
    args = _count_args(root)
    modes = ms.mode_names(args.policy, False, ["policy:llama3_2_1b.json"])
    judge, notes, checks = _FakeJudge(root, "graphed"), [], []
    ms._one_count(judge, args, 4096, "graphed", modes, "blockwise", notes, checks, log=lambda *a, **k: None)
    assert not any("FP8 weights" in n for n in notes)
    assert [c["fp8_weights"]["stale"] for c in checks] == [[], []] and checks[0]["fp8_weights"]["cached"] > 0
    judge.stale = ("decoder.layers.0.mlp.linear_fc1",)
    notes, checks = [], []
    ms._one_count(judge, args, 4096, "graphed", modes, "blockwise", notes, checks, log=lambda *a, **k: None)
    said = [n for n in notes if "FP8 weights" in n]
    assert len(said) == 1 and said[0].startswith("tokens 4096 graphed native:llama3_2_1b.json: FP8 weights: ")
    assert "kept a stale FP8 weight across the step (decoder.layers.0.mlp.linear_fc1)" in said[0]
    assert checks[1]["fp8_weights"]["stale"] == ["decoder.layers.0.mlp.linear_fc1"]
    # A look that cannot be made says why, in the notes and the checks, and the count goes on.
    judge.look_fails, notes, checks = "OutOfMemoryError: CUDA out of memory", [], []
    row = ms._one_count(judge, args, 4096, "graphed", modes, "blockwise", notes, checks, log=lambda *a, **k: None)
    assert "FP8 weights not looked at: OutOfMemoryError: CUDA out of memory" in notes[-1] and len(row["modes"]) == 4
    assert checks[0]["fp8_weights"] == {"not_checked": "OutOfMemoryError: CUDA out of memory"}
