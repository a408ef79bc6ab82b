"""Implicit maximum-likelihood estimation (Niepert et al. 2021,
https://arxiv.org/abs/2106.01798): :func:`imle` and its layer."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._core.compat import fresh_output
from .._core.kernels import opmath, opmath_dtype
from .._core.validation import check_int, check_positive
from ..ops._autograd import apply_function, cached_signature, forward_mode, mark_non_differentiable
from ._base import (
    Solver,
    _check_bool,
    _check_choice,
    _check_finite,
    _check_generator,
    _check_nonnegative,
    _check_solver,
    _no_jvp,
    _solve_samples,
    _SolverLayer,
)
from ._noise import _noise, sum_of_gamma_noise

#: Noise distributions of :func:`imle`.
IMLE_NOISES = ("sum_of_gamma", "gumbel", "normal", "none")
#: What :func:`imle` returns: the mean of the samples or the samples.
IMLE_REDUCTIONS = ("mean", "none")


def _target_samples(ctx: Any, theta: Tensor, noise: Tensor, step: Tensor) -> Tensor:
    """The solutions at the target distribution's scores
    :math:`\\alpha\\theta - \\text{step} + (\\tau'/\\tau)\\,\\epsilon_m`, one solver call."""
    target = opmath(theta) if ctx.alpha == 1.0 else ctx.alpha * opmath(theta)
    target = target - step  # the target distribution's scores
    target_noise = noise if ctx.ratio == 1.0 else ctx.ratio * noise
    return _solve_samples(ctx.solver, target + target_noise, theta.dtype)


@cached_signature
class _IMLE(torch.autograd.Function):
    """Forward: the mean of ``solver(theta + eps_m)``; backward:
    ``mean_m (solver(theta + eps_m) - solver(alpha theta - lam g + r eps_m)) / lam``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        theta: Tensor, noise: Tensor, solver: Solver, lam: float, alpha: float, ratio: float
    ) -> tuple[Tensor, Tensor]:
        ys = _solve_samples(solver, opmath(theta).unsqueeze(0) + noise, theta.dtype)
        return fresh_output(ys.mean(0).to(theta.dtype)), ys

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        theta, noise, solver, lam, alpha, ratio = inputs
        mark_non_differentiable(ctx, output[1])
        ctx.save_for_backward(theta, noise, output[1])
        ctx.solver, ctx.lam, ctx.alpha, ctx.ratio = solver, lam, alpha, ratio

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _grad_ys: Any) -> tuple[Tensor | None, ...]:
        theta, noise, ys = ctx.saved_tensors
        step = (ctx.lam * opmath(grad)).unsqueeze(0)
        ys_target = _target_samples(ctx, theta, noise, step)
        return ((ys - ys_target).mean(0) / ctx.lam).to(grad.dtype), None, None, None, None, None


