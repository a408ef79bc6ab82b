r"""The ``vae-bernoulli`` benchmark: a Bernoulli VAE on dynamically binarised digits.

Model (:mod:`hardgrad.bench._vae`): ``latent_bits`` Bernoulli latents (32; 16 with
``--quick``), a one-hidden-layer encoder and decoder (``hidden`` units, leaky ReLU), a
uniform Bernoulli(1/2) prior, and a Bernoulli likelihood over the pixels. Every batch is
binarised afresh, :math:`x_{bin} \sim \mathrm{Bern}(x)`. Loss: the per-example -ELBO with
the KL in closed form and :math:`E_q[-\log p(x \mid b)]` through :func:`hardgrad.expectation`
with the estimator under test.

Estimators: every registered one defined for Bernoulli variables except ``"exact"``, each
at the same budget of ``evaluations`` (2) evaluations of the decoder per example and step:
two samples for the pathwise estimators, REINFORCE and RLOO, one antithetic pair for ARM
and DisARM, and one draw (3 evaluations: the hard sample and two relaxed ones) for REBAR
and RELAX, whose temperature and scale train in the same Adam optimizer.

Measured per estimator: the final train and test -ELBO (the training images and the test
images each binarised once with a fixed seed; the reconstruction term averaged over
``test_samples`` draws of q), the test -ELBO along training (``vae_bernoulli_curves.png``),
and at ``checkpoints`` the variance of the encoder-logit gradient of the reconstruction
term on a fixed batch of ``diag_batch`` training images (``num_draws`` independent draws
from :func:`hardgrad.diagnostics.gradient_samples`; the sum over the batch's logits of the
per-coordinate variance): along each estimator's own training
(``vae_bernoulli_variance.png``), and for every estimator at the *same* parameters, those
of the ``reference`` (DisARM) run at its checkpoints, which is the fair comparison of
variances at equal evaluations.

Measured wall times (digits, 2 CPU cores shared with other jobs, load average about 5):
``--quick`` 54 s; ``--quick`` under ``torchrun --nproc_per_node 2`` (one thread per rank)
75 s. The full run (32 bits, 3000 steps, 13 estimators): 447 s on that loaded machine
(Gumbel-Rao alone 150 s); 230 s on idle cores (the run in ``docs/results/full/``), where
``--quick`` takes 21 s.

Under ``torchrun --nproc_per_node N`` every rank trains on its shard of the training
images with DistributedDataParallel (see :mod:`hardgrad.bench._distributed`).
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

from . import _distributed
from ._task import BenchSettings, Progress, Table, TaskResult, task
from ._vae import (
    Setup,
    chosen_names,
    few_threads,
    fmt,
    parameter_digest,
    plot_checkpoints,
    plot_curves,
    public,
    shared_diagnostics,
    spaced,
    train,
)
from .data import load_dataset

__all__ = ["BernoulliVAEConfig", "default_config", "run"]


@dataclass(frozen=True)
class BernoulliVAEConfig:
    """Settings of the ``vae-bernoulli`` benchmark.

    Attributes:
        latent_bits: Bernoulli latent variables.
        hidden: hidden units of the encoder and of the decoder (``0``: linear).
        steps, batch, lr: Adam steps, examples per step (per rank), learning rate.
        evaluations: decoder evaluations per example and step, for every estimator.
        estimators: registry names; ``None``: every Bernoulli-capable one but ``"exact"``.
        reference: the run whose checkpoints every estimator is measured at.
        curve_points: test -ELBO points along training.
        checkpoints: gradient diagnostics along training (including step 0 and the end).
        diag_batch: images of the fixed diagnostic batch.
        num_draws: gradient draws per diagnostic.
        curve_samples, test_samples: draws of q per image for the curves / final -ELBO.
        plot: write the PNGs (needs matplotlib).
    """

    latent_bits: int = 32
    hidden: int = 128
    steps: int = 3000
    batch: int = 100
    lr: float = 1e-3
    evaluations: int = 2
    estimators: tuple[str, ...] | None = None
    reference: str = "disarm"
    curve_points: int = 16
    checkpoints: int = 4
    diag_batch: int = 32
    num_draws: int = 400
    curve_samples: int = 10
    test_samples: int = 100
    plot: bool = True


def default_config(quick: bool) -> BernoulliVAEConfig:
    """The full setting, or the ``--quick`` one: 16 bits, fewer steps and draws."""
    if quick:
        return BernoulliVAEConfig(
            latent_bits=16,
            steps=300,
            curve_points=6,
            checkpoints=3,
            num_draws=100,
            curve_samples=4,
            test_samples=20,
        )
    return BernoulliVAEConfig()


def _names(config: BernoulliVAEConfig) -> list[str]:
    return chosen_names(config.estimators, "bernoulli")


def _variance_notes(
    shared: dict[int, dict[str, dict[str, Any]]], runs: dict[str, dict[str, Any]]
) -> list[str]:
    """DisARM against ARM and RLOO, at the same parameters and along own training."""
    notes = []
    for other in ("arm", "rloo"):
        if "disarm" not in runs or other not in runs:
            continue
        ratios = [
            per["disarm"]["var"] / per[other]["var"]
            for per in shared.values()
            if "disarm" in per and other in per and per[other]["var"] > 0
        ]
        if ratios:
            below = sum(r < 1 for r in ratios)
            verdict = (
                "holds"
                if below == len(ratios)
                else ("does NOT hold" if below == 0 else "holds only partly")
            )
            notes.append(
                f"DisARM vs {other.upper()} at equal evaluations ({runs['disarm']['evaluations']} "
                f"vs {runs[other]['evaluations']}), same parameters: variance ratio "
                + ", ".join(f"{r:.3g}" for r in ratios)
                + f" at the {len(ratios)} checkpoints; DisARM lower at {below}/{len(ratios)}: "
                f"the literature's ordering (DisARM below {other.upper()}) {verdict}."
            )
        own = [
            (a["var"], b["var"])
            for a, b in zip(runs["disarm"]["diagnostics"], runs[other]["diagnostics"], strict=True)
        ]
        below_own = sum(a < b for a, b in own)
        notes.append(
            f"Along each run's own training, DisARM's variance is below {other.upper()}'s at "
            f"{below_own}/{len(own)} checkpoints (different parameters: indicative only)."
        )
    return notes


@task(
    "vae-bernoulli",
    "Bernoulli VAE on binarised digits: -ELBO and encoder-gradient variance per estimator "
    "at equal f evaluations",
    default_config,
)
def run(
    settings: BenchSettings, config: BernoulliVAEConfig | None, progress: Progress
) -> TaskResult:
    """Run the Bernoulli VAE benchmark; see the module docstring."""
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
    hidden = (config.hidden,) if config.hidden > 0 else ()
    setup = Setup(
        latents=config.latent_bits,
        categories=None,
        enc_hidden=hidden,
        dec_hidden=hidden,
        binarize=True,
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
    tag = f"bern{config.latent_bits}"
    progress.start("vae-bernoulli", len(names) + 1)
    t_start = time.perf_counter()
    runs: dict[str, dict[str, Any]] = {}
    try:
        with few_threads(data.features):
            for name in names:
                this = dataclasses.replace(setup, keep_states=name == config.reference)
                runs[name] = train(name, this, data, settings, tag)
                progress.advance(f"{name}: test -ELBO {runs[name]['test_neg_elbo']:.2f}")
            shared = shared_diagnostics(runs[config.reference], runs, setup, data, settings, tag)
            progress.advance("variances at shared parameters")
    finally:
        progress.finish()

    label = f"{config.latent_bits} bits, {data.name}"
    table = Table(
        f"-ELBO (nats) and encoder-gradient variance, {label}, {config.steps} steps",
        [
            "estimator",
            "unbiased",
            "samples",
            "f evals",
            "train -ELBO",
            "test -ELBO",
            *[f"var @{s}" for s in setup.checkpoints],
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
                *[fmt(d["var"], 3) for d in r["diagnostics"]],
                f"{r['ms_per_step']:.2f}",
            ]
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
        "shared": {
            str(step): {n: {k: v for k, v in d.items() if k != "mean"} for n, d in per.items()}
            for step, per in shared.items()
        },
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
            panels, settings.out, "vae_bernoulli_curves.png", "Bernoulli VAE: test -ELBO"
        )
        if figure is not None:
            result.figures.append(figure)
            data_out["figures"][figure] = "data.runs.*.curve: test -ELBO along training"
        figure = plot_checkpoints(
            panels,
            [("var", "encoder-gradient variance (summed)", True), ("snr", "SNR", True)],
            settings.out,
            "vae_bernoulli_variance.png",
            "Bernoulli VAE: encoder-logit gradient",
        )
        if figure is not None:
            result.figures.append(figure)
            data_out["figures"][figure] = "data.runs.*.diagnostics: var and snr"
    return result
