"""The ``snn`` benchmark's runner: the runs per method and seed, and the registered task
(see :mod:`hardgrad.bench.snn`)."""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

import torch

from .. import _distributed
from .._task import BenchSettings, Progress, TaskResult, task
from ..data import load_dataset
from ._config import SnnConfig, default_config, surrogate_choices
from ._report import _notes, _summary, _table
from ._train import train_and_evaluate


@task(
    "snn",
    "Rate-coded spiking MLP (LIF) on digits over 25 steps, per step surrogate: accuracy, "
    "spike rate, ms/step",
    default_config,
)
def run(settings: BenchSettings, config: SnnConfig, progress: Progress) -> TaskResult:
    """Train the spiking MLP with every surrogate from ``config.seeds`` seeds."""
    t_start = time.perf_counter()
    if config.seeds < 1 or config.epochs < 1 or config.steps < 1:
        raise ValueError(
            "Expected `seeds`, `epochs` and `steps` >= 1, but found "
            f"{config.seeds}, {config.epochs} and {config.steps}"
        )
    chosen = surrogate_choices(config)
    data = load_dataset(settings.data, settings.seed).to(settings.device)
    classes = int(max(int(data.y_train.max()), int(data.y_test.max()))) + 1
    progress.start("snn", len(chosen) * config.seeds)
    threads = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(max(1, config.threads))
    rows: list[dict[str, Any]] = []
    try:
        for label, surrogate in chosen.items():
            runs = []
            for s in range(config.seeds):
                progress.advance(f"{label}, seed {s + 1}/{config.seeds}", steps=0)
                seed = settings.seed * 1000 + s
                runs.append(train_and_evaluate(surrogate, data, config, seed, settings.device))
                progress.advance()
            accuracy = _summary([r["test_accuracy"] for r in runs])
            peak = float(surrogate.derivative(torch.zeros((), dtype=torch.float64)))
            rows.append(
                {
                    "label": label,
                    "surrogate": repr(surrogate),
                    "peak": peak,
                    "classes": classes,
                    "test_accuracy": {**accuracy, "values": [r["test_accuracy"] for r in runs]},
                    "spike_rate": statistics.fmean(r["spike_rate"] for r in runs),
                    "final_loss": [r["final_loss"] for r in runs],
                    "ms_per_step": statistics.fmean(r["ms_per_step"] for r in runs),
                    "seconds_mean": statistics.fmean(r["seconds"] for r in runs),
                    "trains": accuracy["mean"] >= config.trains_at,
                }
            )
            progress.log(f"{label}: test accuracy {100 * accuracy['mean']:.1f} %")
    finally:
        torch.set_num_threads(threads)
    progress.finish()
    best = max((r["test_accuracy"]["mean"] for r in rows), default=0.0)
    for r in rows:
        mean = r["test_accuracy"]["mean"]
        r["verdict"] = (
            "yes"
            if mean >= config.trains_at and mean >= best - config.close_to_best
            else "partly"
            if mean >= config.trains_at
            else "no"
        )
    result = TaskResult(
        name="snn",
        summary=f"Spiking MLP on {data.name}, {config.steps} steps: test accuracy per step "
        f"surrogate over {config.seeds} seed(s) ({settings.device})",
        settings=dataclasses.asdict(config),
        data={
            "dataset": data.name,
            "n_train": len(data.x_train),
            "n_test": len(data.x_test),
            "world_size": _distributed.world_size(),
            "rows": rows,
        },
        wall_s=time.perf_counter() - t_start,
    )
    result.tables = [_table(rows, config)]
    result.notes = _notes(rows, config, data)
    return result
