"""The benchmark task registry and the plain data a task returns.

A task is a function ``run(settings, config, progress) -> TaskResult`` filed in
:data:`TASKS` under its name with :func:`task`; ``hardgrad bench`` and ``hardgrad list``
read the registry, so a new benchmark only has to register itself (and be imported by
:mod:`hardgrad.bench`).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .._core.registry import Registry


def available_threads() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one), shared
    with the other processes ``torchrun`` started on this node (``LOCAL_WORLD_SIZE``), so
    that ranks do not oversubscribe the machine."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        cores = os.cpu_count() or 1
    local_ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    return max(1, cores // local_ranks)


@dataclass(frozen=True)
class BenchSettings:
    """Settings shared by every task of one ``hardgrad bench`` run.

    Attributes:
        quick: the reduced setting (``--quick``): fewer repeats and smaller problems.
        seed: seed of every random draw.
        device: torch device string the task runs on.
        threads: intra-op threads (``torch.set_num_threads``).
        out: folder for ``results.json``, ``report.md`` and plots; ``None`` writes nothing.
        data: a folder of MNIST-format IDX files for the training tasks; ``None`` uses
            scikit-learn's digits (see :mod:`hardgrad.bench.data`).
    """

    quick: bool = False
    seed: int = 0
    device: str = "cpu"
    threads: int = field(default_factory=available_threads)
    out: Path | None = None
    data: Path | None = None


@dataclass
class Table:
    """A result table: a title, column names and rows of already formatted cells."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class TaskResult:
    """What a task hands back: tables to print, figures to keep, JSON-able data."""

    name: str
    summary: str
    settings: dict[str, Any]
    data: dict[str, Any]
    tables: list[Table] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)
    wall_s: float = 0.0


class Progress(Protocol):
    """How a task reports progress (to stderr); see :mod:`hardgrad.bench.report`."""

    def start(self, description: str, total: int) -> None:
        """Begin a task of ``total`` steps."""

    def advance(self, description: str | None = None, steps: int = 1) -> None:
        """``steps`` more steps are done; ``description`` says what comes next."""

    def log(self, message: str) -> None:
        """A line worth keeping (a warning, a finished sub-step)."""

    def finish(self) -> None:
        """The task is over."""


RunFn = Callable[[BenchSettings, Any, Progress], TaskResult]


@dataclass(frozen=True)
class Task:
    """A registered benchmark.

    Attributes:
        name: the name ``hardgrad bench NAME`` takes.
        summary: one line for ``hardgrad list``.
        run: ``run(settings, config, progress) -> TaskResult``.
        config: ``config(quick) -> config object`` (a dataclass) with the task's defaults.
    """

    name: str
    summary: str
    run: RunFn
    config: Callable[[bool], Any]


#: Every benchmark task, in registration order.
TASKS: Registry[Task] = Registry("task")


def task(name: str, summary: str, config: Callable[[bool], Any]) -> Callable[[RunFn], RunFn]:
    """Decorator that registers ``run`` as the benchmark task ``name``."""

    def register(run: RunFn) -> RunFn:
        TASKS.register(name)(Task(name, summary, run, config))
        return run

    return register
