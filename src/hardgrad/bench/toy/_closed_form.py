"""The closed forms of the ``toy`` benchmark: each estimator's mean and variance on the
Bernoulli toy (derived in :mod:`hardgrad.bench.toy`), and the check of a measured moment."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard, TypeVar

import torch
from torch import Tensor

from ...estimators import (
    ARM,
    GST,
    RLOO,
    ST,
    DisARM,
    Estimator,
    Exact,
    GumbelRao,
    GumbelSoftmax,
    Reinforce,
    ReinMax,
    STGumbel,
    STIdentity,
)
from ._config import RESOLVE_Z, TOLERANCE

_E = TypeVar("_E", bound=Estimator)


# --------------------------------------------------------------------------- closed forms


@dataclass(frozen=True)
class ClosedForm:
    """The closed-form mean and variance of one estimator's gradient (``None``: unknown)."""

    mean: float | None
    var: float | None
    source: str


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def _sigmoid_slope(x: float) -> float:
    return _sigmoid(x) * _sigmoid(-x)


def _two_point(p: float, g1: float, g0: float, n: int, source: str) -> ClosedForm:
    """An estimate that is ``g1`` when ``b = 1`` and ``g0`` when ``b = 0``, averaged ``n``
    times."""
    return ClosedForm(p * g1 + (1 - p) * g0, p * (1 - p) * (g1 - g0) ** 2 / n, source)


def _simpson(
    h: Callable[[Tensor], Tensor], phi: float, positive: bool, points: int = 2**13
) -> float:
    """:math:`\\int h(x)\\,\\sigma'(x - \\phi)\\,dx` over :math:`x > 0` or :math:`x < 0`: the
    expectation of ``h(d) 1[d > 0]`` (or ``1[d < 0]``), ``d`` logistic around ``phi``."""
    span = 60.0  # the logistic density is below e^-60 beyond
    lo, hi = (0.0, max(phi, 0.0) + span) if positive else (min(phi, 0.0) - span, 0.0)
    x = torch.linspace(lo, hi, points + 1, dtype=torch.float64)
    w = torch.ones_like(x)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    density = torch.sigmoid(x - phi) * torch.sigmoid(phi - x)
    return float((h(x) * density * w).sum()) * (hi - lo) / points / 3


def _slope_tensor(x: Tensor, tau: float) -> Tensor:
    return torch.sigmoid(x / tau) * torch.sigmoid(-x / tau) / tau


def _gapped_difference(phi: float, b: int, gap: float) -> float:
    """``z_1 - z_0`` of the gapped logits of ``[0, phi]`` given the sample ``b``."""
    top = max(0.0, phi)
    if b == 1:
        return top - min(0.0, top - gap)
    return min(phi, top - gap) - top


def _exactly(est: Estimator, cls: type[_E]) -> TypeGuard[_E]:
    """``est`` is an instance of ``cls`` itself (a subclass may change the estimator)."""
    return type(est) is cls


