"""The table and notes of the ``snn`` benchmark, computed from its runs."""

from __future__ import annotations

import statistics
from typing import Any

from .._task import Table
from ..data import Dataset
from ._config import SnnConfig


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def _table(rows: list[dict[str, Any]], config: SnnConfig) -> Table:
    table = Table(
        f"Spiking MLP on digits, {config.steps} steps, rate-coded: test accuracy (%) per step "
        f"surrogate, mean ± std over {config.seeds} seed(s), {config.epochs} epochs",
        [
            "surrogate",
            "σ'(0)",
            "test acc",
            "min–max",
            "spike rate",
            "train loss",
            "ms/step",
            "trains",
        ],
    )
    for r in rows:
        acc = r["test_accuracy"]
        spread = f" ± {100 * acc['std']:.1f}" if config.seeds > 1 else ""
        table.rows.append(
            [
                r["label"],
                f"{r['peak']:.3g}",
                f"{100 * acc['mean']:.1f}{spread}",
                f"{100 * acc['min']:.1f}–{100 * acc['max']:.1f}",
                f"{r['spike_rate']:.3f}",
                f"{statistics.fmean(r['final_loss']):.3f}",
                f"{r['ms_per_step']:.1f}",
                r["verdict"],
            ]
        )
    return table


def _notes(rows: list[dict[str, Any]], config: SnnConfig, data: Dataset) -> list[str]:
    classes = rows[0]["classes"] if rows else 10
    trains = [r["label"] for r in rows if r["verdict"] == "yes"]
    partly = [r["label"] for r in rows if r["verdict"] == "partly"]
    fails = [r["label"] for r in rows if r["verdict"] == "no"]
    notes = [
        f"Data: {data.name}, {len(data.x_train)} train / {len(data.x_test)} test images, "
        f"Bernoulli rate code over {config.steps} steps; network {data.features}-"
        f"{config.hidden}-{classes}, LIF beta {config.beta}, threshold 1, subtract reset; Adam "
        f"lr {config.lr}, batch {config.batch_size}, {config.epochs} epochs, {config.seeds} "
        f"seed(s); loss: cross-entropy of the output spike counts. Chance: {100 / classes:.0f} %.",
        f"Train (mean test accuracy within {100 * config.close_to_best:.0f} pp of the best): "
        + (", ".join(trains) or "none")
        + f". Partly (at least {100 * config.trains_at:.0f} %, but further below the best): "
        + (", ".join(partly) or "none")
        + ". Do not train: "
        + (", ".join(fails) or "none")
        + ".",
        "spike rate: spikes per hidden neuron per time step on the test set; σ'(0): the "
        "surrogate's derivative at the threshold; ms/step: median wall time of one training "
        "step (forward and backward through all time steps).",
    ]
    if rows:
        best = max(rows, key=lambda r: r["test_accuracy"]["mean"])
        notes.append(
            f"Best: {best['label']} at {100 * best['test_accuracy']['mean']:.1f} % test accuracy."
        )
    return notes
