"""The layout of ``src/hardgrad`` (docs/dev/architecture.md): imports go down the layers only,
no import circles, no module over 600 lines, every family one package, tests mirror the source.

The import graph is read from the source with :mod:`ast` (nothing is imported), counting
imports inside functions too: a lazy import that closes a circle is still a circle.
"""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PACKAGE = SRC / "hardgrad"
TESTS = ROOT / "tests"

#: Each top-level part of hardgrad -> its layer. A module may import from its own layer or a
#: lower one, never from a higher one. Same-layer imports between families are allowed; the
#: circle test keeps them one way.
LAYERS: dict[str, int] = {
    "_version": 0,
    "_core": 0,
    "surrogates": 1,
    "ops": 2,
    "estimators": 3,
    "stochastic": 4,
    "vq": 5,
    "routing": 5,
    "sorting": 5,
    "solvers": 5,
    "subsets": 5,
    "gates": 5,
    "policy": 5,
    "nn": 6,
    "diagnostics": 7,
    "testing": 8,
    "hardgrad": 9,  # the top-level facade (lazy re-exports): only the command line imports it
    "bench": 10,
    "__main__": 10,
}

#: The longest a module may be (issue 40).
MAX_LINES = 600

#: The only modules allowed at the top level beside packages: the facade, the entry point,
#: the version, and the families that fit in one module.
TOP_LEVEL_MODULES = {"__init__", "__main__", "_version", "gates", "subsets"}

#: Family packages whose ``__init__`` must open with the papers they implement.
FAMILIES_WITH_PAPERS = (
    "surrogates",
    "ops",
    "estimators",
    "stochastic",
    "vq",
    "routing",
    "sorting",
    "solvers",
    "nn",
)

#: Folders of tests/ that are not a package of the source: none but data and caches.
TEST_FOLDERS_NOT_PACKAGES = {"__pycache__"}


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def find_modules(src: Path, package: str) -> dict[str, Path]:
    return {module_name(p, src): p for p in sorted((src / package).rglob("*.py"))}


def imports_of(name: str, path: Path, modules: Mapping[str, Path]) -> Iterator[str]:
    """Every module of ``modules`` that ``name`` imports, anywhere in its body."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    root = name.split(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target:
                    yield target
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != root:
                continue
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                yield submodule if submodule in modules else target


def import_graph(src: Path, package: str) -> dict[str, set[str]]:
    modules = find_modules(src, package)
    return {
        name: {t for t in imports_of(name, path, modules) if t in modules and t != name}
        for name, path in modules.items()
    }


def layer_of(module: str) -> int:
    parts = module.split(".")
    return LAYERS["hardgrad" if len(parts) == 1 else parts[1]]


def upward_imports(graph: Mapping[str, set[str]]) -> list[str]:
    return sorted(
        f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
        for a, targets in graph.items()
        for b in targets
        if layer_of(b) > layer_of(a)
    )


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(SRC, "hardgrad")


def test_every_part_of_the_package_has_a_layer(graph: dict[str, set[str]]) -> None:
    unplaced = sorted({m.split(".")[1] for m in graph if "." in m} - set(LAYERS))
    assert not unplaced, f"add {unplaced} to LAYERS here and to docs/dev/architecture.md"


def test_no_module_imports_from_a_higher_layer(graph: dict[str, set[str]]) -> None:
    assert upward_imports(graph) == []


def test_no_import_circles(graph: dict[str, set[str]]) -> None:
    assert circles(graph) == []


def test_no_module_over_600_lines() -> None:
    lengths = {
        name: len(path.read_text(encoding="utf-8").splitlines())
        for name, path in find_modules(SRC, "hardgrad").items()
    }
    assert {n: k for n, k in lengths.items() if k > MAX_LINES} == {}


def test_the_top_level_holds_packages_and_one_module_families_only() -> None:
    modules = {p.stem for p in PACKAGE.glob("*.py")}
    assert modules - TOP_LEVEL_MODULES == set(), "a helper belongs in _core, a family in a package"


@pytest.mark.parametrize("family", FAMILIES_WITH_PAPERS)
def test_each_family_package_opens_with_its_papers_and_public_names(family: str) -> None:
    init = PACKAGE / family / "__init__.py"
    tree = ast.parse(init.read_text(encoding="utf-8"))
    docstring = ast.get_docstring(tree) or ""
    assert "https://" in docstring, f"hardgrad.{family}'s docstring cites no paper link"
    names = [
        node
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        and any(isinstance(t, ast.Name) and t.id == "__all__" for t in _targets(node))
    ]
    assert names, f"hardgrad.{family} lists no __all__"


def _targets(node: ast.Assign | ast.AnnAssign) -> list[ast.expr]:
    return list(node.targets) if isinstance(node, ast.Assign) else [node.target]


def test_tests_mirror_the_source() -> None:
    """Each folder of tests/ is a package of src/hardgrad; each package of more than a few
    modules has its folder of tests."""
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir()} - TEST_FOLDERS_NOT_PACKAGES
    assert folders - packages == set(), "a test folder with no package of that name"
    assert packages - folders == set(), "a package without its folder of tests"
    stray = sorted(
        str(p.relative_to(TESTS))
        for p in TESTS.rglob("__init__.py")
        if "audit_corpus" not in p.parts
    )
    assert stray == [], "tests run with --import-mode=importlib: no __init__.py in tests/"


# The checks above catch what they claim: a made-up package with an upward import and a circle.


def _write(root: Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_an_upward_import_and_a_lazy_circle_are_found(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "hardgrad/__init__.py": "",
            "hardgrad/_core/__init__.py": "",
            "hardgrad/_core/kernels.py": "from ..nn import Thing\n",
            "hardgrad/nn/__init__.py": "from ._a import Thing\n",
            "hardgrad/nn/_a.py": "from ._b import helper\nThing = 1\n",
            "hardgrad/nn/_b.py": """
                def helper():
                    from . import _a  # lazy, still a circle
                    return _a
            """,
            "hardgrad/ops/__init__.py": "from .. import _core\nfrom .._core import kernels\n",
        },
    )
    graph = import_graph(tmp_path, "hardgrad")
    assert upward_imports(graph) == [
        "hardgrad._core.kernels (layer 0) imports hardgrad.nn (layer 6)"
    ]
    assert circles(graph) == [["hardgrad.nn._a", "hardgrad.nn._b"]]
    assert graph["hardgrad.ops"] == {"hardgrad._core", "hardgrad._core.kernels"}
