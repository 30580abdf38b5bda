"""The oracle in the Megatron judge: its search units, the forced policies its candidates are
built with, the candidates' build and capture order, and results the step merge reads."""

from __future__ import annotations

import json
import subprocess

import pytest

import adaptive_fp8 as af8
from adaptive_fp8.bench import megatron_oracle as mo
from adaptive_fp8.bench import megatron_step as ms
from adaptive_fp8.bench.step_spec import group_keys
from test_megatron_step import _FakeJudge, _count_args


def _keys(root, model="llama3_2_1b.yaml", **kw):
    p = af8._plan(root / "fixtures/models" / model, None, dict(seq_length=1024, **kw))
    return group_keys(p["modules"], "llm", p["architecture"]["llm"])


def test_groups_sharing_a_key_are_one_unit(root):
    keys = _keys(root, "deepseek_v3.yaml", tp=8, ep=64, etp=1)
    units = mo.search_units(keys, list(keys))
    assert units["fc2+shared.fc2"] == ["fc2", "shared.fc2"]
    assert "fc2" not in units and sum(len(g) for g in units.values()) == len(keys)
    # Only the groups the all-FP8 model runs FP8 are searched.
    assert mo.search_units(keys, ["qkv"] if "qkv" in keys else [next(iter(keys))]).keys() != units.keys()


@pytest.mark.parametrize("execution", ["eager", "graphed"])
def test_a_forced_policy_runs_exactly_its_groups_fp8(root, tmp_path, execution):
    keys = _keys(root, tp=1)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(mo.forced_policy(keys, {"qkv", "fc2"})))
    for tokens in (16, 4096):
        plan = af8._plan(root / "fixtures/models/llama3_2_1b.yaml", str(path), dict(tp=1, seq_length=tokens, execution=execution))
        fp8 = {ms.group_names(plan["modules"])[m["name"]] for m in plan["modules"] if m["use_fp8"]}
        assert fp8 == {"qkv", "fc2"}, (tokens, fp8)


class _TimedJudge(_FakeJudge):
    """Times a model by its FP8 groups: fc1 pays (-1 ms), qkv costs (+0.5 ms)."""

    def __init__(self, root, execution):
        super().__init__(root, execution)

    def build(self, kw, integ, policy, region, recipe, tokens, execution):
        model, note = super().build(kw, integ, policy, region, recipe, tokens, execution)
        self.calls[-1] += f" {sorted(self._groups(model))}"
        return model, note

    def _groups(self, model):
        seen = self.precisions(model)
        return {ms.group_names(self._rows(model))[ms.plan_name(p)] for p, on in seen.items() if on}

    def _rows(self, model):
        return af8._plan(self.root / "fixtures/models/llama3_2_1b.yaml", None, dict(tp=1, seq_length=model["tokens"]))["modules"]

    def step_fn(self, model, tokens, vocab, grad_accum=1, execution="eager"):
        step = super().step_fn(model, tokens, vocab, grad_accum, execution)
        step.model = model
        return step

    def release_graphs(self, execution):
        self.calls.append(f"release {execution}")

    def time_ms(self, step, steps):
        g = self._groups(step.model) if step.model["policy"] else set()
        return 10.0 - ("fc1" in g) + 0.5 * ("qkv" in g)


@pytest.mark.parametrize("execution", ["eager", "graphed"])
def test_the_oracle_finds_the_group_that_pays_and_the_merge_reads_it(root, tmp_path, fp8sel, execution):
    args = _count_args(root, oracle="greedy", oracle_repeats=3)
    keys = _keys(root, tp=1)
    judge = _TimedJudge(root, execution)
    modes = ms.mode_names(args.policy, False, ["policy:llama3_2_1b.json"])
    row = ms._one_count(judge, args, 4096, execution, modes, "blockwise", [], [], lambda *a, **k: None, keys, tmp_path)
    assert row["modes"]["oracle"]["fp8_groups"] == ["fc1"]
    assert [t["kept"] for t in row["oracle_trials"] if t["search"] == "up"] == [False, False, True, False]
    fixed = next(i for i, c in enumerate(judge.calls) if c.startswith("build bf16"))
    builds = [c for c in judge.calls[:fixed] if c.startswith("build")]  # the search's candidates
    if execution == "graphed":
        # Each trial's pair built and captured on its own, Megatron's graphs released between.
        first = judge.calls.index("capture")
        assert judge.calls[:first] == ["release graphed", "build hook graphed ['qkv']", "step hook", "build hook graphed []", "step hook"]
        assert judge.calls.count("release graphed") >= len(row["oracle_trials"])
    else:
        # Eager candidates are reused across trials: all-BF16 is built once for the upward pass;
        # each one the search gives up is dropped (its memory freed) before the fixed modes.
        assert builds.count("build hook eager []") == 1
        assert judge.calls[:fixed].count("drop") >= sum(1 for t in row["oracle_trials"] if t["search"] != "final")
    # The step merge turns the Megatron worker's results into rules.
    from adaptive_fp8.bench.step_common import results_document

    header = {"model": args.model, "model_name": "llama3_2_1b", "component": "llm", "group_keys": keys, "trainer": "megatron",
              "tp": 1, "layers": 2, "steps": 1, "repeats": 2, "execution": execution, "grad_accum": 1,
              "recipe": "Float8BlockScaling", "fp8_recipe": "blockwise", "device": "fake", "te_version": "fake", "complete": True}
    out = results_document(header, [row], te_blocks=False)
    res = tmp_path / "r.json"
    res.write_text(json.dumps(out))
    pol = tmp_path / "p.json"
    r = subprocess.run([str(fp8sel), "merge-policy", "--step", str(res), "--output", str(pol)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    rules = json.loads(pol.read_text())["rules"]
    field = "min_tokens" if execution == "eager" else "min_tokens_graphed"
    fc1 = rules["layernorm_column"]["fc1"][0]
    assert fc1.get(field, fc1["min_tokens"]) == 4096