def closed_form(
    est: Estimator, t: float, phi: float, num_samples: int, baseline: float | None = None
) -> ClosedForm:
    """The closed-form mean and variance of ``est``'s logits gradient on the toy (see the
    package docstring for the derivations); ``baseline`` is ``reinforce(ema)``'s current
    moving average."""
    p = _sigmoid(phi)
    exact = p * (1 - p) * (1 - 2 * t)
    f1, f0 = (1 - t) ** 2, t**2
    n = max(num_samples, 1)
    if _exactly(est, Exact):
        return ClosedForm(exact, 0.0, "p(1-p)(1-2t)")
    if _exactly(est, ST):
        tau = est.tau
        s = _sigmoid_slope(phi / tau) / tau
        return _two_point(p, 2 * (1 - t) * s, -2 * t * s, n, "2(b-t)σ'(φ/τ)/τ")
    if _exactly(est, STIdentity):
        return _two_point(p, 2 * (1 - t), -2 * t, n, "2(b-t)")
    if _exactly(est, ReinMax):
        tau = est.tau
        ps, slope = _sigmoid(phi / tau), _sigmoid_slope(phi)
        r1, r0 = (ps + 1) / 2, ps / 2
        g1 = 2 * (1 - t) * (2 * r1 * (1 - r1) - slope / 2)
        g0 = -2 * t * (2 * r0 * (1 - r0) - slope / 2)
        return _two_point(p, g1, g0, n, "2(b-t)(2r(1-r)-σ'(φ)/2)")
    if _exactly(est, GST):
        tau, gap = est.tau, est.gap
        s1 = _sigmoid_slope(_gapped_difference(phi, 1, gap) / tau) / tau
        s0 = _sigmoid_slope(_gapped_difference(phi, 0, gap) / tau) / tau
        return _two_point(p, 2 * (1 - t) * s1, -2 * t * s0, n, "2(b-t)σ'(Δ_b/τ)/τ")
    if _exactly(est, STGumbel) or _exactly(est, GumbelRao):
        tau = est.tau
        k = est.k if isinstance(est, GumbelRao) else 1
        mean, second = 0.0, 0.0
        for positive, weight, prob in ((True, 2 * (1 - t), p), (False, -2 * t, 1 - p)):
            m = _simpson(lambda x: _slope_tensor(x, tau), phi, positive) / prob
            m2 = _simpson(lambda x: _slope_tensor(x, tau) ** 2, phi, positive) / prob
            mean += prob * weight * m
            second += prob * weight**2 * (m * m + (m2 - m * m) / k)
        label = "quadrature" + (f", k={k}" if isinstance(est, GumbelRao) else "")
        return ClosedForm(mean, (second - mean * mean) / n, label)
    if _exactly(est, GumbelSoftmax):
        tau = est.tau

        def grad(x: Tensor) -> Tensor:
            return 2 * (torch.sigmoid(x / tau) - t) * _slope_tensor(x, tau)

        mean = sum(_simpson(grad, phi, s) for s in (True, False))
        second = sum(_simpson(lambda x: grad(x) ** 2, phi, s) for s in (True, False))
        return ClosedForm(mean, (second - mean * mean) / n, "quadrature (relaxed f)")
    if _exactly(est, Reinforce):
        mode = est.baseline
        if mode is None or (mode == "ema" and baseline is not None):
            beta = 0.0 if mode is None else float(baseline or 0.0)
            second = p * (1 - p) ** 2 * (f1 - beta) ** 2 + (1 - p) * p**2 * (f0 - beta) ** 2
            label = "β=0" if mode is None else f"β={beta:.4g} (EMA state)"
            return ClosedForm(exact, (second - exact**2) / n, label)
        if mode == "optimal" and n == 2:
            q = 2 * p * (1 - p)
            return ClosedForm(exact, (1 - 2 * t) ** 2 * q * (1 - q) / 4, "= RLOO, n=2")
    if _exactly(est, RLOO) and n == 2:
        q = 2 * p * (1 - p)
        return ClosedForm(exact, (1 - 2 * t) ** 2 * q * (1 - q) / 4, "(1-2t)²q(1-q)/4")
    if _exactly(est, ARM):
        a = abs(p - 0.5)
        var = (1 - 2 * t) ** 2 * (1 / 12 - 2 * a**3 / 3 - (0.25 - a * a) ** 2)
        return ClosedForm(exact, var / (n // 2), "(1-2t)²(1/12-2a³/3-(1/4-a²)²)")
    if _exactly(est, DisARM):
        r = 2 * _sigmoid(-abs(phi))
        var = 0.25 * (1 - 2 * t) ** 2 * _sigmoid(abs(phi)) ** 2 * r * (1 - r)
        return ClosedForm(exact, var / (n // 2), "(1-2t)²σ(|φ|)²r(1-r)/4")
    if est.unbiased:
        return ClosedForm(exact, None, "unbiased")
    return ClosedForm(None, None, "")


# --------------------------------------------------------------------------- measuring


def check_moment(measured: float, se: float, expected: float, rounding: float) -> dict[str, Any]:
    """Compare a measured moment with its closed form.

    ``ok``: relative error at most :data:`TOLERANCE` (for an expected 0: ``|measured|`` at
    most ``rounding``, plus :data:`RESOLVE_Z` standard errors); ``unresolved``: off by more,
    but by less than :data:`RESOLVE_Z` standard errors; ``FAIL``: otherwise.
    """
    if expected == 0:
        ok = abs(measured) <= rounding + RESOLVE_Z * se
        return {"status": "ok" if ok else "FAIL", "rel_error": None, "resolution": None}
    rel = (measured - expected) / abs(expected)
    if abs(rel) <= TOLERANCE:
        status = "ok"
    elif abs(measured - expected) <= RESOLVE_Z * se:
        status = "unresolved"
    else:
        status = "FAIL"
    return {"status": status, "rel_error": rel, "resolution": RESOLVE_Z * se / abs(expected)}
