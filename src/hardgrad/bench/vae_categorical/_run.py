"""The ``vae-categorical`` benchmark's runner: one training run per estimator, and the registered
task (see :mod:`hardgrad.bench.vae_categorical`)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from .. import _distributed
from .._task import BenchSettings, Progress, Table, TaskResult, task
from .._vae import (
    Setup,
    few_threads,
    fmt,
    plot_checkpoints,
    plot_curves,
    public,
    shared_diagnostics,
    spaced,
    train,
)
from ..data import load_dataset
from ._config import CategoricalVAEConfig, _names, default_config
from ._report import _notes


@task(
    "vae-categorical",
    "Categorical VAE on digits (8x4, 4x6): -ELBO and bias/std/cosine to the exact "
    "encoder-logit gradient per estimator",
    default_config,
)
def run(
    settings: BenchSettings, config: CategoricalVAEConfig | None, progress: Progress
) -> TaskResult:
    """Run the categorical VAE benchmark; see the package docstring."""
    config = config if config is not None else default_config(settings.quick)
    if config.steps < 1 or config.batch < 1 or config.num_draws < 2:
        raise ValueError(
            "Expected `steps` >= 1, `batch` >= 1 and `num_draws` >= 2, but found "
            f"{config.steps}, {config.batch}, {config.num_draws}"
        )
    names = _names(config)
    if config.reference not in names:
        raise ValueError(f"Expected `reference` among {names}, but found {config.reference!r}")
    data = load_dataset(settings.data, settings.seed).to(settings.device)
    progress.start("vae-categorical", (len(names) + 1) * len(config.configurations))
    t_start = time.perf_counter()
    panels: dict[str, dict[str, Any]] = {}
    shared_panels: dict[str, dict[str, dict[str, Any]]] = {}
    all_shared: dict[str, dict[int, dict[str, dict[str, Any]]]] = {}
    all_runs: dict[str, dict[str, dict[str, Any]]] = {}
    try:
        with few_threads(data.features):
            for latents, categories in config.configurations:
                label = f"{latents}x{categories}"
                setup = Setup(
                    latents=latents,
                    categories=categories,
                    enc_hidden=config.enc_hidden,
                    dec_hidden=config.dec_hidden,
                    binarize=False,
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
                runs: dict[str, dict[str, Any]] = {}
                for name in names:
                    this = dataclasses.replace(setup, keep_states=name == config.reference)
                    runs[name] = train(name, this, data, settings, f"cat{label}")
                    progress.advance(
                        f"{label} {name}: test -ELBO {runs[name]['test_neg_elbo']:.2f}"
                    )
                exact_setup = dataclasses.replace(setup, exact=True)
                shared = shared_diagnostics(
                    runs[config.reference], runs, exact_setup, data, settings, f"cat{label}"
                )
                progress.advance(f"{label}: exact-gradient comparison")
                all_runs[label], all_shared[label] = runs, shared
    finally:
        progress.finish()

    tables: list[Table] = []
    notes: list[str] = []
    data_out: dict[str, Any] = {"dataset": data.name, "configurations": {}, "figures": {}}
    for label, runs in all_runs.items():
        shared = all_shared[label]
        table = Table(
            f"{label} ({data.name}, {config.steps} steps): -ELBO (nats)",
            [
                "estimator",
                "unbiased",
                "samples",
                "f evals",
                "train -ELBO",
                "test -ELBO",
                "var @end (own run)",
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
                    fmt(r["diagnostics"][-1]["var"], 3),
                    f"{r['ms_per_step']:.2f}",
                ]
            )
        quality = Table(
            f"{label}: encoder-logit gradient vs the exact gradient ({label.split('x')[1]}^"
            f"{label.split('x')[0]} configurations enumerated), bias / std / cosine at the "
            f"{config.reference} run's steps",
            ["estimator", *[f"@{s} bias/std/cos" for s in shared], "bias floor @end"],
        )
        for name in runs:
            quality.rows.append(
                [
                    name,
                    *[
                        f"{fmt(per[name]['bias'], 3)} / {fmt(per[name]['std'], 3)} / "
                        f"{fmt(per[name]['cosine'], 3)}"
                        for per in shared.values()
                    ],
                    fmt(list(shared.values())[-1][name]["bias_floor"], 3),
                ]
            )
        quality.notes.append(
            f"Relative to ||exact||, {config.num_draws} draws on {config.diag_batch} fixed "
            "images; REBAR/RELAX with their parameters after their own training."
        )
        tables += [table, quality]
        notes += _notes(label, shared, runs)
        public_runs = {n: public(r) for n, r in runs.items()}
        shared_public = {
            str(step): {n: {k: v for k, v in d.items() if k != "mean"} for n, d in per.items()}
            for step, per in shared.items()
        }
        data_out["configurations"][label] = {"runs": public_runs, "shared": shared_public}
        panels[label] = public_runs
        shared_panels[label] = {
            n: {
                "unbiased": runs[n]["unbiased"],
                "diagnostics": [{"step": step, **per[n]} for step, per in shared.items()],
            }
            for n in runs
        }
    if _distributed.world_size() > 1:
        notes.append(f"Trained on {_distributed.world_size()} ranks (DDP); batch per rank.")
    result = TaskResult(
        name="vae-categorical",
        summary=f"Categorical VAE ({', '.join(all_runs)}, {data.name}): -ELBO and "
        "bias/std/cosine to the exact encoder-logit gradient per estimator",
        settings=dataclasses.asdict(config),
        data=data_out,
        tables=tables,
        notes=notes,
        wall_s=time.perf_counter() - t_start,
    )
    if settings.out is not None and config.plot and _distributed.is_main():
        figure = plot_curves(
            panels, settings.out, "vae_categorical_curves.png", "Categorical VAE: test -ELBO",
            quick=settings.quick, config=config, table="steps): -ELBO (nats)",
        )  # fmt: skip
        if figure is not None:
            result.figures.append(figure)
            data_out["figures"][figure] = "data.configurations.*.runs.*.curve"
        figure = plot_checkpoints(
            shared_panels,
            [("bias", "relative bias", True), ("cosine", "cosine to exact", False)],
            settings.out,
            "vae_categorical_bias.png",
            "Categorical VAE: encoder-logit gradient vs exact, at the reference run's parameters",
            quick=settings.quick, config=config, table="encoder-logit gradient vs the exact",
        )  # fmt: skip
        if figure is not None:
            result.figures.append(figure)
            data_out["figures"][figure] = "data.configurations.*.shared: bias and cosine"
    return result
