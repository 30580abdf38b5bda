"""The step model's worker: its pure half (groups, plans file, calibration counts, the command
line), and with torch installed its whole run on the CPU through a stand-in for TE (the numbers
are the host's clock there; the GPU half runs on the device, scripts/device/step_model.sh)."""

from __future__ import annotations

import json

import pytest

import adaptive_fp8 as af8
from adaptive_fp8.bench import step_inputs as si
from adaptive_fp8.bench.phases import Phases
from adaptive_fp8.bench.step_spec import Spec, StepBenchError, composition, group_keys

#: The fields of `fp8_report::step_inputs::StepInputs` (the Rust reader refuses any other).
DOC_FIELDS = {"format", "version", "model", "model_name", "component", "recipe", "fp8_recipe", "fp8_format", "fp8_param", "device", "host", "te_version", "tp", "ep", "etp", "layers",
              "layer_types", "grad_accum", "steps", "rounds", "manual_gc", "settle_s", "settled", "groups", "modules", "step_times", "failed",
              "notes", "complete"}
GROUP_FIELDS = {"group", "key", "scale", "instances", "in_features", "out_features", "graphed", "fp8_capable"}
STEP_FIELDS = {"execution", "tokens", "mode", "fp8_groups", "wall_ms", "steps", "host_ms", "gpu_ms"}


def _spec(root, model, **kw):
    p = af8._plan(str(root / "fixtures" / "models" / model), None, kw)
    return Spec.from_plan(p["modules"], p["architecture"].get("llm"), model, "llm"), p


def test_groups_carry_their_key_instances_and_whether_a_graph_captures_them(root):
    spec, plan = _spec(root, "deepseek_v3.yaml", tp=8, ep=64, seq_length=4096)
    kinds = composition(spec, 2, 1)
    keys = group_keys(plan["modules"], "llm", plan["architecture"]["llm"])
    rows = {g["group"]: g for g in si.group_rows(spec, kinds, keys)}
    assert set(rows["fc1"]) == GROUP_FIELDS
    assert (rows["fc1"]["instances"], rows["experts.fc1"]["instances"], rows["proj"]["instances"]) == (1, 1, 2)
    assert rows["proj"]["graphed"] and not rows["experts.fc1"]["graphed"] and not rows["shared.fc2"]["graphed"]
    assert rows["experts.fc1"]["scale"] == 8 and rows["qkv" if "qkv" in rows else "proj"]["scale"] == 1


def test_a_bad_plans_file_is_refused_with_the_field_named(tmp_path):
    f = tmp_path / "plans.json"
    for body, want in [("{", "cannot read the plans file"), (json.dumps({"format": "x"}), "format: expected"),
                       (json.dumps({"format": si.PLANS_FORMAT, "plans": []}), "plans: expected a non-empty list"),
                       (json.dumps({"format": si.PLANS_FORMAT, "plans": [{"execution": "eager", "tokens": 0, "fp8_groups": []}]}), "plans[0]")]:
        f.write_text(body)
        with pytest.raises(StepBenchError, match=want.replace("[", r"\[")):
            si.read_plans(str(f))
    f.write_text(json.dumps({"format": si.PLANS_FORMAT, "plans": [{"execution": "graphed", "tokens": 2048, "fp8_groups": ["fc1"]}]}))
    assert si.read_plans(str(f))[0]["tokens"] == 2048


def test_the_calibration_counts_and_the_command_line(capsys, tmp_path):
    assert si.default_calibration([1024, 2048, 4096, 8192, 16384]) == [1024, 2048, 4096, 16384]
    assert si.default_calibration([16384, 1024, 4096]) == [1024, 4096, 16384]
    assert si.default_calibration([4096, 1024, 1024]) == [1024, 4096]
    assert si.default_calibration([2048]) == [2048]
    rc = si.main(["--model", "m.json", "--tokens", "1024,2048", "--calibrate", "4096", "--json", str(tmp_path / "o.json")])
    assert rc == 2 and "--calibrate 4096 not in --tokens" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        si.parser().parse_args(["--model", "m", "--tokens", "0", "--json", "o"])


def test_the_header_has_exactly_the_readers_fields():
    args = si.parser().parse_args(["--model", "m.json", "--json", "o.json"])
    assert set(si.header(args, "m", [], ["dense"], "cpu", "stand-in", "r")) == DOC_FIELDS


