"""The step model's measurements, torch half (imported only when a measurement runs): host time
and GPU time apart, for one module group and for one whole training step.

- A module's GPU time: the GPU is held by a sleep kernel while the host issues one training
  step of the module, so the time from the end of the sleep to the end of the work is the GPU's
  own (no gaps waiting on the host); its host time is then the issue time. Where the host could
  not stay ahead (it finished issuing after the sleep ended, even with a longer sleep: the
  launch queue filled, or something synced), the GPU time is the union of its kernels' times
  under torch's profiler, and the host time the wall time of the module at a few rows, where the
  host bounds it.
- A whole step's GPU time: the union of its kernels' times under the profiler (kernels on
  several streams overlap; the union counts that once); its host time: the wall time of the same
  step at a count so small that the host bounds it (the host's work does not grow with tokens).

On the CPU (the TE stand-in) every time is the host's clock: the CPU tests check shapes and
bookkeeping, not speed.
"""

from __future__ import annotations

import time

from adaptive_fp8.bench.step_spec import Spec

_GROUPED = ("experts.fc1", "experts.fc2")
_NORMED = ("qkv", "fc1", "q_up_proj", "kv_up_proj")
#: The longest the GPU is held for one module step (ms).
MAX_HOLD_MS = 400.0


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

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def held(self, work, hold_ms: float) -> tuple[float, float, bool]:
        """One run of ``work`` behind a hold: host issue ms, GPU ms, and whether the host
        finished issuing before the hold ended."""
        torch = self.torch
        if not self.cuda:
            t0 = time.perf_counter()
            work()
            ms = (time.perf_counter() - t0) * 1e3
            return ms, ms, True
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        torch.cuda._sleep(int(hold_ms * self.cycles_per_ms))
        a.record()
        t0 = time.perf_counter()
        work()
        issue = (time.perf_counter() - t0) * 1e3
        ahead = not a.query()
        b.record()
        torch.cuda.synchronize()
        return issue, a.elapsed_time(b), ahead

    def wall(self, work, n: int) -> float:
        """ms per run of ``n`` back-to-back runs."""
        self.sync()
        t0 = time.perf_counter()
        for _ in range(n):
            work()
        self.sync()
        return (time.perf_counter() - t0) * 1e3 / n

    def kernels(self, work, n: int = 1) -> float:
        """GPU ms per run: the union of the kernels' intervals over ``n`` runs under torch's
        profiler (the host's clock on the CPU)."""
        if not self.cuda:
            return self.wall(work, n)
        from torch.profiler import ProfilerActivity, profile

        self.sync()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                work()
            self.sync()
        spans = sorted(
            (e.time_range.start, e.time_range.end)
            for e in prof.events()
            if str(getattr(e, "device_type", "")).endswith("CUDA") and e.time_range.end > e.time_range.start
        )
        return union_us(spans) / 1e3 / n


def union_us(spans: list[tuple[float, float]]) -> float:
    """The length of the union of sorted intervals."""
    total, end = 0.0, float("-inf")
    for a, b in spans:
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def gpu_and_host(sleeper: Sleeper, work, hold_ms: float) -> tuple[float, float | None, float]:
    """A module step's GPU ms and host ms (None where the host could not stay ahead: then the GPU
    time is the profiler's), and the hold to use next."""
    for _ in range(2):
        issue, gpu, ahead = sleeper.held(work, hold_ms)
        if ahead:
            return gpu, issue, hold_ms
        if hold_ms >= MAX_HOLD_MS:
            break
        hold_ms = min(MAX_HOLD_MS, max(2 * hold_ms, 1.5 * issue))
    return sleeper.kernels(work), None, hold_ms


def module_work(bench, spec: Spec, group: str, on: bool, rows: int | None = None):
    """One training step of one module of ``group`` alone, as the step runs it: forward in the
    step's autocast (FP8 or, with ``on`` False, the module run in BF16), backward with a
    gradient for its input, and an optimizer step over its parameters; ``grad_accum``
    micro-batches per optimizer step. ``rows`` replaces the plan's rows (grouped: per expert)."""
    torch = bench.torch
    m = spec.modules[group]
    grouped = group in _GROUPED
    mod = bench._linear({group: on}, spec, group, norm=group in _NORMED, grouped=grouped)
    gen = torch.Generator(device=bench.device).manual_seed(11)
    splits = None
    n = m.rows if rows is None else rows
    if grouped:
        splits = [n // m.gemms + (1 if i < n % m.gemms else 0) for i in range(m.gemms)] if rows is None else [rows] * m.gemms
        if on:
            splits = [(s + 15) // 16 * 16 for s in splits]
        n = sum(splits)
    shape = (n, m.in_features) if grouped else (n, 1, m.in_features)
    x = torch.randn(*shape, device=bench.device, dtype=torch.bfloat16, generator=gen).requires_grad_()
    grad = torch.randn(*shape[:-1], m.out_features, device=bench.device, dtype=torch.bfloat16, generator=gen)
    opt = bench._optimizer([p for p in mod.parameters() if p.requires_grad])
    accum = getattr(bench.args, "grad_accum", 1)
    ctx = lambda: bench.autocast(enabled=True, **{bench.recipe_kw: bench.recipe})  # noqa: E731

    def work():
        for _ in range(accum):
            with ctx():
                y = mod(x, splits) if grouped else mod(x)
            y.backward(grad)
        opt.step()
        opt.zero_grad(set_to_none=True)
        x.grad = None

    def finite() -> bool:
        with torch.no_grad(), ctx():
            y = mod(x, splits) if grouped else mod(x)
        return bool(torch.isfinite(y).all())

    work.finite = finite
    return work
