"""How long the step workers' timed rounds of whole steps last (pure: no torch): back-to-back
steps per round (`round_steps`, as timeit's autorange) and rounds per count (`count_rounds`: more
for short steps)."""

from __future__ import annotations

import math

#: A timed round of whole steps lasts at least this long (ms), as timeit's autorange: longer steps
#: get fewer back-to-back steps a round (at least MIN_ROUND_STEPS, at most `--steps`).
ROUND_MS = 200.0
MIN_ROUND_STEPS = 2


def round_steps(step_ms: float, most: int) -> int:
    """Back-to-back steps per timed round for steps of about `step_ms` (the fastest mode's
    warm-up step, so every mode's round lasts at least ROUND_MS): all of `most` for short steps,
    fewer for long ones, never fewer than MIN_ROUND_STEPS (nor more than `most`)."""
    need = math.ceil(ROUND_MS / step_ms) if step_ms > 0 else most
    return min(most, max(MIN_ROUND_STEPS, need))


#: A count's timed rounds of whole steps last at least about this long (ms) where `--rounds`
#: rounds would be shorter, up to MAX_ROUNDS_FACTOR x `--rounds` (the reader's bound,
#: `fp8_report::step_inputs::MAX_ROUNDS_FACTOR`): short, host-bound steps spread most from round
#: to round, and the median of 7 rounds spread by 5% (one standard deviation) is known to about
#: 2.4%, of 21 to 1.4%: a 3% bar on the model needs the steps measured closer than that.
COUNT_MS = 2000.0
MAX_ROUNDS_FACTOR = 3


def count_rounds(round_ms: float, rounds: int) -> int:
    """Interleaved rounds of a count whose round (every mode's steps once) takes about
    `round_ms`: `rounds`, more where they would last under COUNT_MS, at most
    MAX_ROUNDS_FACTOR x `rounds` (21 at the default 7)."""
    need = math.ceil(COUNT_MS / round_ms) if round_ms > 0 else rounds
    return min(MAX_ROUNDS_FACTOR * rounds, max(rounds, need))
