"""The ``l0`` benchmark's runner: the runs per method and seed, and the registered task
(see :mod:`hardgrad.bench.l0`)."""

from __future__ import annotations

import dataclasses
import itertools

from .._seeds import check_runs, train_over_seeds
from .._task import BenchSettings, Progress, Table, TaskResult, task
from ..data import load_dataset
from ._config import L0Config, default_config
from ._report import _plot
from ._train import train_and_evaluate

KEYS = (
    "accuracy",
    "gate_sparsity",
    "input_sparsity",
    "hidden_sparsity",
    "weight_sparsity",
    "ms_per_step",
)


@task(
    "l0",
    "L0 pruning of an MLP on digits with Hard Concrete gates: sparsity vs accuracy",
    default_config,
)
def run(settings: BenchSettings, config: L0Config, progress: Progress) -> TaskResult:
    """Train for every penalty weight from ``config.seeds`` seeds; report the trade-off."""
    check_runs(config.seeds, config.steps)
    data = load_dataset(settings.data, settings.seed)
    progress.start("l0", len(config.lambdas) * config.seeds)
    rows = train_over_seeds(
        config.lambdas,
        lambda lam, seed: train_and_evaluate(lam, data, config, seed),
        seeds=config.seeds,
        base_seed=settings.seed,
        keys=KEYS,
        label="lambda",
        progress=progress,
        threads=config.threads,
        describe=lambda lam: f"lambda {lam}",
    )
    progress.finish()
    table = Table(
        title=f"L0 pruning on {data.name} (test set, {config.seeds} seed(s), {config.steps} steps)",
        columns=[
            "lambda",
            "accuracy (%)",
            "gates off (%)",
            "inputs off (%)",
            "hidden off (%)",
            "weights removed (%)",
            "ms / step",
        ],
    )
    for r in rows:
        table.rows.append(
            [
                f"{r['lambda']:g}",
                f"{100 * r['accuracy']['mean']:.1f} ± {100 * r['accuracy']['std']:.1f}",
                f"{100 * r['gate_sparsity']['mean']:.1f}",
                f"{100 * r['input_sparsity']['mean']:.1f}",
                f"{100 * r['hidden_sparsity']['mean']:.1f}",
                f"{100 * r['weight_sparsity']['mean']:.1f}",
                f"{r['ms_per_step']['mean']:.2f}",
            ]
        )
    notes = [
        f"MLP {data.features}-{config.hidden}-10 with Hard Concrete gates on inputs and hidden "
        f"units (beta 2/3, gamma -0.1, zeta 1.1, init keep 0.9); loss = cross-entropy + lambda "
        f"x expected share of open gates; Adam lr {config.lr} (gates {config.gate_lr}), batch "
        f"{config.batch_size}. Test-time gates are deterministic."
    ]
    if len(rows) >= 2:
        first, last = rows[0], rows[-1]
        monotone = all(
            a["weight_sparsity"]["mean"] <= b["weight_sparsity"]["mean"] + 1e-9
            for a, b in itertools.pairwise(rows)
        )
        notes.append(
            f"From lambda {first['lambda']:g} to {last['lambda']:g}: weights removed "
            f"{100 * first['weight_sparsity']['mean']:.1f} % -> "
            f"{100 * last['weight_sparsity']['mean']:.1f} %, accuracy "
            f"{100 * first['accuracy']['mean']:.1f} % -> {100 * last['accuracy']['mean']:.1f} %; "
            f"sparsity {'grows' if monotone else 'does not grow'} monotonically with lambda."
        )
    figures: list[str] = []
    if settings.out is not None and config.plot:
        name = _plot(rows, settings.out, config, quick=settings.quick)
        if name is not None:
            figures.append(name)
    result = TaskResult(
        name="l0",
        summary=f"L0 pruning on {data.name}: {len(config.lambdas)} penalty weights",
        settings=dataclasses.asdict(config),
        data={"dataset": data.name, "rows": rows},
    )
    result.tables = [table]
    result.notes = notes
    result.figures = figures
    return result