def test_the_header_records_the_recipes_options(capsys):
    """The format always; delayed scaling's amax options too (Megatron's flag names taken); the
    amax options with another recipe refused before TE loads."""
    head = lambda *a: si.header(si.parser().parse_args(["--model", "m.json", "--json", "o.json", *a]), "m", [], ["dense"], "cpu", "stand-in", "r")
    assert head()["fp8_format"] == "e4m3" and "amax_history_len" not in head()
    # The weights: BF16 (Megatron's default) unless FP8 ones are asked for, by Megatron's flag too.
    assert head()["fp8_param"] is False
    assert head("--fp8-param")["fp8_param"] is True and head("--fp8-param-gather")["fp8_param"] is True
    assert head("--recipe", "tensorwise", "--fp8-format", "hybrid")["fp8_format"] == "hybrid"
    d = head("--recipe", "delayed")
    assert (d["fp8_format"], d["amax_history_len"], d["amax_compute_algo"]) == ("hybrid", 1024, "max")
    d = head("--recipe", "delayed", "--fp8-format", "e4m3", "--fp8-amax-history-len", "1", "--fp8-amax-compute-algo", "most_recent")
    assert set(d) == DOC_FIELDS | {"amax_history_len", "amax_compute_algo"}
    assert (d["fp8_format"], d["amax_history_len"], d["amax_compute_algo"]) == ("e4m3", 1, "most_recent")
    rc = si.main(["--model", "m.json", "--recipe", "tensorwise", "--amax-history-len", "16", "--json", "o.json"])
    assert rc == 2 and "--amax-history-len: the tensorwise recipe keeps no amax history" in capsys.readouterr().err
    rc = si.main(["--model", "m.json", "--fp8-format", "hybrid", "--json", "o.json"])
    assert rc == 2 and "E4M3 only" in capsys.readouterr().err


def test_a_vlms_vision_encoder_is_its_own_document(root):
    """`--component vit`: the vision encoder's dense layers (bidirectional), its keys at the
    step's TP, and the document says whose they are."""
    from adaptive_fp8.bench.step_bench import spec_at, step_keys

    model = str(root / "fixtures" / "models" / "qwen3_vl_235b_a22b.yaml")
    args = si.parser().parse_args(["--model", model, "--component", "vit", "--tp", "2", "--ep", "1", "--json", "o.json"])
    args.tp_comm = False
    spec, kw = spec_at(af8, args, 4096)
    kinds = composition(spec, 2)
    name, keys = step_keys(af8, args, spec, kinds, kw)
    rows = si.group_rows(spec, kinds, keys)
    assert kinds == ["dense", "dense"] and not spec.causal
    assert [r["group"] for r in rows] == ["qkv", "proj", "fc1", "fc2"] and all(r["key"]["tp"] == 2 for r in rows)
    doc = si.header(args, name, rows, kinds, "cpu", "stand-in", "r")
    assert doc["component"] == "vit"
    # Its attention runs per image (1024 tokens unless told), and the document says so.
    assert spec.image_tokens == 1024 and "each image of 1024 tokens" in doc["notes"][0]
    args.image_tokens = 2304
    assert spec_at(af8, args, 4096)[0].image_tokens == 2304
    args.image_tokens = 0
    with pytest.raises(StepBenchError, match="--image-tokens 0"):
        spec_at(af8, args, 4096)
    llm = si.parser().parse_args(["--model", model, "--json", "o.json"])
    llm_doc = si.header(llm, name, [], kinds, "cpu", "stand-in", "r")
    assert llm_doc["component"] == "llm" and llm_doc["notes"] == []
    assert spec_at(af8, llm, 4096)[0].image_tokens == 0
    with pytest.raises(SystemExit):
        si.parser().parse_args(["--model", model, "--component", "audio", "--json", "o.json"])


# -- the torch half on the CPU, with a stand-in for TE (skipped where torch is missing) ---------

TINY = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_act": "silu", "hidden_size": 128,
        "intermediate_size": 256, "moe_intermediate_size": 48, "num_experts": 8, "num_experts_per_tok": 2, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-6, "vocab_size": 1000}


