"""scripts/upkeep/heldout.py: which committed sets it fits, and the errors it reads (pure; the fit
itself is fp8sel's, tested in Rust)."""

from __future__ import annotations

import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts" / "upkeep"))
import heldout  # noqa: E402


def test_every_committed_layout_with_a_check_is_a_set_and_other_recipes_are_not():
    found = heldout.sets(ROOT)
    names = [str(i) for i, _ in found]
    assert any("llama3_2_1b_tp2_ep1_etp2" in n for n in names), names
    assert not any("tensorwise" in n for n in names), names
    for inputs, checks in found:
        assert inputs.name.endswith(heldout.INPUTS) and checks, inputs
        assert all((ROOT / c).is_file() and c.name.startswith(inputs.name[: -len(heldout.INPUTS)]) for c in checks)


def test_only_the_rows_the_calibration_did_not_use_and_on_the_grain_are_held_out():
    row = lambda e, err, cal, t=4096: {"execution": e, "error": err, "calibrated": cal, "tokens": t}  # noqa: E731
    policy = {"provenance": {"step": {"model": [
        {"check": [row("eager", -0.04, False), row("eager", 0.5, True), row("graphed", 0.01, False)]},
        {"check": [row("eager", 0.02, False), row("graphed", -0.9, False, 8928)]},
    ]}}}
    assert heldout.errors(policy) == ({"eager": [0.04, 0.02], "graphed": [0.01]}, 1)

