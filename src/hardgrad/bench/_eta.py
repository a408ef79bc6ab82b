"""How long each benchmark task is expected to take, for the progress lines of
``hardgrad bench``.

The estimate of a task is its wall time in the previous run written to the same ``--out``
folder (``results.json``, same ``--quick`` setting), else :data:`QUICK_ESTIMATES_S` for the
quick setting, else none.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

#: Seconds each task took in one ``make bench`` (``hardgrad bench --quick --out DIR``) on a
#: fresh clone, 2 cores (an x86-64 Linux VM, torch 2.13.0 CPU, 2026-12-06, load average 1.0
#: to 1.2); a loaded machine takes longer, ``speed`` and ``models`` most (see the benchmarks
#: guide).
QUICK_ESTIMATES_S: dict[str, float] = {
    "toy": 8.0,
    "poly": 9.0,
    "vae-categorical": 10.0,
    "vae-bernoulli": 10.0,
    "qat": 6.0,
    "speed": 91.0,
    "vq": 18.0,
    "models": 19.0,
    "moe": 16.0,
    "shortest-path": 8.0,
    "l0": 9.0,
    "ranking": 7.0,
    "snn": 7.0,
    "policy": 8.0,
}


def previous_times(out: Path | None, quick: bool) -> dict[str, float]:
    """Each task's wall time in ``out/results.json`` when that run had the same ``quick``
    setting (``{}`` when there is none, or it cannot be read)."""
    if out is None:
        return {}
    try:
        document = json.loads((out / "results.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(document, dict) or document.get("quick") != quick:
        return {}
    tasks = document.get("tasks")
    if not isinstance(tasks, dict):
        return {}
    times = {}
    for name, entry in tasks.items():
        wall = entry.get("wall_s") if isinstance(entry, dict) else None
        if isinstance(wall, (int, float)) and math.isfinite(wall) and wall > 0:
            times[name] = float(wall)
    return times


def estimate(name: str, quick: bool, previous: Mapping[str, float]) -> tuple[float, str] | None:
    """``(seconds, where the figure comes from)`` for task ``name``, or ``None``."""
    if name in previous:
        return previous[name], "previous run"
    if quick and name in QUICK_ESTIMATES_S:
        return QUICK_ESTIMATES_S[name], "measured quick time"
    return None


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    return f"{seconds // 60} min {seconds % 60:02d} s"
