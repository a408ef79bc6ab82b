r"""What the two VAE benchmarks share: the model, the ELBO, training and gradient diagnostics.

The model (:class:`VAE`) has discrete latents :math:`b` (``latents`` Bernoulli bits, or
``latents`` categorical variables of ``categories`` classes, one-hot), an MLP encoder that
gives the logits of :math:`q(b \mid x)` and an MLP decoder that gives the logits of a
Bernoulli likelihood :math:`p(x \mid b)` over the pixels (binary cross-entropy, which takes
binarised or [0, 1] targets). The prior is uniform. The training loss per example is

.. math:: -\mathrm{ELBO}(x) = E_{q(b \mid x)}[-\log p(x \mid b)] + \mathrm{KL}(q(b \mid x)\,\|\,p(b)),

the KL in closed form (:func:`kl_bernoulli`, :func:`kl_categorical`) and the
reconstruction expectation through :func:`hardgrad.expectation` with the estimator under
test: its gradient for the encoder's logits is the estimator, the decoder gets the
ordinary pathwise gradient of the samples' values.

Every estimator gets the same number of evaluations of :math:`f` (the decoder) per example
and step where it can (``evaluations``, :func:`samples_for`); REBAR and RELAX evaluate
:math:`f` three times per draw, so with a budget of 2 they get one draw (3 evaluations),
and the tables say so.

Under ``torchrun`` the model is wrapped in ``DistributedDataParallel``
(:func:`hardgrad.bench._distributed.wrap`), every rank trains on its own shard of the
training images with its own sampling seed, and the estimators' own parameters (REBAR,
RELAX) are averaged across ranks by the estimators themselves. Evaluations and diagnostics
use seeds that do not depend on the rank, so every rank computes the same numbers.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from .. import estimators as _estimators
from .._expectation import expectation
from ..diagnostics import exact_gradient, gradient_samples
from ..diagnostics._compare import summarize
from ..estimators import Estimator, ScoreFunctionEstimator
from . import _distributed
from ._pyplot import pyplot
from ._task import BenchSettings
from .data import Dataset

Objective = Callable[[Tensor], Tensor]


# --------------------------------------------------------------------------- the model


def _mlp(sizes: Sequence[int]) -> torch.nn.Sequential:
    layers: list[torch.nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(torch.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(torch.nn.LeakyReLU(0.1))
    return torch.nn.Sequential(*layers)


def kl_bernoulli(logits: Tensor) -> Tensor:
    r""":math:`\mathrm{KL}(\mathrm{Bern}(\sigma(\ell)) \,\|\, \mathrm{Bern}(1/2))`, summed over
    the last dimension: :math:`\sum_i q_i \log q_i + (1-q_i)\log(1-q_i) + \log 2`."""
    q = torch.sigmoid(logits)
    logsig = torch.nn.functional.logsigmoid
    per_bit = q * logsig(logits) + (1 - q) * logsig(-logits) + math.log(2.0)
    return per_bit.sum(-1)


def kl_categorical(logits: Tensor) -> Tensor:
    r""":math:`\mathrm{KL}(\mathrm{Cat}(\mathrm{softmax}(\ell)) \,\|\, \mathrm{Uniform}(C))`
    summed over the variables: logits ``(..., L, C)`` -> ``(...)``."""
    log_q = torch.log_softmax(logits, -1)
    per_var = (log_q.exp() * (log_q + math.log(logits.shape[-1]))).sum(-1)
    return per_var.sum(-1)


class VAE(torch.nn.Module):
    """A discrete VAE: ``features`` pixels, ``latents`` variables of ``categories`` classes
    (``None``: Bernoulli bits), MLP encoder ``features-enc_hidden-latent logits`` and
    decoder ``latent inputs-dec_hidden-features``.

    ``forward(x, estimator, num_samples, generator)`` is the per-example -ELBO ``(batch,)``.
    """

    def __init__(
        self,
        features: int,
        latents: int,
        categories: int | None,
        enc_hidden: Sequence[int],
        dec_hidden: Sequence[int],
    ) -> None:
        super().__init__()
        self.features, self.latents, self.categories = features, latents, categories
        width = latents * (categories or 1)
        self.encoder = _mlp([features, *enc_hidden, width])
        self.decoder = _mlp([width, *dec_hidden, features])

    @property
    def dist(self) -> str:
        return "bernoulli" if self.categories is None else "categorical"

    def encode(self, x: Tensor) -> Tensor:
        """The logits of q(b | x): ``(B, L)`` or ``(B, L, C)``."""
        logits: Tensor = self.encoder(x)
        if self.categories is not None:
            logits = logits.unflatten(-1, (self.latents, self.categories))
        return logits

    def reconstruction(self, x: Tensor) -> Objective:
        """``f(b) = -log p(x | b)`` per example: samples ``(n, B, L[, C])`` -> ``(n, B)``."""

        def f(b: Tensor) -> Tensor:
            inputs = b.flatten(-2) if self.categories is not None else b
            out: Tensor = self.decoder(inputs)
            target = x.expand_as(out)
            bce = torch.nn.functional.binary_cross_entropy_with_logits(
                out, target, reduction="none"
            )
            return bce.sum(-1)

        return f

    def kl(self, logits: Tensor) -> Tensor:
        return kl_bernoulli(logits) if self.categories is None else kl_categorical(logits)

    def forward(
        self,
        x: Tensor,
        estimator: Estimator,
        num_samples: int,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        logits = self.encode(x)
        recon = expectation(
            self.reconstruction(x),
            logits,
            dist=self.dist,
            estimator=estimator,
            num_samples=num_samples,
            generator=generator,
        )
        return recon + self.kl(logits)


@torch.no_grad()
def negative_elbo(
    model: VAE, x: Tensor, num_samples: int, generator: torch.Generator, chunk: int = 512
) -> Tensor:
    """The per-example -ELBO with the reconstruction term averaged over ``num_samples``
    independent draws of q (an unbiased Monte-Carlo estimate), ``(N,)``."""
    out = []
    for start in range(0, x.shape[0], chunk):
        xs = x[start : start + chunk]
        logits = model.encode(xs)
        recon = expectation(
            model.reconstruction(xs),
            logits,
            dist=model.dist,
            estimator="reinforce",
            num_samples=num_samples,
            generator=generator,
        )
        out.append(recon + model.kl(logits))
    return torch.cat(out)


# --------------------------------------------------------------------------- estimators


def estimator_names(dist: str) -> list[str]:
    """Every registered estimator defined for ``dist``, except exact enumeration."""
    names = []
    for name, cls in _estimators.ESTIMATORS.items():
        if name == "exact":
            continue
        if dist in getattr(cls, "dists", ("bernoulli", "categorical")):
            names.append(name)
    return names


def chosen_names(requested: Sequence[str] | None, dist: str) -> list[str]:
    """``requested`` checked against :func:`estimator_names` (all of them for ``None``)."""
    available = estimator_names(dist)
    if requested is None:
        return available
    for name in requested:
        if name not in available:
            raise ValueError(
                f"Unknown or non-{dist} estimator {name!r} in `estimators`; available: "
                + ", ".join(repr(n) for n in available)
            )
    return list(requested)


def make_estimator(name: str, seed: int) -> Estimator:
    """A fresh instance (stateful ones get their own parameters, seeded)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _estimators.get(name)


