"""``make lint`` stays clean: ruff's checks and formatting and mypy (strict, the settings in
pyproject.toml) over the source, run as the Makefile runs them. Slow (mypy takes ~15 s
cold); skipped where the ``dev`` extra is not installed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


@pytest.mark.skipif(importlib.util.find_spec("ruff") is None, reason="ruff (dev extra) missing")
def test_ruff_check_and_format():
    for args in (("ruff", "check", "src", "tests"), ("ruff", "format", "--check", "src", "tests")):
        done = _run(*args)
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(importlib.util.find_spec("mypy") is None, reason="mypy (dev extra) missing")
def test_mypy_strict(tmp_path):
    done = _run("mypy", "--cache-dir", str(tmp_path / "mypy"))
    assert done.returncode == 0, done.stdout + done.stderr
