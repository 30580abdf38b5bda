"""Shared fixtures: the repository root and the `fp8sel` binary the equality tests compare with."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def fp8sel() -> Path:
    """The CLI built from this checkout (`$FP8SEL`, else target/debug/fp8sel, built if missing)."""
    given = os.environ.get("FP8SEL")
    if given:
        return Path(given)
    binary = ROOT / "target" / "debug" / "fp8sel"
    if not binary.exists():
        subprocess.run(["cargo", "build", "-q", "-p", "fp8sel"], cwd=ROOT, check=True)
    return binary
