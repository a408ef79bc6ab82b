"""The wheel: built from the source tree, installed with its dependencies into a fresh
virtual environment, imported and run there, so a missing package file, entry point or
dependency fails CI.

Everything is written under ``tmp_path`` (the source tree is copied there first, so the
build writes nothing into the repository and needs no ``build/`` or ``dist/`` leftovers).
The wheel is built with ``pip wheel`` (build isolation fetches the ``hatchling`` backend
from the package index) and installed with ``-c constraints.txt``: an unpinned torch
would download several GB of CUDA wheels. The fresh environment has no access to the
development environment's packages, so anything ``hardgrad`` imports that its wheel does
not declare (``Requires-Dist``) fails the import there. Imports made only inside
functions (the benchmark extras) are checked statically against the declared extras.

Cost: about 5 s for the build and 30-50 s for the install (torch's wheel is the slow part;
``--no-compile`` skips byte-compiling it).
"""

from __future__ import annotations

import ast
import dataclasses
import email.message
import email.parser
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import hardgrad as hg

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "hardgrad"

#: Not copied from the source tree: what a fresh clone does not have (version control,
#: environments, build outputs at the top level; caches anywhere).
TOP_LEVEL_SKIPPED = {".git", ".venv", "build", "dist", "bench-results"}
SKIPPED_ANYWHERE = {"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".hypothesis"}


def _ignore(directory: str, names: list[str]) -> set[str]:
    skipped = SKIPPED_ANYWHERE.intersection(names)
    if Path(directory).resolve() == ROOT:
        skipped |= TOP_LEVEL_SKIPPED.intersection(names)
    if Path(directory).resolve() == ROOT / "docs":
        skipped |= {"_build"}.intersection(names)
    return skipped


#: Import names whose distribution on the package index has another name.
DISTRIBUTIONS = {"sklearn": "scikit-learn"}


def _run(args: list[str | Path], *, cwd: Path, timeout: float, env: dict[str, str] | None = None):
    result = subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if result.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, args))} exited with {result.returncode}\n"
            f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-4000:]}"
        )
    return result


def _source_version() -> str:
    """``__version__`` as written in src/hardgrad/_version.py (read, not imported)."""
    tree = ast.parse((PACKAGE / "_version.py").read_text())
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets)
            and isinstance(node.value, ast.Constant)
        ):
            return str(node.value.value)
    raise AssertionError("src/hardgrad/_version.py sets no __version__ string")


