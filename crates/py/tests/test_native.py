"""Megatron's native per-module config (`fp8sel te-precision-config`, `te_precision_config`):
every module path's first matching matcher, by `fnmatch` (what Megatron's GlobMatcher calls),
gives the decision `fp8sel explain --json` gives, for every fixture model and layout."""

from __future__ import annotations

import fnmatch
import json
import subprocess

import pytest

import adaptive_fp8 as af8
import adaptive_fp8.megatron as af8m

# (model, policy, layouts (tp, ep, etp)) over every fixture model, examples included.
CASES = [
    ("fixtures/models/qwen2_5_72b.yaml", "policies/qwen2_5_72b.json", [(1, 1, 1), (4, 1, 4), (8, 1, 8)]),
    ("fixtures/models/llama3_2_1b.yaml", "policies/llama3_2_1b.json", [(1, 1, 1), (2, 1, 2)]),
    ("fixtures/models/deepseek_v3.yaml", "policies/deepseek_v3.json", [(1, 8, 1), (8, 64, 1), (8, 32, 1)]),
    ("fixtures/models/qwen3_vl_235b_a22b.yaml", "policies/qwen3_vl_235b_a22b.llm.json", [(1, 8, 1), (4, 16, 1)]),
    ("fixtures/models/hf/qwen2_5_72b.json", "policies/qwen2_5_72b.json", [(4, 1, 4)]),
    ("examples/models/qwen3_30b_a3b.json", None, [(1, 1, 1)]),
    ("examples/models/mixtral_8x7b.json", None, [(2, 8, 1)]),
]
TOKENS = [256, 1024, 4096, 32768]


def megatron_match(config: dict, path: str) -> str:
    """What Megatron's RecipeConfig does: the first enabled glob matcher, in order."""
    for m in config["matchers"].values():
        if m.get("enabled") and m["type"] == "glob" and fnmatch.fnmatch(path, m["pattern"]):
            return m["config"]
    return None


def runs_fp8(config: dict, path: str) -> bool:
    name = megatron_match(config, path)
    assert name is not None, f"{path}: no matcher (the catch-all must match every module)"
    return config["configs"][name]["training_recipe"].get("fp8_quantization_recipe") is not None


