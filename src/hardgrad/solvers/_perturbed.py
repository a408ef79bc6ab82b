"""Perturbed optimizers and the perturbed Fenchel-Young loss (Berthet et al. 2020,
https://arxiv.org/abs/2002.08676): :func:`perturbed` and its layer."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._core.compat import fresh_output
from .._core.kernels import opmath
from .._core.validation import check_floating, check_int, check_positive
from ..ops._autograd import apply_function, cached_signature, forward_mode, mark_non_differentiable
from ._base import (
    Solver,
    _check_bool,
    _check_choice,
    _check_generator,
    _check_solver,
    _inner,
    _solve,
    _solve_samples,
    _SolverLayer,
)
from ._noise import _noise

#: Noise distributions of :func:`perturbed`.
PERTURBED_NOISES = ("gumbel", "normal")
#: Perturbations of :func:`perturbed`: added, or a factor (sign-preserving).
_PERTURBATIONS = ("additive", "multiplicative")
#: Baselines of :func:`perturbed`'s gradient estimate.
_BASELINES = ("none", "leave_one_out")
#: Reductions of :meth:`PerturbedSolver.fenchel_young_loss` over the batch.
_REDUCTIONS = ("none", "mean", "sum")


def _perturb(theta: Tensor, noise: Tensor, sigma: float, multiplicative: bool) -> Tensor:
    r"""The ``(M, N, *event)`` stack of perturbed scores: :math:`\theta + \sigma Z_m`, or
    :math:`\theta \odot e^{\sigma Z_m - \sigma^2/2}` (``theta`` in the compute dtype)."""
    if multiplicative:
        return theta.unsqueeze(0) * _factor(noise, sigma)
    return theta.unsqueeze(0) + sigma * noise


def _factor(noise: Tensor, sigma: float) -> Tensor:
    r"""The multiplicative perturbation's log-normal factor :math:`e^{\sigma Z - \sigma^2/2}`
    (mean 1)."""
    return torch.exp(sigma * noise - 0.5 * sigma * sigma)


def _score(noise: Tensor, kind: str, baseline: str) -> Tensor:
    r"""The noise's score :math:`\nabla\nu(Z_m)` (mean 0), centred over the samples for the
    leave-one-out baseline: :math:`\frac{M}{M-1}(s_m - \bar s) = s_m - \frac{1}{M-1}
    \sum_{j\ne m} s_j`."""
    score = noise if kind == "normal" else 1.0 - torch.exp(-noise)  # grad of -log density
    m = noise.shape[0]
    if baseline == "leave_one_out" and m > 1:
        score = (score - score.mean(0, keepdim=True)) * (m / (m - 1))
    return score


def _over_theta(x: Tensor, theta: Tensor) -> Tensor:
    r"""``x / theta`` (the multiplicative perturbation's chain rule through
    :math:`\log|\theta|`), 0 where ``theta`` is 0: there the perturbation cannot move the
    score and the smoothed map has no derivative."""
    nonzero = theta != 0
    return torch.where(nonzero, x / torch.where(nonzero, theta, torch.ones_like(theta)), 0.0)


@cached_signature
class _Perturbed(torch.autograd.Function):
    """Forward: the mean (or the unperturbed solution) of ``solver(theta + sigma Z_m)`` (or
    of ``theta * exp(sigma Z_m - sigma^2 / 2)``); backward: Berthet et al.'s Jacobian
    estimate."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        theta: Tensor,
        noise: Tensor,
        solver: Solver,
        sigma: float,
        kind: str,
        hard: bool,
        multiplicative: bool,
        baseline: str,
    ) -> tuple[Tensor, Tensor]:
        scores = _perturb(opmath(theta), noise, sigma, multiplicative)
        ys = _solve_samples(solver, scores, theta.dtype)
        y = _solve(solver, theta) if hard else ys.mean(0).to(theta.dtype)
        return fresh_output(y), ys

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        theta, noise, _, sigma, kind, _, multiplicative, baseline = inputs
        mark_non_differentiable(ctx, output[1])
        ctx.save_for_backward(noise, output[1], theta if multiplicative else None)
        ctx.sigma, ctx.kind, ctx.multiplicative, ctx.baseline = (
            sigma, kind, multiplicative, baseline
        )  # fmt: skip

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _grad_ys: Any) -> tuple[Tensor | None, ...]:
        noise, ys, theta = ctx.saved_tensors
        score = _score(noise, ctx.kind, ctx.baseline)
        inner = _inner(opmath(grad).unsqueeze(0), ys)
        out = (inner * score).mean(0).div(ctx.sigma)
        if ctx.multiplicative:
            out = _over_theta(out, opmath(theta))
        return (out.to(grad.dtype),) + (None,) * 7


