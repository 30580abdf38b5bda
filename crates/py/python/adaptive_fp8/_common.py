"""Small pieces the GPU-side modules share (pure Python; imports nothing heavy)."""

from __future__ import annotations

import inspect
import json
import math
import os
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Optional


def quantile(values: list[float], q: float) -> float:
    """Nearest-rank quantile (what the toolkit's reports give as p10/p90); `values` not empty."""
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def stat(values: list[float]) -> dict:
    """median / p10 / p90, the report format's timing figure."""
    return {"median": statistics.median(values), "p10": quantile(values, 0.1), "p90": quantile(values, 0.9)}


def time_fwd_bwd(torch: Any, forward: Callable, dy: Any, iters: int, before: Callable = lambda: None) -> tuple[list, list, list]:
    """ms of forward, backward and both, per iteration: CUDA events around an eager step,
    synchronized after each (host time included). `before` runs ahead of each iteration."""
    fw, bw, tot = [], [], []
    for _ in range(iters):
        before()
        a, m, b = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        a.record()
        out = forward()
        m.record()
        out.backward(dy)
        b.record()
        torch.cuda.synchronize()
        fw.append(a.elapsed_time(m))
        bw.append(m.elapsed_time(b))
        tot.append(a.elapsed_time(b))
    return fw, bw, tot


def te_api(te: Any) -> tuple[Callable, Callable, str]:
    """TE's FP8 contexts under their new names or the old ones, and the autocast's recipe keyword:
    `(model_init, autocast, recipe_kw)` (TE 2.8 renamed fp8_model_init/fp8_autocast/fp8_recipe)."""
    model_init = getattr(te, "quantized_model_init", None) or te.fp8_model_init
    autocast = getattr(te, "autocast", None) or te.fp8_autocast
    recipe_kw = "recipe" if "recipe" in inspect.signature(autocast).parameters else "fp8_recipe"
    return model_init, autocast, recipe_kw


MAX_CONNECTIONS = "CUDA_DEVICE_MAX_CONNECTIONS"


def megatron_tp_environment(environ: Any = os.environ) -> str:
    """``CUDA_DEVICE_MAX_CONNECTIONS=1`` unless set, before CUDA starts: Megatron's training
    asserts it for tensor (or context) parallelism on Hopper, so a TP group is timed with the
    one hardware queue Megatron's TP runs have (TE warns without it that TP/SP collectives may
    not overlap the backward GEMMs). Returns the value in force."""
    return environ.setdefault(MAX_CONNECTIONS, "1")


def write_atomic(path: str, text: str) -> None:
    """Writes a temp file beside `path` and renames it over: a reader sees the old file or the
    new one, never half of one."""
    tmp = Path(path).with_name(f".{Path(path).name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def finite_json(v: Any) -> str:
    """``v`` as JSON text (indent 1), every non-finite float as ``null``: JSON has no NaN or
    Infinity (Python's ``json`` writes them as bare tokens no JSON reader takes), so the readers
    (``fp8_report``) see a missing figure they name, not a file that is not JSON."""

    def finite(x: Any) -> Any:
        if isinstance(x, float):
            return x if math.isfinite(x) else None
        if isinstance(x, dict):
            return {k: finite(y) for k, y in x.items()}
        if isinstance(x, (list, tuple)):
            return [finite(y) for y in x]
        return x

    return json.dumps(finite(v), indent=1, allow_nan=False) + "\n"


def emit(out: dict, text: str, json_path: Optional[str], md_path: Optional[str], quiet: bool = False) -> None:
    """A benchmark's results: the JSON and the markdown where asked (each written to a temp file
    and renamed, so a reader or a kill never leaves half a file), the markdown on stdout unless
    `quiet`."""
    for path, body in ((json_path, finite_json(out)), (md_path, text)):
        if path:
            write_atomic(path, body)
    if not quiet:
        sys.stdout.write(text)