def test_measure_and_check_run_end_to_end_with_a_te_stand_in(tmp_path, root):
    torch = pytest.importorskip("torch", reason="skipped: torch not installed (the CPU stand-in run needs it)")
    import fake_te

    cfg = tmp_path / "moe.json"
    cfg.write_text(json.dumps(TINY))
    base = ["--model", str(cfg), "--tokens", "64,128", "--layers", "1", "--rounds", "2", "--steps", "1", "--warmup", "1"]
    args = si.parser().parse_args([*base, "--json", str(tmp_path / "in.json")])
    args.calibrate, args.tp_comm, args.component = si.default_calibration(args.tokens), False, "llm"
    torch.manual_seed(0)
    said = []
    doc = si.run(args, log=lambda *a, **k: said.append(" ".join(map(str, a))), te=fake_te, device="cpu")
    assert set(doc) == DOC_FIELDS and doc["complete"]
    # Each count's line says where its time went (no allocator on the CPU).
    counts = [x for x in said if "tokens 128 graphed:" in x]
    assert len(counts) == 1 and all(f"{p} " in counts[0] for p in ("build", "warm-up", "rounds", "profile")), said
    assert "allocator" not in counts[0]
    _check(doc, *_schema(root, "adaptive-fp8-step-inputs.v1.schema.json"))
    groups = [g["group"] for g in doc["groups"]]
    assert {"qkv", "proj", "experts.fc1", "experts.fc2"} <= set(groups)
    assert len(doc["modules"]) == 2 * len(groups)
    for m in doc["modules"]:
        assert len(m["bf16"]["gpu_ms"]) == 2 and len(m["fp8"]["host_ms"]) == 2 and min(m["bf16"]["gpu_ms"]) > 0
    modes = {(s["execution"], s["tokens"], s["mode"]) for s in doc["step_times"]}
    assert modes == {(e, t, m) for e in ("eager", "graphed") for t in (64, 128) for m in ("bf16", "fp8")}
    assert all(set(s) == STEP_FIELDS and s["host_ms"] > 0 and s["gpu_ms"] > 0 and s["steps"] == 1 for s in doc["step_times"])
    # Settled once, before the first timed whole steps, and recorded (typed, not a note).
    assert doc["settle_s"] == 12.0 and doc["settled"]["at"] == "eager at 64" and doc["settled"]["rounds"] >= 6
    assert not any(n.startswith("settled before") for n in doc["notes"])
    # The check: the plans file's plans, beside all-BF16 and all-FP8.
    plans = tmp_path / "plans.json"
    plans.write_text(json.dumps({"format": si.PLANS_FORMAT, "plans": [{"execution": "eager", "tokens": 128, "fp8_groups": ["qkv"]},
                                                                      {"execution": "eager", "tokens": 64, "fp8_groups": []}]}))
    args = si.parser().parse_args([*base, "--check", str(plans), "--execution", "eager", "--json", str(tmp_path / "c.json")])
    args.calibrate, args.tp_comm, args.component = [], False, "llm"
    doc = si.run(args, log=lambda *a, **k: None, te=fake_te, device="cpu")
    rows = {(s["tokens"], s["mode"]): s for s in doc["step_times"]}
    assert doc["modules"] == [] and (rows[(128, "plan")]["mode"], rows[(128, "plan")]["fp8_groups"]) == ("plan", ["qkv"])
    assert rows[(128, "plan")]["wall_ms"] != rows[(128, "bf16")]["wall_ms"]
    # A plan that is all-BF16 is that step: timed once, the same rounds.
    assert rows[(64, "plan")]["fp8_groups"] == [] and rows[(64, "plan")]["wall_ms"] == rows[(64, "bf16")]["wall_ms"]
    assert all(s["host_ms"] is None and s["gpu_ms"] is None for s in doc["step_times"])
    assert doc["settled"]["at"] == "eager at 64"  # the check's own settling
    _check(doc, *_schema(root, "adaptive-fp8-step-inputs.v1.schema.json"))


