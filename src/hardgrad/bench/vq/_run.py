"""The ``vq`` benchmark's runner: the runs per method and seed, and the registered task
(see :mod:`hardgrad.bench.vq`)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch

from .._seeds import check_runs
from .._task import BenchSettings, Progress, TaskResult, task
from ..data import load_dataset
from ._config import VARIANTS, VQConfig, default_config
from ._report import _notes, _plot, _stat, _tables
from ._residual import residual_rows, residual_runs
from ._residual_report import residual_notes, residual_plot, residual_table
from ._train import train_and_evaluate

#: The bottlenecks, in table order.


@task(
    "vq",
    "VQ-VAE on digits: STE, rotation trick, Gumbel, EMA codebook, FSQ, LFQ, residual VQ; "
    "recon and usage",
    default_config,
)
def run(settings: BenchSettings, config: VQConfig, progress: Progress) -> TaskResult:
    """Train every bottleneck from ``config.seeds`` seeds at equal steps, then the residual
    rows; report the metrics."""
    t_start = time.perf_counter()
    check_runs(config.seeds, config.steps, config.variants, VARIANTS, "variants")
    data = load_dataset(settings.data, settings.seed)
    progress.start("vq", len(config.variants) * config.seeds + residual_runs(config))
    threads = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(max(1, config.threads))
    rows = []
    try:
        for variant in config.variants:
            runs = []
            for s in range(config.seeds):
                progress.advance(f"{variant}, seed {s + 1}/{config.seeds}", steps=0)
                runs.append(train_and_evaluate(variant, data, config, settings.seed * 1000 + s))
                progress.advance()
            row: dict[str, Any] = {"variant": variant, "runs": runs}
            for key in ("recon_mse", "usage", "perplexity", "dead", "commit", "ms_per_step"):
                row[key] = _stat([float(r[key]) for r in runs])
            rows.append(row)
            progress.log(
                f"{variant}: recon MSE {1000 * row['recon_mse']['mean']:.2f}e-3, "
                f"usage {100 * row['usage']['mean']:.1f} %"
            )
        residual = residual_rows(data, config, settings.seed, progress)
    finally:
        torch.set_num_threads(threads)
    progress.finish()
    figures: list[str] = []
    if settings.out is not None and config.plot:
        name = _plot(rows, settings.out, config, quick=settings.quick)
        if name is not None:
            figures.append(name)
        name = residual_plot(residual, settings.out, config, quick=settings.quick)
        if name is not None:
            figures.append(name)
    result = TaskResult(
        name="vq",
        summary=f"VQ-VAE on {data.name}: six quantizers and residual VQ at {config.steps} "
        f"steps, {config.seeds} seed(s)",
        settings=dataclasses.asdict(config),
        data={"dataset": data.name, "rows": rows, "residual": residual, "figures": figures},
        wall_s=time.perf_counter() - t_start,
    )
    result.tables = _tables(rows, config) + ([residual_table(residual, config)] if residual else [])
    result.notes = _notes(rows, config, data) + residual_notes(residual, config)
    result.figures = figures
    return result
