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


def test_the_order_table_places_each_held_out_count_where_its_check_timed_it(tmp_path):
    import json

    step = lambda e, t: {"execution": e, "tokens": t, "mode": "bf16"}  # noqa: E731
    check, recheck = tmp_path / "c.json", tmp_path / "r.json"
    # Timed in this order: 1280, 2048 (calibrated), 1536, 8192 (timed again), 4224, then 3 more.
    order = [1280, 2048, 1536, 8192, 4224, 4480, 5120, 6272]
    check.write_text(json.dumps({"step_times": [step("eager", t) for t in order]}))
    recheck.write_text(json.dumps({"step_times": [step("eager", 8192)]}))
    row = lambda t, err, cal=False, g=1.0, h=2.0: {"execution": "eager", "tokens": t, "error": err, "calibrated": cal,  # noqa: E731
                                                   "predicted_gpu_ms": g, "predicted_host_ms": h}
    policy = {"provenance": {"step": {"model": [{"check": [
        row(1280, -0.10), row(2048, -0.5, cal=True), row(1536, -0.06, g=4.0), row(8192, -0.9), row(4224, 0.01, g=4.0),
        row(4480, 0.0), row(5120, 0.02), row(6272, 0.05), row(4300, 0.3),  # 4300: off the grain and not timed
    ]}]}}}
    into: dict = {}
    heldout.by_order(policy, [check, recheck], True, into)
    # 1280 and 1536 are the 1st and 3rd (2048 calibrated, 8192 re-timed: left out); 4224 is
    # 5th; 4480 the 6th; 5120 and 6272 the 7th and 8th.
    assert into == {(True, "1st-3rd"): [(-0.10, True), (-0.06, False)], (True, "4th-6th"): [(0.01, False), (0.0, True)],
                    (True, "7th on"): [(0.02, True), (0.05, True)]}
    table = heldout.order_table(into)
    assert "| MoE | 1st-3rd | 2 | -8.0% | 0 of 2 | 1, -10.0% |" in table, table
    assert "dense" not in table, table