def test_a_vision_encoders_attention_stays_within_each_image():
    """Whole images batched (an image's tokens strided by the batch), the rest one shorter image:
    each token attends to its own image's tokens alone, never across images."""
    torch = pytest.importorskip("torch", reason="skipped: torch not installed (the CPU stand-in run needs it)")
    import fake_te
    from adaptive_fp8.bench.step_layers import _per_image

    torch.manual_seed(0)
    n, img, h, d = 40, 16, 2, 8
    q, k, v = (torch.randn(n, h, d) for _ in range(3))
    core = fake_te.DotProductAttention(h, d, attn_mask_type="no_mask")
    out = _per_image(torch, core, (q, k, v), img)
    assert out.shape == (n, h * d)

    def alone(idx):
        t = torch.tensor(idx)
        return core(q[t].unsqueeze(1), k[t].unsqueeze(1), v[t].unsqueeze(1)).reshape(len(idx), -1)

    # 40 tokens of 16-token images: two whole images (tokens 0, 2, .., 30 and 1, 3, .., 31), then 8.
    for idx in (list(range(0, 32, 2)), list(range(1, 32, 2)), list(range(32, 40))):
        assert torch.allclose(out[idx], alone(idx), atol=1e-5)
    assert not torch.allclose(out, alone(list(range(n))), atol=1e-3)
    # One image of every token is the whole sequence's attention.
    assert torch.allclose(_per_image(torch, core, (q, k, v), n), alone(list(range(n))), atol=1e-5)


def test_a_module_the_host_cannot_stay_ahead_of_is_timed_by_its_kernels():
    from adaptive_fp8.bench import step_probe as sp

    class Held:
        """A sleeper whose host never stays ahead (a full launch queue)."""

        def __init__(self):
            self.holds = []

        def held(self, work, hold_ms):
            self.holds.append(hold_ms)
            return hold_ms + 1.0, 9.0, False

        def kernels(self, work, n=1):
            return 2.5

    s = Held()
    gpu, host, hold = sp.gpu_and_host(s, None, 5.0)
    assert (gpu, host) == (2.5, None) and s.holds == [5.0, 10.0] and hold == 20.0
    assert sp.union_us([(0.0, 2.0), (1.0, 3.0), (5.0, 6.0)]) == 4.0


# -- the writer against the reader's schema (docs/schemas/, generated from fp8_report's types) ----

from schema_check import check as _check, schema as _schema  # noqa: E402


def _doc():
    args = si.parser().parse_args(["--model", "m.json", "--json", "o.json"])
    key = {"kind": "row", "ub_name": "fc2", "tp": 1}
    doc = si.header(args, "m", [{"group": "fc2", "key": key, "scale": 1, "instances": 2, "in_features": 64, "out_features": 32,
                                 "graphed": True, "fp8_capable": True}], ["dense"], "cpu", "stand-in", "r")
    doc["modules"].append({"tokens": 64, "group": "fc2", "bf16": {"host_ms": [0.1], "gpu_ms": [0.2]}, "fp8": None})
    doc["step_times"].append({"execution": "eager", "tokens": 64, "mode": "bf16", "fp8_groups": [], "wall_ms": [1.0], "host_ms": 0.5, "gpu_ms": 0.7})
    return doc


def test_a_round_of_long_steps_has_fewer_of_them_and_lasts_about_as_long():
    most = 5
    assert si.round_steps(10.0, most) == most  # short steps: all of --steps
    assert si.round_steps(si.ROUND_MS / 3, most) == 3
    assert si.round_steps(si.ROUND_MS / 3 - 0.1, most) == 4  # a round never falls short of ROUND_MS
    assert si.round_steps(400.0, most) == si.MIN_ROUND_STEPS  # long ones: at least the minimum
    assert si.round_steps(400.0, 1) == 1 and si.round_steps(0.0, most) == most  # never above --steps
    for ms in (1.0, 37.5, 66.7, 120.0, 999.0):
        n = si.round_steps(ms, most)
        assert si.MIN_ROUND_STEPS <= n <= most and (n == most or n == si.MIN_ROUND_STEPS or n * ms >= si.ROUND_MS > (n - 1) * ms)