@cached_signature
class _PerturbedFenchelYoung(torch.autograd.Function):
    """Forward: the perturbed Fenchel-Young loss (without the constant Omega(target));
    backward: ``y_sigma(theta) - target`` (the samples weighted by their factors for a
    multiplicative perturbation)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        theta: Tensor,
        target: Tensor,
        noise: Tensor,
        solver: Solver,
        sigma: float,
        multiplicative: bool,
    ) -> tuple[Tensor, Tensor]:
        perturbed = _perturb(opmath(theta), noise, sigma, multiplicative)
        ys = _solve_samples(solver, perturbed, theta.dtype)
        value = _inner(perturbed, ys).mean(0) - _inner(
            opmath(theta).unsqueeze(0), opmath(target).unsqueeze(0)
        ).squeeze(0)
        mean = (ys * _factor(noise, sigma)).mean(0) if multiplicative else ys.mean(0)
        return fresh_output(value.reshape(theta.shape[:1]).to(theta.dtype)), mean

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        _, target, *_ = inputs
        mark_non_differentiable(ctx, output[1])
        ctx.save_for_backward(target, output[1])

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _grad_mean: Any) -> tuple[Tensor | None, ...]:
        target, mean = ctx.saved_tensors
        g = opmath(grad).reshape(grad.shape + (1,) * (mean.dim() - 1))
        return (g * (mean - opmath(target))).to(grad.dtype), None, None, None, None, None


# --------------------------------------------------------------------------- forward mode
# The perturbed optimizer's backward is a linear map of the incoming gradient (an
# estimated Jacobian), so its forward-mode twin applies the transposed map to the tangent
# (the identity solver is IdentityGradient, which has its own).


@forward_mode(_Perturbed)
@cached_signature
class _PerturbedJVP(_Perturbed):
    r""":math:`\dot y = \frac{1}{M\sigma}\sum_m y_m \langle s_m, \dot\theta\rangle`, the
    transpose of backward's :math:`\frac{1}{M\sigma}\sum_m s_m \langle g, y_m\rangle` (:math:`s_m`
    the noise's score, centred for the baseline; :math:`\dot\theta/\theta` for a
    multiplicative perturbation)."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        _Perturbed.setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[1], output[1], inputs[0] if inputs[6] else None)

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_rest: Any) -> tuple[Tensor, None]:
        noise, ys, theta = ctx.saved_tensors
        score = _score(noise, ctx.kind, ctx.baseline)
        t = opmath(tangent)
        if ctx.multiplicative:
            t = _over_theta(t, opmath(theta))
        inner = _inner(t.unsqueeze(0), score)
        return (inner * ys).mean(0).div(ctx.sigma).to(tangent.dtype), None


