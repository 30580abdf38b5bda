"""Python's garbage collector around timed steps: what ran inside the timed regions, counted by
generation and said in a note; with --manual-gc, off there and as it was after. Pure (no torch):
the worker's and the TE-block judge's rounds run on a stand-in bench whose steps force a full
collection."""

from __future__ import annotations

import gc

import pytest

from adaptive_fp8.bench import collector as col
from adaptive_fp8.bench import step_bench as sb
from adaptive_fp8.bench import step_inputs as si
from bench_stand_in import StandInBench


def _Bench(manual: bool) -> StandInBench:
    """Each timed step runs a full collection where the collector is on, inside the bench's
    timed region, as step_layers.Bench's time_ms has it; long warm-up steps, so the worker's
    --rounds rounds and no more."""
    return StandInBench(warm_ms=2000.0, ms=lambda n: 1.0, work=lambda: gc.collect() if gc.isenabled() else None, manual_gc=manual)


def test_a_full_collection_inside_a_timed_region_is_counted_and_noted_and_one_outside_is_not():
    c = col.Collector()
    gc.collect()  # outside: not counted
    with c:
        gc.collect()
        gc.collect(0)
    got = c.take()
    assert got["collections"][2] == 1 and got["collections"][0] >= 1 and got["collect_ms"] > 0 and got["timed_ms"] >= got["collect_ms"]
    assert c.take()["collections"] == [0, 0, 0]  # taken: counting again
    with c:
        gc.collect()
    note = c.note("eager at 2048")
    assert note.startswith("eager at 2048: Python's garbage collector ran 1 full collection(s) inside timed rounds") and "--manual-gc" in note
    with c:
        gc.collect(0)
    assert c.note("eager at 4096") is None  # young collections only: no note
    assert c._callback not in gc.callbacks


def test_manual_keeps_the_collector_off_inside_and_as_it_was_after():
    c = col.Collector(manual=True)
    assert gc.isenabled()
    with c:
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with c:
            assert not gc.isenabled()
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()
    # An exception inside the region still restores it and removes the callback.
    with pytest.raises(RuntimeError):
        with c:
            raise RuntimeError("a step failed")
    assert gc.isenabled() and c._callback not in gc.callbacks
    assert col.Collector().manual is False


def test_every_step_tool_spells_the_flag_alike_and_records_it():
    for parse in (lambda a: si.parser().parse_args(["--model", "m.json", "--json", "o.json", *a]),
                  lambda a: sb.parser().parse_args(["--model", "m.json", *a])):
        assert parse([]).manual_gc is False and parse(["--manual-gc"]).manual_gc is True
    args = si.parser().parse_args(["--model", "m.json", "--json", "o.json", "--manual-gc"])
    assert si.header(args, "m", [], ["dense"], "cpu", "stand-in", "r")["manual_gc"] is True


@pytest.mark.parametrize("manual", [False, True])
def test_the_worker_and_the_judge_note_full_collections_in_their_rounds_and_none_with_manual_gc(manual):
    from types import SimpleNamespace

    groups = ["fc1", "fc2"]
    notes: list[str] = []
    args = SimpleNamespace(rounds=2, steps=5, repeats=2, oracle="none", oracle_repeats=None)
    rows = si._steps(_Bench(manual), None, SimpleNamespace(tokens=2048), ["dense"], groups, [("bf16", []), ("fp8", groups)],
                     "eager", 2048, args, lambda *a, **k: None, None, notes)
    assert [len(r["wall_ms"]) for r in rows] == [2, 2]
    modes = {"bf16": dict.fromkeys(groups, False), "fp8": dict.fromkeys(groups, True)}
    sb._one(_Bench(manual), args, SimpleNamespace(tokens=4096), ["dense"], modes, {}, "graphed", lambda *a, **k: None, notes)
    if manual:
        assert notes == []
    else:
        assert [n.split(":")[0] for n in notes] == ["eager at 2048", "graphed at 4096"]
        assert all("ran 4 full collection(s) inside timed rounds" in n for n in notes)
    assert gc.isenabled()


def test_a_counts_rounds_start_from_zero_and_say_what_ran_inside_them():
    c = col.Collector()
    with c:
        gc.collect()  # before the count's rounds: not the count's
    notes: list[str] = []
    with c.rounds("eager at 1024", notes):
        with c:
            gc.collect()
            gc.collect()
    assert len(notes) == 1 and "ran 2 full collection(s)" in notes[0]
    with c.rounds("eager at 2048", None):  # no list to say it in: nothing raised
        with c:
            gc.collect()
    with c.rounds("eager at 4096", notes):
        pass
    assert len(notes) == 1
