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


def _print_rich(result: TaskResult) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console()
    console.rule(f"[bold]{result.name}[/bold]: {result.summary}")
    for table in result.tables:
        rich_table = RichTable(title=table.title, title_justify="left")
        for i, column in enumerate(table.columns):
            numeric = bool(table.rows) and all(
                _looks_numeric(row[i]) or row[i] in ("", "-", "n/a") for row in table.rows
            )
            rich_table.add_column(column, justify="right" if numeric else "left")
        for row in table.rows:
            rich_table.add_row(*row)
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
    """The Markdown report: environment, then each task's tables, notes and figures."""
    lines = [
        "# hardgrad benchmark report",
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
        for table in r.tables:
            lines += [f"### {table.title}", "", markdown_table(table), ""]
            lines += [f"- {note}" for note in table.notes]
            if table.notes:
                lines.append("")
        if r.notes:
            lines += ["### Notes", ""]
            lines += [f"- {note}" for note in r.notes]
            lines.append("")
        for figure in r.figures:
            lines += [f"![{figure}]({figure})", ""]
    return "\n".join(lines)
