"""adaptive_fp8._common: the small pieces the GPU-side tools share (pure Python)."""

from __future__ import annotations


def test_emitted_json_has_no_nan_token(tmp_path):
    # Python's json writes NaN and Infinity as bare tokens no JSON reader takes; the documents
    # carry them as null, which the typed readers name as a missing figure.
    import json

    from adaptive_fp8._common import emit, finite_json

    out = {"a": float("nan"), "b": [1.0, float("inf"), (2, float("-inf"))], "c": {"d": 3}}
    assert json.loads(finite_json(out)) == {"a": None, "b": [1.0, None, [2, None]], "c": {"d": 3}}
    emit(out, "", str(tmp_path / "r.json"), None, quiet=True)
    text = (tmp_path / "r.json").read_text()
    assert "NaN" not in text and "Infinity" not in text and json.loads(text)["a"] is None