def test_the_writers_documents_match_the_readers_schema_and_a_planted_field_fails(root):
    schema, defs = _schema(root, "adaptive-fp8-step-inputs.v1.schema.json")
    _check(_doc(), schema, defs)
    # With what settling took, as the worker records it.
    from adaptive_fp8.bench.settle import Once

    once = Once(60.0)
    once(iter([(12.0, 0.1)] * 3 + [(10.0, 0.1)] * 9).__next__, "eager at 1024")
    settled = dict(_doc(), settled=once.record())
    assert settled["settled"]["at"] == "eager at 1024" and settled["settled"]["flat"] and settled["settle_s"] == 12.0
    _check(settled, schema, defs)
    for plant in (lambda d: d.update(argv=["x"]), lambda d: d["step_times"][0].update(ahead=True), lambda d: d["groups"][0].pop("in_features"),
                  lambda d: d.update(settled={"at": "eager at 1024", "rounds": 1})):
        d = _doc()
        plant(d)
        with pytest.raises(ValueError):
            _check(d, schema, defs)
    plans, pdefs = _schema(root, "adaptive-fp8-step-plans.v1.schema.json")
    _check({"format": si.PLANS_FORMAT, "plans": [{"execution": "graphed", "tokens": 2048, "fp8_groups": ["fc1"]}]}, plans, pdefs)


def test_served_the_worker_runs_each_asked_check_then_ends_with_its_input(tmp_path, monkeypatch, capsys):
    import io

    runs = []

    def fake_run(args, progress=None, **_):
        runs.append((args.check, args.json))
        return {"modules": [], "step_times": [], "failed": [], "complete": True}

    monkeypatch.setattr(si, "run", fake_run)
    monkeypatch.setattr(si, "emit", lambda d, _n, path, _p, quiet: open(path, "w").write("{}"))
    c = tmp_path / "c.json"
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"check": "p.json", "json": str(c)}) + "\n"))
    assert si.main(["--model", "m.yaml", "--json", str(tmp_path / "in.json"), "--serve"]) == 0
    assert runs == [(None, str(tmp_path / "in.json")), ("p.json", str(c))]
    out = capsys.readouterr().out.splitlines()
    assert out == [f"step_inputs: done {tmp_path / 'in.json'}", f"step_inputs: done {c}"]
    # A line that is not a check ends the worker with the fix named, on stderr.
    for line, want in [("{", "not JSON"), (json.dumps({"check": "p"}), 'expected {"check"')]:
        monkeypatch.setattr("sys.stdin", io.StringIO(line + "\n"))
        assert si.main(["--model", "m.yaml", "--json", str(tmp_path / "in.json"), "--serve"]) == 2
        assert want in capsys.readouterr().err


def test_a_check_count_out_of_memory_twice_is_timed_in_groups_of_fewer_modes():
    class OutOfMemoryError(RuntimeError):
        pass

    class Bench:
        def free(self, collect=False):
            pass

    modes = [("bf16", []), ("fp8", ["fc1", "qkv"]), ("plan", ["fc1"])]
    assert si.split_modes(modes) == [[modes[0], modes[2]], [modes[1]]]
    assert si.split_modes(modes[:2]) == []
    oom = OutOfMemoryError("CUDA out of memory.")

    def raises():
        raise oom

    def rows(ms):
        return lambda: [{"mode": m} for m, _ in ms]

    log = lambda *a, **k: None  # noqa: E731
    doc = {"step_times": [], "failed": [], "notes": []}
    si._count(Bench(), doc, "graphed", 16384, log, raises, [rows(g) for g in si.split_modes(modes)])
    assert [r["mode"] for r in doc["step_times"]] == ["bf16", "plan", "fp8"] and doc["failed"] == []
    assert "timed in 2 groups" in doc["notes"][0]
    # A group out of memory too: a failed row, no partial rows.
    doc = {"step_times": [], "failed": [], "notes": []}
    si._count(Bench(), doc, "graphed", 16384, log, raises, [rows(modes[:1]), raises])
    assert doc["step_times"] == [] and [f["tokens"] for f in doc["failed"]] == [16384] and doc["notes"] == []


