"""The ``ranking`` benchmark's runner: the runs per method and seed, and the registered task
(see :mod:`hardgrad.bench.ranking`)."""

from __future__ import annotations

import dataclasses

from .._seeds import check_runs, train_over_seeds
from .._task import BenchSettings, Progress, Table, TaskResult, task
from ._config import METHODS, RankingConfig, default_config
from ._train import make_data, train_and_evaluate


#: The methods, in table order.
@task(
    "ranking",
    "learning to rank with soft_rank and rank (soft, NeuralSort, SoftSort backwards)",
    default_config,
)
def run(settings: BenchSettings, config: RankingConfig, progress: Progress) -> TaskResult:
    """Train every method from ``config.seeds`` seeds at equal steps; report the metrics."""
    check_runs(config.seeds, config.steps, config.methods, METHODS, "methods")
    data = make_data(config, settings.seed)
    progress.start("ranking", len(config.methods) * config.seeds)
    rows = train_over_seeds(
        config.methods,
        lambda method, seed: train_and_evaluate(method, data, config, seed),
        seeds=config.seeds,
        base_seed=settings.seed,
        keys=("spearman", "exact", "ms_per_step"),
        label="method",
        progress=progress,
        threads=config.threads,
    )
    progress.finish()
    table = Table(
        title=f"Learning to rank {config.items} items (test set, {config.seeds} seed(s), "
        f"{config.steps} steps)",
        columns=["method", "Spearman rho", "lists exactly ranked (%)", "ms / step"],
    )
    for r in rows:
        table.rows.append(
            [
                r["method"],
                f"{r['spearman']['mean']:.4f} ± {r['spearman']['std']:.4f}",
                f"{100 * r['exact']['mean']:.1f} ± {100 * r['exact']['std']:.1f}",
                f"{r['ms_per_step']['mean']:.2f}",
            ]
        )
    notes = [
        f"{config.train} train / {config.test} test lists of {config.items} items, "
        f"p = {config.features}, score noise {config.noise}; scorer {config.features}-"
        f"{config.hidden}-1, batch {config.batch_size}, Adam lr {config.lr}; relaxation "
        f"strength {config.strength}; loss: squared rank error (score MSE: squared score error)."
    ]
    result = TaskResult(
        name="ranking",
        summary=f"learning to rank: {len(config.methods)} methods, {config.steps} steps",
        settings=dataclasses.asdict(config),
        data={"rows": rows},
    )
    result.tables = [table]
    result.notes = notes
    return result