@forward_mode(_PerturbedFenchelYoung)
@cached_signature
class _PerturbedFenchelYoungJVP(_PerturbedFenchelYoung):
    r""":math:`\dot L = \langle y_\sigma(\theta) - t, \dot\theta\rangle` per row (the target
    held constant, as in backward)."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        _PerturbedFenchelYoung.setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[1], output[1])

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_rest: Any) -> tuple[Tensor, None]:
        target, mean = ctx.saved_tensors
        t = opmath(tangent) * (mean - opmath(target))
        value = t.sum(dim=tuple(range(1, t.dim()))) if t.dim() > 1 else t
        return value.to(tangent.dtype), None


# --------------------------------------------------------------------------- layer


class PerturbedSolver(_SolverLayer):
    """The layer :func:`perturbed` returns; see there."""

    def __init__(
        self,
        solver: Solver,
        *,
        noise: str,
        sigma: float,
        num_samples: int,
        hard: bool,
        perturbation: str,
        baseline: str,
        minimize: bool,
        generator: torch.Generator | None,
    ) -> None:
        self.solver = _check_solver(solver)
        self.noise = _check_choice(noise, "noise", PERTURBED_NOISES)
        self.perturbation = _check_choice(perturbation, "perturbation", _PERTURBATIONS)
        if perturbation == "multiplicative" and noise != "normal":
            raise ValueError(
                "Expected `noise='normal'` for perturbation='multiplicative' (the factor "
                f"exp(sigma Z - sigma^2 / 2) of a standard normal Z), but found noise={noise!r}"
            )
        self.baseline = _check_choice(baseline, "baseline", _BASELINES)
        self.sigma = check_positive(sigma, "sigma")
        self.num_samples = check_int(num_samples, "num_samples", low=1)
        self.hard = _check_bool(hard, "hard")
        self.minimize = _check_bool(minimize, "minimize")
        self.generator = _check_generator(generator)

    def _settings(self) -> str:
        extra = "" if self.perturbation == "additive" else ", perturbation='multiplicative'"
        if self.baseline != "none":
            extra += f", baseline={self.baseline!r}"
        return (
            f"noise={self.noise!r}, sigma={self.sigma}, num_samples={self.num_samples}, "
            f"hard={self.hard}{extra}, minimize={self.minimize}"
        )

    def __call__(self, theta: Tensor) -> Tensor:
        scores, solver = self._scores(theta)
        z = _noise(self.noise, scores, self.num_samples, self.generator)
        mult = self.perturbation == "multiplicative"
        y, _ = apply_function(
            _Perturbed, scores, z, solver, self.sigma, self.noise, self.hard, mult, self.baseline
        )
        return self._unbatch(theta, y)

    def fenchel_young_loss(
        self, theta: Tensor, target: Tensor, *, reduction: str = "none"
    ) -> Tensor:
        r"""The perturbed Fenchel-Young loss of ``theta`` against the solutions ``target``.

        .. math::

            \ell(\theta; y) = F_\sigma(\theta) - \langle \theta, y \rangle, \qquad
            F_\sigma(\theta) = E\big[\max_{y'} \langle \theta + \sigma Z, y' \rangle\big]
            \approx \frac1M \sum_m \langle \theta + \sigma Z_m, y_m \rangle,

        per batch entry (shape ``(N,)``), up to the constant :math:`\Omega(y)`, which does
        not depend on :math:`\theta` (so the value may be below 0). Its gradient is
        :math:`\nabla_\theta \ell = y_\sigma(\theta) - y`, with :math:`y_\sigma` estimated by
        the mean of the same samples (Berthet et al. 2020, Prop. 4.1); convex in
        :math:`\theta`, no Jacobian estimate needed. With ``minimize=True``, ``theta`` are
        costs and :math:`\theta = -c` inside. ``target`` gets no gradient. For the
        multiplicative perturbation :math:`\theta \odot F_m`,
        :math:`F_m = e^{\sigma Z_m - \sigma^2/2}`, the same Danskin argument gives
        :math:`\nabla_\theta F_\sigma = E[F \odot y^*(\theta \odot F)]`, estimated by
        :math:`\frac1M\sum_m F_m \odot y_m` (PyEPO's ``perturbedFenchelYoungMul``).
        ``reduction``: ``"none"`` (one value per batch entry, the default), ``"mean"`` (over
        the batch, as PyEPO's default; 0 for an empty batch) or ``"sum"``.

        Example:
            >>> import torch, hardgrad as hg
            >>> argmax = lambda t: hg.one_hot_argmax(t)
            >>> layer = hg.perturbed(argmax, sigma=0.5, num_samples=1000,
            ...                      generator=torch.Generator().manual_seed(0))
            >>> theta = torch.tensor([[1.0, 0.0, -1.0]], requires_grad=True)
            >>> loss = layer.fenchel_young_loss(theta, torch.tensor([[0.0, 1.0, 0.0]]))
            >>> loss.sum().backward(); theta.grad  # softmax(theta / 0.5) - target, roughly
            tensor([[ 0.8720, -0.8890,  0.0170]])
        """
        scores, solver = self._scores(theta)
        check_floating(target, "target")
        if target.shape != theta.shape:
            raise ValueError(
                f"Expected `target` to have `theta`'s shape {tuple(theta.shape)}, but found "
                f"shape {tuple(target.shape)}"
            )
        z = _noise(self.noise, scores, self.num_samples, self.generator)
        _check_choice(reduction, "reduction", _REDUCTIONS)
        loss, _ = apply_function(
            _PerturbedFenchelYoung, scores, target.detach().reshape(scores.shape), z, solver,
            self.sigma, self.perturbation == "multiplicative",
        )  # fmt: skip
        loss = self._unbatch(theta, loss)
        if reduction == "sum" or (reduction == "mean" and loss.numel() == 0):
            return loss.sum()  # an empty batch: 0, not torch's NaN mean
        return loss.mean() if reduction == "mean" else loss


def perturbed(
    solver: Solver,
    *,
    noise: str = "gumbel",
    sigma: float = 1.0,
    num_samples: int = 10,
    hard: bool = False,
    perturbation: str = "additive",
    baseline: str = "none",
    minimize: bool = False,
    generator: torch.Generator | None = None,
) -> PerturbedSolver:
    r"""Perturbed optimizer (Berthet et al. 2020, https://arxiv.org/abs/2002.08676).

    The returned layer maps scores :math:`\theta` to

    .. math::

        y_\sigma(\theta) = E_Z\big[y^*(\theta + \sigma Z)\big] \approx
        \frac1M \sum_{m=1}^M y^*(\theta + \sigma Z_m), \qquad
        y^*(\theta) = \arg\max_{y} \langle \theta, y\rangle = \texttt{solver}(\theta),

    with :math:`M` = ``num_samples`` i.i.d. draws :math:`Z_m` of standard ``noise``
    (``"gumbel"`` or ``"normal"``), all solved in one solver call. Backward: the Jacobian
    estimate of the same samples (Berthet et al., Prop. 3.1),

    .. math::

        \frac{\partial L}{\partial \theta} = \frac{1}{M\sigma}\sum_{m=1}^M
        \Big\langle \frac{\partial L}{\partial y}, y^*(\theta + \sigma Z_m)\Big\rangle
        \nabla\nu(Z_m), \qquad
        \nabla\nu(z) = z \text{ (normal)}, \quad 1 - e^{-z} \text{ (Gumbel)},

    where :math:`\nu = -\log` (noise density). It is unbiased for the gradient of
    :math:`y_\sigma` (a smooth function), hence biased for the hard solver's (zero)
    gradient. With Gumbel noise and a one-hot argmax solver,
    :math:`y_\sigma(\theta) = \operatorname{softmax}(\theta/\sigma)` exactly (Gumbel-max).
    With ``hard=True`` the forward is the unperturbed solution :math:`y^*(\theta)` (one
    more solver call; the backward is unchanged: a straight-through use of the perturbed
    Jacobian). :meth:`PerturbedSolver.fenchel_young_loss` gives the matching loss.

    ``perturbation="multiplicative"`` (with ``noise="normal"``; Dalle et al. 2022,
    https://arxiv.org/abs/2207.13513, PyEPO's ``perturbedOptMul``) perturbs by a factor of
    mean 1 that keeps every score's sign, :math:`\theta \odot e^{\sigma Z_m - \sigma^2/2}`:
    an additive Gaussian perturbation of :math:`\log|\theta|`, so the estimate is the one
    above with :math:`\nabla\nu(Z_m) = Z_m` divided elementwise by :math:`\theta` (0 where
    :math:`\theta = 0`, where the perturbation cannot move the score).

    ``baseline="leave_one_out"`` (PyEPO's ``variance_reduction``) subtracts from each
    sample's :math:`\langle \partial L/\partial y, y_m\rangle` the mean of the other
    :math:`M - 1`. It is unbiased for the same gradient: the baseline :math:`b_m` is
    independent of :math:`Z_m` and :math:`E[\nabla\nu(Z)] = 0` (for the normal and the
    Gumbel score alike), so :math:`E[b_m\nabla\nu(Z_m)] = 0`. Equivalently the scores are
    centred, :math:`\nabla\nu(Z_m) \to \frac{M}{M-1}\big(\nabla\nu(Z_m) -
    \overline{\nabla\nu(Z)}\big)`. No effect for :math:`M = 1`.

    Args:
        solver: ``solver(theta) -> y`` for a batch ``(N, *event)``; see :mod:`hardgrad.solvers`.
        noise: ``"gumbel"`` or ``"normal"``.
        sigma: noise scale, > 0.
        num_samples: :math:`M`, >= 1.
        hard: forward the unperturbed solution instead of the mean.
        perturbation: ``"additive"`` (:math:`\theta + \sigma Z`) or ``"multiplicative"``
            (:math:`\theta \odot e^{\sigma Z - \sigma^2/2}`, normal noise only).
        baseline: ``"none"`` or ``"leave_one_out"`` (unbiased; a control variate whose
            effect on the variance depends on the problem).
        minimize: the solver minimises :math:`\langle c, y\rangle`; the layer takes costs.
        generator: the source of the noise (the global RNG when None).

    Example:
        >>> import torch, hardgrad as hg
        >>> g = torch.Generator().manual_seed(0)
        >>> layer = hg.perturbed(hg.one_hot_argmax, sigma=1.0, num_samples=20000, generator=g)
        >>> theta = torch.tensor([[2.0, 1.0, 0.0]])
        >>> layer(theta), torch.softmax(theta, -1)
        (tensor([[0.6732, 0.2385, 0.0883]]), tensor([[0.6652, 0.2447, 0.0900]]))
        >>> argmin = lambda c: hg.one_hot_argmax(-c)  # positive costs, sign kept
        >>> mul = hg.perturbed(argmin, noise="normal", perturbation="multiplicative",
        ...                    baseline="leave_one_out", sigma=0.5, num_samples=1000,
        ...                    minimize=True, generator=g)
        >>> mul(torch.tensor([[1.0, 1.5, 3.0]]))
        tensor([[0.6840, 0.2760, 0.0400]])
    """
    return PerturbedSolver(
        solver,
        noise=noise,
        sigma=sigma,
        num_samples=num_samples,
        hard=hard,
        perturbation=perturbation,
        baseline=baseline,
        minimize=minimize,
        generator=generator,
    )
