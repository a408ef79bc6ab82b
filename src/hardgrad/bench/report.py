"""Progress on stderr, tables on stdout, and ``results.json`` / ``report.md`` on disk.

Rich is used where it is installed and the stream is a terminal; otherwise plain text.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import torch

from .._version import __version__
from ._task import BenchSettings, Table, TaskResult, available_threads

# --------------------------------------------------------------------------- progress


class PlainProgress:
    """Progress as plain lines on a stream (stderr by default)."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self._name = ""
        self._total = 0
        self._done = 0
        self._t0 = 0.0

    def _write(self, line: str) -> None:
        print(line, file=self.stream, flush=True)

    def start(self, description: str, total: int) -> None:
        self._name, self._total, self._done = description, total, 0
        self._t0 = time.perf_counter()
        self._write(f"[{description}] starting ({total} steps)")

    def advance(self, description: str | None = None, steps: int = 1) -> None:
        self._done += steps
        elapsed = time.perf_counter() - self._t0
        what = f" {description}" if description else ""
        self._write(f"[{self._name} {self._done}/{self._total} {elapsed:6.1f}s]{what}")

    def log(self, message: str) -> None:
        self._write(f"[{self._name}] {message}")

    def finish(self) -> None:
        elapsed = time.perf_counter() - self._t0
        self._write(f"[{self._name}] done in {elapsed:.1f}s")


class RichProgress:
    """Progress as a rich progress bar on stderr."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        self.console = Console(stderr=True)
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.fields[name]}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=self.console,
        )
        self._task: Any = None
        self._name = ""

    def start(self, description: str, total: int) -> None:
        self._name = description
        self._progress.start()
        self._task = self._progress.add_task("", total=total, name=description)

    def advance(self, description: str | None = None, steps: int = 1) -> None:
        if description is None:
            self._progress.advance(self._task, steps)
        else:
            self._progress.update(self._task, advance=steps, description=description)

    def log(self, message: str) -> None:
        from rich.markup import escape

        self._progress.console.print(f"[dim]\\[{escape(self._name)}][/dim] {escape(message)}")

    def finish(self) -> None:
        self._progress.stop()


def make_progress(stream: IO[str] | None = None) -> PlainProgress | RichProgress:
    """A rich progress bar when stderr is a terminal and rich is installed, else plain lines."""
    target = stream if stream is not None else sys.stderr
    if stream is None and target.isatty():
        try:
            return RichProgress()
        except ImportError:
            pass
    return PlainProgress(target)


# --------------------------------------------------------------------------- tables


def markdown_table(table: Table) -> str:
    """``table`` as an aligned Markdown pipe table (readable as plain text too)."""
    cells = [table.columns, *table.rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(table.columns))]

    def numeric(i: int) -> bool:
        values = [row[i] for row in table.rows if row[i] not in ("", "-", "n/a")]
        return bool(values) and all(_looks_numeric(v) for v in values)

    right = [numeric(i) for i in range(len(widths))]

    def line(row: Sequence[str]) -> str:
        parts = [
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, right, strict=True)
        ]
        return "| " + " | ".join(parts) + " |"

    rule = (
        "|"
        + "|".join(
            "-" * (w + 1) + ":" if r else "-" * (w + 2) for w, r in zip(widths, right, strict=True)
        )
        + "|"
    )
    return "\n".join([line(table.columns), rule, *(line(r) for r in table.rows)])


def _looks_numeric(text: str) -> bool:
    try:
        float(text.rstrip("×x%").replace(",", ""))
    except ValueError:
        return False
    return True


def print_result(result: TaskResult, stream: IO[str] | None = None) -> None:
    """Print a task's tables and notes (rich tables on a terminal, Markdown otherwise)."""
    out = stream if stream is not None else sys.stdout
    if stream is None and out.isatty():
        try:
            _print_rich(result)
            return
        except ImportError:
            pass
    print(f"\n## {result.name}: {result.summary}\n", file=out)
    for table in result.tables:
        print(f"### {table.title}\n", file=out)
        print(markdown_table(table), file=out)
        for note in table.notes:
            print(f"- {note}", file=out)
        print(file=out)
    for note in result.notes:
        print(f"- {note}", file=out)
    out.flush()


#: A text column is folded down to this width (or its longest cell, if shorter) at most;
#: when the columns do not fit so, the table is printed in parts of fewer columns.
_MIN_TEXT_WIDTH = 14
#: Characters between two columns of a rich table (padding and the blank separator), and
#: at its two edges together.
_GAP = 3
_EDGES = 2


