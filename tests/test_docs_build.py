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
import re
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
    if Path(directory).resolve() == ROOT:  # other environments, e.g. .venv-torch-2.11.0
        here = here | {name for name in names if name.startswith(".venv")}
    return (SKIPPED_ANYWHERE | here).intersection(names)


@pytest.fixture(scope="module")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The HTML site built once from a copy of the source tree; fails on any warning."""
    tmp_path = tmp_path_factory.mktemp("docs")
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
    return out


def test_docs_build_without_warnings(built_site: Path) -> None:
    """``sphinx-build -W --keep-going -b html docs OUT`` exits 0: no warning anywhere
    (unknown references, pages missing from the toctree, broken directives, registry
    entries without an API entry, ...), and the math is served from the site itself."""
    assert (built_site / "index.html").is_file()
    _assert_math_renders_offline(built_site)


#: A headless browser for the rendering check; CI has none (the test is skipped there).
BROWSER = (
    shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
)


@pytest.mark.skipif(BROWSER is None, reason="no headless Chromium on this machine")
@pytest.mark.parametrize("page", ["api/surrogates", "api/estimators", "guides/quantization"])
def test_math_renders_in_a_headless_browser(built_site: Path, page: str) -> None:
    """Load a built page in headless Chromium (no network needed: file://) and check that
    MathJax typeset every formula: one ``mjx-container`` per math span, no error nodes."""
    assert BROWSER is not None
    html = built_site / f"{page}.html"
    math_spans = html.read_text(encoding="utf-8").count('class="math notranslate nohighlight"')
    assert math_spans > 0
    result = subprocess.run(
        [
            BROWSER,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=15000",
            "--dump-dom",
            html.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    dom = result.stdout
    assert result.returncode == 0, result.stderr[-2000:]
    assert dom.count("<mjx-container") == math_spans
    assert "<mjx-merror" not in dom and "data-mjx-error" not in dom


def _assert_math_renders_offline(out: Path) -> None:
    """Every page with math loads MathJax from the built site, never from the network
    (issue 13: the docs must render their math without network access), and the script
    and its fonts are there."""
    pages_with_math = 0
    for page in out.rglob("*.html"):
        html = page.read_text(encoding="utf-8")
        scripts = re.findall(r'<script[^>]*src="([^"]+)"', html)
        assert not [s for s in scripts if "://" in s or s.startswith("//")], (
            f"{page.relative_to(out)} loads a script from the network: {scripts}"
        )
        mathjax = [s for s in scripts if "mathjax" in s.lower()]
        if "\\(" in html or "\\[" in html or 'class="math' in html:
            pages_with_math += 1
            assert mathjax, f"{page.relative_to(out)} has math but no MathJax script"
        for src in mathjax:
            assert (page.parent / src.split("?")[0]).is_file(), f"{src} missing in {page}"
    assert pages_with_math >= 10
    fonts = out / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2"
    assert any(fonts.glob("*.woff")), "MathJax's CHTML fonts are not in the build"


def test_front_door_groups_the_sidebar_and_links_every_guide(built_site: Path) -> None:
    """Issue 41: the landing page says how to install before anything else, then where to
    start and which page to pick per task; the sidebar is grouped (Start, By task, Tools,
    Reference) and reaches every guide and API page, the changelog and how to cite."""
    html = (built_site / "index.html").read_text(encoding="utf-8")
    headings = re.findall(r"<h2>(.*?)<a class=\"headerlink\"", html)
    assert headings[:3] == ["Install", "Start here", "Pick your task"], headings
    captions = re.findall(
        r'<p class="caption[^"]*" role="heading"><span class="caption-text">'
        r"([^<]+)</span>",
        html,
    )
    assert captions == ["Start", "By task", "Tools", "Reference"], captions
    guides_and_api = sorted(
        f"{p.parent.name}/{p.stem}"
        for folder in ("guides", "api")
        for p in (ROOT / "docs" / folder).glob("*.md")
    )
    pages = [*guides_and_api, "changelog", "citing", "internals", "dev/architecture"]
    missing = [page for page in pages if f'href="{page}.html"' not in html]
    assert missing == [], f"not reachable from the sidebar: {missing}"
    install, pick = html.index('id="install"'), html.index('id="pick-your-task"')
    assert install < html.index("download.pytorch.org/whl/cpu") < pick  # the CPU-only install
