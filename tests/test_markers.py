"""The markers that keep ``make test-fast`` fast are where they belong: every test function
that calls ``torch.compile`` is marked ``compile`` (``test-fast`` runs ``-m "not slow and not
compile"``; a compile costs seconds)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def _calls_torch_compile(node: ast.AST) -> bool:
    for call in ast.walk(node):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute):
            func = call.func
            if (
                func.attr == "compile"
                and isinstance(func.value, ast.Name)
                and func.value.id == "torch"
            ):
                return True
    return False


def _marks(decorators: list[ast.expr]) -> set[str]:
    names = set()
    for decorator in decorators:
        for node in ast.walk(decorator):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "mark"
            ):
                names.add(node.attr)
    return names


def unmarked_compile_tests(root: Path) -> list[str]:
    """``path::name`` of the test functions under ``root`` that call ``torch.compile``
    without the ``compile`` mark (on the function or in the module's ``pytestmark``)."""
    found = []
    for path in sorted(root.rglob("test_*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        module_marks: set[str] = set()
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
            ):
                module_marks |= _marks([node.value])
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test"):
                marks = module_marks | _marks(node.decorator_list)
                if "compile" not in marks and _calls_torch_compile(node):
                    found.append(f"{path.relative_to(root)}::{node.name}")
    return found


def test_every_test_that_compiles_is_marked_compile():
    assert unmarked_compile_tests(TESTS) == []


def test_the_scan_finds_an_unmarked_compile(tmp_path):
    (tmp_path / "test_made_up.py").write_text(
        "import pytest, torch\n"
        "def test_plain():\n    torch.compile(lambda x: x)\n"
        "@pytest.mark.compile\ndef test_marked():\n    torch.compile(lambda x: x)\n"
        "def test_comment_only():\n    pass  # torch.compile(...) in a comment\n"
    )
    assert unmarked_compile_tests(tmp_path) == ["test_made_up.py::test_plain"]
