"""Untimed rounds before a run's first timed ones, until the rounds stop getting faster (pure: no
torch; the caller passes one round of its built steps).

On the H200 a check's first counts ran slower than the model where its later counts agreed, and
an MoE's rows there got faster round by round far more often than slower, through its sixth count
(docs/RESULTS.md, "The step model": the check's first counts; dense rows did not). The served
worker idles while fp8sel fits the model; the first whole steps after that pay for it, and a
median of 7 rounds does not hide a slow start that lasts seconds. The inputs' first whole steps
show it too. Settling first, once per run (a measurement, a check, a judge), costs a few rounds
where the steps are warm already and bounds the cost where they are not.

What this module is not: a warm-up of each mode (the tools' `--warmup` steps do that, per mode
and count), and no part of a timed round: nothing it runs is recorded but what it took (a
document's `settled`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

#: The flag every step tool spells the same way.
FLAG = "--settle"
#: At most this many seconds of untimed rounds (by the rounds' own step time, so every rank of a
#: TP group stops after the same round).
DEFAULT_S = 12.0
#: Rounds compared: the mean of the last WINDOW rounds against the WINDOW before them.
WINDOW = 3
#: Settled once the last rounds are no more than this much faster than the ones before.
FLAT = 0.01
#: And never more rounds than this, whatever their time (rounds that shrink forever end too).
MAX_ROUNDS = 200


def _seconds(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        v = -1.0
    if not v >= 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"{s!r}: expected seconds >= 0, e.g. 8 (0: no settling)")
    return v


def add_flag(ap) -> None:
    """`--settle SECONDS` on an argparse parser (the judge and the step model's worker)."""
    ap.add_argument(FLAG, type=_seconds, default=DEFAULT_S, metavar="SECONDS",
                    help=f"before a run's first timed rounds, untimed rounds of its steps until three rounds are no more than "
                         f"{FLAT * 100:g}%% faster than the three before, at most this long (default {DEFAULT_S:g}; 0: none). A step "
                         "after an idle GPU and host runs slow for seconds; the document records what settling took")


@dataclass
class Settled:
    """What settling took: rounds, seconds of steps, the first and last round's ms, and whether it
    stopped because the rounds were flat (else at the time bound)."""

    rounds: int
    seconds: float
    first_ms: float
    last_ms: float
    flat: bool


def settle(one_round: Callable[[], tuple[float, float]], max_s: float) -> Settled | None:
    """Runs `one_round()` (a round of every built step; returns its ms per step summed over the
    steps, and the seconds it took) until the mean of the last WINDOW rounds is no more than FLAT
    below the mean of the WINDOW before, or `max_s` seconds of rounds have run, or MAX_ROUNDS
    rounds. None where `max_s` is 0 (settling off)."""
    if max_s <= 0:
        return None
    ms: list[float] = []
    spent = 0.0
    while True:
        m, s = one_round()
        ms.append(m)
        spent += s
        flat = len(ms) >= 2 * WINDOW and _mean(ms[-WINDOW:]) >= (1 - FLAT) * _mean(ms[-2 * WINDOW:-WINDOW])
        if flat or spent >= max_s or len(ms) >= MAX_ROUNDS:
            return Settled(len(ms), spent, ms[0], ms[-1], flat)


def round_of(time_ms: Callable, steps: list, n: int) -> Callable[[], tuple[float, float]]:
    """One untimed round of `steps`, `n` back-to-back each, by `time_ms(step, n)` (ms per step;
    with a TP group the slowest rank's, so every rank stops after the same round): for `settle`."""

    def one() -> tuple[float, float]:
        ms = [time_ms(step, n) for step in steps]
        return sum(ms), sum(ms) * n / 1e3

    return one


def _mean(v: list[float]) -> float:
    return sum(v) / len(v)


class Once:
    """Settles at the first call only (a run's first timed count); `record()` is what it took, a
    document's `settled`."""

    def __init__(self, max_s: float):
        self.max_s, self.done = max_s, False
        self.got: Settled | None = None
        self.at = ""

    def __call__(self, one_round: Callable[[], tuple[float, float]], where: str) -> Settled | None:
        if self.done:
            return None
        self.done = True
        self.got, self.at = settle(one_round, self.max_s), where
        return self.got

    def record(self) -> dict | None:
        """`fp8_report::step_inputs::Settled` (the step-inputs document's and the judges' results'):
        where it ran and what it took; None before it or without it."""
        g = self.got
        if g is None:
            return None
        return {"at": self.at, "rounds": g.rounds, "seconds": g.seconds, "first_ms": g.first_ms, "last_ms": g.last_ms, "flat": g.flat}