@cached_signature
class _IMLESamples(torch.autograd.Function):
    """Forward: the samples ``solver(theta + eps_m)``, stacked; backward:
    ``mean_m (solver(theta + eps_m) - solver(alpha theta - lam M G_m + r eps_m)) / lam``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        theta: Tensor, noise: Tensor, solver: Solver, lam: float, alpha: float, ratio: float
    ) -> Tensor:
        ys = _solve_samples(solver, opmath(theta).unsqueeze(0) + noise, theta.dtype)
        return fresh_output(ys.to(theta.dtype))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        theta, noise, solver, lam, alpha, ratio = inputs
        ctx.save_for_backward(theta, noise, output)
        ctx.solver, ctx.lam, ctx.alpha, ctx.ratio = solver, lam, alpha, ratio

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        theta, noise, ys = ctx.saved_tensors
        step = (ctx.lam * noise.shape[0]) * opmath(grad)
        ys_target = _target_samples(ctx, theta, noise, step)
        out = (opmath(ys) - ys_target).mean(0) / ctx.lam
        return out.to(grad.dtype), None, None, None, None, None


@forward_mode(_IMLE)
@cached_signature
class _IMLENoJVP(_IMLE):
    jvp = _no_jvp("hg.imle")


@forward_mode(_IMLESamples)
@cached_signature
class _IMLESamplesNoJVP(_IMLESamples):
    jvp = _no_jvp("hg.imle")


class IMLESolver(_SolverLayer):
    """The layer :func:`imle` returns; see there."""

    def __init__(
        self,
        solver: Solver,
        *,
        lam: float,
        noise: str | None,
        k: int | None,
        tau: float,
        num_samples: int,
        num_terms: int,
        target_alpha: float,
        target_tau: float | None,
        reduce: str,
        minimize: bool,
        generator: torch.Generator | None,
    ) -> None:
        self.solver = _check_solver(solver)
        self.lam = check_positive(lam, "lam")
        if noise is None:  # Sum-of-Gamma for a subset size, Gumbel otherwise
            noise = "gumbel" if k is None else "sum_of_gamma"
        self.noise = _check_choice(noise, "noise", IMLE_NOISES)
        if noise == "sum_of_gamma":
            if k is None:
                raise ValueError(
                    "Expected `k` (the subset size) for noise='sum_of_gamma', but found k=None"
                )
            k = check_int(k, "k", low=1)
        elif k is not None:
            k = check_int(k, "k", low=1)
        self.k = k
        self.tau = check_positive(tau, "tau")
        self.num_samples = check_int(num_samples, "num_samples", low=1)
        self.num_terms = check_int(num_terms, "num_terms", low=1)
        self.target_alpha = _check_finite(target_alpha, "target_alpha")
        self.target_tau = (
            None if target_tau is None else _check_nonnegative(target_tau, "target_tau")
        )
        self.reduce = _check_choice(reduce, "reduce", IMLE_REDUCTIONS)
        self.minimize = _check_bool(minimize, "minimize")
        self.generator = _check_generator(generator)

    def _settings(self) -> str:
        k = "" if self.k is None else f", k={self.k}"
        extra = "" if self.target_alpha == 1.0 else f", target_alpha={self.target_alpha}"
        if self.target_tau is not None:
            extra += f", target_tau={self.target_tau}"
        if self.reduce != "mean":
            extra += f", reduce={self.reduce!r}"
        return (
            f"lam={self.lam}, noise={self.noise!r}{k}, tau={self.tau}, "
            f"num_samples={self.num_samples}{extra}, minimize={self.minimize}"
        )

    def _draw(self, scores: Tensor) -> Tensor:
        dtype = opmath_dtype(scores.dtype)
        shape = (self.num_samples, *scores.shape)
        if self.noise == "none":
            return torch.zeros(shape, dtype=dtype, device=scores.device)
        if self.noise == "sum_of_gamma":
            assert self.k is not None  # checked in __init__
            return sum_of_gamma_noise(
                shape,
                self.k,
                tau=self.tau,
                num_terms=self.num_terms,
                generator=self.generator,
                dtype=dtype,
                device=scores.device,
            )
        return self.tau * _noise(self.noise, scores, self.num_samples, self.generator)

    def __call__(self, theta: Tensor) -> Tensor:
        scores, solver = self._scores(theta)
        ratio = 1.0 if self.target_tau is None else self.target_tau / self.tau
        args = (scores, self._draw(scores), solver, self.lam, self.target_alpha, ratio)
        if self.reduce == "none":
            ys = apply_function(_IMLESamples, *args)
            return ys.squeeze(1) if theta.dim() == 1 else ys
        y, _ = apply_function(_IMLE, *args)
        return self._unbatch(theta, y)


def imle(
    solver: Solver,
    *,
    lam: float = 10.0,
    noise: str | None = None,
    k: int | None = None,
    tau: float = 1.0,
    num_samples: int = 1,
    num_terms: int = 10,
    target_alpha: float = 1.0,
    target_tau: float | None = None,
    reduce: str = "mean",
    minimize: bool = False,
    generator: torch.Generator | None = None,
) -> IMLESolver:
    r"""Implicit maximum-likelihood estimation (Niepert et al. 2021, https://arxiv.org/abs/2106.01798).

    Forward: perturb-and-MAP samples :math:`y_m = y^*(\theta + \tau\epsilon_m)`,
    :math:`m = 1..M` (``num_samples``), all in one solver call, with
    :math:`y^*(\theta) = \arg\max_y \langle\theta, y\rangle = \texttt{solver}(\theta)`;
    ``reduce="mean"`` (the default) returns their mean :math:`\bar y = \frac1M\sum_m y_m`
    (shape of ``theta``; an exact discrete sample for the default :math:`M = 1`),
    ``reduce="none"`` the samples themselves, stacked on a new first dimension: shape
    ``(num_samples, *theta.shape)``.

    Backward: the difference between the solutions for the current scores and for the
    *target distribution* :math:`\theta'_m = \alpha\theta - \lambda M G_m + \tau'\epsilon_m`
    (the same draws :math:`\epsilon_m`), divided by :math:`\lambda`, with
    :math:`G_m = \partial L/\partial y_m` the gradient reaching sample :math:`m`,

    .. math::

        \frac{\partial L}{\partial \theta} = \frac{1}{M\lambda}\sum_{m=1}^M
        \Big(y^*(\theta + \tau\epsilon_m) - y^*\big(\alpha\theta - \lambda M G_m
        + \tau'\epsilon_m\big)\Big).

    For ``reduce="mean"`` every sample gets :math:`G_m = \frac1M\,\partial L/\partial\bar y`,
    so the target is :math:`\alpha\theta - \lambda\,\partial L/\partial \bar y + \tau'\epsilon_m`:
    a loss of the mean of the samples gets the same gradient from either ``reduce``.
    :math:`\alpha` = ``target_alpha`` (default 1) weighs :math:`\theta` in the target, and
    :math:`\tau'` = ``target_tau`` (default: ``tau``) is the target noise's temperature.
    The :math:`1/\lambda` makes it a finite-difference estimate whose size does not grow
    with :math:`\lambda` for :math:`\alpha = 1`. Biased. Noise :math:`\epsilon`:
    ``"sum_of_gamma"`` (:func:`sum_of_gamma_noise` with subset size ``k``; for k-subset
    solvers; the default when ``k`` is given, Gumbel otherwise), standard ``"gumbel"`` or
    ``"normal"`` noise, or ``"none"`` (then, with :math:`\alpha = 1`, it equals
    :func:`blackbox`). Two solver calls per step (one in forward, one in backward), each on
    the whole batch of samples.

    **torch-imle's convention** (uclnlp/torch-imle, ``imle(target_distribution=
    TargetDistribution(alpha, beta), nb_samples, input_noise_temperature,
    target_noise_temperature)``): its target is :math:`\alpha\theta - \beta G_m +
    \tau'\epsilon_m` and its gradient :math:`\frac1M\sum_m (y_m - y'_m)` with no division,
    and it returns every sample, batch-major (shape ``(N * nb_samples, ...)``). So with
    ``lam = beta / nb_samples``, ``target_alpha = alpha``, ``tau`` and ``target_tau`` its two
    temperatures and ``reduce="none"``, the samples are torch-imle's (``y.transpose(0, 1)
    .reshape(-1, *event)`` in its layout), and its gradient is ``lam`` times this one, for any
    loss of the samples. PyEPO's ``implicitMLE`` (one-sided) divides by :math:`\lambda` and
    returns the mean, as ``reduce="mean"`` does, with :math:`\alpha = 1` and one temperature.

    Args:
        solver: ``solver(theta) -> y``; see :mod:`hardgrad.solvers`.
        lam: :math:`\lambda` > 0, the step to the target distribution.
        noise: one of ``"sum_of_gamma"``, ``"gumbel"``, ``"normal"``, ``"none"``; the
            default ``None`` means ``"sum_of_gamma"`` when ``k`` is given, else ``"gumbel"``.
        k: the subset size, required by ``"sum_of_gamma"``.
        tau: :math:`\tau` > 0, temperature (scale) of the noise in forward.
        num_samples: :math:`M` >= 1.
        num_terms: :math:`s`, the Gamma terms of Sum-of-Gamma noise.
        target_alpha: :math:`\alpha`, a finite real, the weight of :math:`\theta` in the
            target distribution (torch-imle's ``TargetDistribution(alpha=...)``).
        target_tau: :math:`\tau'` >= 0, the temperature of the target's noise (torch-imle's
            ``target_noise_temperature``); ``None`` means ``tau``.
        reduce: ``"mean"`` (the mean of the samples) or ``"none"`` (the samples, shape
            ``(num_samples, *theta.shape)``).
        minimize: the solver minimises :math:`\langle c, y\rangle`; the layer takes costs.
        generator: the source of the noise.

    Example:
        >>> import torch, hardgrad as hg
        >>> top2 = lambda t: hg.topk_mask(t, 2)
        >>> layer = hg.imle(top2, k=2, lam=4.0, generator=torch.Generator().manual_seed(0))
        >>> theta = torch.tensor([[3.0, 2.0, 0.0, -1.0]], requires_grad=True)
        >>> y = layer(theta); y
        tensor([[1., 1., 0., 0.]], grad_fn=<_IMLEBackward>)
        >>> (y * torch.tensor([[0.0, 2.0, 0.0, 0.0]])).sum().backward(); theta.grad
        tensor([[ 0.0000,  0.2500, -0.2500,  0.0000]])
        >>> samples = hg.imle(top2, k=2, num_samples=3, reduce="none", target_alpha=0.0,
        ...                   target_tau=2.0, generator=torch.Generator().manual_seed(0))
        >>> samples(theta).shape  # (num_samples, *theta.shape)
        torch.Size([3, 1, 4])
    """
    return IMLESolver(
        solver,
        lam=lam,
        noise=noise,
        k=k,
        tau=tau,
        num_samples=num_samples,
        num_terms=num_terms,
        target_alpha=target_alpha,
        target_tau=target_tau,
        reduce=reduce,
        minimize=minimize,
        generator=generator,
    )
