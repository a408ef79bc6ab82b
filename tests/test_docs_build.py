"""The documentation site builds with warnings as errors (what ``make docs`` runs).

CI runs pytest only, so this test is how the docs build is checked in CI: it runs
``sphinx-build -W --keep-going -b html`` with this environment's Sphinx on a copy of the
source tree in ``tmp_path`` (the build writes generated figures into its source
directory, ``docs/api/generated/``, and nothing may be written into the repository), and
fails with Sphinx's output on any warning. The pages' examples are doctested separately
(pytest's ``--doctest-glob=*.md``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

#: Not copied from the source tree: what a fresh clone does not have (version control,
#: environments, build outputs at the top level; caches anywhere; earlier docs builds and
#: the figures a build generates into docs/api/generated).
TOP_LEVEL_SKIPPED = {".git", ".venv", "build", "dist", "bench-results"}
SKIPPED_ANYWHERE = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis"}
SKIPPED_UNDER = {
    ROOT: TOP_LEVEL_SKIPPED,
    ROOT / "docs": {"_build"},
    ROOT / "docs" / "api": {"generated"},
}


def _ignore(directory: str, names: list[str]) -> set[str]:
    here = SKIPPED_UNDER.get(Path(directory).resolve(), set())
    return (SKIPPED_ANYWHERE | here).intersection(names)


def test_docs_build_without_warnings(tmp_path: Path) -> None:
    """``sphinx-build -W --keep-going -b html docs OUT`` exits 0: no warning anywhere
    (unknown references, pages missing from the toctree, broken directives, registry
    entries without an API entry, ...)."""
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=_ignore)
    out = tmp_path / "html"
    env = {**os.environ, "MPLBACKEND": "Agg"}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-q",
            "-b",
            "html",
            "-d",
            str(tmp_path / "doctrees"),
            str(source / "docs"),
            str(out),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(
            f"sphinx-build exited with {result.returncode}\n"
            f"--- stderr (warnings)\n{result.stderr[-12000:]}\n"
            f"--- stdout\n{result.stdout[-4000:]}",
            pytrace=False,
        )
    assert (out / "index.html").is_file()
