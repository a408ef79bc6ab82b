"""The ``vae-bernoulli`` benchmark's runner: one training run per estimator, and the registered
task (see :mod:`hardgrad.bench.vae_bernoulli`)."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

from .. import _distributed
from .._task import BenchSettings, Progress, Table, TaskResult, task
from .._vae import (
    few_threads,
    fmt,
    parameter_digest,
    plot_checkpoints,
    plot_curves,
    public,
    shared_diagnostics,
)
from .._vae._runs import checked_estimators, elbo_table, public_shared, setup_from, train_each
from ..data import load_dataset
from ._config import BernoulliVAEConfig, default_config
from ._report import _variance_notes


@task(
    "vae-bernoulli",
    "Bernoulli VAE on binarised digits: -ELBO and encoder-gradient variance per estimator "
    "at equal f evaluations",
    default_config,
)
def run(
    settings: BenchSettings, config: BernoulliVAEConfig | None, progress: Progress
) -> TaskResult:
    """Run the Bernoulli VAE benchmark; see the package docstring."""
    config = config if config is not None else default_config(settings.quick)
    names = checked_estimators(config, "bernoulli")
    data = load_dataset(settings.data, settings.seed).to(settings.device)
    hidden = (config.hidden,) if config.hidden > 0 else ()
    setup = setup_from(
        config,
        latents=config.latent_bits,
        categories=None,
        enc_hidden=hidden,
        dec_hidden=hidden,
        binarize=True,
    )
    tag = f"bern{config.latent_bits}"
    progress.start("vae-bernoulli", len(names) + 1)
    t_start = time.perf_counter()
    try:
        with few_threads(data.features):
            runs = train_each(names, setup, config.reference, data, settings, tag, progress)
            shared = shared_diagnostics(runs[config.reference], runs, setup, data, settings, tag)
            progress.advance("variances at shared parameters")
    finally:
        progress.finish()

    label = f"{config.latent_bits} bits, {data.name}"
    table = elbo_table(
        f"-ELBO (nats) and encoder-gradient variance, {label}, {config.steps} steps",
        runs,
        [f"var @{s}" for s in setup.checkpoints],
        lambda r: [fmt(d["var"], 3) for d in r["diagnostics"]],
    )
    table.notes.append(
        "var @s: summed per-coordinate variance of one estimate of the encoder-logit gradient "
        f"of E_q[-log p(x|b)] on a fixed batch of {config.diag_batch} images, "
        f"{config.num_draws} draws, at step s of the estimator's own run."
    )
    shared_table = Table(
        f"Encoder-gradient variance at the same parameters (the {config.reference} run's "
        "checkpoints)",
        ["estimator", "f evals", *[f"var @{s}" for s in shared], *[f"SNR @{s}" for s in shared]],
    )
    for name, r in runs.items():
        shared_table.rows.append(
            [
                name,
                str(r["evaluations"]),
                *[fmt(per[name]["var"], 3) for per in shared.values()],
                *[fmt(per[name]["snr"], 3) for per in shared.values()],
            ]
        )
    shared_table.notes.append(
        "SNR: norm of the mean estimate over the square root of the summed variance "
        "(hardgrad.diagnostics); REBAR/RELAX measured with their parameters after training."
    )
    notes = _variance_notes(shared, runs)
    finite = {n: r for n, r in runs.items() if math.isfinite(r["test_neg_elbo"])}
    if finite:
        best = min(finite, key=lambda n: finite[n]["test_neg_elbo"])
        order = sorted(finite, key=lambda n: finite[n]["test_neg_elbo"])
        notes.append(
            f"Lowest test -ELBO: {best} ({finite[best]['test_neg_elbo']:.2f} nats); order: "
            + ", ".join(f"{n} {finite[n]['test_neg_elbo']:.2f}" for n in order)
            + "."
        )
    notes.append(
        "Equal evaluations: every estimator spends "
        f"{config.evaluations} decoder evaluations per image and step except "
        + (
            ", ".join(
                f"{n} ({r['evaluations']})"
                for n, r in runs.items()
                if r["evaluations"] != config.evaluations
            )
            or "none"
        )
        + "."
    )
    if _distributed.world_size() > 1:
        notes.append(f"Trained on {_distributed.world_size()} ranks (DDP); batch per rank.")
    data_out: dict[str, Any] = {
        "dataset": data.name,
        "runs": {n: public(r) for n, r in runs.items()},
        "shared": public_shared(shared),
        "checkpoints": list(setup.checkpoints),
        "figures": {},
        "world_size": _distributed.world_size(),
        "parameter_digests": {n: parameter_digest(r["parameters"]) for n, r in runs.items()},
    }
    result = TaskResult(
        name="vae-bernoulli",
        summary=f"Bernoulli VAE ({label}): -ELBO and encoder-gradient variance per estimator "
        f"at {config.evaluations} f evaluations per image",
        settings=dataclasses.asdict(config),
        data=data_out,
        tables=[table, shared_table],
        notes=notes,
        wall_s=time.perf_counter() - t_start,
    )
    if settings.out is not None and config.plot and _distributed.is_main():
        panels = {label: data_out["runs"]}
        figure = plot_curves(
            panels, settings.out, "vae_bernoulli_curves.png", "Bernoulli VAE: test -ELBO",
            quick=settings.quick, config=config, table="-ELBO (nats) and encoder-gradient",
        )  # fmt: skip
        if figure is not None:
            result.figures.append(figure)
            data_out["figures"][figure] = "data.runs.*.curve: test -ELBO along training"
        figure = plot_checkpoints(
            panels,
            [("var", "encoder-gradient variance (summed)", True), ("snr", "SNR", True)],
            settings.out,
            "vae_bernoulli_variance.png",
            "Bernoulli VAE: encoder-logit gradient",
            quick=settings.quick, config=config, table="Encoder-gradient variance at the same",
        )  # fmt: skip
        if figure is not None:
            result.figures.append(figure)
            data_out["figures"][figure] = "data.runs.*.diagnostics: var and snr"
    return result
