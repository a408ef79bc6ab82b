"""What the two VAE benchmarks' runners share: the settings checked, the training setup read
from them, one training run per estimator, the -ELBO table and the diagnostics at shared
parameters as JSON.

``config`` is either task's settings (``BernoulliVAEConfig`` or ``CategoricalVAEConfig``):
both have the fields read here."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .._task import BenchSettings, Progress, Table
from ..data import Dataset
from ._train import Setup, chosen_names, spaced, train


def checked_estimators(config: Any, dist: str) -> list[str]:
    """The estimators ``config`` runs (:func:`chosen_names` for ``dist``), once its step,
    batch and draw counts are checked; its ``reference`` must be among them."""
    if config.steps < 1 or config.batch < 1 or config.num_draws < 2:
        raise ValueError(
            "Expected `steps` >= 1, `batch` >= 1 and `num_draws` >= 2, but found "
            f"{config.steps}, {config.batch}, {config.num_draws}"
        )
    names = chosen_names(config.estimators, dist)
    if config.reference not in names:
        raise ValueError(f"Expected `reference` among {names}, but found {config.reference!r}")
    return names


def setup_from(
    config: Any,
    *,
    latents: int,
    categories: int | None,
    enc_hidden: tuple[int, ...],
    dec_hidden: tuple[int, ...],
    binarize: bool,
) -> Setup:
    """The :class:`Setup` of one model shape: the shape as given, the training and
    diagnostics from ``config`` (``curve_points`` and ``checkpoints`` spread evenly over the
    steps; no exact-gradient comparison)."""
    return Setup(
        latents=latents,
        categories=categories,
        enc_hidden=enc_hidden,
        dec_hidden=dec_hidden,
        binarize=binarize,
        steps=config.steps,
        batch=config.batch,
        lr=config.lr,
        evaluations=config.evaluations,
        eval_steps=spaced(config.steps, config.curve_points),
        checkpoints=spaced(config.steps, config.checkpoints),
        diag_batch=config.diag_batch,
        num_draws=config.num_draws,
        exact=False,
        curve_samples=config.curve_samples,
        test_samples=config.test_samples,
    )


def train_each(
    names: list[str],
    setup: Setup,
    reference: str,
    data: Dataset,
    settings: BenchSettings,
    tag: str,
    progress: Progress,
    progress_prefix: str = "",
) -> dict[str, dict[str, Any]]:
    """One :func:`train` run per estimator of ``names``, by name; the ``reference`` run keeps
    its parameters at the checkpoints (for :func:`shared_diagnostics`). Each run advances
    ``progress`` with its test -ELBO, after ``progress_prefix``."""
    runs: dict[str, dict[str, Any]] = {}
    for name in names:
        this = dataclasses.replace(setup, keep_states=name == reference)
        runs[name] = train(name, this, data, settings, tag)
        progress.advance(f"{progress_prefix}{name}: test -ELBO {runs[name]['test_neg_elbo']:.2f}")
    return runs


def elbo_table(
    title: str,
    runs: dict[str, dict[str, Any]],
    variance_columns: list[str],
    variance_cells: Callable[[dict[str, Any]], list[str]],
) -> Table:
    """One row per run: whether the estimator is unbiased, its samples and evaluations of
    ``f`` per example, the final train and test -ELBO, the gradient variance along its own
    run (``variance_columns``, filled by ``variance_cells(run)``) and its time per step."""
    table = Table(
        title,
        [
            "estimator",
            "unbiased",
            "samples",
            "f evals",
            "train -ELBO",
            "test -ELBO",
            *variance_columns,
            "ms/step",
        ],
    )
    for name, r in runs.items():
        table.rows.append(
            [
                name,
                "yes" if r["unbiased"] else "no",
                str(r["num_samples"]),
                str(r["evaluations"]),
                f"{r['train_neg_elbo']:.2f}",
                f"{r['test_neg_elbo']:.2f}",
                *variance_cells(r),
                f"{r['ms_per_step']:.2f}",
            ]
        )
    return table


def public_shared(
    shared: dict[int, dict[str, dict[str, Any]]],
) -> dict[str, dict[str, dict[str, Any]]]:
    """:func:`shared_diagnostics`' result as JSON: keyed by the step as a string, each
    estimator's diagnostics without their mean gradient."""
    return {
        str(step): {n: {k: v for k, v in d.items() if k != "mean"} for n, d in per.items()}
        for step, per in shared.items()
    }
