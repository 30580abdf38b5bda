"""Adds the policy keys to a step benchmark's results written before they carried them.

``python scripts/upkeep/backfill_keys.py RESULTS.json --out COPY.json [--ep N] [--etp N]``

The step merge (``fp8sel merge-policy --step``, ``cargo xtask gen-policy``) reads each group's
policy key from the results' ``group_keys``; the first end-to-end step runs
(``docs/device-logs/trainer_loop/``) predate them. The keys are not measured: they are the
engine's plan of the run's model at its layout, what ``step_bench`` writes today
(``step_spec.group_keys`` over the groups built). This writes a copy with ``group_keys``,
``model_name``, the layout arguments given that the file did not record, and ``backfilled_from``
(the SHA-256 of the file read: the standing tool leaves that run out once a default is folded
from the copy). The timings are copied unchanged. Never imports torch.

A run that timed no oracle is refused by the merge; ``--fastest-mode`` marks the copy
(``verdict_without_oracle: fastest_mode``) so that each of its rows without one is read as its
fastest mode among those faster than BF16 beyond the noise (BF16 where none is): a search over
the modes the run timed (BF16, all-FP8, the policies of its day), fewer than the oracle's. A run
that already has its keys (today's ``step_bench`` with ``--oracle none``) gets the mark and
``backfilled_from`` only.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

MAX_BYTES = 16 * 1024 * 1024  # a sweep's JSON is tens of KiB


class BackfillError(Exception):
    """Bad input: the message names the file, the field and the fix."""


def read_results(path: Path, marking: bool = False) -> tuple[dict, str]:
    """The results and the SHA-256 of the bytes read (``marking``: for --fastest-mode, where a run
    with its keys is taken as it is)."""
    try:
        if path.stat().st_size > MAX_BYTES:
            raise BackfillError(f"{path}: larger than {MAX_BYTES} bytes: not a step benchmark's results")
        data = path.read_bytes()
    except OSError as e:
        raise BackfillError(f"{path}: cannot read ({e.strerror})") from None
    try:
        v = json.loads(data)
    except ValueError as e:
        raise BackfillError(f"{path}: not JSON ({e})") from None
    if not isinstance(v, dict) or not isinstance(v.get("results"), list) or not v.get("layer_types"):
        raise BackfillError(f"{path}: no `results` and `layer_types`: not a TE-block step benchmark's results "
                            "(python -m adaptive_fp8.bench.step_bench --json)")
    if v.get("group_keys") and not marking:
        raise BackfillError(f"{path}: already has `group_keys`: fold it as it is "
                            "(a run without the oracle: --fastest-mode marks it)")
    return v, hashlib.sha256(data).hexdigest()


def layout(v: dict, path: Path, given: dict) -> dict:
    """The layout arguments: the file's, and those given where it did not record them."""
    out = {}
    for k in ("ep", "etp"):
        have, want = v.get(k), given.get(k)
        if have and want and have != want:
            raise BackfillError(f"{path}: `{k}` is {have} in the file, {want} given: leave --{k} out")
        if have or want:
            out[k] = have or want
    return out


def mark_fastest_mode(v: dict, path: Path) -> dict:
    """``v`` marked for the merge to read its rows without an oracle by their fastest mode."""
    rows = [r for r in v["results"] if isinstance(r, dict) and "error" not in r]
    if all("oracle" in r.get("modes", {}) for r in rows):
        raise BackfillError(f"{path}: every row has an oracle: its verdicts are the oracle's; leave --fastest-mode out")
    if v.get("trainer", "te") != "te":
        raise BackfillError(f"{path}: a Megatron judge's run: its modes are other programs than a policy's; "
                            "only a TE-block run's fastest mode is a verdict")
    # The notes name the tool as it was called when the committed copies were made (they must
    # reproduce byte for byte): it lived in the wheel then.
    notes = list(v.get("notes", [])) + ["verdict_without_oracle added by adaptive_fp8.bench.backfill_keys "
                                        "--fastest-mode: the run timed no oracle"]
    return dict(v, verdict_without_oracle="fastest_mode", notes=notes)


def backfill(v: dict, digest: str, path: Path, root: Path, given: dict) -> dict:
    """The copy: ``v`` with the keys of the groups its step built at its layout."""
    import adaptive_fp8 as af8
    from adaptive_fp8.bench import step_bench as sb

    if not isinstance(v.get("model"), str):
        raise BackfillError(f"{path}: no `model`: the config the step ran")
    model = root / v["model"]
    if not model.is_file():
        raise BackfillError(f"{path}: model {v['model']} not found under {root}: give --root the repository it ran in")
    lay = layout(v, path, given)
    args = sb.header_args(root, dict(v, **lay, layers=len(v["layer_types"])))
    tokens = next((r["tokens"] for r in v["results"] if isinstance(r, dict) and r.get("tokens")), None)
    if tokens is None:
        raise BackfillError(f"{path}: no results row with `tokens`")
    spec, kw = sb.spec_at(af8, args, tokens)
    model_name, keys = sb.step_keys(af8, args, spec, list(v["layer_types"]), kw)
    out = dict(v, **lay, group_keys=keys, model_name=model_name, backfilled_from=digest)
    out["notes"] = list(v.get("notes", [])) + [
        f"group_keys, model_name{''.join(', ' + k for k in lay if k not in v)} added by "
        f"adaptive_fp8.bench.backfill_keys from the engine's plan ({path.name} predates them); timings unchanged"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python scripts/upkeep/backfill_keys.py",
        description="Write a copy of an older step benchmark's results with each group's policy key "
        "(from the engine's plan of its model and layout), so the step merge can fold it.")
    ap.add_argument("results", type=Path, help="the step benchmark's results JSON")
    ap.add_argument("--out", type=Path, required=True, help="the copy to write (never the input)")
    ap.add_argument("--root", type=Path, default=Path("."), help="the repository the run's `model` path is under (default .)")
    ap.add_argument("--ep", type=int, help="expert-parallel size the step ran at, where the file does not say")
    ap.add_argument("--etp", type=int, help="expert tensor-parallel size, where the file does not say")
    ap.add_argument("--fastest-mode", action="store_true",
                    help="a run without the oracle: read each such row's fastest mode (ahead of BF16 beyond "
                    "the noise, else BF16) as its verdict; the copy says so (verdict_without_oracle)")
    a = ap.parse_args(argv)
    try:
        if a.out.resolve() == a.results.resolve():
            raise BackfillError(f"{a.out}: is the input: give --out another path (the input is kept as it is)")
        v, digest = read_results(a.results, marking=a.fastest_mode)
        if v.get("group_keys"):  # today's step_bench wrote them: only the mark is added
            out = dict(v, backfilled_from=digest)
        else:
            out = backfill(v, digest, a.results, a.root, {"ep": a.ep, "etp": a.etp})
        if a.fastest_mode:
            out = mark_fastest_mode(out, a.results)
    except BackfillError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    tmp = a.out.with_name(a.out.name + ".tmp")
    tmp.write_text(json.dumps(out, indent=2) + "\n")
    tmp.replace(a.out)  # never a half-written file
    print(f"wrote {a.out}: {len(out['group_keys'])} group key(s) for {out.get('model_name') or v['model']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
