"""The plumbing every solver layer shares: the ``Solver`` type, the argument checks, one
checked solver call on a batch (or a stack of samples), and the layers' common base."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .._core.validation import check_floating, check_real

Solver = Callable[[Tensor], Tensor]


# --------------------------------------------------------------------------- checks


def _check_solver(solver: Any) -> Solver:
    if not callable(solver):
        raise TypeError(f"Expected `solver` to be callable, but found {type(solver).__name__}")
    return solver


def _check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(
            f"Expected `{name}` to be one of {', '.join(map(repr, choices))}, but found {value!r}"
        )
    return value


def _check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"Expected `{name}` to be a bool, but found {type(value).__name__}")
    return value


def _check_finite(value: Any, name: str) -> float:
    result = check_real(value, name)
    if not -math.inf < result < math.inf:
        raise ValueError(f"Expected `{name}` to be finite, but found {name}={value!r}")
    return result


def _check_nonnegative(value: Any, name: str) -> float:
    result = check_real(value, name)
    if not 0 <= result < math.inf:
        raise ValueError(f"Expected `{name}` >= 0 and finite, but found {name}={value!r}")
    return result


def _check_generator(generator: Any) -> torch.Generator | None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"Expected `generator` to be a torch.Generator or None, but found {type(generator).__name__}"
        )
    return generator


def _check_theta(theta: Any) -> Tensor:
    check_floating(theta, "theta")
    if theta.dim() == 0:
        raise ValueError(
            "Expected `theta` to have a batch dimension (shape (N, *event)), but found a 0-dim tensor"
        )
    return theta


def _solve(solver: Solver, theta: Tensor) -> Tensor:
    """``solver(theta)`` with its output checked (a tensor of ``theta``'s shape), in
    ``theta``'s dtype."""
    y = solver(theta)
    if not isinstance(y, Tensor):
        raise TypeError(
            f"Expected `solver` to return a torch.Tensor, but it returned {type(y).__name__}"
        )
    if y.shape != theta.shape:
        raise ValueError(
            f"Expected `solver` to return a solution of the scores' shape {tuple(theta.shape)}, "
            f"but it returned shape {tuple(y.shape)}"
        )
    return y.to(theta.dtype)


def _solve_samples(solver: Solver, perturbed: Tensor, dtype: torch.dtype) -> Tensor:
    """The solutions for a ``(M, N, *event)`` stack of scores, in one solver call on the
    flattened ``(M * N, *event)`` batch; returned in the compute dtype of ``perturbed``."""
    flat = perturbed.reshape((-1, *perturbed.shape[2:])).to(dtype)
    return _solve(solver, flat).reshape(perturbed.shape).to(perturbed.dtype)


def _inner(a: Tensor, b: Tensor) -> Tensor:
    """:math:`\\langle a, b\\rangle` over the event dimensions of ``(M, N, *event)`` stacks:
    shape ``(M, N, 1, ..., 1)`` (broadcastable back)."""
    p = a * b
    return p.sum(dim=tuple(range(2, p.dim())), keepdim=True) if p.dim() > 2 else p


def _negated(solver: Solver, theta: Tensor) -> Tensor:
    return solver(-theta)


# --------------------------------------------------------------------------- forward mode
# I-MLE's and blackbox's backwards solve a problem moved by the gradient itself: not linear
# in it, so no Jacobian and no JVP exists; their forward-mode twins say so.


def _no_jvp(name: str) -> type:
    """A forward-mode twin that explains why there is none."""

    def jvp(ctx: Any, *_args: Any) -> Any:
        raise NotImplementedError(
            f"{name}'s backward is not linear in the incoming gradient (it calls the solver at "
            "scores moved by that gradient), so it has no Jacobian and forward mode "
            "(torch.func.jvp, jacfwd, forward_ad) cannot be defined; use reverse mode "
            "(backward, torch.func.grad, vjp, jacrev)"
        )

    return staticmethod(jvp)  # type: ignore[return-value]


# --------------------------------------------------------------------------- layers


class _SolverLayer:
    """Shared parts of the solver layers: the solver, ``minimize`` and the theta check."""

    solver: Solver
    minimize: bool

    def _scores(self, theta: Any) -> tuple[Tensor, Solver]:
        """The scores the Function sees (a 1-D ``theta`` as a batch of one; ``-theta`` for a
        minimiser) and the solver to call on them."""
        theta = _check_theta(theta)
        if theta.dim() == 1:
            theta = theta.unsqueeze(0)
        if self.minimize:
            return -theta, functools.partial(_negated, self.solver)
        return theta, self.solver

    @staticmethod
    def _unbatch(theta: Tensor, out: Tensor) -> Tensor:
        """``out`` without the batch dimension that :meth:`_scores` added to a 1-D ``theta``."""
        return out.squeeze(0) if theta.dim() == 1 else out

    def _settings(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        name = getattr(self.solver, "__name__", type(self.solver).__name__)
        return f"{type(self).__name__}({name}, {self._settings()})"