def _column_needs(table: Table) -> tuple[list[int], list[int]]:
    """Each column's natural width (its longest cell or header) and the least it may be
    given: a numeric column its longest cell (a number is never broken), a text column
    :data:`_MIN_TEXT_WIDTH` or its longest cell if shorter (text folds)."""
    natural, needs = [], []
    for i, column in enumerate(table.columns):
        values = [len(row[i]) for row in table.rows]
        header = max((len(word) for word in column.split()), default=1)
        natural.append(max([*values, len(column), 1]))
        if _is_numeric_column([row[i] for row in table.rows]):
            needs.append(max([*values, min(header, _MIN_TEXT_WIDTH), 1]))
        else:
            needs.append(min(max([*values, header, 1]), _MIN_TEXT_WIDTH))
    return natural, needs


def _column_parts(table: Table, width: int) -> list[list[tuple[int, int]]]:
    """The ``(column index, width)`` pairs of each part ``table`` is printed in so that
    every line fits ``width`` characters.

    Every part starts with the first column (the row's name). Columns go into a part while
    their least widths (see :func:`_column_needs`) fit; then the widest columns of the part
    are narrowed, never below their least width, until the part fits. A column too wide
    even for a part of its own with the first column is folded there as far as it takes.
    """
    natural, needs = _column_needs(table)
    soft = [  # a column with its header wrapped at spaces
        max([len(row[i]) for row in table.rows] + [len(w) for w in column.split()] + [1])
        for i, column in enumerate(table.columns)
    ]
    parts: list[list[int]] = []
    current = [0]
    used = needs[0] + _EDGES
    for i in range(1, len(needs)):
        if len(current) > 1 and used + _GAP + needs[i] > width:
            parts.append(current)
            current, used = [0], needs[0] + _EDGES
        current.append(i)
        used += _GAP + needs[i]
    parts.append(current)
    laid_out = []
    for part in parts:
        widths = {i: natural[i] for i in part}
        room = width - _EDGES - _GAP * (len(part) - 1)
        floor = {i: needs[i] for i in part}
        if sum(floor.values()) > room:  # a part of two columns that cannot fit: fold more
            floor = {i: 1 if not _is_numeric(table, i) else needs[i] for i in part}
        # First wrap headers at their spaces, then narrow the widest columns.
        for i in part:
            excess = sum(widths.values()) - room
            if excess > 0:
                widths[i] -= min(excess, max(0, widths[i] - max(soft[i], floor[i])))
        while sum(widths.values()) > room:
            narrowable = [i for i in part if widths[i] > floor[i]]
            if not narrowable:
                break
            widths[max(narrowable, key=widths.__getitem__)] -= 1
        laid_out.append([(i, widths[i]) for i in part])
    return laid_out


def _is_numeric(table: Table, i: int) -> bool:
    return _is_numeric_column([row[i] for row in table.rows])


def _is_numeric_column(values: Sequence[str]) -> bool:
    return bool(values) and all(_looks_numeric(v) or v in ("", "-", "n/a") for v in values)


def _print_rich(result: TaskResult, console: Any = None) -> None:
    """``result`` as rich tables that fit the console's width: a text cell too wide for its
    column is folded onto more lines and a table too wide is printed in parts (each with
    the first column); no cell is cut short with an ellipsis and no number is broken."""
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table as RichTable

    console = console if console is not None else Console()
    heading = f"{result.name}: {result.summary}"
    if len(heading) + 4 <= console.width:
        console.rule(f"[bold]{escape(result.name)}[/bold]: {escape(result.summary)}")
    else:  # a rule would cut the heading short: print it whole, wrapped
        console.print(heading, style="bold", markup=False, highlight=False)
    for table in result.tables:
        parts = _column_parts(table, console.width)
        for k, indices in enumerate(parts):
            title = table.title
            if len(parts) > 1:
                title += f" (part {k + 1} of {len(parts)})"
            rich_table = RichTable(
                title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False
            )
            for i, column_width in indices:
                rich_table.add_column(
                    table.columns[i],
                    justify="right" if _is_numeric(table, i) else "left",
                    overflow="fold",
                    width=column_width,
                )
            for row in table.rows:
                rich_table.add_row(*(row[i] for i, _ in indices))
            console.print(rich_table)
        for note in table.notes:
            console.print(f"  • {note}", markup=False, highlight=False)
    for note in result.notes:
        console.print(f"• {note}", markup=False, highlight=False)


# --------------------------------------------------------------------------- files


