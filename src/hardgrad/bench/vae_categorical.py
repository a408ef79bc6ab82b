r"""The ``vae-categorical`` benchmark: a categorical VAE on the digits, against exact gradients.

Model (:mod:`hardgrad.bench._vae`): ``L`` categorical latents of ``C`` classes (one-hot),
encoder ``64-256-128-(L*C)`` and decoder ``(L*C)-128-256-64`` (leaky ReLU), a uniform
categorical prior, and a Bernoulli likelihood on the pixels ``x / 16`` in [0, 1] (binary
cross-entropy with continuous targets). Loss: the per-example -ELBO with the KL in closed
form and :math:`E_q[-\log p(x \mid b)]` through :func:`hardgrad.expectation`.
Configurations ``L x C``: 8x4 and 4x6 (``--quick``: 4x6 only).

Estimators: every registered one defined for categorical variables except ``"exact"``
(``st``, ``st_identity``, ``gumbel_softmax``, ``st_gumbel``, ``gumbel_rao``, ``reinmax``,
``gst``, ``reinforce``, ``rloo``, ``rebar``, ``relax``), each at ``evaluations`` (2)
decoder evaluations per example and step (REBAR and RELAX: one draw, 3 evaluations).

Measured: the final train and test -ELBO per estimator (reconstruction term averaged over
``test_samples`` draws of q), the test -ELBO along training (``vae_categorical_curves.png``),
and the quality of each estimator's encoder-logit gradient of the reconstruction term on a
fixed batch of ``diag_batch`` training images: at the checkpoints of the ``reference`` run
(the same parameters for every estimator), ``num_draws`` draws
(:func:`hardgrad.diagnostics.gradient_samples`) summarised by
:func:`hardgrad.diagnostics` against the *exact* gradient, computed by enumerating all
:math:`C^L` configurations of every image (:func:`hardgrad.diagnostics.exact_gradient`;
4^8 = 65,536 for 8x4): relative ``bias``, ``std`` and ``cosine``
(``vae_categorical_bias.png``). ``bias floor`` is ``std/sqrt(num_draws)``, the bias an
unbiased estimator shows from the finite number of draws alone. Along each estimator's own
training the gradient variance is recorded too (no exact reference there: enumeration is
the expensive part).

Measured wall times (digits, 2 CPU cores shared with other jobs, load average about 5):
``--quick`` 66 s for the task at 200 steps, so the quick setting was cut to 150 steps
(17 s on idle cores). The full run (two
configurations, 11 estimators, 2000 steps each, exact 8x4 enumeration at 4 checkpoints)
took 377 s on idle cores (the run in ``docs/results/full/``; lower ``steps`` for a shorter
run).
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
    plot_checkpoints,
    plot_curves,
    public,
    shared_diagnostics,
    spaced,
    train,
)
from .data import load_dataset

__all__ = ["CategoricalVAEConfig", "default_config", "run"]


@dataclass(frozen=True)
class CategoricalVAEConfig:
    """Settings of the ``vae-categorical`` benchmark.

    Attributes:
        configurations: ``(L, C)`` pairs: latent variables and categories.
        enc_hidden, dec_hidden: hidden widths of the encoder and decoder.
        steps, batch, lr: Adam steps, examples per step (per rank), learning rate.
        evaluations: decoder evaluations per example and step, for every estimator.
        estimators: registry names; ``None``: every categorical-capable one but ``"exact"``.
        reference: the run at whose checkpoints every estimator meets the exact gradient.
        curve_points: test -ELBO points along training.
        checkpoints: diagnostics along training (including step 0 and the end).
        diag_batch: images of the fixed diagnostic batch (enumeration cost: C^L each).
        num_draws: gradient draws per diagnostic.
        curve_samples, test_samples: draws of q per image for the curves / final -ELBO.
        plot: write the PNGs (needs matplotlib).
    """

    configurations: tuple[tuple[int, int], ...] = ((8, 4), (4, 6))
    enc_hidden: tuple[int, ...] = (256, 128)
    dec_hidden: tuple[int, ...] = (128, 256)
    steps: int = 2000
    batch: int = 100
    lr: float = 1e-3
    evaluations: int = 2
    estimators: tuple[str, ...] | None = None
    reference: str = "rloo"
    curve_points: int = 11
    checkpoints: int = 4
    diag_batch: int = 4
    num_draws: int = 400
    curve_samples: int = 10
    test_samples: int = 100
    plot: bool = True


def default_config(quick: bool) -> CategoricalVAEConfig:
    """The full setting, or the ``--quick`` one: 4x6 only, fewer steps and draws."""
    if quick:
        return CategoricalVAEConfig(
            configurations=((4, 6),),
            steps=150,
            curve_points=6,
            checkpoints=3,
            num_draws=100,
            curve_samples=4,
            test_samples=20,
        )
    return CategoricalVAEConfig()


def _names(config: CategoricalVAEConfig) -> list[str]:
    return chosen_names(config.estimators, "categorical")


def _mean_distance(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """``||mean_a - mean_b|| / ||exact||``."""
    norm = a.get("exact_norm")
    if not norm:
        return None
    diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(a["mean"], b["mean"], strict=True)))
    return diff / norm


def _notes(
    label: str, shared: dict[int, dict[str, dict[str, Any]]], runs: dict[str, dict[str, Any]]
) -> list[str]:
    notes: list[str] = []
    steps = list(shared)
    if "gumbel_rao" in runs and "st_gumbel" in runs:
        ratios, same = [], 0
        distances = []
        for per in shared.values():
            gr, sg = per["gumbel_rao"], per["st_gumbel"]
            if gr["std"] and sg["std"]:
                ratios.append(gr["std"] / sg["std"])
            d = _mean_distance(gr, sg)
            floor = math.hypot(gr["bias_floor"] or 0.0, sg["bias_floor"] or 0.0)
            if d is not None:
                distances.append((d, floor))
                same += d <= 3 * floor
        lower = sum(r < 1 for r in ratios)
        notes.append(
            f"{label}: Gumbel-Rao / ST-Gumbel std ratio "
            + ", ".join(f"{r:.3g}" for r in ratios)
            + f" at steps {steps} (lower at {lower}/{len(ratios)}); distance between their "
            "mean gradients / ||exact|| "
            + ", ".join(f"{d:.3g} (noise {f:.3g})" for d, f in distances)
            + f": same mean within 3 noise levels at {same}/{len(distances)}. Literature "
            "(Paulus et al. 2021: same mean, lower variance): "
            + (
                "holds."
                if lower == len(ratios) and same == len(distances)
                else "does NOT fully hold here (see the figures)."
            )
        )
    if "reinmax" in runs:
        parts = []
        for other in ("reinmax", "st", "st_gumbel", "gumbel_rao"):
            if other in runs:
                b = [
                    per[other]["bias"] for per in shared.values() if per[other]["bias"] is not None
                ]
                c = [
                    per[other]["cosine"]
                    for per in shared.values()
                    if per[other]["cosine"] is not None
                ]
                if b and c:
                    parts.append(f"{other} {sum(b) / len(b):.3g} / {sum(c) / len(c):.3g}")
        finite = sorted(
            (n for n in runs if math.isfinite(runs[n]["test_neg_elbo"])),
            key=lambda n: runs[n]["test_neg_elbo"],
        )
        rank = finite.index("reinmax") + 1 if "reinmax" in finite else None
        notes.append(
            f"{label}: ReinMax's mean relative bias / cosine over the checkpoints: "
            + "; ".join(parts)
            + f". ReinMax's test -ELBO ranks {rank} of {len(finite)}."
        )
    flagged = [
        f"{name} at step {step} (bias {per[name]['bias']:.3g}, floor {per[name]['bias_floor']:.3g})"
        for step, per in shared.items()
        for name in per
        if runs[name]["unbiased"]
        and per[name]["bias"] is not None
        and per[name]["bias_floor"] is not None
        and per[name]["bias"] > 4 * per[name]["bias_floor"]
    ]
    notes.append(
        f"{label}: unbiased estimators whose measured bias exceeds 4x its noise floor: "
        + ("; ".join(flagged) if flagged else "none (all consistent with unbiasedness)")
        + "."
    )
    usable = {n: r for n, r in runs.items() if math.isfinite(r["test_neg_elbo"])}
    if usable:
        order = sorted(usable, key=lambda n: usable[n]["test_neg_elbo"])
        notes.append(
            f"{label}: trains best: {order[0]} (test -ELBO {usable[order[0]]['test_neg_elbo']:.2f});"
            " order: " + ", ".join(f"{n} {usable[n]['test_neg_elbo']:.2f}" for n in order) + "."
        )
    return notes


@task(
    "vae-categorical",
    "Categorical VAE on digits (8x4, 4x6): -ELBO and bias/std/cosine to the exact "
    "encoder-logit gradient per estimator",
    default_config,
)
def run(
    settings: BenchSettings, config: CategoricalVAEConfig | None, progress: Progress
) -> TaskResult:
    """Run the categorical VAE benchmark; see the module docstring."""
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
            panels, settings.out, "vae_categorical_curves.png", "Categorical VAE: test -ELBO"
        )
        if figure is not None:
            result.figures.append(figure)
            data_out["figures"][figure] = "data.configurations.*.runs.*.curve"
        figure = plot_checkpoints(
            shared_panels,
            [("bias", "relative bias", True), ("cosine", "cosine to exact", False)],
            settings.out,
            "vae_categorical_bias.png",
            "Categorical VAE: encoder-logit gradient vs exact, at the reference run's parameters",
        )
        if figure is not None:
            result.figures.append(figure)
            data_out["figures"][figure] = "data.configurations.*.shared: bias and cosine"
    return result
