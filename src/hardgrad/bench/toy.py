r"""The ``toy`` benchmark: every estimator on the Bernoulli toy, against closed forms.

The problem: :math:`L(\phi) = E[(b - t)^2]`, :math:`b \sim \operatorname{Bern}(p)`,
:math:`p = \sigma(\phi)`, so :math:`f(1) - f(0) = 1 - 2t` and the exact gradient is
:math:`\nabla_\phi L = p(1-p)(1-2t)`. For :math:`t < 1/2` the loss is minimised at
:math:`p = 0`; near :math:`t = 1/2` the signal :math:`1 - 2t` is tiny, which is what makes
the problem hard for noisy estimators (Tucker et al. 2017; Grathwohl et al. 2018).

**Table.** For each target ``t`` and logit ``phi``, every estimator registered in
:data:`hardgrad.estimators.ESTIMATORS` that supports Bernoulli variables (plus a few
labelled variants, such as ``reinforce(ema)``) is run once on ``M`` replicas: logits of
shape ``(M,)`` all equal to ``phi`` and ``f = lambda b: (b - t)**2`` returning ``(n, M)``,
so ``logits.grad`` holds ``M`` independent estimates. Each estimator uses its default
``num_samples``; the table shows the resulting evaluations of ``f``. Measured mean and
variance (with standard errors) are set against closed forms, all derived for this toy
(:math:`g_b` is the estimate given the sample :math:`b`, :math:`n` the samples averaged):

* exact: mean :math:`p(1-p)(1-2t)`, variance 0;
* ``st`` (:math:`\tau`): :math:`g_b = 2(b - t)\,\sigma'(\phi/\tau)/\tau`, mean
  :math:`2(p - t)p(1-p)` at :math:`\tau = 1`, variance :math:`4p^3(1-p)^3` there;
* ``st_identity``: :math:`g_b = 2(b - t)`;
* ``reinmax`` (:math:`\tau`): :math:`g_b = 2(b-t)\,(2r_b(1-r_b) - \sigma'(\phi)/2)`,
  :math:`r_b = (\sigma(\phi/\tau) + b)/2`; at :math:`\tau = 1`, :math:`g_1 = (1-p)(1-t)`,
  :math:`g_0 = -pt`: unbiased on this quadratic;
* ``gst`` (:math:`\tau`, gap :math:`\kappa`): :math:`g_b = 2(b-t)\,\sigma'(\Delta_b/\tau)/\tau`
  with :math:`\Delta_b` the gap between the two gapped logits of ``[0, phi]``;
* two-point estimators (all the above): mean :math:`p g_1 + (1-p) g_0`, variance
  :math:`p(1-p)(g_1 - g_0)^2`, divided by :math:`n`;
* ``st_gumbel``, ``gumbel_rao`` (``k`` conditional draws) and ``gumbel_softmax``: one
  logistic variable :math:`d = \phi + \text{Logistic}(0, 1)`, :math:`b = 1[d > 0]`;
  moments of :math:`2(b - t)\sigma'(d/\tau)/\tau` (Gumbel-Rao: conditional on :math:`b`,
  the average of ``k`` draws) and of :math:`2(\sigma(d/\tau) - t)\sigma'(d/\tau)/\tau` by
  Simpson quadrature; at :math:`\phi = 0`, :math:`\tau = 1` ST-Gumbel's mean is
  :math:`(1-2t)/6`;
* ``reinforce`` with a constant baseline :math:`\beta` (0, or the ``ema`` state after a
  warm-up): :math:`E[g^2] = p(1-p)^2 (f_1 - \beta)^2 + (1-p)p^2 (f_0 - \beta)^2`, variance
  :math:`(E[g^2] - g^2)/n`; with :math:`\beta = 0` this is
  :math:`p(1-t)^4(1-p)^2 + (1-p)t^4p^2 - g^2`;
* ``rloo`` and ``reinforce(optimal)`` with two samples: both are
  :math:`\tfrac12 (f_1 - f_2)(b_1 - b_2) = \tfrac12(1-2t)\,1[b_1 \ne b_2]`, variance
  :math:`(1-2t)^2 q(1-q)/4`, :math:`q = 2p(1-p)`;
* ``arm``, one pair: :math:`\hat g = (1-2t)\,|u - \tfrac12|\,1[|u - \tfrac12| > a]`,
  :math:`a = |p - \tfrac12|`, variance
  :math:`(1-2t)^2 (\tfrac1{12} - \tfrac23 a^3 - (\tfrac14 - a^2)^2)` (:math:`(1-2t)^2/48` at 0);
* ``disarm``, one pair: :math:`\hat g = \tfrac12(1-2t)\sigma(|\phi|)\,1[b \ne \tilde b]`,
  variance :math:`\tfrac14(1-2t)^2\sigma(|\phi|)^2 r(1-r)`, :math:`r = 2\sigma(-|\phi|)`
  (0 at :math:`\phi = 0`); with several pairs, divided by their number.

REBAR and RELAX have no closed-form variance (it depends on the learned control variate;
they are measured at their initial parameters); their mean is the exact gradient, as for
every estimator declared unbiased. A check passes when the relative error is at most 5 %;
a closed-form variance of 0 needs a measured variance of 0 to rounding. A check that misses
5 % by less than four standard errors is reported as *unresolved* (the run's ``M`` cannot
tell), not as a failure (four, so that a full run's ~200 checks raise a false failure
about once in a hundred runs).

Wall time on two idle cores: 87-111 s for the full run (``docs/results/toy/``), 22 s
with ``--quick``.

**Curves.** At :math:`t = 0.499`, ``phi`` starts at 0 and Adam (lr 0.01) follows each
estimator for a few thousand steps, ``seeds`` runs at once as ``seeds`` independent logits
(a stateful estimator's parameters, in the same optimizer, are shared by the runs, as they
would be across a batch). The exact gradient is the reference. Unbiased estimators should
head to :math:`p = 0`; straight-through's mean :math:`2(p - t)p(1-p)` vanishes at
:math:`p = t`, so it stalls there. Plots: ``toy_curves.png`` and ``toy_variance.png``.
"""

