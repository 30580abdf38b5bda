"""The TE worker's recipe choice: pure, no TE needed."""

import pytest

from adaptive_fp8.bench.te_worker import recipe_spec


def test_each_recipe_maps_to_its_te_class_with_te_defaults():
    assert recipe_spec({}) == ("Float8BlockScaling", {})
    assert recipe_spec({"recipe": "tensorwise"}) == ("Float8CurrentScaling", {"fp8_format": "E4M3"})
    # `current` is the reference tool's name for tensorwise.
    assert recipe_spec({"recipe": "current", "fp8_format": "hybrid"}) == (
        "Float8CurrentScaling",
        {"fp8_format": "HYBRID"},
    )
    assert recipe_spec({"recipe": "delayed"}) == (
        "DelayedScaling",
        {"fp8_format": "HYBRID", "amax_history_len": 1024, "amax_compute_algo": "max"},
    )
    assert recipe_spec(
        {"recipe": "delayed", "fp8_format": "e4m3", "amax_history_len": 16, "amax_compute_algo": "most_recent"}
    ) == ("DelayedScaling", {"fp8_format": "E4M3", "amax_history_len": 16, "amax_compute_algo": "most_recent"})
    assert recipe_spec({"recipe": "MXFP8"}) == ("MXFP8BlockScaling", {})


@pytest.mark.parametrize(
    "opt, words",
    [
        ({"recipe": "fp4"}, "alias current"),
        ({"recipe": "blockwise", "fp8_format": "hybrid"}, "E4M3 only"),
        ({"recipe": "tensorwise", "fp8_format": "e5m2"}, "e4m3 or hybrid"),
        ({"recipe": "delayed", "amax_compute_algo": "mean"}, "max or most_recent"),
    ],
)
def test_bad_options_say_what_to_use(opt, words):
    with pytest.raises(ValueError, match=words):
        recipe_spec(opt)


def _fake_te_recipe(monkeypatch):
    """transformer_engine.common.recipe as TE 2.20 shapes it: QParams frozen, the quantizer
    parameters class attributes of the per-tensor and blockwise recipes."""
    import dataclasses
    import sys
    import types
    from types import SimpleNamespace

    @dataclasses.dataclass(frozen=True)
    class QParams:
        power_2_scale: bool = False
        amax_epsilon: float = 0.0

    class Float8BlockScaling:
        fp8_quant_fwd_inp = QParams(power_2_scale=True)
        fp8_quant_fwd_weight = QParams(power_2_scale=True)
        fp8_quant_bwd_grad = QParams(power_2_scale=True)

    class DelayedScaling:
        def __init__(self, fp8_format=None, amax_history_len=1024, amax_compute_algo="max"):
            self.fp8_format = fp8_format

    recipe = types.ModuleType("transformer_engine.common.recipe")
    recipe.Float8BlockScaling, recipe.DelayedScaling = Float8BlockScaling, DelayedScaling
    recipe.Format = SimpleNamespace(E4M3="E4M3", HYBRID="HYBRID")
    te, common = types.ModuleType("transformer_engine"), types.ModuleType("transformer_engine.common")
    te.common, common.recipe = common, recipe
    for k, v in {"transformer_engine": te, "transformer_engine.common": common, "transformer_engine.common.recipe": recipe}.items():
        monkeypatch.setitem(sys.modules, k, v)
    return recipe


def test_the_seeds_epsilon_variables_set_amax_epsilon(monkeypatch):
    from adaptive_fp8 import amax_eps
    from adaptive_fp8.bench import te_worker

    _fake_te_recipe(monkeypatch)
    amax_eps._said_eps.clear()
    env = {"FP8_QUANT_FWD_INP_AMAX_EPS": "1e-12", "FP8_QUANT_FWD_WEIGHT_AMAX_EPS": "1e-12",
           "FP8_QUANT_BWD_GRAD_AMAX_EPS": "1e-12"}
    said: list[str] = []
    r = amax_eps.apply_amax_epsilons(te_worker.make_recipe({}, environ={}), env, said.append)
    for f in ("fp8_quant_fwd_inp", "fp8_quant_fwd_weight", "fp8_quant_bwd_grad"):
        q = getattr(r, f)
        assert q.amax_epsilon == 1e-12 and q.power_2_scale is True  # the rest of TE's default kept
    # The class's defaults are untouched: another recipe object starts at 0.
    assert te_worker.make_recipe({}, environ={}).fp8_quant_fwd_inp.amax_epsilon == 0.0
    assert said == ["adaptive_fp8: Float8BlockScaling: fp8_quant_fwd_inp.amax_epsilon=1e-12, "
                    "fp8_quant_fwd_weight.amax_epsilon=1e-12, fp8_quant_bwd_grad.amax_epsilon=1e-12 (from FP8_QUANT_*_AMAX_EPS)"]
    # Said once.
    amax_eps.apply_amax_epsilons(te_worker.make_recipe({}, environ={}), env, said.append)
    assert len(said) == 1
    # make_recipe reads the environment it is given; one variable sets one field.
    r = te_worker.make_recipe({}, environ={"FP8_QUANT_BWD_GRAD_AMAX_EPS": "1e-10"})
    assert (r.fp8_quant_fwd_inp.amax_epsilon, r.fp8_quant_bwd_grad.amax_epsilon) == (0.0, 1e-10)
    # Delayed scaling has no such parameters: left alone, with a note.
    te_worker.make_recipe({"recipe": "delayed"}, environ=env)
    with pytest.raises(ValueError, match="FP8_QUANT_FWD_INP_AMAX_EPS='tiny'.*1e-12"):
        amax_eps.amax_epsilons({"FP8_QUANT_FWD_INP_AMAX_EPS": "tiny"})
    with pytest.raises(ValueError, match="non-negative"):
        amax_eps.amax_epsilons({"FP8_QUANT_BWD_GRAD_AMAX_EPS": "-1"})
    assert amax_eps.amax_epsilons({}) == {}
