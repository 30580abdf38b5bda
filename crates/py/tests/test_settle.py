"""Untimed rounds before a run's first timed ones (`adaptive_fp8.bench.settle`): until the rounds
stop getting faster, bounded by the rounds' own time, once per run, noted. Pure (no torch): the
rounds are stand-ins whose times are given."""

from __future__ import annotations

import argparse

import pytest

from adaptive_fp8.bench import settle as st
from bench_stand_in import StandInBench


def rounds(ms: list[float], n: int = 5):
    """A round function whose k-th round takes ms[k] per step (the last one from then on), and
    the list of the rounds it ran."""
    ran: list[float] = []

    def one():
        m = ms[min(len(ran), len(ms) - 1)]
        ran.append(m)
        return m, m * n / 1e3

    return one, ran


def test_it_stops_once_two_rounds_are_no_faster_than_the_two_before():
    # A slow start for three rounds, then flat: the first window pair that is flat ends it.
    one, ran = rounds([30.0, 27.0, 24.0, 21.0, 20.0, 20.1, 19.9, 20.0])
    got = st.settle(one, max_s=60.0)
    assert got is not None and got.flat
    # Three rounds against the three before: after 9 rounds [19.9, 20, 20] is 2% faster than
    # [21, 20, 20.1]; after 10, [20, 20, 20] is no faster than [20, 20.1, 19.9]: flat.
    assert st.WINDOW == 3
    assert got.rounds == len(ran) == 10 and (got.first_ms, got.last_ms) == (30.0, 20.0)
    assert got.seconds == pytest.approx(sum(ran) * 5 / 1e3)
    # Flat from the start: the fewest rounds that can compare two windows.
    one, ran = rounds([20.0, 20.2, 19.9, 20.1])
    got = st.settle(one, max_s=60.0)
    assert got.flat and got.rounds == 2 * st.WINDOW


def test_rounds_that_keep_getting_faster_stop_at_the_bound_by_their_own_time():
    # 2% faster every round, never flat by the rule (three rounds about 6% faster than the three before).
    one, ran = rounds([100.0 * 0.98**k for k in range(200)], n=10)
    got = st.settle(one, max_s=5.0)
    assert not got.flat and got.seconds >= 5.0 and got.seconds - ran[-1] * 10 / 1e3 < 5.0
    # Rounds that shrink forever (their time never reaches the bound) end at MAX_ROUNDS.
    one, ran = rounds([100.0 * 0.5**k for k in range(st.MAX_ROUNDS + 10)])
    got = st.settle(one, max_s=5.0)
    assert not got.flat and got.rounds == len(ran) == st.MAX_ROUNDS and got.seconds < 5.0
    # Off: nothing runs.
    one, ran = rounds([10.0])
    assert st.settle(one, max_s=0) is None and ran == []


def test_a_run_settles_once_and_records_what_it_took():
    once = st.Once(60.0)
    assert once.record() is None  # nothing yet
    one, ran = rounds([12.0, 11.0, 10.0, 10.0, 10.0, 10.0, 10.0, 10.0])
    assert once(one, "graphed at 2048") is not None
    rec = once.record()
    assert rec == {"at": "graphed at 2048", "rounds": len(ran), "seconds": pytest.approx(sum(ran) * 5 / 1e3),
                   "first_ms": 12.0, "last_ms": 10.0, "flat": True}
    before = len(ran)
    assert once(one, "eager at 4096") is None and len(ran) == before and once.record() == rec
    # Off: no rounds and no record, and it stays off for the run.
    off = st.Once(0.0)
    one, ran = rounds([10.0])
    assert off(one, "eager at 1024") is None and ran == [] and off.record() is None and off.done


def test_round_of_sums_the_steps_ms_and_times_each_step_n_times():
    calls = []

    def time_ms(step, n):
        calls.append((step, n))
        return {"a": 4.0, "b": 6.0}[step]

    ms, seconds = st.round_of(time_ms, ["a", "b"], 5)()
    assert (ms, seconds) == (10.0, pytest.approx(0.05)) and calls == [("a", 5), ("b", 5)]


def test_the_flag_takes_seconds_and_refuses_what_is_not_a_bound():
    ap = argparse.ArgumentParser()
    st.add_flag(ap)
    assert ap.parse_args([]).settle == st.DEFAULT_S and ap.parse_args(["--settle", "0"]).settle == 0.0
    assert ap.parse_args(["--settle", "2.5"]).settle == 2.5
    for bad in ("-1", "nan", "inf", "soon"):
        with pytest.raises(SystemExit):
            ap.parse_args(["--settle", bad])
    assert "0: none" in ap.format_help()


def test_every_step_tool_has_the_flag():
    from adaptive_fp8.bench import step_bench as sb
    from adaptive_fp8.bench import step_inputs as si

    for p in (sb.parser(), si.parser()):
        assert p.parse_args(["--model", "m.json", "--json", "o.json", "--settle", "3"]).settle == 3.0


def test_the_worker_and_the_judge_settle_before_their_first_timed_rounds_only():
    from types import SimpleNamespace

    from adaptive_fp8.bench import step_bench as sb
    from adaptive_fp8.bench import step_inputs as si

    groups = ["fc1", "fc2"]
    args = SimpleNamespace(rounds=3, steps=5, repeats=3, oracle="none", oracle_repeats=None)
    quiet = lambda *a, **k: None  # noqa: E731
    for run in ("worker", "judge"):
        # Its steps run 40% slow for the first three rounds of two modes, then flat.
        bench, notes, first = StandInBench(ms=lambda n: 14.0 if n <= 6 else 10.0), [], st.Once(60.0)
        for tokens in (2048, 4096):  # two counts of one run
            if run == "worker":
                rows = si._steps(bench, None, SimpleNamespace(tokens=tokens), ["dense"], groups, [("bf16", []), ("fp8", groups)],
                                 "eager", tokens, args, quiet, None, notes, first)
                timed = {r["mode"]: r["wall_ms"] for r in rows}
            else:
                modes = {"bf16": dict.fromkeys(groups, False), "fp8": dict.fromkeys(groups, True)}
                row = sb._one(bench, args, SimpleNamespace(tokens=tokens), ["dense"], modes, {}, "eager", quiet, notes, first)
                timed = {m: [row["modes"][m]["ms_median"]] for m in row["modes"]}
            # The slow rounds went to settling, none to the timed ones.
            assert all(v == 10.0 for w in timed.values() for v in w), (run, timed)
        rec = first.record()
        assert rec["at"] == "eager at 2048" and rec["flat"] and (rec["first_ms"], rec["last_ms"]) == (28.0, 20.0), (run, rec)
        # Settling ran rounds of both modes, interleaved, before the first timed one; the second
        # count timed at once (its rounds of 2 modes: the judge's 3, the worker's 3 or more for
        # short steps, here rounds of 2 x 5 steps of 10 ms).
        timed_rounds = 3 if run == "judge" else si.count_rounds(2 * 5 * 10.0, 3)
        assert len(bench.calls) == rec["rounds"] * 2 + 2 * timed_rounds * 2, (run, bench.calls)
        assert not any(n.startswith("settled") for n in notes)  # typed, not a note
        assert bench.calls[:2] == [(), tuple(groups)]