def samples_for(est: Estimator, evaluations: int) -> tuple[int, int]:
    """``(num_samples, evaluations of f)`` that spend at most ``evaluations`` evaluations of
    ``f`` per example where the estimator allows it (at least its minimum otherwise)."""
    per = int(est.evaluations_per_sample)
    n = max(1, evaluations // per)
    if isinstance(est, ScoreFunctionEstimator):
        n = max(n, est.min_samples)
        n -= n % est.sample_multiple
        n = max(n, est.sample_multiple)
    return n, n * per


def seed_of(settings: BenchSettings, *parts: object) -> int:
    """A seed per run that does not depend on the order the runs happen in."""
    key = "/".join(str(p) for p in parts).encode()
    return (settings.seed * 1_000_003 + zlib.crc32(key)) % 2**62


# --------------------------------------------------------------------------- training


@dataclass(frozen=True)
class Setup:
    """One training configuration shared by every estimator of a task.

    Attributes:
        latents, categories: the latent shape (``categories=None``: Bernoulli bits).
        enc_hidden, dec_hidden: hidden widths of the encoder and decoder.
        binarize: dynamically binarise each batch (``x_bin ~ Bern(x)``).
        steps, batch, lr: Adam steps, examples per step (per rank), learning rate.
        evaluations: evaluations of ``f`` per example and step (see :func:`samples_for`).
        eval_steps: steps at which the test -ELBO is recorded (curves).
        checkpoints: steps at which gradient diagnostics are taken (0 = initialisation).
        diag_batch: examples of the fixed diagnostic batch.
        num_draws: gradient draws per diagnostic.
        exact: compare with the exact gradient (enumeration; small latent spaces only).
        curve_samples, test_samples: Monte-Carlo draws of q for the curves and final -ELBO.
        keep_states: keep the model's parameters at every checkpoint (reference run).
    """

    latents: int
    categories: int | None
    enc_hidden: tuple[int, ...]
    dec_hidden: tuple[int, ...]
    binarize: bool
    steps: int
    batch: int
    lr: float
    evaluations: int
    eval_steps: tuple[int, ...]
    checkpoints: tuple[int, ...]
    diag_batch: int
    num_draws: int
    exact: bool
    curve_samples: int
    test_samples: int
    keep_states: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def spaced(steps: int, points: int) -> tuple[int, ...]:
    """``points`` (at least 2) steps from 0 to ``steps``, evenly spaced, deduplicated."""
    points = max(points, 2)
    return tuple(sorted({round(i * steps / (points - 1)) for i in range(points)}))


def fixed_inputs(x: Tensor, binarize: bool, seed: int) -> Tensor:
    """``x`` binarised once with a fixed seed (the same on every rank), or ``x`` itself."""
    if not binarize:
        return x
    g = torch.Generator(device=x.device).manual_seed(seed)
    return torch.bernoulli(x, generator=g)


def build_model(setup: Setup, features: int, seed: int, device: str) -> VAE:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = VAE(features, setup.latents, setup.categories, setup.enc_hidden, setup.dec_hidden)
    return model.to(device)


def diagnose(
    model: VAE,
    est: Estimator,
    x: Tensor,
    num_samples: int | None,
    num_draws: int,
    seed: int,
    exact: Tensor | None,
) -> dict[str, Any]:
    """Draws of the encoder-logit gradient of the reconstruction term on the fixed batch
    ``x`` (:func:`hardgrad.diagnostics.gradient_samples`), summarised by
    :func:`hardgrad.diagnostics` against ``exact`` when given.

    Returns ``var`` (the summed per-coordinate variance of one estimate), ``snr``, and
    with ``exact``: ``bias``, ``std``, ``cosine`` (relative figures) and ``bias_floor``
    (the bias an unbiased estimator shows from ``num_draws`` draws alone, ``std/sqrt(D)``),
    plus ``mean`` (the mean gradient, flattened) for comparing two estimators' means.
    """
    with torch.no_grad():
        logits = model.encode(x)
    f = model.reconstruction(x)
    g = torch.Generator(device=x.device).manual_seed(seed)
    t0 = time.perf_counter()
    if isinstance(est, _estimators.Exact):
        num_samples = None
    draws = gradient_samples(
        f,
        logits,
        estimator=est,
        dist=model.dist,
        num_draws=num_draws,
        num_samples=num_samples,
        generator=g,
    )
    row = summarize(draws, exact, est.name or type(est).__name__, time.perf_counter() - t0)
    flat = draws.detach().double().reshape(draws.shape[0], -1)
    out: dict[str, Any] = {
        "var": float(flat.var(0, correction=1).sum()),
        "snr": row.snr,
        "bias": row.bias,
        "std": row.std,
        "cosine": row.cosine,
        "bias_floor": None if row.std is None else row.std / math.sqrt(num_draws),
        "mean": flat.mean(0).tolist(),
        "exact_norm": None if exact is None else float(exact.double().norm()),
    }
    return out


def exact_reference(model: VAE, x: Tensor) -> Tensor:
    """The exact encoder-logit gradient of the reconstruction term (all configurations)."""
    with torch.no_grad():
        logits = model.encode(x)
    return exact_gradient(model.reconstruction(x), logits, dist=model.dist)


def train(
    name: str,
    setup: Setup,
    data: Dataset,
    settings: BenchSettings,
    tag: str,
) -> dict[str, Any]:
    """Train one VAE with estimator ``name``; the curves, final -ELBOs and diagnostics."""
    device = settings.device
    est = make_estimator(name, seed_of(settings, tag, name, "estimator"))
    if isinstance(est, torch.nn.Module):
        est.to(device)
    num_samples, evaluations = samples_for(est, setup.evaluations)
    model = build_model(setup, data.features, seed_of(settings, tag, "model"), device)
    wrapped = _distributed.wrap(model)
    params = list(model.parameters())
    if isinstance(est, torch.nn.Module):
        params += [p for p in est.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=setup.lr)
    gen = torch.Generator(device=device).manual_seed(
        _distributed.rank_seed(seed_of(settings, tag, name, "train"))
    )
    x_local = _distributed.shard(data.x_train)
    x_test = fixed_inputs(data.x_test, setup.binarize, seed_of(settings, "test-binarisation"))
    x_train_eval = fixed_inputs(
        data.x_train, setup.binarize, seed_of(settings, "train-binarisation")
    )
    x_diag = x_train_eval[: setup.diag_batch]
    eval_seed = seed_of(settings, tag, name, "eval")

    def test_elbo(samples: int) -> float:
        g = torch.Generator(device=device).manual_seed(eval_seed)
        return float(negative_elbo(model, x_test, samples, g).mean())

    curve_steps: list[int] = []
    curve_test: list[float] = []
    curve_train: list[float] = []
    diagnostics: list[dict[str, Any]] = []
    states: dict[int, dict[str, Tensor]] = {}
    running: float | None = None
    order = torch.randperm(x_local.shape[0], generator=gen, device=device)
    cursor = 0
    train_seconds = 0.0

    def checkpoint(step: int) -> None:
        model.eval()
        if step in setup.eval_steps:
            curve_steps.append(step)
            curve_test.append(test_elbo(setup.curve_samples))
            curve_train.append(float("nan") if running is None else running)
        if step in setup.checkpoints:
            reference = exact_reference(model, x_diag) if setup.exact else None
            entry = diagnose(
                model,
                est,
                x_diag,
                num_samples,
                setup.num_draws,
                seed_of(settings, tag, name, "diag", step),
                reference,
            )
            entry["step"] = step
            diagnostics.append(entry)
            if setup.keep_states:
                states[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.train()

    checkpoint(0)
    for step in range(1, setup.steps + 1):
        t0 = time.perf_counter()
        if cursor + setup.batch > order.numel():
            order = torch.randperm(x_local.shape[0], generator=gen, device=device)
            cursor = 0
        idx = order[cursor : cursor + setup.batch]
        cursor += setup.batch
        x = x_local[idx]
        if setup.binarize:
            x = torch.bernoulli(x, generator=gen)
        loss = wrapped(x, est, num_samples, gen).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        value = float(loss.detach())
        running = value if running is None else 0.98 * running + 0.02 * value
        train_seconds += time.perf_counter() - t0
        checkpoint(step)
    model.eval()
    g = torch.Generator(device=device).manual_seed(eval_seed)
    final_train = float(negative_elbo(model, x_train_eval, setup.test_samples, g).mean())
    final_test = test_elbo(setup.test_samples)
    result: dict[str, Any] = {
        "unbiased": bool(est.unbiased),
        "num_samples": num_samples,
        "evaluations": evaluations,
        "train_neg_elbo": final_train,
        "test_neg_elbo": final_test,
        "ms_per_step": 1e3 * train_seconds / max(setup.steps, 1),
        "curve": {"steps": curve_steps, "test": curve_test, "train_running": curve_train},
        "diagnostics": diagnostics,
        "parameters": [p.detach().cpu().clone() for p in model.parameters()],
        "_estimator": est,
        "_states": states,
    }
    return result


def shared_diagnostics(
    reference: dict[str, Any],
    runs: dict[str, dict[str, Any]],
    setup: Setup,
    data: Dataset,
    settings: BenchSettings,
    tag: str,
) -> dict[int, dict[str, dict[str, Any]]]:
    """Every estimator's diagnostics at the *same* parameters: the reference run's models
    at its checkpoints (stateful estimators as they stand after their own training)."""
    device = settings.device
    x_diag = fixed_inputs(data.x_train, setup.binarize, seed_of(settings, "train-binarisation"))[
        : setup.diag_batch
    ]
    model = build_model(setup, data.features, 0, device)
    out: dict[int, dict[str, dict[str, Any]]] = {}
    for step, state in reference["_states"].items():
        model.load_state_dict(state)
        model.eval()
        exact = exact_reference(model, x_diag) if setup.exact else None
        per: dict[str, dict[str, Any]] = {}
        for name, run in runs.items():
            per[name] = diagnose(
                model,
                run["_estimator"],
                x_diag,
                run["num_samples"],
                setup.num_draws,
                seed_of(settings, tag, name, "shared", step),
                exact,
            )
        out[step] = per
    return out


def parameter_digest(parameters: Sequence[Tensor]) -> str:
    """SHA-256 of the parameters' bytes: equal digests mean bitwise-equal models (the
    distributed test compares the ranks' digests)."""
    h = hashlib.sha256()
    for p in parameters:
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()


def public(run: dict[str, Any]) -> dict[str, Any]:
    """A run's JSON-able part (no estimator object, states or parameter tensors)."""
    return {
        k: (
            [{kk: vv for kk, vv in d.items() if kk != "mean"} for d in v]
            if k == "diagnostics"
            else v
        )
        for k, v in run.items()
        if not k.startswith("_") and k != "parameters"
    }


class few_threads:  # noqa: N801 - used like a function
    """Context manager: one intra-op thread while the problem is small (``features`` at
    most 256, the digits), where more threads only add pool overhead; unchanged else."""

    def __init__(self, features: int) -> None:
        self.features = features
        self.saved = torch.get_num_threads()

    def __enter__(self) -> None:
        if self.features <= 256:
            torch.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        torch.set_num_threads(self.saved)


# --------------------------------------------------------------------------- plots


def plot_curves(
    panels: dict[str, dict[str, dict[str, Any]]], out: Path, filename: str, title: str
) -> str | None:
    """Test -ELBO along training, one panel per configuration, one line per estimator."""
    plt = pyplot()
    if plt is None:
        return None
    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4.6), squeeze=False)
    cmap = plt.get_cmap("tab20")
    for ax, (label, runs) in zip(axes[0], panels.items(), strict=True):
        for i, (name, run) in enumerate(runs.items()):
            curve = run["curve"]
            style = "-" if run["unbiased"] else "--"
            ax.plot(curve["steps"], curve["test"], style, color=cmap(i % 20), label=name)
        finals = [r["test_neg_elbo"] for r in runs.values() if math.isfinite(r["test_neg_elbo"])]
        if finals:
            lo, hi = min(finals), max(finals)
            ax.set_ylim(lo - 0.1 * (hi - lo + 1), hi + 0.6 * (hi - lo + 1))
        ax.set_title(label)
        ax.set_xlabel("Adam step")
        ax.set_ylabel("test -ELBO (nats)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.suptitle(title + " (dashed: biased estimators)")
    fig.tight_layout()
    fig.savefig(out / filename, dpi=110)
    plt.close(fig)
    return filename


def plot_checkpoints(
    panels: dict[str, dict[str, dict[str, Any]]],
    keys: Sequence[tuple[str, str, bool]],
    out: Path,
    filename: str,
    title: str,
) -> str | None:
    """Diagnostics along training: one row per configuration, one column per ``(key,
    label, log scale)``, one line per estimator."""
    plt = pyplot()
    if plt is None:
        return None
    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(
        len(panels), len(keys), figsize=(6.0 * len(keys), 4.2 * len(panels)), squeeze=False
    )
    cmap = plt.get_cmap("tab20")
    for row, (label, runs) in zip(axes, panels.items(), strict=True):
        for ax, (key, ylabel, log) in zip(row, keys, strict=True):
            for i, (name, run) in enumerate(runs.items()):
                points = [
                    (d["step"], d[key])
                    for d in run["diagnostics"]
                    if d[key] is not None and (not log or d[key] > 0)
                ]
                if points:
                    xs, ys = zip(*points, strict=True)
                    style = "-o" if run["unbiased"] else "--o"
                    ax.plot(xs, ys, style, color=cmap(i % 20), label=name, markersize=3)
            if log:
                ax.set_yscale("log")
            ax.set_xlabel("Adam step")
            ax.set_ylabel(ylabel)
            ax.set_title(label)
            ax.grid(alpha=0.3)
        row[0].legend(fontsize=7, ncol=2)
    fig.suptitle(title + " (each estimator along its own training; dashed: biased)")
    fig.tight_layout()
    fig.savefig(out / filename, dpi=110)
    plt.close(fig)
    return filename


def fmt(x: float | None, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}g}"
