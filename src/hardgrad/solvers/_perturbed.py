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


@cached_signature
class _Perturbed(torch.autograd.Function):
    """Forward: the mean (or the unperturbed solution) of ``solver(theta + sigma Z_m)``;
    backward: Berthet et al.'s Jacobian estimate."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        theta: Tensor, noise: Tensor, solver: Solver, sigma: float, kind: str, hard: bool
    ) -> tuple[Tensor, Tensor]:
        ys = _solve_samples(solver, opmath(theta).unsqueeze(0) + sigma * noise, theta.dtype)
        y = _solve(solver, theta) if hard else ys.mean(0).to(theta.dtype)
        return fresh_output(y), ys

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        _, noise, _, sigma, kind, _ = inputs
        mark_non_differentiable(ctx, output[1])
        ctx.save_for_backward(noise, output[1])
        ctx.sigma, ctx.kind = sigma, kind

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _grad_ys: Any) -> tuple[Tensor | None, ...]:
        noise, ys = ctx.saved_tensors
        score = noise if ctx.kind == "normal" else 1.0 - torch.exp(-noise)  # grad of -log density
        inner = _inner(opmath(grad).unsqueeze(0), ys)
        return (inner * score).mean(0).div(ctx.sigma).to(grad.dtype), None, None, None, None, None


@cached_signature
class _PerturbedFenchelYoung(torch.autograd.Function):
    """Forward: the perturbed Fenchel-Young loss (without the constant Omega(target));
    backward: ``y_sigma(theta) - target``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        theta: Tensor, target: Tensor, noise: Tensor, solver: Solver, sigma: float
    ) -> tuple[Tensor, Tensor]:
        perturbed = opmath(theta).unsqueeze(0) + sigma * noise
        ys = _solve_samples(solver, perturbed, theta.dtype)
        value = _inner(perturbed, ys).mean(0) - _inner(
            opmath(theta).unsqueeze(0), opmath(target).unsqueeze(0)
        ).squeeze(0)
        return fresh_output(value.reshape(theta.shape[:1]).to(theta.dtype)), ys.mean(0)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        _, target, *_ = inputs
        mark_non_differentiable(ctx, output[1])
        ctx.save_for_backward(target, output[1])

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _grad_mean: Any) -> tuple[Tensor | None, ...]:
        target, mean = ctx.saved_tensors
        g = opmath(grad).reshape(grad.shape + (1,) * (mean.dim() - 1))
        return (g * (mean - opmath(target))).to(grad.dtype), None, None, None, None


# --------------------------------------------------------------------------- forward mode
# The perturbed optimizer's backward is a linear map of the incoming gradient (an
# estimated Jacobian), so its forward-mode twin applies the transposed map to the tangent
# (the identity solver is IdentityGradient, which has its own).


@forward_mode(_Perturbed)
@cached_signature
class _PerturbedJVP(_Perturbed):
    r""":math:`\dot y = \frac{1}{M\sigma}\sum_m y_m \langle s_m, \dot\theta\rangle`, the
    transpose of backward's :math:`\frac{1}{M\sigma}\sum_m s_m \langle g, y_m\rangle` (:math:`s_m`
    the noise's score)."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        _Perturbed.setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[1], output[1])

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_rest: Any) -> tuple[Tensor, None]:
        noise, ys = ctx.saved_tensors
        score = noise if ctx.kind == "normal" else 1.0 - torch.exp(-noise)
        inner = _inner(opmath(tangent).unsqueeze(0), score)
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
        minimize: bool,
        generator: torch.Generator | None,
    ) -> None:
        self.solver = _check_solver(solver)
        self.noise = _check_choice(noise, "noise", PERTURBED_NOISES)
        self.sigma = check_positive(sigma, "sigma")
        self.num_samples = check_int(num_samples, "num_samples", low=1)
        self.hard = _check_bool(hard, "hard")
        self.minimize = _check_bool(minimize, "minimize")
        self.generator = _check_generator(generator)

    def _settings(self) -> str:
        return (
            f"noise={self.noise!r}, sigma={self.sigma}, num_samples={self.num_samples}, "
            f"hard={self.hard}, minimize={self.minimize}"
        )

    def __call__(self, theta: Tensor) -> Tensor:
        scores, solver = self._scores(theta)
        z = _noise(self.noise, scores, self.num_samples, self.generator)
        y, _ = apply_function(_Perturbed, scores, z, solver, self.sigma, self.noise, self.hard)
        return self._unbatch(theta, y)

    def fenchel_young_loss(self, theta: Tensor, target: Tensor) -> Tensor:
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
        costs and :math:`\theta = -c` inside. ``target`` gets no gradient.

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
        loss, _ = apply_function(
            _PerturbedFenchelYoung, scores, target.detach().reshape(scores.shape), z, solver,
            self.sigma,
        )  # fmt: skip
        return self._unbatch(theta, loss)


def perturbed(
    solver: Solver,
    *,
    noise: str = "gumbel",
    sigma: float = 1.0,
    num_samples: int = 10,
    hard: bool = False,
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

    Args:
        solver: ``solver(theta) -> y`` for a batch ``(N, *event)``; see :mod:`hardgrad.solvers`.
        noise: ``"gumbel"`` or ``"normal"``.
        sigma: noise scale, > 0.
        num_samples: :math:`M`, >= 1.
        hard: forward the unperturbed solution instead of the mean.
        minimize: the solver minimises :math:`\langle c, y\rangle`; the layer takes costs.
        generator: the source of the noise (the global RNG when None).

    Example:
        >>> import torch, hardgrad as hg
        >>> g = torch.Generator().manual_seed(0)
        >>> layer = hg.perturbed(hg.one_hot_argmax, sigma=1.0, num_samples=20000, generator=g)
        >>> theta = torch.tensor([[2.0, 1.0, 0.0]])
        >>> layer(theta), torch.softmax(theta, -1)
        (tensor([[0.6732, 0.2385, 0.0883]]), tensor([[0.6652, 0.2447, 0.0900]]))
    """
    return PerturbedSolver(
        solver,
        noise=noise,
        sigma=sigma,
        num_samples=num_samples,
        hard=hard,
        minimize=minimize,
        generator=generator,
    )