from __future__ import annotations

import dataclasses
import math
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeGuard, TypeVar

import torch
from torch import Tensor

from .. import estimators as _estimators
from .._expectation import expectation
from ..diagnostics import gradient_samples
from ..estimators import (
    ARM,
    GST,
    RELAX,
    RLOO,
    ST,
    DisARM,
    Estimator,
    Exact,
    GumbelRao,
    GumbelSoftmax,
    Reinforce,
    ReinMax,
    ScoreFunctionEstimator,
    STGumbel,
    STIdentity,
)
from ._task import BenchSettings, Progress, TaskResult, task
from ._toy_report import check_summary, curve_table, notes, plot_curves, plot_variance, row_tables

__all__ = [
    "VARIANTS",
    "ClosedForm",
    "ElementwiseMLP",
    "ToyConfig",
    "check_moment",
    "closed_form",
    "default_config",
    "run",
]

_E = TypeVar("_E", bound=Estimator)

#: Relative tolerance of the closed-form checks.
TOLERANCE = 0.05
#: Standard errors within which a check off by more than the tolerance is 'unresolved'.
RESOLVE_Z = 4.0


@dataclass(frozen=True)
class ToyConfig:
    """Settings of the toy benchmark.

    Attributes:
        targets: the values of ``t`` in the table.
        phis: the logits ``phi`` in the table (``p = sigmoid(phi)``).
        replicas: independent estimates per estimator and setting (``M``).
        chunk: logits per call when warming up the EMA baseline (bounds memory).
        estimators: registry names and :data:`VARIANTS` to run; ``None``: every registered
            estimator that supports Bernoulli variables, then every variant.
        ema_warmup: calls that set ``reinforce(ema)``'s moving average before it is measured.
        curve_target: ``t`` of the optimisation curves.
        steps: Adam steps of each curve (0: no curves).
        lr: Adam's learning rate.
        seeds: runs per estimator (independent logits of one batch).
        record_every: keep ``p`` every this many steps.
        dtype: dtype of the logits (``"float64"`` or ``"float32"``).
        plot: write ``toy_curves.png`` and ``toy_variance.png`` (needs matplotlib).
    """

    targets: tuple[float, ...] = (0.45, 0.49, 0.499)
    phis: tuple[float, ...] = (0.0, -1.0)
    replicas: int = 2**18
    chunk: int = 2**17
    estimators: tuple[str, ...] | None = None
    ema_warmup: int = 20
    curve_target: float = 0.499
    steps: int = 3000
    lr: float = 0.01
    seeds: int = 16
    record_every: int = 10
    dtype: str = "float64"
    plot: bool = True


def default_config(quick: bool) -> ToyConfig:
    """The full setting, or the ``--quick`` one: fewer replicas, shorter curves."""
    if quick:
        return ToyConfig(replicas=2**14, chunk=2**14, steps=600, seeds=8, record_every=5)
    return ToyConfig()


# --------------------------------------------------------------------------- estimators


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
    module docstring for the derivations); ``baseline`` is ``reinforce(ema)``'s current
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
    """Run the toy benchmark; see the module docstring."""
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
            figure = plot_curves(curves, config, settings.out)
            if figure is not None:
                result.figures.append(figure)
                data["figures"][figure] = "data.curves: p per estimator (mean, min, max)"
        figure = plot_variance(rows, config, settings.out)
        if figure is not None:
            result.figures.append(figure)
            data["figures"][figure] = "data.rows: var per estimator, t and phi"
    return result
