"""Blackbox differentiation of combinatorial solvers (Vlastelica et al. 2020,
https://arxiv.org/abs/1912.02175): :func:`blackbox` and its layer."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._core.compat import fresh_output
from .._core.kernels import opmath
from .._core.validation import check_positive
from ..ops._autograd import apply_function, cached_signature, forward_mode
from ._base import Solver, _check_bool, _check_solver, _no_jvp, _solve, _SolverLayer


@cached_signature
class _Blackbox(torch.autograd.Function):
    """Forward ``solver(theta)``; backward ``(y - solver(theta - lam g)) / lam``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(theta: Tensor, solver: Solver, lam: float) -> Tensor:
        return fresh_output(_solve(solver, theta))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        theta, solver, lam = inputs
        ctx.save_for_backward(theta, output)
        ctx.solver, ctx.lam = solver, lam

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        theta, y = ctx.saved_tensors
        shifted = (opmath(theta) - ctx.lam * opmath(grad)).to(theta.dtype)
        y_lam = _solve(ctx.solver, shifted)
        return ((opmath(y) - opmath(y_lam)) / ctx.lam).to(grad.dtype), None, None


@forward_mode(_Blackbox)
@cached_signature
class _BlackboxNoJVP(_Blackbox):
    jvp = _no_jvp("hg.blackbox")


class BlackboxSolver(_SolverLayer):
    """The layer :func:`blackbox` returns; see there."""

    def __init__(self, solver: Solver, *, lam: float, minimize: bool) -> None:
        self.solver = _check_solver(solver)
        self.lam = check_positive(lam, "lam")
        self.minimize = _check_bool(minimize, "minimize")

    def _settings(self) -> str:
        return f"lam={self.lam}, minimize={self.minimize}"

    def __call__(self, theta: Tensor) -> Tensor:
        scores, solver = self._scores(theta)
        return self._unbatch(theta, apply_function(_Blackbox, scores, solver, self.lam))


def blackbox(solver: Solver, *, lam: float, minimize: bool = False) -> BlackboxSolver:
    r"""Blackbox differentiation of a combinatorial solver (Vlastelica et al. 2020,
    https://arxiv.org/abs/1912.02175).

    Forward: the exact solution :math:`y = y^*(\theta) = \texttt{solver}(\theta)`. Backward:
    the gradient of the piecewise-linear interpolation of :math:`L(y^*(\cdot))` at
    :math:`\theta`, from one more solver call at the shifted scores,

    .. math::

        \frac{\partial L}{\partial \theta} = \frac{1}{\lambda}\Big(y^*(\theta) -
        y^*\big(\theta - \lambda \tfrac{\partial L}{\partial y}\big)\Big).

    (The paper writes it for a cost minimiser: :math:`w' = w + \lambda\,\partial L/\partial y`,
    :math:`\partial L/\partial w = -(y(w) - y(w'))/\lambda`; ``minimize=True`` is exactly
    that.) :math:`\lambda` trades the interpolation's faithfulness (small) against
    informative gradients (large). Biased; zero when the shifted solution is unchanged.

    Args:
        solver: ``solver(theta) -> y``; see :mod:`hardgrad.solvers`.
        lam: :math:`\lambda` > 0.
        minimize: the solver minimises :math:`\langle c, y\rangle`; the layer takes costs.

    Example:
        >>> import torch, hardgrad as hg
        >>> layer = hg.blackbox(hg.one_hot_argmax, lam=2.0)
        >>> theta = torch.tensor([[1.0, 0.5, -1.0]], requires_grad=True)
        >>> y = layer(theta); y
        tensor([[1., 0., 0.]], grad_fn=<_BlackboxBackward>)
        >>> (y * torch.tensor([[1.0, 0.0, 0.0]])).sum().backward(); theta.grad
        tensor([[ 0.5000, -0.5000,  0.0000]])
    """
    return BlackboxSolver(solver, lam=lam, minimize=minimize)
