"""What `scripts/device/regen_shipped.sh` brought back, put where the repository keeps it: the
one step between a device call's `regen_shipped.tar.gz` (or `regen_judge.tar.gz`) and `cargo
xtask gen-policy --check`.

For each row the call ran (its line in the tarball's `regen/steps.txt`, the last one per row):
- finished (rc 0): its reports (`<row>/reports/*_{inputs,check,recheck,recheck<N>}_step.json`) replace
  every committed report of the same layouts in the row's recipe's folder
  (`reports/h200/step_model/`, `reports/h200/<recipe>/step_model/`; a re-timing round the new run
  did not make is removed with the rest, so a check is never read beside another run's re-timing),
  and its log, policies and summary replace `docs/device-logs/regen_shipped/<row>/`;
- cut or failed (any other rc): its log goes to `docs/device-logs/regen_shipped/cut/`, and no
  report moves.
The rows' lines are appended to `docs/device-logs/regen_shipped/steps.txt` (those it ends with
already are not: a later call on the same machine brings the earlier calls' rows again). A judge tarball's
`regen/judge/` files go to `docs/device-logs/regen_shipped/judge/`. Every file is written whole
(a temporary file renamed into place); a member outside `regen/` is refused before anything is
written. The folders are the H200's: a tarball measured on another GPU (its `regen/gpu.txt`,
or a report's `device`) is refused whole. Then run `FP8_UPDATE_POLICIES=1 cargo xtask gen-policy
--check`.

    python3 scripts/upkeep/land_regen.py OUT/regen_shipped.tar.gz [--root .] [--dry-run]
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile

LOGS = "docs/device-logs/regen_shipped"
#: A layout's step report: its inputs, or a round of its check (`check`, `recheck`, `recheck<N>`
#: from 2: fp8_report::step_inputs::check_round_word).
REPORT = re.compile(r"^(?P<layout>.+)_(?:inputs|check|recheck|recheck[2-9]|recheck[1-9][0-9]+)_step\.json$")
#: A row's own files kept as its log (not its reports, not its plots).
LOG_FILES = ("gen.log", "*.json", "*.md")


def unlanded(lines: list[str], ledger: list[str]) -> list[str]:
    """The lines of a call's `steps.txt` the ledger lacks: a later call on the same machine
    brings the earlier calls' rows again, so the longest start of `lines` that the ledger ends
    with is landed already. A line equal to an older one elsewhere (the same row, the same
    seconds, another day) is a new run and lands."""
    for n in range(min(len(lines), len(ledger)), 0, -1):
        if ledger[-n:] == lines[:n]:
            return lines[n:]
    return lines


class LandError(Exception):
    """Bad input: the message names the file and the fix."""


def reports_dir(recipe: str) -> str:
    """Where `recipe`'s shipped step reports are (`fp8_pipeline::shipped::step_model_dir`)."""
    return "reports/h200/step_model" if recipe == "blockwise" else f"reports/h200/{recipe}/step_model"


def rows_of(steps_txt: str) -> dict[str, int]:
    """Each row's rc, the last line of it (`<row> rc=<rc> in <s> s`)."""
    out: dict[str, int] = {}
    for line in steps_txt.splitlines():
        got = re.match(r"(\S+) rc=(\d+) in \d+ s", line)
        if got:
            out[got.group(1)] = int(got.group(2))
    return out


def _extract(tarball: str, into: str) -> str:
    """The tarball's `regen/` folder under `into`; refuses any member outside it."""
    try:
        with tarfile.open(tarball) as t:
            members = t.getmembers()
            for m in members:
                parts = m.name.split("/")
                if parts[0] != "regen" or ".." in parts or os.path.isabs(m.name) or not (m.isfile() or m.isdir()):
                    raise LandError(f"{tarball}: member {m.name!r} is not a file under regen/; fix: pass the tarball regen_shipped.sh wrote")
            t.extractall(into, members=members, filter="data")
    except (tarfile.TarError, OSError) as e:
        raise LandError(f"{tarball}: not a readable tarball ({e}); fix: fetch the call's files again") from e
    return os.path.join(into, "regen")


#: One step of landing: ("put", src, dst) copies a file whole (a temporary file renamed into
#: place), ("remove", path, "") removes one.
Action = tuple[str, str, str]


def _do(actions: list[Action]) -> None:
    for kind, a, b in actions:
        if kind == "remove":
            # Two rows of one tarball may hold the same layout: the later one's set wins, and a
            # file the earlier one already removed is gone.
            with contextlib.suppress(FileNotFoundError):
                os.remove(a)
            continue
        os.makedirs(os.path.dirname(b), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(b), prefix=".land_")
        os.close(fd)
        try:
            shutil.copyfile(a, tmp)
            os.replace(tmp, b)
        except BaseException:
            os.remove(tmp)
            raise


