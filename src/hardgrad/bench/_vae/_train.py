"""How the two VAE benchmarks train and diagnose: the estimators and their sample budgets,
the training loop, and the gradient diagnostics along it."""

from __future__ import annotations

import hashlib
import math
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ... import estimators as _estimators
from ...diagnostics import exact_gradient, gradient_samples
from ...diagnostics._compare import summarize
from ...estimators import Estimator, ScoreFunctionEstimator
from .. import _distributed
from .._task import BenchSettings
from ..data import Dataset
from ._model import VAE, negative_elbo

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
