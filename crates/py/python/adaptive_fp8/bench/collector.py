"""Python's cyclic garbage collector around timed training steps (pure: no torch).

A host-bound step (short sequences, small models, MoE with its token-count sync) takes a few
milliseconds of Python; a full collection with torch loaded takes about 100. One that lands in
one mode's timed round and not in another's is noise the paired ratio cannot remove. The
:class:`Collector` counts the collections that run inside timed steps, by generation and with
their time, so a report can say where that happened; with ``manual`` it keeps the collector off
while steps are timed, which is what Megatron-LM's ``--manual-gc`` does between the collections
it triggers itself. The caller collects between token counts (``gc.collect()`` where it frees
the count's models), so memory stays bounded.

What this module is not: a memory manager. It turns nothing off outside a timed region and
never changes the collector's thresholds."""

from __future__ import annotations

import contextlib
import gc
import time

#: The flag every step tool spells the same way (Megatron-LM's own name for it).
FLAG = "--manual-gc"
HELP = (
    "keep Python's garbage collector off while steps are timed, as Megatron-LM's --manual-gc "
    "does (collected between token counts instead); without it the collector runs as in a "
    "default trainer, and the report notes full collections that ran inside timed rounds"
)


def add_flag(ap) -> None:
    """`--manual-gc` on an argparse parser (the judges and the step model's worker)."""
    ap.add_argument(FLAG, dest="manual_gc", action="store_true", help=HELP)


class Collector:
    """Collections inside timed regions (``with collector:``), by generation, and their time."""

    def __init__(self, manual: bool = False) -> None:
        self.manual = manual
        self._reset()
        self._start: float | None = None
        self._entered: float | None = None
        self._was_enabled = True

    def _reset(self) -> None:
        self.collections = [0, 0, 0]
        self.collect_ms = 0.0
        self.timed_ms = 0.0

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        elif phase == "stop" and self._start is not None:
            generation = min(int(info.get("generation", 2)), 2)
            self.collections[generation] += 1
            self.collect_ms += (time.perf_counter() - self._start) * 1e3
            self._start = None

    def __enter__(self) -> Collector:
        self._was_enabled = gc.isenabled()
        if self.manual:
            gc.disable()
        gc.callbacks.append(self._callback)
        self._entered = time.perf_counter()
        return self

    def __exit__(self, *exc) -> bool:
        self.timed_ms += (time.perf_counter() - self._entered) * 1e3
        gc.callbacks.remove(self._callback)
        self._start = None
        if self.manual and self._was_enabled:
            gc.enable()
        return False

    def take(self) -> dict:
        """What ran inside the timed regions since the last take: ``collections`` (generations
        0, 1, 2), ``collect_ms`` and ``timed_ms``; then starts counting again."""
        out = {"manual": self.manual, "collections": list(self.collections), "collect_ms": self.collect_ms, "timed_ms": self.timed_ms}
        self._reset()
        return out

    @contextlib.contextmanager
    def rounds(self, where: str, notes: list[str] | None):
        """Around a count's timed rounds: counts from zero, and appends to ``notes`` (where
        given) the :meth:`note` of what ran inside them."""
        self.take()
        yield self
        said = self.note(where)
        if said and notes is not None:
            notes.append(said)

    def note(self, where: str) -> str | None:
        """A report's note where full collections ran inside timed rounds (then reset), else
        None: what noise in a host-bound row may come from, and the flag that removes it."""
        got = self.take()
        full = got["collections"][2]
        if not full:
            return None
        return (
            f"{where}: Python's garbage collector ran {full} full collection(s) inside timed rounds "
            f"({got['collect_ms']:.1f} ms of collections in {got['timed_ms']:.0f} ms timed); {FLAG} keeps it off there"
        )
