"""A stand-in for `adaptive_fp8.bench.step_layers.Bench` without torch: what the step workers'
`_steps` and the TE-block judge's `_one` call, with the step times a test gives. Shared by the
tests of timed rounds (the collector, settling, rounds per count)."""

from __future__ import annotations

from typing import Callable, Optional

from adaptive_fp8.bench.collector import Collector


class StandInBench:
    """`check` returns `warm_ms` (the warm-up step that sizes a round); `time_ms` runs `work`
    inside the collector's timed region and returns `ms(n)`, `n` the calls so far (this one
    included); `calls` lists each timed step's model, the FP8 groups it was built with."""

    def __init__(self, warm_ms: float = 10.0, ms: Optional[Callable[[int], float]] = None,
                 work: Optional[Callable[[], None]] = None, manual_gc: bool = False) -> None:
        self.collector, self.calls = Collector(manual_gc), []
        self.warm_ms, self._ms, self._work = warm_ms, ms or (lambda n: warm_ms), work
        self.torch, self.device = None, "cpu"
        self.rank, self.world, self.group = 0, 1, None

    def build(self, spec, kinds, fp8):
        return tuple(sorted(fp8)) if isinstance(fp8, list) else tuple(sorted(g for g, on in fp8.items() if on))

    def step_fn(self, spec, model, execution):
        step = lambda: None  # noqa: E731
        step.losses, step.model = [], model
        return step

    def check(self, step, name):
        return self.warm_ms

    def free(self, collect=False):
        pass

    def close(self):
        pass

    def time_ms(self, step, steps=None):
        self.calls.append(step.model)
        with self.collector:
            if self._work is not None:
                self._work()
        return self._ms(len(self.calls))
