"""Spawned ``torch.distributed`` ranks for the tests, with bounds on their lifetime.

Seen in CI-like runs (a clean clone, the whole suite in one pytest process that ran
``torch.compile`` tests before): spawned rank interpreters finished their work, saved
their results, called ``destroy_process_group`` and then hung at interpreter exit in
gloo's threads, so ``start_processes(join=True)`` waited forever. :func:`run_ranks` waits
for the results instead: once they are all there, ranks still alive after ``linger_s`` are
killed; a run that passes ``deadline_s`` is killed and fails the test.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import torch

#: How long ranks whose results are all in may take to exit before they are killed.
LINGER_S = 10.0
#: A hard bound on one spawned run (they take seconds; a stuck rank fails the test).
DEADLINE_S = 300.0


def run_ranks(
    worker: Callable[..., Any],
    args: tuple[Any, ...],
    nprocs: int,
    done: Callable[[], bool],
    *,
    linger_s: float = LINGER_S,
    deadline_s: float = DEADLINE_S,
) -> None:
    """``worker(rank, *args)`` in ``nprocs`` spawned processes; returns when they have exited,
    or when ``done()`` (every rank's results are in) has held for ``linger_s`` (stragglers
    are killed). Raises if a rank fails; fails the test past ``deadline_s``."""
    context = torch.multiprocessing.start_processes(
        worker, args=args, nprocs=nprocs, start_method="spawn", join=False
    )
    deadline = time.monotonic() + deadline_s
    finished: float | None = None
    while not context.join(timeout=1):  # raises if a rank failed
        if done():
            finished = finished or time.monotonic()
            if time.monotonic() - finished > linger_s:
                _kill(context)
                return
        if time.monotonic() > deadline:
            _kill(context)
            pytest.fail(f"the {nprocs} spawned ranks did not finish within {deadline_s:g} s")


def _kill(context: Any) -> None:
    for process in context.processes:
        if process.is_alive():
            process.kill()
            process.join(5)
