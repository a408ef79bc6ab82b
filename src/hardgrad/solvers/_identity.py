"""The identity (straight-through) and negative-identity backward through a solver, with
projections (Sahoo et al. 2023, https://arxiv.org/abs/2205.15213): :func:`identity_solver`."""

from __future__ import annotations

import functools

import torch
from torch import Tensor

from ..ops._autograd import IdentityGradient, apply_function
from ._base import Solver, _check_bool, _check_choice, _check_solver, _solve, _SolverLayer

_PROJECTIONS = ("none", "norm", "standardize")


class IdentitySolver(_SolverLayer):
    """The layer :func:`identity_solver` returns; see there."""

    def __init__(self, solver: Solver, *, project: str, minimize: bool) -> None:
        self.solver = _check_solver(solver)
        self.project = _check_choice(project, "project", _PROJECTIONS)
        self.minimize = _check_bool(minimize, "minimize")

    def _settings(self) -> str:
        return f"project={self.project!r}, minimize={self.minimize}"

    def __call__(self, theta: Tensor) -> Tensor:
        scores, solver = self._scores(theta)
        if self.project != "none":
            dims = tuple(range(1, scores.dim()))
            if self.project == "standardize" and dims:
                scores = scores - scores.mean(dims, keepdim=True)
            norm = scores.norm(dim=dims, keepdim=True) if dims else scores.abs()
            scores = scores / norm.clamp_min(torch.finfo(scores.dtype).tiny)
        return self._unbatch(
            theta, apply_function(IdentityGradient, scores, functools.partial(_solve, solver))
        )


def identity_solver(
    solver: Solver, *, project: str = "none", minimize: bool = False
) -> IdentitySolver:
    r"""The identity (straight-through) backward through a solver (Sahoo et al. 2023,
    https://arxiv.org/abs/2205.15213).

    Forward :math:`y = y^*(P(\theta))`, backward
    :math:`\partial L/\partial\theta = J_P^\top\, \partial L / \partial y`: the solver's
    Jacobian replaced by the identity. For a cost minimiser (``minimize=True``) the scores
    are :math:`-c`, so the costs get :math:`-\partial L/\partial y`: the paper's *negative
    identity*. The projection :math:`P` (differentiated by autograd) is ``"none"``,
    ``"norm"`` (:math:`\theta / \lVert\theta\rVert`, per batch entry) or ``"standardize"``
    (:math:`(\theta - \bar\theta)/\lVert\theta - \bar\theta\rVert`); the paper's
    projections keep the scores from drifting in scale or offset, to which the solution of a
    linear program is blind. ``"norm"`` leaves every linear argmax unchanged;
    ``"standardize"`` leaves it unchanged only for solutions of fixed size (k-subsets,
    permutations). Biased.

    Args:
        solver: ``solver(theta) -> y``; see :mod:`hardgrad.solvers`.
        project: ``"none"``, ``"norm"`` or ``"standardize"``.
        minimize: the solver minimises :math:`\langle c, y\rangle`; the layer takes costs.

    Example:
        >>> import torch, hardgrad as hg
        >>> def argmin(cost):  # a solver that minimises <cost, y> over one-hot y
        ...     return torch.nn.functional.one_hot(cost.argmin(-1), cost.shape[-1]).to(cost.dtype)
        >>> layer = hg.identity_solver(argmin, minimize=True)
        >>> cost = torch.tensor([[1.0, 0.5, 2.0]], requires_grad=True)
        >>> y = layer(cost); y
        tensor([[0., 1., 0.]], grad_fn=<IdentityGradientBackward>)
        >>> (y * torch.tensor([[1.0, 2.0, 3.0]])).sum().backward(); cost.grad
        tensor([[-1., -2., -3.]])
    """
    return IdentitySolver(solver, project=project, minimize=minimize)