def _clean_env() -> dict[str, str]:
    """The environment for the fresh venv: nothing that points Python at other packages."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PYTHONNOUSERSITE"] = "1"
    return env


@dataclasses.dataclass(frozen=True)
class Built:
    """The wheel and the copy of src/hardgrad it was built from."""

    wheel: Path
    package: Path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The wheel built from a copy of the source tree."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=_ignore)
    out = base / "dist"
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", out, source],
        cwd=base,
        timeout=300,
    )
    wheels = sorted(out.glob("hardgrad-*.whl"))
    assert len(wheels) == 1, wheels
    return Built(wheels[0], source / "src" / "hardgrad")


def _metadata(archive: zipfile.ZipFile) -> email.message.Message:
    (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
    return email.parser.Parser().parsestr(archive.read(name).decode())


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0].lower()


class _Imports(ast.NodeVisitor):
    """Collects third-party imports (outside the standard library and hardgrad), split
    into those that run when the module is imported and those inside functions or under
    ``if TYPE_CHECKING:`` (run only when called, or never). An import in the body of a
    ``try`` that catches ``ImportError`` (or ``ModuleNotFoundError``) is optional by
    construction (a peer library a benchmark compares with when it is there) and is not
    collected: it cannot fail for a missing package."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.depth = 0
        self.guarded = 0
        self.at_import: dict[str, set[str]] = {}
        self.deferred: dict[str, set[str]] = {}

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._function(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        self._function(node)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._function(node)

    def visit_If(self, node: ast.If) -> None:
        test = ast.unparse(node.test)
        if test in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            self.depth += 1
            for child in node.body:
                self.visit(child)
            self.depth -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Try(self, node: ast.Try) -> None:
        names = {
            n.id
            for handler in node.handlers
            if handler.type is not None
            for n in ast.walk(handler.type)
            if isinstance(n, ast.Name)
        }
        optional = bool(names & {"ImportError", "ModuleNotFoundError"})
        self.guarded += optional
        for child in node.body:
            self.visit(child)
        self.guarded -= optional
        for child in [*node.handlers, *node.orelse, *node.finalbody]:
            self.visit(child)

    def _add(self, name: str) -> None:
        top = name.split(".")[0]
        if self.guarded:
            return
        if top != "hardgrad" and top not in sys.stdlib_module_names:
            target = self.deferred if self.depth else self.at_import
            target.setdefault(top, set()).add(self.path)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            self._add(node.module)


def _third_party_imports(files: dict[str, str]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """``(at_import, deferred)``: import name -> the files that import it."""
    at_import: dict[str, set[str]] = {}
    deferred: dict[str, set[str]] = {}
    for path, text in files.items():
        visitor = _Imports(path)
        visitor.visit(ast.parse(text, filename=path))
        for found, into in ((visitor.at_import, at_import), (visitor.deferred, deferred)):
            for name, paths in found.items():
                into.setdefault(name, set()).update(paths)
    return at_import, deferred


#: Extras for working on hardgrad, not for running it: code in the wheel may not rely
#: on them.
DEVELOPMENT_EXTRAS = {"dev", "docs"}


def test_wheel_contents_and_metadata(built: Built) -> None:
    """The wheel holds exactly the files of src/hardgrad (every module, py.typed; no
    tests, docs, benchmark results or caches), the version of src/hardgrad/_version.py,
    the ``hardgrad`` console script, torch as a dependency, and every third-party package
    the code imports declared: imports that run when a module is imported among the core
    dependencies, imports inside functions at least in a runtime extra (not ``dev`` or
    ``docs``)."""
    version = _source_version()
    assert built.wheel.name.startswith(f"hardgrad-{version}-")
    with zipfile.ZipFile(built.wheel) as archive:
        names = archive.namelist()
        metadata = _metadata(archive)
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = archive.read(entry_points).decode()
        sources = {n: archive.read(n).decode() for n in names if n.endswith(".py")}
    dist_info = f"hardgrad-{version}.dist-info/"
    package_files = sorted(n for n in names if not n.startswith(dist_info))
    expected = sorted(
        "hardgrad/" + p.relative_to(built.package).as_posix()
        for p in built.package.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )
    assert package_files == expected, (
        f"missing from the wheel: {sorted(set(expected) - set(package_files))}; "
        f"unexpected in the wheel: {sorted(set(package_files) - set(expected))}"
    )
    assert "hardgrad/py.typed" in names
    junk = [n for n in names if re.search(r"(^|/)(tests?|docs|bench-results|__pycache__)/", n)]
    assert not junk, junk
    assert not [n for n in names if n.endswith((".pyc", ".pyo"))]

    assert metadata["Name"] == "hardgrad"
    assert metadata["Version"] == version
    assert re.search(r"^hardgrad\s*=\s*hardgrad\.bench\.cli:main\s*$", scripts, re.MULTILINE)
    core: set[str] = set()
    extras: dict[str, set[str]] = {}
    for requirement in metadata.get_all("Requires-Dist") or []:
        marker = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", requirement)
        target = extras.setdefault(marker.group(1), set()) if marker else core
        target.add(_requirement_name(requirement))
    assert "torch" in core
    runtime_extras = [names for extra, names in extras.items() if extra not in DEVELOPMENT_EXTRAS]
    optional = core.union(*runtime_extras)
    at_import, deferred = _third_party_imports(sources)
    for imports, allowed, what in (
        (at_import, core, "core dependencies (it runs on import)"),
        (deferred, optional, "core dependencies or runtime extras"),
    ):
        for module, paths in sorted(imports.items()):
            distribution = DISTRIBUTIONS.get(module, module).lower()
            assert distribution in allowed, (
                f"{sorted(paths)} import {module!r}, but {distribution!r} is not among the "
                f"wheel's {what}: core {sorted(core)}, extras {extras}"
            )


SMOKE = r"""
import importlib, importlib.metadata, pathlib, pkgutil, sys

import torch
import hardgrad as hg

venv = pathlib.Path(sys.argv[1]).resolve()
location = pathlib.Path(hg.__file__).resolve()
assert venv in location.parents, f"imported {location}, not the installed wheel"
assert hg.__version__ == importlib.metadata.version("hardgrad") == sys.argv[2], hg.__version__
assert (location.parent / "py.typed").is_file(), "py.typed is not installed"

# Every module imports with only the declared (core) dependencies installed.
for info in pkgutil.walk_packages(hg.__path__, "hardgrad."):
    importlib.import_module(info.name)

# A hard op, forward and backward.
x = torch.tensor([0.4, 1.6, -2.5], requires_grad=True)
y = hg.round(x)
y.sum().backward()
assert y.tolist() == [0.0, 2.0, -2.0] and x.grad.tolist() == [1.0, 1.0, 1.0], (y, x.grad)

# A stochastic unit.
logits = torch.zeros(4000, requires_grad=True)
b = hg.bernoulli(logits, generator=torch.Generator().manual_seed(0))
assert set(b.unique().tolist()) == {0.0, 1.0} and 0.45 < float(b.mean()) < 0.55
b.sum().backward()
assert logits.grad is not None and bool(torch.isfinite(logits.grad).all())

# An expectation with RLOO: the value is a Monte-Carlo mean, the gradient finite.
theta = torch.zeros(3, requires_grad=True)
target = torch.tensor([0.0, 1.0, 0.0])
value = hg.expectation(lambda s: (s - target).square(), theta, estimator="rloo",
                       num_samples=8, generator=torch.Generator().manual_seed(0))
assert value.shape == (3,) and bool(((value >= 0) & (value <= 1)).all()), value
value.sum().backward()
assert theta.grad is not None and bool(torch.isfinite(theta.grad).all()), theta.grad

# The soft sorts: the C kernel compiled from the installed source into HARDGRAD_CACHE_DIR
# where a compiler is found, else the tensor path; the same ranks either way.
from hardgrad._core import native
from hardgrad.sorting import _native_pav
x = torch.arange(40.0).remainder(7).reshape(2, 20) * 0.3
ranks = hg.soft_rank(x, regularization="kl")
with native.disabled():
    plain = hg.soft_rank(x, regularization="kl")
assert torch.allclose(ranks, plain, rtol=1e-6), (ranks, plain)
built, detail = _native_pav.status()
if native.compiler() is not None:
    assert built, detail
    assert pathlib.Path(detail).parent == pathlib.Path(sys.argv[3]), detail
    assert (location.parent / "sorting" / "_pav_kernel.c").is_file()
print("smoke ok")
"""


def test_wheel_installs_into_a_fresh_venv_and_runs(built: Built, tmp_path: Path) -> None:
    """Installed with its dependencies (torch pinned by constraints.txt) into a fresh
    virtual environment: ``import hardgrad`` finds the installed copy with the source's
    version and ``py.typed``, every module imports, a hard op, ``hg.bernoulli`` and
    ``hg.expectation(..., estimator="rloo")`` run forward and backward, ``hg.soft_rank``
    compiles its C kernel from the installed source into the cache (where a compiler is
    found) and agrees with the tensor path, and the
    ``hardgrad`` console script answers ``--help``, ``--version`` and ``list``."""
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=tmp_path, timeout=120)
    bin_dir = venv / ("Scripts" if os.name == "nt" else "bin")
    python = bin_dir / "python"
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            python,
            "install",
            "-q",
            "--no-compile",
            "-c",
            ROOT / "constraints.txt",
            built.wheel,
        ],
        cwd=tmp_path,
        timeout=600,
    )
    env = _clean_env()
    version = _source_version()
    script = tmp_path / "smoke.py"
    script.write_text(SMOKE)
    env["HARDGRAD_CACHE_DIR"] = str(tmp_path / "kernels")
    result = _run(
        [python, script, venv, version, tmp_path / "kernels"], cwd=tmp_path, timeout=300, env=env
    )
    assert "smoke ok" in result.stdout

    hardgrad = bin_dir / "hardgrad"
    usage = _run([hardgrad, "--help"], cwd=tmp_path, timeout=120, env=env).stdout
    assert "usage: hardgrad" in usage and "bench" in usage and "list" in usage
    shown = _run([hardgrad, "--version"], cwd=tmp_path, timeout=120, env=env)
    assert version in shown.stdout + shown.stderr
    listing = _run([hardgrad, "list"], cwd=tmp_path, timeout=120, env=env).stdout
    for name in (*hg.ops.OPS.names(), *hg.surrogates.SURROGATES.names()):
        assert re.search(rf"^\s+{re.escape(name)}\s", listing, re.MULTILINE), name
    for name in hg.estimators.ESTIMATORS.names():
        assert re.search(rf"^\s+{re.escape(name)}\s", listing, re.MULTILINE), name


def test_import_scan_skips_only_imports_guarded_by_import_error() -> None:
    """The scan that checks declared dependencies: an optional peer import inside
    ``try: ... except ImportError`` is not a dependency; the same import unguarded, or
    guarded by another exception, still is."""
    source = """
import numpy
def f():
    try:
        import torchsort
    except ImportError:
        return None
    try:
        import scipy
    except ValueError:
        pass
    try:
        import rich
    except (OSError, ModuleNotFoundError):
        pass
"""
    visitor = _Imports("x.py")
    visitor.visit(ast.parse(source))
    assert set(visitor.at_import) == {"numpy"}
    assert set(visitor.deferred) == {"scipy"}
