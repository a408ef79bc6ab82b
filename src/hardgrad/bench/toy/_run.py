"""The ``toy`` benchmark's runner: estimators and variants, the measured rows and Adam
curves, and the registered task (see :mod:`hardgrad.bench.toy`)."""

from __future__ import annotations

import dataclasses
import math
import time
import zlib
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ... import estimators as _estimators
from ...diagnostics import gradient_samples
from ...estimators import (
    RELAX,
    Estimator,
    Exact,
    Reinforce,
    ScoreFunctionEstimator,
)
from ...stochastic._expectation import expectation
from .._task import BenchSettings, Progress, TaskResult, task
from ._closed_form import _sigmoid, check_moment, closed_form
from ._config import TOLERANCE, ToyConfig, default_config
from ._plots import plot_curves, plot_variance
from ._report import check_summary, curve_table, notes, row_tables


class ElementwiseMLP(torch.nn.Module):
    """RELAX's learned control variate for the toy: a 1-``hidden``-1 tanh network applied
    to every relaxed variable ``z`` separately, ``(n, M) -> (n, M)``."""

    def __init__(self, hidden: int = 10) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(1, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)
        )

    def forward(self, z: Tensor) -> Tensor:
        out: Tensor = self.net(z.unsqueeze(-1)).squeeze(-1)
        return out


def _relax_mlp() -> Estimator:
    return RELAX(ElementwiseMLP())


#: Labelled variants run next to the registry's default instances.
VARIANTS: dict[str, Callable[[], Estimator]] = {
    "reinforce(ema)": lambda: Reinforce(baseline="ema"),
    "reinforce(optimal)": lambda: Reinforce(baseline="optimal"),
    "relax(mlp)": _relax_mlp,
}


def _supports_bernoulli(cls: type[Estimator]) -> bool:
    return "bernoulli" in getattr(cls, "dists", ("bernoulli",))


def _resolve_names(config: ToyConfig) -> list[str]:
    if config.estimators is None:
        names = [n for n, cls in _estimators.ESTIMATORS.items() if _supports_bernoulli(cls)]
        return names + list(VARIANTS)
    known = [*_estimators.ESTIMATORS.names(), *VARIANTS]
    for name in config.estimators:
        if name not in known:
            raise ValueError(
                f"Unknown estimator {name!r} in `estimators`; available: "
                + ", ".join(repr(k) for k in known)
            )
    return list(config.estimators)


