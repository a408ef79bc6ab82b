"""Benchmarks and the command line (``hardgrad bench``, ``hardgrad list``).

Every task registers itself in :data:`TASKS` (see :func:`task`); this package imports the
task modules so that the registry is complete. Nothing in :mod:`hardgrad` imports this
package.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

# Task modules register themselves on import (registration order = import order); add new
# ones in the order of DESIGN.md (toy, poly, vae-categorical, vae-bernoulli, qat, speed).
# isort: off
from . import toy
from . import poly
from . import vae_categorical
from . import vae_bernoulli
from . import qat
from . import speed
from . import vq
from . import models
from . import moe
from . import shortest_path
from . import l0
from . import ranking
from . import snn

# isort: on
from ._task import TASKS, BenchSettings, Progress, Table, Task, TaskResult, available_threads, task

__all__ = [
    "TASKS",
    "BenchSettings",
    "Progress",
    "Table",
    "Task",
    "TaskResult",
    "available_threads",
    "l0",
    "models",
    "moe",
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
) -> list[TaskResult]:
    """Run the named tasks (all registered ones when ``names`` is empty).

    Sets the intra-op thread count and seed from ``settings``; writes ``results.json`` and
    ``report.md`` to ``settings.out`` when it is set. Under ``torchrun`` it joins the
    process group first (see :mod:`hardgrad.bench._distributed`); only rank 0 reports. ``configs`` overrides a task's default
    config (``task.config(settings.quick)``), e.g. for tests. ``on_result`` is called
    with each result as soon as its task is done (the CLI prints it).
    """
    import io

    from . import _distributed
    from .report import PlainProgress, make_progress, write_results

    chosen = list(names) or list(TASKS.names())
    tasks = [TASKS.get(name, "task") for name in chosen]
    already_in_group = torch.distributed.is_available() and torch.distributed.is_initialized()
    _distributed.setup(settings.device)  # under torchrun: join the ranks' process group
    settings = dataclasses.replace(settings, device=_distributed.local_device(settings.device))
    main = _distributed.is_main()  # only rank 0 reports and writes
    if not main:
        progress = PlainProgress(io.StringIO())
    progress = progress if progress is not None else make_progress()
    results: list[TaskResult] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(settings.threads)
    try:
        for entry in tasks:
            torch.manual_seed(settings.seed)
            config = (configs or {}).get(entry.name) or entry.config(settings.quick)
            t0 = time.perf_counter()
            result = entry.run(settings, config, progress)
            result.wall_s = time.perf_counter() - t0
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
