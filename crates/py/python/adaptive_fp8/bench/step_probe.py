"""The step model's measurements, torch half (imported only when a measurement runs): the host
time and the GPU time of one module group, and of one whole training step, measured apart.

Both use one trick: before the work is issued, the GPU is held by a sleep kernel long enough for
the host to issue everything first. The host's issue time is then its own cost (no waiting on
the GPU), and the GPU's time from the end of the sleep to the end of the work is its own (no gaps
waiting on the host). A step with host syncs (the MoE token-count sync) is split there: the host
time excludes what it waited in the sync, and after each sync the GPU is held again, so the GPU
time is the sum of the segments' times. A measurement where the GPU finished a sleep before the
host finished issuing is redone with a longer sleep; `ahead` records whether it held.

On the CPU (the TE stand-in) both are the host's wall time: the CPU tests check shapes and
bookkeeping, not speed.
"""

from __future__ import annotations

import time

from adaptive_fp8.bench import step_layers
from adaptive_fp8.bench.step_spec import Spec

_GROUPED = ("experts.fc1", "experts.fc2")
_NORMED = ("qkv", "fc1", "q_up_proj", "kv_up_proj")


class Sleeper:
    """Holds the GPU for a given time (``torch.cuda._sleep`` in clock cycles, calibrated once)."""

    def __init__(self, torch, device: str) -> None:
        self.torch, self.cuda = torch, device == "cuda"
        self.cycles_per_ms = 0.0
        if self.cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            cycles = 20_000_000
            a.record()
            torch.cuda._sleep(cycles)
            b.record()
            torch.cuda.synchronize()
            self.cycles_per_ms = cycles / max(a.elapsed_time(b), 1e-3)

    def hold(self, ms: float) -> None:
        if self.cuda:
            self.torch.cuda._sleep(int(ms * self.cycles_per_ms))

    def event(self):
        if not self.cuda:
            return _HostEvent()
        e = self.torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()


class _HostEvent:
    """A CPU stand-in for a CUDA event: the host clock."""

    def __init__(self) -> None:
        self.t = time.perf_counter()

    def query(self) -> bool:
        return True

    def elapsed_time(self, other: "_HostEvent") -> float:
        return (other.t - self.t) * 1e3


class StepProbe:
    """One probed run of ``work``: host ms (issue time less the time waited in syncs), GPU ms
    (the segments' times after each hold) and whether the host stayed ahead in every segment.
    The MoE block calls :meth:`before_sync` and :meth:`after_sync` around its sync while armed."""

    def __init__(self, sleeper: Sleeper, hold_ms: float) -> None:
        self.sleeper, self.hold_ms = sleeper, hold_ms

    def run(self, work) -> tuple[float, float, bool]:
        s = self.sleeper
        s.sync()
        self.spans, self.waited, self.ahead = [], 0.0, True
        s.hold(self.hold_ms)
        self.spans.append([s.event(), None])
        step_layers.SYNC_PROBE[0] = self
        t0 = time.perf_counter()
        try:
            work()
            t1 = time.perf_counter()
            self._close()
        finally:
            step_layers.SYNC_PROBE[0] = None
        s.sync()
        gpu = sum(a.elapsed_time(b) for a, b in self.spans)
        return (t1 - t0) * 1e3 - self.waited * 1e3, gpu, self.ahead if s.cuda else True

    def _close(self) -> None:
        start = self.spans[-1][0]
        if self.sleeper.cuda and start.query():
            self.ahead = False  # the GPU left the hold before the host finished this segment
        self.spans[-1][1] = self.sleeper.event()

    def before_sync(self) -> None:
        self._close()

    def after_sync(self, waited_s: float) -> None:
        self.waited += waited_s
        self.sleeper.hold(self.hold_ms)
        self.spans.append([self.sleeper.event(), None])


def probe(sleeper: Sleeper, work, hold_ms: float, tries: int = 4) -> tuple[float, float, bool, float]:
    """:class:`StepProbe` with the hold doubled until the host stays ahead (at most ``tries``
    times); returns host ms, GPU ms, ahead, and the hold that was used."""
    for _ in range(tries):
        host, gpu, ahead = StepProbe(sleeper, hold_ms).run(work)
        if ahead:
            return host, gpu, True, hold_ms
        hold_ms = max(2 * hold_ms, 1.5 * host)
    return host, gpu, False, hold_ms


def module_work(bench, spec: Spec, group: str, on: bool, iters: int):
    """``iters`` training steps of one module of ``group`` alone, as the step runs it: forward in
    the step's autocast (FP8 or, with ``on`` False, the module run in BF16), backward with a
    gradient for its input, and an optimizer step over its parameters; ``grad_accum``
    micro-batches per optimizer step."""
    torch = bench.torch
    m = spec.modules[group]
    fp8 = {group: on}
    grouped = group in _GROUPED
    mod = bench._linear(fp8, spec, group, norm=group in _NORMED, grouped=grouped)
    gen = torch.Generator(device=bench.device).manual_seed(11)
    splits = None
    rows = m.rows
    if grouped:
        splits = [rows // m.gemms + (1 if i < rows % m.gemms else 0) for i in range(m.gemms)]
        if on:
            splits = [(s + 15) // 16 * 16 for s in splits]
        rows = sum(splits)
    x = torch.randn(rows, m.in_features, device=bench.device, dtype=torch.bfloat16, generator=gen).requires_grad_()
    if not grouped:
        x = x.reshape(rows, 1, m.in_features).detach().requires_grad_()
    out_shape = (rows, m.out_features) if grouped else (rows, 1, m.out_features)
    grad = torch.randn(*out_shape, device=bench.device, dtype=torch.bfloat16, generator=gen)
    opt = bench._optimizer([p for p in mod.parameters() if p.requires_grad])
    accum = getattr(bench.args, "grad_accum", 1)

    def work():
        for _ in range(iters):
            for _ in range(accum):
                with bench.autocast(enabled=True, **{bench.recipe_kw: bench.recipe}):
                    y = mod(x, splits) if grouped else mod(x)
                y.backward(grad)
            opt.step()
            opt.zero_grad(set_to_none=True)
            x.grad = None

    work.finite = lambda: bool(torch.isfinite(y_of(mod, x, splits, grouped, bench)).all())
    return work


def y_of(mod, x, splits, grouped, bench):
    with bench.torch.no_grad(), bench.autocast(enabled=True, **{bench.recipe_kw: bench.recipe}):
        return mod(x, splits) if grouped else mod(x)