def _world_size() -> int:
    from ._distributed import world_size

    return world_size()


def environment(settings: BenchSettings) -> dict[str, Any]:
    """Versions, machine and settings that every results.json starts with."""
    return {
        "hardgrad": __version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "device": settings.device,
        "threads": settings.threads,
        "cores_available": available_threads(),
        "seed": settings.seed,
        "quick": settings.quick,
        "data": "digits (scikit-learn)" if settings.data is None else str(settings.data),
        "world_size": _world_size(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["hardgrad", *sys.argv[1:]]) if sys.argv else "hardgrad",
    }


def _jsonable(value: Any) -> Any:
    """Plain JSON: non-finite floats become ``null``; tuples, paths and dtypes strings."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return str(value)


def write_results(
    out: Path, settings: BenchSettings, results: Sequence[TaskResult]
) -> tuple[Path, Path]:
    """Write ``out/results.json`` and ``out/report.md``; returns both paths."""
    out.mkdir(parents=True, exist_ok=True)
    env = environment(settings)
    document = {
        **env,
        "tasks": {
            r.name: {
                "summary": r.summary,
                "settings": r.settings,
                "wall_s": r.wall_s,
                "results": r.data,
                "notes": r.notes,
                "figures": r.figures,
            }
            for r in results
        },
    }
    json_path = out / "results.json"
    json_path.write_text(json.dumps(_jsonable(document), indent=2, allow_nan=False) + "\n")
    md_path = out / "report.md"
    md_path.write_text(markdown_report(env, results))
    return json_path, md_path


def markdown_report(env: dict[str, Any], results: Sequence[TaskResult]) -> str:
    """The Markdown report: the verdict (see :mod:`hardgrad.bench.verdict`), the
    environment, then each task's tables, notes and figures."""
    from .verdict import verdict_lines, verdicts_of

    verdict = verdict_lines(verdicts_of(results), quick=bool(env["quick"]))
    lines = [
        "# hardgrad benchmark report",
        "",
        f"## {verdict[0]}",
        "",
        verdict[1],
        "",
        *verdict[2:-1],  # the tasks, a list
        "",
        verdict[-1],
        "",
        "## Environment",
        "",
        f"- date: {env['date']}",
        f"- hardgrad {env['hardgrad']}, torch {env['torch']}, Python {env['python']}",
        f"- platform: {env['platform']} ({env['processor']})",
        f"- device: {env['device']}, threads: {env['threads']} (of {env['cores_available']} "
        f"cores), seed: {env['seed']}, "
        f"quick: {env['quick']}",
        f"- data: {env['data']}; processes: {env['world_size']}",
        f"- command: `{env['command']}`",
        "",
    ]
    for r in results:
        lines += [f"## {r.name}: {r.summary}", "", f"Wall time: {r.wall_s:.1f} s.", ""]
        settings = ", ".join(f"{k}={v}" for k, v in r.settings.items())
        lines += [f"Settings: {settings}.", ""]
        placed = figures_by_table(r.tables, r.figures)
        for i, table in enumerate(r.tables):
            lines += [f"### {table.title}", "", markdown_table(table), ""]
            lines += [f"- {note}" for note in table.notes]
            if table.notes:
                lines.append("")
            lines += figure_lines(placed.get(i, []))
        if r.notes:
            lines += ["### Notes", ""]
            lines += [f"- {note}" for note in r.notes]
            lines.append("")
        lines += figure_lines(placed.get(None, []))
    return "\n".join(lines)


def figures_by_table(
    tables: Sequence[Table], figures: Sequence[str]
) -> dict[int | None, list[str]]:
    """Where each figure goes in ``report.md``: under the last table whose title contains
    the figure's ``table`` (see :class:`hardgrad.bench._pyplot.FigureFile`), by the
    table's index; ``None``: at the end of the task's section."""
    placed: dict[int | None, list[str]] = {}
    for figure in figures:
        part = getattr(figure, "table", None)
        where = None
        if part:
            matches = [i for i, t in enumerate(tables) if part in t.title]
            where = matches[-1] if matches else None
        placed.setdefault(where, []).append(figure)
    return placed


def figure_lines(figures: Sequence[str]) -> list[str]:
    """Each figure as a Markdown image and a ``Figure: <file> — <caption>`` line."""
    lines: list[str] = []
    for figure in figures:
        caption = getattr(figure, "caption", "")
        lines += [
            f"![{figure}]({figure})",
            "",
            f"Figure: {figure}" + (f" — {caption}" if caption else ""),
            "",
        ]
    return lines