def paths(name: str, layers: int) -> list[str]:
    """Concrete Megatron module paths of a plan row: first, middle and last layer index."""
    return [name.replace("layers.", f"layers.{i}.", 1) for i in sorted({0, layers // 2, layers - 1})]


def explain(fp8sel, root, model, policy, tp, ep, etp, seq):
    args = [str(fp8sel), "explain", "--json", "--model", model, "--tp", str(tp), "--ep", str(ep), "--etp", str(etp), "--seq-length", str(seq)]
    if policy:
        args += ["--policy", policy]
    out = subprocess.run(args, cwd=root, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("model,policy,layouts", CASES)
def test_every_module_path_matches_the_explained_decision(fp8sel, root, model, policy, layouts):
    checked = 0
    for (tp, ep, etp) in layouts:
        for seq in TOKENS:
            cfg = af8m.te_precision_config(root / model, policy and root / policy, tp=tp, ep=ep, etp=etp, seq_length=seq)
            assert list(cfg["matchers"])[-1] == "default" and cfg["matchers"]["default"]["pattern"] == "*"
            for row in explain(fp8sel, root, model, policy, tp, ep, etp, seq)["modules"]:
                if row["component"] != "llm":
                    continue
                for p in paths(row["name"], row["layers"]):
                    assert runs_fp8(cfg, p) == row["use_fp8"], (model, tp, seq, p, row["reason"])
                    checked += 1
            # A module the engine does not know runs BF16.
            assert not runs_fp8(cfg, "decoder.layers.0.some_new_block.linear_x")
            assert not runs_fp8(cfg, "vision_model.decoder.layers.0.self_attention.linear_qkv")
    assert checked > 0


def test_the_cli_writes_the_same_config(fp8sel, root, tmp_path):
    yaml = pytest.importorskip("yaml")
    out = tmp_path / "te_precision.yaml"
    args = ["te-precision-config", "--model", "fixtures/models/deepseek_v3.yaml", "--policy", "policies/deepseek_v3.json",
            "--tp", "8", "--ep", "64", "--etp", "1", "--seq-length", "4096", "--output", str(out)]
    r = subprocess.run([str(fp8sel), *args], cwd=root, capture_output=True, text=True, check=True)
    assert "--te-precision-config-file" in r.stdout and "--fp8-format e4m3 --fp8-recipe blockwise" in r.stdout
    text = out.read_text()
    assert text.startswith("# Megatron-core per-module precision")
    assert "policy: policies/deepseek_v3.json" in text and "layout: tp 8 ep 64 etp 1" in text and "tokens: 4096" in text
    loaded = yaml.safe_load(text)
    py = af8m.te_precision_config(root / "fixtures/models/deepseek_v3.yaml", root / "policies/deepseek_v3.json", tp=8, ep=64, etp=1, seq_length=4096)
    assert loaded == py
    assert list(loaded["matchers"]) == list(py["matchers"])  # order is the semantics


def test_regions_follow_the_experts_and_the_graphs(root):
    # DeepSeek-V3 at TP 8 EP 64, 4096 tokens: routed experts run FP8 -> the global FP8 region.
    e = af8m.native_export(root / "fixtures/models/deepseek_v3.yaml", root / "policies/deepseek_v3.json", tp=8, ep=64, etp=1, seq_length=4096)
    assert e["region"] == "fp8" and e["fp8_instances"] > 0
    # Its BF16 groups would hold FP8 weights under --fp8-param-gather (Megatron 0.19 builds them so).
    assert any("without --fp8-param-gather" in line for line in e["launch"])
    # Llama-3.2-1B at 256 tokens: nothing runs FP8 -> the BF16 model, launched without --fp8-format.
    e = af8m.native_export(root / "fixtures/models/llama3_2_1b.yaml", root / "policies/llama3_2_1b.json", tp=1, seq_length=256)
    assert e["region"] == "bf16" and e["fp8_instances"] == 0
    assert "without --fp8-format" in e["launch"][0]
    # ... at 8192 in an eager step its FP8 modules are dense: they enter FP8 themselves, in the
    # BF16 region, with a launch line that says it holds for eager steps only.
    e = af8m.native_export(root / "fixtures/models/llama3_2_1b.yaml", root / "policies/llama3_2_1b.json", tp=1, seq_length=8192)
    assert e["region"] == "bf16" and e["fp8_need"] is None and 0 < e["fp8_instances"] < 64
    assert "no --fp8-format" in e["launch"][1] and "eager steps only" in e["launch"][1]
    # ... graphed, the same dense FP8 modules need the FP8 region: megatron-core's graphs
    # re-quantize cached FP8 weights only under config.fp8 (the judge found them stale outside).
    e = af8m.native_export(root / "fixtures/models/llama3_2_1b.yaml", root / "policies/llama3_2_1b.json", tp=1, seq_length=8192, execution="graphed")
    assert e["region"] == "fp8" and e["fp8_need"] == "graphed_weights" and 0 < e["fp8_instances"] < 64
    assert "--fp8-format" in e["launch"][0] and "CUDA-graphed" in e["launch"][1]
    assert "without --fp8-param-gather" in e["launch"][2]  # its BF16 groups would hold FP8 weights
    assert af8.plan_summary(root / "fixtures/models/llama3_2_1b.yaml", root / "policies/llama3_2_1b.json", seq_length=8192, execution="graphed")["fp8_modules"] == e["fp8_instances"]
    # ... and eager (the default) takes the eager thresholds: nothing FP8 at 2048, where the
    # graphed ones run fc1 and fc2 FP8.
    e = af8m.native_export(root / "fixtures/models/llama3_2_1b.yaml", root / "policies/llama3_2_1b.json", tp=1, seq_length=2048)
    assert e["region"] == "bf16" and e["fp8_instances"] == 0
    e = af8m.native_export(root / "fixtures/models/llama3_2_1b.yaml", root / "policies/llama3_2_1b.json", tp=1, seq_length=2048, execution="graphed")
    assert e["fp8_instances"] > 0
    # DeepSeek-V3 at TP 1 EP 16, 4096 graphed: proj and the dense MLP FP8, the routed experts
    # BF16. The FP8 region would pad the BF16 experts (measured slower than BF16): every module
    # is written BF16, the launch is the BF16 model's, and the plan document says why.
    dsv3 = (root / "fixtures/models/deepseek_v3.yaml", root / "policies/deepseek_v3.json")
    e = af8m.native_export(*dsv3, tp=1, ep=16, etp=1, seq_length=4096, execution="graphed")
    assert e["region"] == "bf16" and e["fp8_instances"] == 0 and e["fp8_need"] is None
    assert e["bf16_because"] == "padded_experts" and e["bf16_because_instances"] > 0
    assert "written BF16" in e["launch"][0] and "without --fp8-format" in e["launch"][0]
    assert all(m["config"] == "bf16" for m in e["config"]["matchers"].values())
    doc = af8._plan(str(dsv3[0]), str(dsv3[1]), dict(tp=1, ep=16, seq_length=4096, execution="graphed"))
    assert doc["native_bf16_because"] == "padded_experts" and doc["launch_region"] == "bf16"
    assert doc["fp8_region_need"] == "graphed_weights"  # what its FP8 modules would need
    # Eager, or with FP8 experts (8192 graphed), the plan is written as it is.
    assert af8m.native_export(*dsv3, tp=1, ep=16, etp=1, seq_length=4096)["fp8_instances"] > 0
    e = af8m.native_export(*dsv3, tp=1, ep=16, etp=1, seq_length=8192, execution="graphed")
    assert e["region"] == "fp8" and e["bf16_because"] is None and e["fp8_need"] == "routed_experts"


def test_delayed_and_unknown_recipes_are_refused(fp8sel, root, tmp_path):
    with pytest.raises(af8.PlanError, match="refuses delayed scaling.*adaptive_fp8.megatron.enable"):
        af8m.te_precision_config(root / "fixtures/models/llama3_2_1b.yaml", root / "policies/llama3_2_1b.json", recipe="delayed", seq_length=4096)
    with pytest.raises(af8.PlanError, match="fp4"):
        af8m.te_precision_config(root / "fixtures/models/llama3_2_1b.yaml", root / "policies/llama3_2_1b.json", recipe="fp4", seq_length=4096)
    out = tmp_path / "x.yaml"
    for extra, msg in ((["--recipe", "delayed"], "refuses delayed scaling"),):
        r = subprocess.run([str(fp8sel), "te-precision-config", "--model", "fixtures/models/llama3_2_1b.yaml", "--policy",
                            "policies/llama3_2_1b.json", "--seq-length", "4096", "--output", str(out), *extra],
                           cwd=root, capture_output=True, text=True)
        assert r.returncode == 2 and msg in r.stderr, r.stderr
        assert not out.exists()  # nothing half-written
    # Blockwise in HYBRID is what Megatron builds from --fp8-format hybrid (TE 2.20.2 trains it):
    # written as asked, with a note that the policy was measured in E4M3.
    r = subprocess.run([str(fp8sel), "te-precision-config", "--model", "fixtures/models/llama3_2_1b.yaml", "--policy",
                        "policies/llama3_2_1b.json", "--seq-length", "4096", "--output", str(out), "--fp8-format", "hybrid"],
                       cwd=root, capture_output=True, text=True)
    assert r.returncode == 0 and "measured in E4M3" in r.stderr, r.stderr
    assert "fp8_format: hybrid" in out.read_text()
    out.unlink()
    # The output may not be one of the inputs.
    r = subprocess.run([str(fp8sel), "te-precision-config", "--model", "fixtures/models/llama3_2_1b.yaml", "--policy",
                        "policies/llama3_2_1b.json", "--seq-length", "4096", "--output", "policies/llama3_2_1b.json"],
                       cwd=root, capture_output=True, text=True)
    assert r.returncode == 2 and json.loads((root / "policies/llama3_2_1b.json").read_text())["version"] == 1


def test_a_config_dict_plans_like_its_file(root):
    yaml = pytest.importorskip("yaml")
    fields = yaml.safe_load((root / "fixtures/models/llama3_2_1b.yaml").read_text())
    a = af8.plan(fields, root / "policies/llama3_2_1b.json", seq_length=2048)
    b = af8.plan(root / "fixtures/models/llama3_2_1b.yaml", root / "policies/llama3_2_1b.json", seq_length=2048)
    assert [(r["name"], r["use_fp8"], r["in_features"]) for r in a] == [(r["name"], r["use_fp8"], r["in_features"]) for r in b]
    with pytest.raises(af8.ConfigError, match="num_layers|hidden_size"):
        af8.plan({"hidden_size": 64}, None, seq_length=128)


def _plan_keys(rules: dict) -> list[dict]:
    """Every rule key of a policy's ``rules``, in the plan's key form."""
    keys = []
    for kind, v in sorted(rules.items()):
        if isinstance(v, dict):
            keys += [{"kind": kind, "ub_name": ub, "tp": r["tp"]} for ub, rs in sorted(v.items()) for r in rs]
        else:
            keys += [{"kind": kind, "etp": r["etp"], "num_gemms": r["num_gemms"]} for r in v]
    return keys


def _mixed(policy: dict) -> dict:
    """The policy with a recipe plan over every other key: tensorwise from 1024, then blockwise
    or BF16 from 8192 (eager) and the reverse order graphed; the keys left out follow rules."""
    keys = []
    for i, k in enumerate(_plan_keys(policy["rules"])):
        if i % 2:
            continue
        late = "blockwise" if i % 4 == 0 else "bf16"
        keys.append({"key": k, "eager": [{"from": 1024, "recipe": "tensorwise"}, {"from": 8192, "recipe": late}],
                     "graphed": [{"from": 512, "recipe": "blockwise"}, {"from": 4096, "recipe": "tensorwise"}]})
    # The reader wants the keys in the policy crate's order: dense before grouped, each by kind
    # (declaration order), then name and layout.
    order = ["layernorm_column", "column", "row", "duplicated", "column_grouped", "row_grouped"]
    keys.sort(key=lambda k: (order.index(k["key"]["kind"]), k["key"].get("ub_name", ""), k["key"].get("tp", 0),
                             k["key"].get("etp", 0), k["key"].get("num_gemms", 0)))
    return {**policy, "recipes": {"base": "blockwise", "max_quant_error": 0.05, "keys": keys}}


@pytest.mark.parametrize("model,policy,layouts", [c for c in CASES if c[1]])
def test_a_mixed_plans_matchers_give_each_module_the_recipe_explain_gives(fp8sel, root, tmp_path, model, policy, layouts):
    mixed = tmp_path / "mixed.json"
    mixed.write_text(json.dumps(_mixed(json.loads((root / policy).read_text()))))
    recipes = set()
    for (tp, ep, etp) in layouts:
        for seq in TOKENS:
            cfg = af8m.te_precision_config(root / model, mixed, tp=tp, ep=ep, etp=etp, seq_length=seq)
            for row in explain(fp8sel, root, model, str(mixed), tp, ep, etp, seq)["modules"]:
                if row["component"] != "llm":
                    continue
                want = (row.get("recipe") or "blockwise") if row["use_fp8"] else None
                for p in paths(row["name"], row["layers"]):
                    got = cfg["configs"][megatron_match(cfg, p)]["training_recipe"].get("fp8_quantization_recipe")
                    assert got == want, (model, tp, seq, p, row["reason"])
                    recipes.add(got)
    assert "tensorwise" in recipes, recipes
