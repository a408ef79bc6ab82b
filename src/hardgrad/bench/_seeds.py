"""Training a task's variants over several seeds: the loop the training tasks share."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ._task import Progress


def check_runs(
    seeds: int, steps: int, chosen: Sequence[str] = (), known: Sequence[str] = (), what: str = ""
) -> None:
    """``ValueError`` unless ``seeds`` and ``steps`` are at least 1 and every name in
    ``chosen`` is one of ``known`` (the config field ``what``, e.g. ``"methods"``)."""
    if seeds < 1 or steps < 1:
        raise ValueError(f"Expected `seeds` and `steps` >= 1, but found {seeds} and {steps}")
    for name in chosen:
        if name not in known:
            raise ValueError(
                f"Unknown {what.rstrip('s')} {name!r} in `{what}`; available: {', '.join(known)}"
            )


def mean_std(values: Sequence[float]) -> dict[str, float]:
    """``{"mean", "std"}`` of ``values`` (sample standard deviation; 0 for one value)."""
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


def train_over_seeds(
    variants: Sequence[Any],
    train: Callable[[Any, int], dict[str, Any]],
    *,
    seeds: int,
    base_seed: int,
    keys: Sequence[str],
    label: str,
    progress: Progress,
    threads: int | None = None,
    describe: Callable[[Any], str] = str,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """``train(variant, seed)`` for every variant and seed ``1000 * base_seed + s``; one row
    per variant: ``{label: variant, "runs": [...], key: mean_std over runs for each key}``.

    With ``threads``, intra-op threads are set for the loop and restored after it;
    ``on_row`` sees each row when it is done (e.g. to log it).
    """
    previous = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(max(1, threads))
    rows = []
    try:
        for variant in variants:
            runs = []
            for s in range(seeds):
                progress.advance(f"{describe(variant)}, seed {s + 1}/{seeds}", steps=0)
                runs.append(train(variant, base_seed * 1000 + s))
                progress.advance()
            row: dict[str, Any] = {label: variant, "runs": runs}
            for key in keys:
                row[key] = mean_std([float(r[key]) for r in runs])
            rows.append(row)
            if on_row is not None:
                on_row(row)
    finally:
        torch.set_num_threads(previous)
    return rows