def row_actions(regen: str, row: str, rc: int, root: str) -> list[Action]:
    """What landing one row does (nothing yet written)."""
    here = os.path.join(regen, row)
    if rc != 0:
        log = os.path.join(here, "gen.log")
        return [("put", log, os.path.join(root, LOGS, "cut", f"{row.replace('/', '_')}.gen.log"))] if os.path.exists(log) else []
    recipe = row.rpartition("/")[0] or "blockwise"
    new = sorted(p for p in glob.glob(os.path.join(here, "reports", "*_step.json")) if REPORT.match(os.path.basename(p)))
    if not new:
        raise LandError(f"{here}/reports: row {row} finished but brought back no step report; fix: fetch the call's files again")
    for p in new:
        try:
            with open(p) as f:
                device = json.load(f).get("device")
        except (OSError, ValueError, AttributeError) as e:
            raise LandError(f"{p}: not a step report ({e}); fix: fetch the call's files again") from e
        if not isinstance(device, str) or "H200" not in device:
            raise LandError(f"{p}: field `device`: measured on {device!r}, not an H200, whose reports make the shipped "
                            "policies; fix: keep it elsewhere (docs/device-logs/) or run the row on nvidia-h200")
    dest = os.path.join(root, reports_dir(recipe))
    layouts = {REPORT.match(os.path.basename(p))["layout"] for p in new}
    old = [(m["layout"], p) for p in sorted(glob.glob(os.path.join(dest, "*_step.json"))) if (m := REPORT.match(os.path.basename(p)))]
    out: list[Action] = [("remove", p, "") for layout, p in old if layout in layouts]
    out += [("put", p, os.path.join(dest, os.path.basename(p))) for p in new]
    logs = os.path.join(root, LOGS, row)
    out += [("remove", old, "") for old in sorted(glob.glob(os.path.join(logs, "*"))) if os.path.isfile(old)]
    out += [("put", p, os.path.join(logs, os.path.basename(p))) for pattern in LOG_FILES for p in sorted(glob.glob(os.path.join(here, pattern)))]
    return out


def land(tarball: str, root: str, dry: bool = False) -> list[str]:
    """Every row (and judge file) of `tarball` put in place under `root`, all or nothing: every
    row is read before the first file is written. What was done (or would be), a line each."""
    with tempfile.TemporaryDirectory(prefix="land_regen_") as tmp:
        regen = _extract(tarball, tmp)
        gpu = os.path.join(regen, "gpu.txt")
        if os.path.exists(gpu):
            with open(gpu) as f:
                name = f.readline().split(",")[0].strip()
            if "H200" not in name:
                raise LandError(f"{tarball}: regen/gpu.txt: measured on {name!r}, not an H200, whose results the shipped "
                                "folders hold; fix: keep it elsewhere (docs/device-logs/) or run the queue on nvidia-h200")
        judge = os.path.join(regen, "judge")
        actions: list[Action] = [("put", p, os.path.join(root, LOGS, "judge", os.path.relpath(p, judge)))
                                 for p in sorted(glob.glob(os.path.join(judge, "**", "*"), recursive=True)) if os.path.isfile(p)]
        steps = os.path.join(regen, "steps.txt")
        text = ""
        if os.path.exists(steps):
            with open(steps) as f:
                text = f.read()
            for row, rc in rows_of(text).items():
                actions += row_actions(regen, row, rc, root)
        elif not actions:
            raise LandError(f"{tarball}: no regen/steps.txt and no regen/judge/; fix: pass the tarball regen_shipped.sh wrote")
        said = [f"write {b}" if kind == "put" else f"remove {a}" for kind, a, b in actions]
        ledger = os.path.join(root, LOGS, "steps.txt")
        have = open(ledger).read().splitlines() if os.path.exists(ledger) else []
        new = unlanded([line for line in text.splitlines() if line.strip()], have)
        if new:
            said.append(f"append {len(new)} line(s) to {ledger}")
        if not dry:
            _do(actions)
            if new:
                with open(ledger, "a") as f:
                    f.write("\n".join(new) + "\n")
        return said


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="land_regen.py", description=__doc__.split("\n\n")[0],
                                 epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tarball", help="regen_shipped.tar.gz or regen_judge.tar.gz, as a device call brought it back")
    ap.add_argument("--root", default=".", help="the repository (default: here)")
    ap.add_argument("--dry-run", action="store_true", help="say what would be written and removed, and write nothing")
    a = ap.parse_args(argv)
    if not os.path.isdir(os.path.join(a.root, LOGS)):
        print(f"land_regen: {a.root}: no {LOGS}; fix: run from the repository root or pass --root", file=sys.stderr)
        return 2
    try:
        said = land(a.tarball, a.root, a.dry_run)
    except LandError as e:
        print(f"land_regen: {e}", file=sys.stderr)
        return 2
    print("\n".join(said))
    return 0


if __name__ == "__main__":
    sys.exit(main())