def test_a_served_check_that_ran_out_of_memory_times_only_those_counts_again_in_a_fresh_interpreter(tmp_path, monkeypatch, capsys):
    import io
    import os

    def row(e, t):
        return {"execution": e, "tokens": t, "mode": "bf16", "fp8_groups": [], "wall_ms": [1.0], "host_ms": None, "gpu_ms": None}

    oom = {"execution": "graphed", "tokens": 4096, "error": "OutOfMemoryError: CUDA out of memory."}
    other = {"execution": "eager", "tokens": 1024, "error": "RuntimeError: capture failed"}
    timed = []

    def fake_run(args, progress=None, **_):
        if not args.check:
            return {"modules": [], "step_times": [], "failed": [], "notes": [], "complete": True}
        asked = [(p["execution"], p["tokens"]) for p in si.read_plans(args.check)]
        timed.append(asked)
        if len(timed) == 1:
            return {"modules": [], "step_times": [row("eager", 2048)], "failed": [other, oom], "notes": ["n"], "complete": True}
        return {"modules": [], "step_times": [row(e, t) for e, t in asked], "failed": [], "notes": ["n"], "complete": True}

    class Exec(Exception):
        pass

    def fake_exec(path, argv):
        raise Exec(argv)

    written = {}
    monkeypatch.setattr(si, "run", fake_run)
    monkeypatch.setattr(si, "emit", lambda d, _n, path, _p, quiet: written.__setitem__(path, d))
    monkeypatch.setattr(os, "execv", fake_exec)
    monkeypatch.delenv(si.FRESH, raising=False)
    argv = ["--model", "m.yaml", "--json", str(tmp_path / "in.json"), "--serve"]
    monkeypatch.setattr("sys.argv", ["step_inputs.py", *argv])
    plans = tmp_path / "p.json"
    plans.write_text(json.dumps({"format": si.PLANS_FORMAT, "plans": [
        {"execution": e, "tokens": t, "fp8_groups": []} for e, t in [("eager", 1024), ("eager", 2048), ("graphed", 4096)]]}))
    c = tmp_path / "c.json"
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps({"check": str(plans), "json": str(c)}) + "\n"))
    with pytest.raises(Exec) as e:
        si.main(argv)
    got = e.value.args[0]
    assert got[1:3] == ["-m", "adaptive_fp8.bench.step_inputs"] and got.count("--json") == 1
    again = f"{c}.oom-plans.json"
    assert got[-4:] == ["--check", again, "--json", str(c)] and "--serve" in got and "m.yaml" in got
    assert os.environ[si.FRESH] == "1" and "timing them again in a fresh interpreter" in capsys.readouterr().err
    # Started afresh, the worker times the count that ran out of memory, alone, and keeps the rest.
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert si.main(["--model", "m.yaml", "--check", again, "--json", str(c), "--serve"]) == 0
    assert timed == [[("eager", 1024), ("eager", 2048), ("graphed", 4096)], [("graphed", 4096)]]
    doc = written[str(c)]
    assert [(r["execution"], r["tokens"]) for r in doc["step_times"]] == [("eager", 2048), ("graphed", 4096)]
    assert doc["failed"] == [other]
    assert doc["notes"] == ["n", "graphed at 4096: ran out of memory after the other counts; timed again in a fresh interpreter"]
    assert not os.path.exists(again) and not os.path.exists(f"{c}.kept.json") and si.KEPT not in os.environ


def test_a_failed_count_is_collected_after_its_steps_are_gone():
    # The failure's traceback holds the frame that built the steps; a collection while it is
    # alive frees nothing (the H200 kept 29 GiB of CUDA-graph pools through both retries).
    import weakref

    class OutOfMemoryError(RuntimeError):
        pass

    class Step:
        pass

    alive = []

    class Bench:
        def free(self, collect=False):
            alive.append(sum(r() is not None for r in refs))

    refs = []

    def builds_then_fails():
        step = Step()
        refs.append(weakref.ref(step))
        raise OutOfMemoryError("CUDA out of memory.")

    doc = {"step_times": [], "failed": [], "notes": []}
    log = lambda *a, **k: None  # noqa: E731
    si._count(Bench(), doc, "graphed", 14976, log, builds_then_fails, [builds_then_fails])
    assert alive == [0, 0, 0] and len(refs) == 3
    assert doc["failed"] == [{"execution": "graphed", "tokens": 14976, "error": "OutOfMemoryError: CUDA out of memory."}]