def _make(name: str, seed: int, device: str, dtype: torch.dtype) -> Estimator:
    """A fresh instance (stateful ones get their own parameters, seeded)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        est = VARIANTS[name]() if name in VARIANTS else _estimators.get(name)
    if isinstance(est, RELAX) and est.control_variate is not None:
        est.control_variate.to(dtype=dtype)
    if isinstance(est, torch.nn.Module):
        est.to(device=device)
    return est


def _num_samples(est: Estimator) -> int:
    """What ``num_samples=None`` resolves to (0 for exact enumeration)."""
    if isinstance(est, ScoreFunctionEstimator):
        return est.default_num_samples()
    return 1


def _evaluations(est: Estimator) -> int:
    if isinstance(est, Exact):
        return 2  # the two configurations of one bit
    return _num_samples(est) * int(est.evaluations_per_sample)


def _seed(settings: BenchSettings, *parts: object) -> int:
    """A seed per row that does not depend on the order rows run in."""
    key = "/".join(str(p) for p in parts).encode()
    return (settings.seed * 1_000_003 + zlib.crc32(key)) % 2**62


def _moments(g: Tensor) -> dict[str, float]:
    """Mean, variance and their standard errors of the ``M`` estimates ``g`` (float64)."""
    m = g.numel()
    mean = float(g.mean())
    centred = g - mean
    var = float(centred.square().sum()) / max(m - 1, 1)
    fourth = float(centred.pow(4).mean())
    return {
        "mean": mean,
        "se_mean": math.sqrt(var / m),
        "var": var,
        "se_var": math.sqrt(max(fourth - var * var, 0.0) / m),
        "max_abs": float(g.abs().max()),
    }


def _estimates(
    est: Estimator,
    t: float,
    phi: float,
    config: ToyConfig,
    settings: BenchSettings,
    generator: torch.Generator,
) -> Tensor:
    """``config.replicas`` independent gradient estimates at ``phi``, as float64 (drawn by
    :func:`hardgrad.diagnostics.gradient_samples`, the same code ``compare`` uses)."""
    dtype = getattr(torch, config.dtype)
    logits = torch.full((1,), phi, dtype=dtype, device=settings.device)
    draws = gradient_samples(
        lambda b: (b - t).square(),
        logits,
        estimator=est,
        num_draws=config.replicas,
        generator=generator,
    )
    return draws.reshape(-1).to(torch.float64)


def _ema_baseline(est: Reinforce) -> float:
    ema, steps = est.ema, est.steps
    assert isinstance(ema, Tensor) and isinstance(steps, Tensor)
    return float(ema) / (1 - est.decay ** int(steps))


def _warm_up_ema(
    est: Reinforce,
    t: float,
    phi: float,
    config: ToyConfig,
    settings: BenchSettings,
    generator: torch.Generator,
) -> float:
    """Let the moving average settle on ``E[f]`` (training mode), then freeze it (eval)."""
    dtype = getattr(torch, config.dtype)
    est.train()
    m = min(config.chunk, config.replicas)
    logits = torch.full((m,), phi, dtype=dtype, device=settings.device)
    for _ in range(config.ema_warmup):  # the average is updated in the forward
        expectation(lambda b: (b - t).square(), logits, estimator=est, generator=generator)
    est.eval()
    return _ema_baseline(est)


def _measure_row(
    name: str, t: float, phi: float, config: ToyConfig, settings: BenchSettings
) -> dict[str, Any]:
    dtype = getattr(torch, config.dtype)
    seed = _seed(settings, name, t, phi)
    est = _make(name, seed, settings.device, dtype)
    generator = torch.Generator(device=settings.device).manual_seed(seed)
    baseline = None
    if isinstance(est, Reinforce) and est.baseline == "ema" and config.ema_warmup > 0:
        baseline = _warm_up_ema(est, t, phi, config, settings, generator)
    n = _num_samples(est)
    g = _estimates(est, t, phi, config, settings, generator)
    stats = _moments(g)
    p = _sigmoid(phi)
    exact = p * (1 - p) * (1 - 2 * t)
    form = closed_form(est, t, phi, n, baseline)
    bias = stats["mean"] - exact
    se = stats["se_mean"]
    # What rounding alone can produce: a few ulps of the largest value involved.
    rounding = 64 * torch.finfo(dtype).eps * max(stats["max_abs"], abs(exact))
    z = bias / max(se, rounding)
    row: dict[str, Any] = {
        "estimator": name,
        "t": t,
        "phi": phi,
        "p": p,
        "unbiased": bool(est.unbiased),
        "pathwise": bool(est.pathwise),
        "num_samples": n,
        "evaluations": _evaluations(est),
        "replicas": int(g.numel()),
        **stats,
        "exact": exact,
        "bias": bias,
        "rel_bias": bias / abs(exact),
        "z": z,
        "var_is_zero": stats["var"] <= rounding**2,
        "var_x_evaluations": stats["var"] * _evaluations(est),
        "closed_form_mean": form.mean,
        "closed_form_var": form.var,
        "closed_form_source": form.source,
        "baseline": baseline,
        "mean_check": None,
        "var_check": None,
    }
    if form.mean is not None:
        row["mean_check"] = check_moment(stats["mean"], se, form.mean, rounding)
    if form.var is not None:
        row["var_check"] = check_moment(stats["var"], stats["se_var"], form.var, rounding**2)
    return row


# --------------------------------------------------------------------------- curves


def _curve(name: str, config: ToyConfig, settings: BenchSettings) -> dict[str, Any]:
    """``p`` along Adam on ``phi`` (``seeds`` runs at once) with estimator ``name``."""
    dtype = getattr(torch, config.dtype)
    t = config.curve_target
    seed = _seed(settings, "curve", name)
    est = _make(name, seed, settings.device, dtype)
    generator = torch.Generator(device=settings.device).manual_seed(seed)
    phi = torch.zeros(config.seeds, dtype=dtype, device=settings.device, requires_grad=True)
    params = [phi]
    if isinstance(est, torch.nn.Module):
        params += [q for q in est.parameters() if q.requires_grad]
    optimizer = torch.optim.Adam(params, lr=config.lr)
    kept = [0, *range(config.record_every, config.steps + 1, config.record_every)]
    if kept[-1] != config.steps:
        kept.append(config.steps)
    history = torch.empty(len(kept), config.seeds, dtype=torch.float64, device=settings.device)
    history[0] = torch.sigmoid(phi.detach())
    slot = 1
    t0 = time.perf_counter()
    for step in range(1, config.steps + 1):
        optimizer.zero_grad(set_to_none=True)
        value = expectation(lambda b: (b - t).square(), phi, estimator=est, generator=generator)
        value.sum().backward()
        optimizer.step()
        if slot < len(kept) and step == kept[slot]:
            history[slot] = torch.sigmoid(phi.detach())
            slot += 1
    wall = time.perf_counter() - t0
    p = history.cpu()
    below = (p < 0.1).to(torch.int64)
    first = torch.where(below.any(0), below.argmax(0), -1)
    reached = [kept[int(i)] if int(i) >= 0 else None for i in first]
    return {
        "unbiased": bool(est.unbiased),
        "evaluations_per_step": _evaluations(est),
        "mean": p.mean(1).tolist(),
        "min": p.amin(1).tolist(),
        "max": p.amax(1).tolist(),
        "final": p[-1].tolist(),
        "final_mean": float(p[-1].mean()),
        "first_step_below_0.1": reached,
        "ms_per_step": 1e3 * wall / max(config.steps, 1),
        "_steps": kept,
    }


# --------------------------------------------------------------------------- the task


@task(
    "toy",
    "Bernoulli toy E[(b - t)^2]: every estimator's mean/variance/bias vs closed forms; "
    "Adam curves at t = 0.499",
    default_config,
)
def run(settings: BenchSettings, config: ToyConfig | None, progress: Progress) -> TaskResult:
    """Run the toy benchmark; see the package docstring."""
    config = config if config is not None else default_config(settings.quick)
    if config.replicas < 2 or config.chunk < 1:
        raise ValueError(
            f"Expected `replicas` >= 2 and `chunk` >= 1, but found {config.replicas}, {config.chunk}"
        )
    names = _resolve_names(config)
    curve_names = names if config.steps > 0 else []
    settings_rows = len(config.phis) * len(config.targets) * len(names)
    progress.start("toy", settings_rows + len(curve_names))
    rows: list[dict[str, Any]] = []
    curves: dict[str, Any] | None = None
    t_start = time.perf_counter()
    try:
        for phi in config.phis:
            for t in config.targets:
                for name in names:
                    rows.append(_measure_row(name, t, phi, config, settings))
                    progress.advance(f"t={t} phi={phi} {name}")
        if curve_names:
            entries: dict[str, Any] = {}
            # The curves' tensors have `seeds` elements: more intra-op threads only add
            # thread-pool overhead there.
            threads = torch.get_num_threads()
            torch.set_num_threads(1)
            try:
                for name in curve_names:
                    entries[name] = _curve(name, config, settings)
                    progress.advance(f"curve {name}")
            finally:
                torch.set_num_threads(threads)
            steps = next(iter(entries.values()))["_steps"]
            for entry in entries.values():
                del entry["_steps"]
            curves = {
                "target": config.curve_target,
                "lr": config.lr,
                "seeds": config.seeds,
                "steps": steps,
                "estimators": entries,
            }
    finally:
        progress.finish()
    data: dict[str, Any] = {
        "problem": "L(phi) = E[(b - t)^2], b ~ Bernoulli(sigmoid(phi)); "
        "exact gradient p(1-p)(1-2t)",
        "tolerance": TOLERANCE,
        "rows": rows,
        "curves": curves,
        "figures": {},
    }
    result = TaskResult(
        name="toy",
        summary="Bernoulli toy E[(b - t)^2]: logits-gradient mean, variance and bias per "
        f"estimator vs closed forms ({config.dtype}, {settings.device}), and Adam curves",
        settings=dataclasses.asdict(config),
        data=data,
        wall_s=time.perf_counter() - t_start,
    )
    result.tables = [*row_tables(rows, config), check_summary(rows)]
    if curves is not None:
        result.tables.append(curve_table(curves, config))
    result.notes = notes(rows, curves, config)
    if settings.out is not None and config.plot:
        if curves is not None:
            figure = plot_curves(curves, config, settings.out, quick=settings.quick)
            if figure is not None:
                result.figures.append(figure)
                data["figures"][figure] = "data.curves: p per estimator (mean, min, max)"
        figure = plot_variance(rows, config, settings.out, quick=settings.quick)
        if figure is not None:
            result.figures.append(figure)
            data["figures"][figure] = "data.rows: var per estimator, t and phi"
    return result
