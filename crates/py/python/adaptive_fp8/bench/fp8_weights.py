"""Whether a training step quantizes each FP8 module's weight again after the optimizer moved it
(pure: the judge hands in the modules, the step and a fingerprint; no torch here).

TE caches a module's FP8 weight (``_fp8_workspaces["weight"]``, a grouped module's
``weight{i}``) while ``is_first_microbatch`` is given, and quantizes it again only on a first
micro-batch. Megatron re-arms it before each step; a CUDA graph replays whatever its capture
recorded, so a module captured with a cached weight and no skip flag to flip (an FP8 module
outside the global FP8 region) may run every later step on the FP8 weight of its capture: a
step that is faster than it should be, and training on stale weights. This finds such modules
by their cache's fingerprint across one more step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable


@dataclass
class Freshness:
    """What one more step did to the FP8 modules' weights."""

    cached: int = 0
    """FP8 modules with a cached FP8 weight."""
    uncached: int = 0
    """FP8 modules without one: they quantize their weight in every forward."""
    stale: list[str] = field(default_factory=list)
    """Cached modules whose weights moved while their cached FP8 weight did not."""
    unmoved: list[str] = field(default_factory=list)
    """Modules whose weights the step left unchanged (nothing to judge their cache by)."""

    def to_json(self) -> dict:
        return {"cached": self.cached, "uncached": self.uncached, "stale": self.stale, "unmoved": self.unmoved}

    def __str__(self) -> str:
        out = f"{self.cached} with a cached FP8 weight, {self.uncached} quantizing theirs every forward"
        if self.stale:
            out += f"; {len(self.stale)} kept a stale FP8 weight across the step ({', '.join(self.stale[:4])})"
        if self.unmoved:
            out += f"; {len(self.unmoved)} whose weights the step did not move"
        return out


def weight_caches(module: Any) -> dict[str, Any]:
    """A TE module's cached FP8 weights, by cache name."""
    ws = getattr(module, "_fp8_workspaces", None) or {}
    return {k: v for k, v in ws.items() if k.startswith("weight") and v is not None}


def weights(module: Any) -> dict[str, Any]:
    """A TE module's own weight parameters (``weight``, a grouped module's ``weight{i}``), by name."""
    return {n: p for n, p in module.named_parameters(recurse=False) if n.startswith("weight")}


def freshness(modules: Iterable[tuple[str, Any]], step: Callable[[], Any], fingerprint: Callable[[Any], Any]) -> Freshness:
    """Runs ``step`` once and reports, for the FP8 TE modules ``(name, module)``, which kept a
    stale FP8 weight: a cached FP8 weight (``weight{i}`` judged by its own parameter where the
    module has one of that name) unchanged while its weight moved. ``fingerprint(tensor)`` must
    change when the tensor's values do (the judge: sums of the dequantized values)."""
    modules = list(modules)
    before = {n: ({k: fingerprint(v) for k, v in weight_caches(m).items()},
                  {k: fingerprint(p) for k, p in weights(m).items()}) for n, m in modules}
    step()
    out = Freshness()
    for n, m in modules:
        caches, params = before[n]
        now = {k: fingerprint(p) for k, p in weights(m).items()}
        moved = {k for k in now if now[k] != params.get(k)}
        if not moved:
            out.unmoved.append(n)
        if not caches:
            out.uncached += 1
            continue
        out.cached += 1
        after = {k: fingerprint(v) for k, v in weight_caches(m).items()}
        for k, v in caches.items():
            # A grouped module's weight{i} cache by its own parameter; a cache of another name by any.
            weight_moved = k in moved if k in now else bool(moved)
            if weight_moved and after.get(k) == v:
                out.stale.append(n)
                break
    return out
