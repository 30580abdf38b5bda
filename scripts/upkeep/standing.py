"""The end-to-end step runs read against the policies shipped now (pure: the engine, no torch).

``docs/device-logs/trainer_loop/`` holds the TE-block step runs of the end-to-end section, and
``docs/device-logs/default_judge/`` the retunes' TE-block judge runs, each row timing BF16,
all-FP8, the policies of the day and (mostly) the oracle, every mode a set of FP8 groups.
The TE-block step builds a mode from its groups alone, so a row measured today's default as well
wherever one of its modes ran exactly the groups today's file picks at that layout, count and
execution. For every row of a shipped model this names those groups, the mode that timed them
(or none: not measured), its figures, and whether they miss the target (slower than BF16 beyond
the band, or over 1.01 x the fastest of BF16, all-FP8 and the oracle): a miss measured then that
today's file still makes stands named. A run a default was folded from (a committed step result,
or the file a copied one was made from) is left out (a test checks it), so each row is a
separate measurement, though some of its counts are
ones a sweep also timed. ``docs/device-logs/trainer_loop/standing.json`` is this
module's output; a test checks it is current, and ``cargo xtask results`` renders it
(``{{standing: ...}}``).

    python scripts/upkeep/standing.py [--root .] [--json OUT]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

SCENARIOS = "docs/device-logs/trainer_loop/scenarios.json"
# The retunes' TE-block judge runs (step_bench at counts the defaults were not made at).
JUDGE_RUNS = "docs/device-logs/default_judge"
STANDING = "docs/device-logs/trainer_loop/standing.json"
# The recipe a run's TE class names, and the folder of its shipped policies.
RECIPE_DIRS = {"Float8BlockScaling": "", "Float8CurrentScaling": "tensorwise", "DelayedScaling": "delayed"}
# A mode timed for today's groups: a policy's first, then the reference modes.
PREFERRED = ("policy:", "oracle", "fp8", "bf16")
TARGET_VS_MIN = 1.01


def shipped_policy(root: Path, header: dict) -> str | None:
    """The shipped default for the run's model, component and recipe, relative to ``root``; None
    for a model no file ships for (the ``examples/`` ones)."""
    recipe = str(header.get("recipe", "Float8BlockScaling")).split("(")[0]
    folder = RECIPE_DIRS.get(recipe)
    if folder is None:
        return None
    stem = Path(header["model"]).stem
    base = Path("policies") / folder
    for name in (f"{stem}.json", f"{stem}.{header.get('component', 'llm')}.json"):
        if (root / base / name).is_file():
            return str(base / name)
    return None


def todays_groups(af8, root: Path, header: dict, policy: str, tokens: int, execution: str) -> set[str]:
    """The FP8 groups ``policy`` picks in the run's step (its layout and layer kinds), the way
    ``step_bench`` builds a policy mode."""
    from adaptive_fp8.bench import step_bench as sb

    args = sb.header_args(root, header, "--policy", str(root / policy))
    spec, kw = sb.spec_at(af8, args, tokens)
    _, modes, _ = sb.modes_for(af8, args, spec, list(header["layer_types"]), dict(kw, execution=execution))
    return {g for g, on in modes[sb.policy_mode_name(args.policy[0], args.policy)].items() if on}


def timed_as(row: dict, groups: set[str]) -> str | None:
    """The row's mode that ran exactly ``groups`` FP8, preferring a policy's."""
    same = [m for m, v in row.get("modes", {}).items() if set(v.get("fp8_groups", [])) == groups]
    for prefix in PREFERRED:
        for m in same:
            if m.startswith(prefix):
                return m
    return same[0] if same else None


def figures(row: dict, mode: str) -> dict:
    """A mode's ratio to BF16 (median, band, verdict), to the fastest reference, and the verdict."""
    modes = row["modes"]
    m = modes[mode]
    refs = [modes[r]["ms_median"] for r in ("bf16", "fp8", "oracle") if r in modes and modes[r].get("ms_median")]
    vs_min = m["ms_median"] / min(refs) if refs and m.get("ms_median") else None
    verdict = m.get("verdict_vs_bf16", "-")
    return {
        "vs_bf16_median": m.get("vs_bf16_median"),
        "vs_bf16_p10": m.get("vs_bf16_p10"),
        "vs_bf16_p90": m.get("vs_bf16_p90"),
        "verdict": verdict,
        "vs_min": vs_min,
        "miss": verdict == "slower" or (vs_min is not None and vs_min > TARGET_VS_MIN),
    }


def folded_digests(root: Path) -> set[str]:
    """The contents of every committed step result (``reports/**/*_step.json``) and of the files
    one was copied from (its ``copied_from``, a repository path): the runs the defaults were
    folded from, which this reading leaves out."""
    out = set()
    for p in (root / "reports").rglob("*_step.json"):
        data = p.read_bytes()
        out.add(hashlib.sha256(data).hexdigest())
        source = json.loads(data).get("copied_from")
        if isinstance(source, str) and (root / source).is_file():
            out.add(hashlib.sha256((root / source).read_bytes()).hexdigest())
    return out


