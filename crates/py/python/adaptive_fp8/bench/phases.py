"""Where a count's time went in the step workers: seconds per phase, and on a GPU the caching
allocator's retries (each a synchronize and a return of every cached block, a sign that memory is
near full). Pure: reads torch's allocator statistics only through the bench it is given."""

from __future__ import annotations

import contextlib
import time


class Phases:
    """One count's clock: `with phases("build"): ...` adds to that phase; `str()` is the log line's
    part (the phases in the order first timed, then the allocator's retries since it started)."""

    def __init__(self, bench):
        self._now, self._seconds = time.perf_counter, {}
        self._torch = getattr(bench, "torch", None)
        self._cuda = getattr(bench, "device", None) == "cuda" and self._torch is not None
        self._retries = self._alloc_retries()

    def _alloc_retries(self) -> int:
        return int(self._torch.cuda.memory_stats().get("num_alloc_retries", 0)) if self._cuda else 0

    @contextlib.contextmanager
    def __call__(self, phase: str):
        t0 = self._now()
        try:
            yield
        finally:
            self._seconds[phase] = self._seconds.get(phase, 0.0) + self._now() - t0

    def __str__(self) -> str:
        s = ", ".join(f"{p} {t:.1f} s" for p, t in self._seconds.items())
        if self._cuda:
            s += f", allocator retries {self._alloc_retries() - self._retries}"
        return s
