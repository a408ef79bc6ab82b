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
    _check_generator,
    _check_solver,
    _no_jvp,
    _solve_samples,
    _SolverLayer,
)
from ._noise import _noise, sum_of_gamma_noise

#: Noise distributions of :func:`imle`.
IMLE_NOISES = ("sum_of_gamma", "gumbel", "normal", "none")


@cached_signature
class _IMLE(torch.autograd.Function):
    """Forward: the mean of ``solver(theta + eps_m)``; backward:
    ``mean_m (solver(theta + eps_m) - solver(theta - lam g + eps_m)) / lam``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(theta: Tensor, noise: Tensor, solver: Solver, lam: float) -> tuple[Tensor, Tensor]:
        ys = _solve_samples(solver, opmath(theta).unsqueeze(0) + noise, theta.dtype)
        return fresh_output(ys.mean(0).to(theta.dtype)), ys

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        theta, noise, solver, lam = inputs
        mark_non_differentiable(ctx, output[1])
        ctx.save_for_backward(theta, noise, output[1])
        ctx.solver, ctx.lam = solver, lam

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _grad_ys: Any) -> tuple[Tensor | None, ...]:
        theta, noise, ys = ctx.saved_tensors
        target = opmath(theta) - ctx.lam * opmath(grad)  # the target distribution's scores
        ys_target = _solve_samples(ctx.solver, target.unsqueeze(0) + noise, theta.dtype)
        return ((ys - ys_target).mean(0) / ctx.lam).to(grad.dtype), None, None, None


@forward_mode(_IMLE)
@cached_signature
class _IMLENoJVP(_IMLE):
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
        self.minimize = _check_bool(minimize, "minimize")
        self.generator = _check_generator(generator)

    def _settings(self) -> str:
        k = "" if self.k is None else f", k={self.k}"
        return (
            f"lam={self.lam}, noise={self.noise!r}{k}, tau={self.tau}, "
            f"num_samples={self.num_samples}, minimize={self.minimize}"
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
        y, _ = apply_function(_IMLE, scores, self._draw(scores), solver, self.lam)
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
    minimize: bool = False,
    generator: torch.Generator | None = None,
) -> IMLESolver:
    r"""Implicit maximum-likelihood estimation (Niepert et al. 2021, https://arxiv.org/abs/2106.01798).

    Forward: perturb-and-MAP samples, averaged over ``num_samples`` (an exact discrete
    sample for the default of one),

    .. math::

        y = \frac1M\sum_{m=1}^M y^*(\theta + \epsilon_m), \qquad
        y^*(\theta) = \arg\max_y \langle\theta, y\rangle = \texttt{solver}(\theta).

    Backward: the difference between the solutions for the current scores and for the
    *target distribution* :math:`\theta' = \theta - \lambda\,\partial L/\partial y`, with
    the same noise, divided by :math:`\lambda`,

    .. math::

        \frac{\partial L}{\partial \theta} = \frac{1}{M\lambda}\sum_{m=1}^M
        \Big(y^*(\theta + \epsilon_m) - y^*\big(\theta - \lambda \tfrac{\partial L}{\partial y}
        + \epsilon_m\big)\Big).

    The :math:`1/\lambda` makes it a finite-difference estimate whose size does not grow
    with :math:`\lambda` (the reference implementation, torch-imle, leaves it out: its
    gradient is this one times :math:`\lambda`). Biased. Noise :math:`\epsilon`:
    ``"sum_of_gamma"`` (:func:`sum_of_gamma_noise` with subset size ``k`` and temperature
    ``tau``; for k-subset solvers; the default when ``k`` is given, Gumbel otherwise), ``tau``
    times standard ``"gumbel"`` or ``"normal"``
    noise, or ``"none"`` (then it equals :func:`blackbox`). Two solver calls per step (one
    in forward, one in backward), each on the whole batch of samples.

    Args:
        solver: ``solver(theta) -> y``; see :mod:`hardgrad.solvers`.
        lam: :math:`\lambda` > 0, the step to the target distribution.
        noise: one of ``"sum_of_gamma"``, ``"gumbel"``, ``"normal"``, ``"none"``; the
            default ``None`` means ``"sum_of_gamma"`` when ``k`` is given, else ``"gumbel"``.
        k: the subset size, required by ``"sum_of_gamma"``.
        tau: temperature (scale) of the noise, > 0.
        num_samples: :math:`M` >= 1.
        num_terms: :math:`s`, the Gamma terms of Sum-of-Gamma noise.
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
    """
    return IMLESolver(
        solver,
        lam=lam,
        noise=noise,
        k=k,
        tau=tau,
        num_samples=num_samples,
        num_terms=num_terms,
        minimize=minimize,
        generator=generator,
    )