def test_a_count_that_ran_out_of_memory_is_collected_and_timed_once_more():
    class OutOfMemoryError(RuntimeError):
        pass

    class Bench:
        freed = 0

        def free(self, collect=False):
            assert collect, "a failed count's steps are collected"
            self.freed += 1

    def timing(failures):
        left = list(failures)

        def time_it():
            if left:
                raise left.pop(0)
            return [{"mode": "bf16"}]
        return time_it

    logged = []
    log = lambda *a, **k: logged.append(" ".join(map(str, a)))  # noqa: E731
    # Out of memory once: collected, timed again, its rows kept.
    b, doc = Bench(), {"step_times": [], "failed": []}
    si._count(b, doc, "graphed", 2432, log, timing([OutOfMemoryError("CUDA out of memory. Tried to allocate 924.00 MiB")]))
    assert doc == {"step_times": [{"mode": "bf16"}], "failed": []} and b.freed == 1 and "timing it again" in logged[-1]
    # Twice: a failed row. Another failure is not timed again.
    for failures, freed in (([OutOfMemoryError("x"), OutOfMemoryError("y")], 2), ([RuntimeError("capture failed")], 1)):
        b, doc = Bench(), {"step_times": [], "failed": []}
        si._count(b, doc, "eager", 3200, log, timing(failures))
        assert doc["step_times"] == [] and b.freed == freed
        assert [(f["execution"], f["tokens"]) for f in doc["failed"]] == [("eager", 3200)]
    assert doc["failed"][0]["error"] == "RuntimeError: capture failed"
    # A refusal of the plans is the caller's error, not a failed count.
    with pytest.raises(si.StepBenchError):
        si._count(Bench(), {"step_times": [], "failed": []}, "eager", 64, log, timing([si.StepBenchError("plans: bad")]))
    assert si.is_oom("OutOfMemoryError: CUDA out of memory.") and not si.is_oom("RuntimeError: capture failed")


def test_a_counts_phases_add_up_and_name_the_allocators_retries_on_a_gpu():
    class Stats:
        retries = 3

        def memory_stats(self):
            return {"num_alloc_retries": self.retries}

    class Torch:
        cuda = Stats()

    class Bench:
        device, torch = "cuda", Torch()

    clock = Phases(Bench())
    for _ in range(2):
        with clock("build"):
            pass
    with clock("rounds"):
        Torch.cuda.retries = 7  # the allocator freed its cache and retried 4 times meanwhile
    line = str(clock)
    assert line.startswith("build ") and ", rounds " in line and line.endswith("allocator retries 4"), line
    # A phase that raises is still counted; on the CPU there is no allocator to ask.
    cpu = Phases(type("B", (), {"device": "cpu", "torch": None})())
    with pytest.raises(ZeroDivisionError), cpu("warm-up"):
        1 / 0
    assert str(cpu).startswith("warm-up ") and "allocator" not in str(cpu)


def test_the_worker_sets_expandable_segments_before_torch_loads_and_keeps_the_users_setting(tmp_path, monkeypatch):
    from adaptive_fp8.bench.step_bench import ALLOC_CONF

    seen = []

    def fake_run(args, progress=None, **_):
        import os

        seen.append(os.environ.get(ALLOC_CONF))
        return {"modules": [], "step_times": [], "failed": [], "complete": True}

    monkeypatch.setattr(si, "run", fake_run)
    monkeypatch.setattr(si, "emit", lambda d, _n, path, _p, quiet: None)
    argv = ["--model", "m.yaml", "--json", str(tmp_path / "in.json")]
    monkeypatch.setenv(ALLOC_CONF, "")  # recorded, so the test's own setting is undone after it
    monkeypatch.delenv(ALLOC_CONF)
    assert si.main(argv) == 0
    monkeypatch.setenv(ALLOC_CONF, "max_split_size_mb:512")
    assert si.main(argv) == 0
    assert seen == ["expandable_segments:True", "max_split_size_mb:512"]


def test_a_count_of_short_steps_gets_more_rounds_up_to_three_times(root):
    r = si.parser().parse_args(["--model", "m.json", "--json", "o.json"]).rounds
    assert r == 7
    # Rounds that last long enough: --rounds; short ones: as many as last COUNT_MS, at most 3 x.
    assert si.count_rounds(1000.0, r) == r and si.count_rounds(si.COUNT_MS / r, r) == r
    assert si.count_rounds(si.COUNT_MS / 10, r) == 10
    assert si.count_rounds(si.COUNT_MS / 10 - 1, r) == 11  # never short of COUNT_MS
    assert si.count_rounds(1.0, r) == si.MAX_ROUNDS_FACTOR * r == 21 and si.count_rounds(0.0, r) == r
    # The reader's bound is the same factor.
    rust = (root / "crates" / "report" / "src" / "step_inputs.rs").read_text()
    assert f"pub const MAX_ROUNDS_FACTOR: usize = {si.MAX_ROUNDS_FACTOR};" in rust


