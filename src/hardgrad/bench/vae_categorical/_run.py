"""The ``vae-categorical`` benchmark's runner: one training run per estimator, and the registered
task (see :mod:`hardgrad.bench.vae_categorical`)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from .. import _distributed
from .._task import BenchSettings, Progress, Table, TaskResult, task
from .._vae import (
    few_threads,
    fmt,
    plot_checkpoints,
    plot_curves,
    public,
    shared_diagnostics,
)
from .._vae._runs import checked_estimators, elbo_table, public_shared, setup_from, train_each
from ..data import load_dataset
from ._config import CategoricalVAEConfig, default_config
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
    names = checked_estimators(config, "categorical")
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
                setup = setup_from(
                    config,
                    latents=latents,
                    categories=categories,
                    enc_hidden=config.enc_hidden,
                    dec_hidden=config.dec_hidden,
                    binarize=False,
                )
                runs = train_each(
                    names,
                    setup,
                    config.reference,
                    data,
                    settings,
                    f"cat{label}",
                    progress,
                    progress_prefix=f"{label} ",
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
        table = elbo_table(
            f"{label} ({data.name}, {config.steps} steps): -ELBO (nats)",
            runs,
            ["var @end (own run)"],
            lambda r: [fmt(r["diagnostics"][-1]["var"], 3)],
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
        data_out["configurations"][label] = {"runs": public_runs, "shared": public_shared(shared)}
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