def layout_of(header: dict) -> str:
    """A TE-block run's layout in words, from its header."""
    parts = [header.get("model_name") or Path(header["model"]).stem, f"TP {header.get('tp', 1)}"]
    if header.get("ep"):
        parts.append(f"EP {header['ep']}")
    parts.append(f"{header['layers']} layers ({', '.join(header['layer_types'])})")
    if header.get("fp8_recipe", "blockwise") != "blockwise":
        parts.append(f"`--recipe {header['fp8_recipe']}`")
    return ", ".join(parts)


def judge_runs(root: Path, folded: set[str] | None = None) -> list[tuple[str, dict]]:
    """The retunes' TE-block judge runs of shipped models, as ``(path under docs/device-logs,
    header)``: step_bench files of the TE blocks (``trainer`` ``te``: the Megatron judge's modes
    are two integrations, separate programs, so today's groups cannot be read off one of them), not
    a sweep's output (``reports/``) nor a committed step result's copy."""
    folded = folded_digests(root) if folded is None else folded
    base = root / JUDGE_RUNS
    out = []
    for p in sorted(base.rglob("*.json")):
        rel = p.relative_to(base.parent)
        if "reports" in rel.parts:
            continue
        data = p.read_bytes()  # once: its digest and its header
        if hashlib.sha256(data).hexdigest() in folded:
            continue
        header = json.loads(data)
        if not isinstance(header, dict) or header.get("trainer") != "te" or "layer_types" not in header or header.get("tp_comm"):
            continue
        if shipped_policy(root, header) is not None:
            out.append((rel.as_posix(), header))
    return out


def fp8_weights(header: dict) -> bool:
    """Whether the run's FP8 modules held FP8 weights (its ``fp8_param``): a TE-block run before
    the field held them (until 2026-12-06); today's worker, and the files made from it, hold BF16
    ones (docs/POLICY.md), so such a row timed FP8 groups at a cost today's step does not pay."""
    return bool(header.get("fp8_param", True))


def read_run(af8, root: Path, header: dict, label: dict) -> list[dict]:
    """One run's rows against today's file of its model: ``label`` (scenario, layout, file,
    run) and, per row, today's groups, the mode that timed them and its figures."""
    policy = shipped_policy(root, header)
    if policy is None:
        return []
    rows = []
    for row in header["results"]:
        if "modes" not in row:
            continue
        tokens, execution = row["tokens"], row.get("execution", header.get("execution", "eager"))
        groups = todays_groups(af8, root, header, policy, tokens, execution)
        mode = timed_as(row, groups)
        out = dict(label, execution=execution, tokens=tokens, policy=policy, fp8_groups=sorted(groups), timed_as=mode,
                   fp8_weights=fp8_weights(header))
        if mode is not None:
            out.update(figures(row, mode))
        rows.append(out)
    return rows


def with_step_args(header: dict, scenario: dict) -> dict:
    """The run's header with the scenario's ``step_args`` where the file does not record them:
    the step benchmarks of the first end-to-end runs wrote no ``ep``, and a policy keys routed
    experts by their local count, so today's groups must be read at the EP that ran."""
    return {**scenario.get("step_args", {}), **{k: v for k, v in header.items() if v is not None}}


def standing(root: Path) -> dict:
    """Every row of every shipped model's end-to-end run and of the retunes' TE-block judge
    runs, read against today's policies."""
    import adaptive_fp8 as af8

    runs = root / Path(SCENARIOS).parent
    folded = folded_digests(root)
    rows = []
    for sc in json.loads((root / SCENARIOS).read_text())["scenarios"]:
        for rel in sc["files"]:
            if not rel.endswith(".json"):
                continue
            data = (runs / rel).read_bytes()  # once: its digest and its header
            if hashlib.sha256(data).hexdigest() in folded:
                continue
            # The layout alone: a recipe scenario's note on the file of its day stays there.
            label = {"scenario": sc["name"], "layout": sc["what"].split(" with `policies/")[0], "file": rel, "run": rel.split("/")[0]}
            rows += read_run(af8, root, with_step_args(json.loads(data), sc), label)
    for rel, header in judge_runs(root, folded):
        label = {"scenario": "Default judge", "layout": layout_of(header), "file": rel, "run": rel.split("/")[1]}
        rows += read_run(af8, root, header, label)
    return {"source": SCENARIOS, "judge_runs": JUDGE_RUNS, "target_vs_min": TARGET_VS_MIN, "rows": rows}


def render(data: dict) -> str:
    """The JSON as committed: sorted keys, two-space indent, a final newline."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python scripts/upkeep/standing.py",
        description="Read the end-to-end step runs against the policies shipped now: for each row, today's FP8 "
        "groups, the mode that timed them and whether it misses (writes " + STANDING + " with --json).",
    )
    ap.add_argument("--root", type=Path, default=Path("."), help="the repository (default .)")
    ap.add_argument("--json", type=Path, help="write the result here (default: stdout)")
    a = ap.parse_args(argv)
    if not (a.root / SCENARIOS).is_file():
        print(f"error: {a.root / SCENARIOS}: not found; give --root the repository", file=sys.stderr)
        return 2
    text = render(standing(a.root))
    if a.json is None:
        sys.stdout.write(text)
        return 0
    tmp = a.json.with_name(a.json.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(a.json)  # never a half-written file
    print(f"wrote {a.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
