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


def te_recipe_class(recipe: object) -> str:
    """The TE recipe class a recipe object is (pure, duck-typed): its own class's name where that
    is one of TE's, else the first of TE's among its bases. Megatron builds delayed scaling as
    ``TEDelayedScaling``, a subclass of TE's ``DelayedScaling``: that module ran ``DelayedScaling``.
    A class of none of TE's names is returned as it is (a check then names it)."""
    te = set(RECIPE_CLASSES.values())
    return next((c.__name__ for c in type(recipe).__mro__ if c.__name__ in te), type(recipe).__name__)


def recipe_format(recipe: object) -> str | None:
    """The FP8 format a recipe object runs (``E4M3`` or ``HYBRID``: its ``fp8_format``'s name), or
    ``None`` where it has none (an FP4 recipe)."""
    f = getattr(recipe, "fp8_format", None)
    return None if f is None else str(getattr(f, "name", f)).upper()


def recipe_counts(planned: list[dict], ran: dict[str, str], trainer_recipe: str) -> tuple[dict[str, int], dict[str, int]]:
    """What the hook planned against what ran: ``planned`` the hook's plan rows (``fp8``, and
    ``recipe``: the module's own under a per-module recipe plan, else ``None``: the trainer's),
    ``ran`` each FP8 module's TE recipe class as TE kept it (``fp8_meta["recipe"]``, by module
    path). Returns ``(planned, ran)``, each the number of FP8 modules per TE recipe class: equal
    when every module ran under the recipe the policy gave it (one row per module instance)."""
    want: dict[str, int] = {}
    for r in planned:
        if r.get("fp8"):
            cls = RECIPE_CLASSES.get(r.get("recipe") or trainer_recipe, r.get("recipe") or trainer_recipe)
            want[cls] = want.get(cls, 0) + 1
    got: dict[str, int] = {}
    for cls in ran.values():
        got[cls] = got.get(cls, 0) + 1
    return want, got
