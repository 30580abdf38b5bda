"""The TE worker's recipe choice: pure, no TE needed."""

import pytest

from adaptive_fp8.te_worker import recipe_spec


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
