"""Small pieces the GPU-side modules share (pure Python; imports nothing heavy)."""

from __future__ import annotations

import inspect
import json
import sys
from pathlib import Path
from typing import Any, Callable, Optional


def te_api(te: Any) -> tuple[Callable, Callable, str]:
    """TE's FP8 contexts under their new names or the old ones, and the autocast's recipe keyword:
    `(model_init, autocast, recipe_kw)` (TE 2.8 renamed fp8_model_init/fp8_autocast/fp8_recipe)."""
    model_init = getattr(te, "quantized_model_init", None) or te.fp8_model_init
    autocast = getattr(te, "autocast", None) or te.fp8_autocast
    recipe_kw = "recipe" if "recipe" in inspect.signature(autocast).parameters else "fp8_recipe"
    return model_init, autocast, recipe_kw


def emit(out: dict, text: str, json_path: Optional[str], md_path: Optional[str]) -> None:
    """A benchmark's results: the JSON and the markdown where asked, the markdown on stdout."""
    if json_path:
        Path(json_path).write_text(json.dumps(out, indent=1) + "\n")
    if md_path:
        Path(md_path).write_text(text)
    sys.stdout.write(text)
