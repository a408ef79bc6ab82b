"""The ``shortest-path`` benchmark's runner: the runs per method and seed, and the registered task
(see :mod:`hardgrad.bench.shortest_path`)."""

from __future__ import annotations

import dataclasses

from .._seeds import check_runs, train_over_seeds
from .._task import BenchSettings, Progress, TaskResult, task
from ._config import METHODS, ShortestPathConfig, default_config
from ._report import _notes, _plot, _tables
from ._train import make_data, train_and_evaluate


#: The training methods, in table order.
@task(
    "shortest-path",
    "predict grid costs for Dijkstra: perturbed, I-MLE, blackbox, identity; regret",
    default_config,
)
def run(settings: BenchSettings, config: ShortestPathConfig, progress: Progress) -> TaskResult:
    """Train every method from ``config.seeds`` seeds at equal steps; report the metrics."""
    check_runs(config.seeds, config.steps, config.methods, METHODS, "methods")
    data = make_data(config, settings.seed)
    progress.start("shortest-path", len(config.methods) * config.seeds)
    rows = train_over_seeds(
        config.methods,
        lambda method, seed: train_and_evaluate(method, data, config, seed),
        seeds=config.seeds,
        base_seed=settings.seed,
        keys=("regret", "optimal", "ms_per_step"),
        label="method",
        progress=progress,
        threads=config.threads,
        on_row=lambda row: progress.log(
            f"{row['method']}: regret {100 * row['regret']['mean']:.2f} %"
        ),
    )
    progress.finish()
    figures: list[str] = []
    if settings.out is not None and config.plot:
        name = _plot(rows, settings.out, config, quick=settings.quick)
        if name is not None:
            figures.append(name)
    result = TaskResult(
        name="shortest-path",
        summary=f"shortest path on a {config.grid}x{config.grid} grid: "
        f"{len(config.methods)} methods, {config.steps} steps, {config.seeds} seed(s)",
        settings=dataclasses.asdict(config),
        data={"rows": rows},
    )
    result.tables = _tables(rows, config)
    result.notes = _notes(rows, config)
    result.figures = figures
    return result
