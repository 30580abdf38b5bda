"""probe_host's pure half: the per-expert fit, the profile document, the atomic write, and the
skip without a GPU. The document format is the one fp8sel reads (`fixtures/host/example.json`,
parsed by crates/merge/tests/merge.rs)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from adaptive_fp8.bench import probe_host

ROOT = Path(__file__).resolve().parents[3]

#: Example inputs (not measurements): the fixture is what `profile` makes of them.
EXAMPLE = {
    "layernorm_column": {"bf16": 0.61, "fp8": 1.02},
    "row": {"bf16": 0.52, "fp8": 0.93},
    "row_grouped": {"bf16": [(1, 0.7), (2, 0.8), (4, 1.0), (8, 1.4)], "fp8": [(1, 1.2), (2, 1.4), (4, 1.8), (8, 2.6)]},
}


def test_the_per_expert_fit_recovers_a_line_and_never_goes_negative():
    base, slope = probe_host.fit_per_expert([(1, 0.7), (2, 0.8), (4, 1.0), (8, 1.4)])
    assert abs(base - 0.7) < 1e-9 and abs(slope - 0.1) < 1e-9
    assert probe_host.fit_per_expert([(1, 1.0), (8, 0.5)])[1] == 0.0  # noise: no negative slope
    assert probe_host.fit_per_expert([(4, 2.0)]) == (2.0, 0.0)
    with pytest.raises(ValueError):
        probe_host.fit_per_expert([])


def test_the_profile_matches_the_fixture_fp8sel_reads():
    doc = probe_host.profile(EXAMPLE, "example device", "2.20.2", "blockwise")
    want = json.loads((ROOT / "fixtures/host/example.json").read_text())
    assert doc == want
    assert doc["kinds"]["row_grouped"]["fp8_per_expert_ms"] == pytest.approx(0.2)
    with pytest.raises(ValueError, match="unknown module kind"):
        probe_host.profile({"rows": {"bf16": 1, "fp8": 1}})
    with pytest.raises(ValueError, match="between 0 and 1000"):
        probe_host.profile({"row": {"bf16": -1, "fp8": 1}})


def test_write_is_atomic_and_leaves_no_temp_files(tmp_path):
    out = tmp_path / "host.json"
    probe_host.write_atomic(str(out), {"a": 1})
    assert json.loads(out.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["host.json"]
    with pytest.raises(TypeError):
        probe_host.write_atomic(str(out), {"a": object()})
    assert json.loads(out.read_text()) == {"a": 1}  # the old file survives a failed write
    assert [p.name for p in tmp_path.iterdir()] == ["host.json"]


def test_without_a_gpu_it_skips_and_writes_nothing(tmp_path):
    out = tmp_path / "host.json"
    r = subprocess.run([sys.executable, "-m", "adaptive_fp8.bench.probe_host", "--out", str(out)], capture_output=True, text=True)
    if "skipped" not in r.stdout:
        pytest.skip(f"this machine has TE and a GPU: {r.stdout[-200:]}")
    assert r.returncode == 0 and not out.exists()
    r = subprocess.run([sys.executable, "-m", "adaptive_fp8.bench.probe_host", "--help"], capture_output=True, text=True)
    assert "--host-profile" in r.stdout and "max(gpu time, host time)" in r.stdout


def test_importing_it_does_not_import_torch():
    code = "import sys, adaptive_fp8.bench.probe_host; print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"
