"""Benchmarks and the command line (``hardgrad bench``, ``hardgrad list``).

Every task registers itself in :data:`TASKS` (see :func:`task`); reading ``TASKS`` from
this package imports every task module of :data:`TASK_MODULES` so that the registry is
complete. Importing the package itself imports neither torch nor a task (the command line's
``--help`` stays fast). Nothing in :mod:`hardgrad` imports this package.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from . import _task
from ._task import BenchSettings, Progress, Table, Task, TaskResult, available_threads, task

if TYPE_CHECKING:
    from .._core.registry import Registry

#: Every task's name -> the module that registers it (``<task package>._run``, relative to
#: this package), in the order of DESIGN.md (toy, poly,
#: vae-categorical, vae-bernoulli, qat, speed, ...). The command line reads the names from
#: here without importing torch or the task modules (``hardgrad --help`` stays fast); the
#: modules are imported, in this order, when :data:`TASKS` is first read.
#: ``tests/bench/test_cli.py`` checks that it names exactly the registered tasks.
TASK_MODULES: dict[str, str] = {
    "toy": "toy._run",
    "poly": "poly._run",
    "vae-categorical": "vae_categorical._run",
    "vae-bernoulli": "vae_bernoulli._run",
    "qat": "qat._run",
    "speed": "speed._run",
    "vq": "vq._run",
    "models": "models._run",
    "moe": "moe._run",
    "shortest-path": "shortest_path._run",
    "l0": "l0._run",
    "ranking": "ranking._run",
    "snn": "snn._run",
    "policy": "policy._run",
}

#: The attributes imported on first use: each task's package and the public plumbing.
_LAZY_MODULES = frozenset(m.split(".")[0] for m in TASK_MODULES.values()) | {
    "data",
    "plots",
    "report",
    "cli",
}


def _all_tasks() -> Registry[Task]:
    """:data:`TASKS` with every task module imported, in :data:`TASK_MODULES`' order."""
    for module in TASK_MODULES.values():
        importlib.import_module(f"{__name__}.{module}")
    registry = _task.TASKS
    order = {name: i for i, name in enumerate(TASK_MODULES)}
    if list(registry.names()) != sorted(registry.names(), key=lambda n: order.get(n, len(order))):
        # a task module imported on its own before the others registered out of order
        entries = dict(registry.items())
        registry._entries = {
            n: entries[n] for n in sorted(entries, key=lambda n: order.get(n, len(order)))
        }
    return registry


def __getattr__(name: str) -> Any:
    """``TASKS`` (every task registered) and the task modules, imported on first use."""
    if name == "TASKS":
        return _all_tasks()
    if name in _LAZY_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "TASKS",
    "TASK_MODULES",
    "BenchSettings",
    "Progress",
    "Table",
    "Task",
    "TaskResult",
    "available_threads",
    "l0",
    "models",
    "moe",
    "policy",
    "poly",
    "qat",
    "ranking",
    "run_tasks",
    "shortest_path",
    "snn",
    "speed",
    "task",
    "toy",
    "vae_bernoulli",
    "vae_categorical",
    "vq",
]


def run_tasks(
    names: Sequence[str],
    settings: BenchSettings,
    *,
    configs: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    on_result: Callable[[TaskResult], None] | None = None,
    log: IO[str] | None = None,
) -> list[TaskResult]:
    """Run the named tasks (all registered ones when ``names`` is empty).

    Sets the intra-op thread count and seed from ``settings``; writes ``results.json`` and
    ``report.md`` to ``settings.out`` when it is set. Under ``torchrun`` it joins the
    process group first (see :mod:`hardgrad.bench._distributed`); only rank 0 reports. ``configs`` overrides a task's default
    config (``task.config(settings.quick)``), e.g. for tests. ``on_result`` is called
    with each result as soon as its task is done (the CLI prints it). With ``log`` (the CLI
    passes stderr), a line when each task starts, with its estimated time (see
    :mod:`hardgrad.bench._eta`), and one when it ends, with the time it took.
    """
    import io

    import torch

    from . import _distributed, _eta
    from .report import PlainProgress, make_progress, write_results

    registry = _all_tasks()
    chosen = list(names) or list(registry.names())
    tasks = [registry.get(name, "task") for name in chosen]
    already_in_group = torch.distributed.is_available() and torch.distributed.is_initialized()
    _distributed.setup(settings.device)  # under torchrun: join the ranks' process group
    settings = dataclasses.replace(settings, device=_distributed.local_device(settings.device))
    main = _distributed.is_main()  # only rank 0 reports and writes
    if not main:
        progress = PlainProgress(io.StringIO())
    progress = progress if progress is not None else make_progress()
    results: list[TaskResult] = []
    if not main:
        log = None
    previous = _eta.previous_times(settings.out, settings.quick) if log is not None else {}
    estimates = [_eta.estimate(t.name, settings.quick, previous) for t in tasks]
    threads = torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    try:
        for i, entry in enumerate(tasks):
            torch.manual_seed(settings.seed)
            config = (configs or {}).get(entry.name) or entry.config(settings.quick)
            where = f"[bench {i + 1}/{len(tasks)}] {entry.name}"
            if log is not None:
                print(f"{where}: started, {_estimate_text(estimates[i:])}", file=log, flush=True)
            t0 = time.perf_counter()
            result = entry.run(settings, config, progress)
            result.wall_s = time.perf_counter() - t0
            if log is not None:
                expected = estimates[i]
                print(
                    f"{where}: done in {_eta.duration(result.wall_s)}"
                    + (f" (estimate {_eta.duration(expected[0])})" if expected else ""),
                    file=log,
                    flush=True,
                )
            results.append(result)
            if main and settings.out is not None:  # keep what is done if a later task fails
                write_results(settings.out, settings, results)
            if main and on_result is not None:
                on_result(result)
    finally:
        torch.set_num_threads(threads)
        if not already_in_group:
            _distributed.teardown()
    return results


def _estimate_text(estimates: Sequence[tuple[float, str] | None]) -> str:
    """``estimate 30 s (measured quick time); about 4 min 10 s left in all`` for the
    estimates of this task and those after it."""
    from ._eta import duration

    first = estimates[0]
    if first is None:
        return "no estimate (no earlier run in the --out folder)"
    text = f"estimate {duration(first[0])} ({first[1]})"
    if len(estimates) > 1 and all(e is not None for e in estimates):
        text += f"; about {duration(sum(e[0] for e in estimates if e))} left in all"
    return text
