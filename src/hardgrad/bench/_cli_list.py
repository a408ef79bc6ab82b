"""``hardgrad list``: every public name of hardgrad, one line each, grouped by family
(:mod:`hardgrad.bench._catalog`), the ops, surrogates and estimators read from their
registries, and the benchmark tasks; tables folded to the terminal's width, full width when
piped."""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import textwrap
from collections.abc import Iterable, Sequence
from typing import IO, TYPE_CHECKING, Any

from .._core.registry import Registry

if TYPE_CHECKING:
    pass


def _plain(text: str) -> str:
    """reStructuredText roles and literals as plain text: ``:math:`x` `` -> ``x``."""
    from ._catalog import plain

    return plain(text)


def _first_line(obj: Any) -> str:
    """The first paragraph of ``obj``'s docstring on one line."""
    from ._catalog import summary

    return summary(obj)


def _columns(rows: Iterable[Sequence[str]], out: IO[str], indent: str = "  ") -> None:
    """Aligned columns; on a terminal the last one is wrapped to its width (nothing is cut
    short), piped it is printed whole on one line."""
    rows = [list(r) for r in rows]
    if not rows:
        return
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    width = shutil.get_terminal_size().columns if _is_terminal(out) else 0
    for row in rows:
        cells = [c.ljust(w) for c, w in zip(row[:-1], widths, strict=False)]
        head = indent + "  ".join(cells) + ("  " if cells else "")
        last = row[-1]
        if width and len(head) + len(last) > width:
            room = width - len(head)
            if room < _MIN_WRAP:  # too narrow beside the names: the text on its own lines
                print(head.rstrip(), file=out)
                head, room = indent + "    ", max(width - len(indent) - 4, _MIN_WRAP)
            lines = textwrap.wrap(last, room, break_on_hyphens=False) or [""]
            print(head + lines[0], file=out)
            for line in lines[1:]:
                print(" " * len(head) + line, file=out)
        else:
            print((head + last).rstrip(), file=out)


def _heading(text: str, out: IO[str]) -> None:
    """``text`` on its own lines, wrapped to the terminal's width on a terminal."""
    width = shutil.get_terminal_size().columns if _is_terminal(out) else 0
    for line in textwrap.wrap(text, width, subsequent_indent="  ") if width else [text]:
        print(line, file=out)


#: The least width the last column of ``hardgrad list`` is wrapped to beside the others.
_MIN_WRAP = 24


def _is_terminal(out: IO[str]) -> bool:
    isatty = getattr(out, "isatty", None)
    return bool(isatty and isatty())


def _estimator_registry() -> Registry[Any] | None:
    """``hardgrad.estimators``' registry once that module exists; ``None`` before."""
    try:
        module = importlib.import_module("hardgrad.estimators")
    except ModuleNotFoundError as error:
        if error.name == "hardgrad.estimators":
            return None
        raise
    preferred = getattr(module, "ESTIMATORS", None)
    if isinstance(preferred, Registry):
        return preferred
    for value in vars(module).values():
        if isinstance(value, Registry):
            return value
    return None


def _list(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import hardgrad

    from ..ops import OPS
    from ..surrogates import SURROGATES
    from . import TASKS
    from ._catalog import by_family, summary

    out = sys.stdout
    registry = _estimator_registry()
    ops = {id(OPS)} | {id(getattr(hardgrad, n)) for n in OPS.names() if n in hardgrad.__all__}
    surrogates = {id(SURROGATES)} | {id(cls) for _, cls in SURROGATES.items()}
    estimators = {id(registry)} | {id(e) for _, e in (registry.items() if registry else ())}
    _heading("hardgrad's public names by family (hg = hardgrad); docs pages in brackets.", out)
    for family, entries in by_family():
        print(file=out)
        _heading(f"{family.title} [{', '.join(family.guides)}]:", out)
        # A registry's block, where the family holds the registry; its entries are not
        # repeated below it.
        shown: set[int] = set()
        if any(e.path == "hg.ops.OPS" for e in entries):
            print("  Ops (hg.<name>; hg.ops.OPS):", file=out)
            _columns((_op_row(name, spec) for name, spec in OPS.items()), out, "    ")
            shown |= ops
        if any(e.path == "hg.surrogates.SURROGATES" for e in entries):
            print("  Surrogates (surrogate=NAME; hg.surrogates.SURROGATES):", file=out)
            _columns(
                (
                    [name, cls.__name__, f"[{', '.join(sorted(cls.applies_to))}]", _first_line(cls)]
                    for name, cls in SURROGATES.items()
                ),
                out,
                "    ",
            )
            shown |= surrogates
        if "hardgrad.estimators" in family.modules:  # the registry found where it is
            _list_estimators(registry, out)
            shown |= estimators
        rest = [[e.path, summary(e.obj)] for e in entries if id(e.obj) not in shown]
        if rest and shown:
            print("  Also:", file=out)
        _columns(rest, out, "    " if shown else "  ")
    print("\nBenchmark tasks (hardgrad bench TASK) [guides/benchmarks]:", file=out)
    _columns(([name, t.summary] for name, t in TASKS.items()), out)
    return 0


def _op_row(name: str, spec: Any) -> list[str]:
    family = f"[{spec.family or 'selection'}"
    if spec.default_surrogate:
        family += f", default surrogate {spec.default_surrogate!r}]"
    else:
        family += "]"
    return [name, family, _plain(spec.summary)]


def _list_estimators(registry: Registry[Any] | None, out: IO[str]) -> None:
    print("  Estimators (estimator=NAME; hg.estimators.ESTIMATORS):", file=out)
    if registry is None or len(registry) == 0:
        print("    (none yet: this version of hardgrad has no estimator registry)", file=out)
        return
    _columns(
        (
            [
                name,
                getattr(entry, "__name__", type(entry).__name__),
                _estimator_kind(entry),
                _first_line(entry),
            ]
            for name, entry in registry.items()
        ),
        out,
        "    ",
    )


def _estimator_kind(entry: object) -> str:
    """``[pathwise, biased]``-style tags: where it is usable and whether it is unbiased."""
    where = "pathwise" if getattr(entry, "pathwise", True) else "expectation only"
    bias = "unbiased" if getattr(entry, "unbiased", False) else "biased"
    return f"[{where}, {bias}]"