def test_the_worker_times_short_steps_in_more_rounds_and_long_ones_in_rounds():
    from types import SimpleNamespace

    from bench_stand_in import StandInBench

    groups = ["fc1"]
    args = SimpleNamespace(rounds=7, steps=5)
    # Rounds of 2 modes x 5 steps: 4 ms steps want 21 (capped); steps of COUNT_MS / 100 make
    # rounds of COUNT_MS / 10, so 10; 400 ms steps (2 a round) keep 7.
    for ms, want in ((4.0, 21), (si.COUNT_MS / 100, 10), (400.0, 7)):
        rows = si._steps(StandInBench(warm_ms=ms), None, SimpleNamespace(tokens=1024), ["dense"], groups, [("bf16", []), ("fp8", groups)],
                         "eager", 1024, args, lambda *a, **k: None, None, [])
        assert [len(r["wall_ms"]) for r in rows] == [want, want], (ms, rows)


def test_a_checks_run_settles_once_records_it_and_keeps_its_notes_without_torch(tmp_path, monkeypatch):
    """The worker's `run()` in check mode, its bench a stand-in (no torch): settled before its first
    timed count and recorded typed, every count's rounds as `count_rounds` sizes them, and its
    collector's notes in the document (where a full collection ran inside timed rounds)."""
    import gc

    from adaptive_fp8.bench import step_layers, step_probe
    from adaptive_fp8.bench.settle import DEFAULT_S
    from bench_stand_in import StandInBench

    cfg = tmp_path / "moe.json"
    cfg.write_text(json.dumps(TINY))
    plans = tmp_path / "plans.json"
    plans.write_text(json.dumps({"format": si.PLANS_FORMAT, "plans": [{"execution": "eager", "tokens": 256, "fp8_groups": ["qkv"]},
                                                                      {"execution": "eager", "tokens": 128, "fp8_groups": []}]}))
    benches = []

    def bench(args, te, device):
        # Steps of 10 ms, 40% slower for the first three rounds of two modes; every timed call
        # runs a full collection where the collector is on.
        b = StandInBench(ms=lambda n: 14.0 if n <= 6 else 10.0, work=lambda: gc.collect() if gc.isenabled() else None)
        benches.append(b)
        return b

    monkeypatch.setattr(step_layers, "Bench", bench)
    monkeypatch.setattr(step_probe, "Sleeper", lambda torch, device: None)
    args = si.parser().parse_args(["--model", str(cfg), "--check", str(plans), "--execution", "eager", "--layers", "1",
                                   "--json", str(tmp_path / "c.json")])
    args.calibrate, args.tp_comm, args.component = [], False, "llm"
    doc = si.run(args, log=lambda *a, **k: None, te=None, device="cpu")
    assert doc["complete"] and doc["settle_s"] == DEFAULT_S
    assert doc["settled"]["at"] == "eager at 128" and doc["settled"]["flat"] and doc["settled"]["first_ms"] == 28.0
    rows = {(s["tokens"], s["mode"]): s for s in doc["step_times"]}
    # 128: all-BF16 is the plan (one step), with all-FP8; 256: three steps. Rounds of 5 x 10 ms
    # steps: as many as last COUNT_MS, at most 21.
    assert len(rows[(128, "bf16")]["wall_ms"]) == si.count_rounds(5 * 20.0, 7) == 20
    assert len(rows[(256, "plan")]["wall_ms"]) == si.count_rounds(5 * 30.0, 7) == 14
    assert all(w == 10.0 for s in doc["step_times"] for w in s["wall_ms"])  # the slow rounds settled
    assert any("full collection" in n for n in doc["notes"]), doc["notes"]


def test_the_host_is_named_by_its_cpu_and_count():
    """Eager thresholds of host-bound layouts move with the host: the worker names it (Linux:
    /proc/cpuinfo's model name and the logical CPU count), one line, no padding."""
    from adaptive_fp8.bench.step_common import host_cpu

    h = host_cpu()
    assert h is not None and h.endswith(" CPUs") and "\n" not in h and "  " not in h, h
