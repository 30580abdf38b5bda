"""The FP8 recipe names every tool takes (Megatron's ``--fp8-recipe`` values, and ``current``,
the reference tool's name for tensorwise) and the TE recipe class each one builds. Pure: no TE
import. The one place these names are typed."""

from __future__ import annotations

#: TE recipe classes by our recipe names.
RECIPE_CLASSES = {
    "blockwise": "Float8BlockScaling",
    "tensorwise": "Float8CurrentScaling",
    "current": "Float8CurrentScaling",
    "delayed": "DelayedScaling",
    "mxfp8": "MXFP8BlockScaling",
    "nvfp4": "NVFP4BlockScaling",
}

#: The names, in the order the tools' ``--help`` lists them.
RECIPES = tuple(RECIPE_CLASSES)
