"""The problem of the ``poly`` benchmark: the exact loss of the current probabilities, its
optimum, and where straight-through's mean gradient vanishes."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

# --------------------------------------------------------------------------- the problem


def optimum(power: float, target: float = 0.45) -> float:
    """``min_z E|z - t|^p`` over ``z`` in {0, 1}: ``min(t, 1 - t) ** p``."""
    return float(min(target, 1 - target) ** power)


def exact_loss(probs: Tensor, power: float | Tensor, target: float = 0.45) -> Tensor:
    """``mean_i [pi_i |1 - t|^p + (1 - pi_i) |t|^p]`` over the last dimension, the exact
    expected loss of independent Bernoulli variables with probabilities ``probs``
    (differentiable; ``power`` broadcasts against ``probs.shape[:-1]``)."""
    power = torch.as_tensor(power, dtype=probs.dtype, device=probs.device)
    power = power.reshape((*power.shape, 1))
    one = abs(1 - target) ** power
    zero = abs(target) ** power
    return (probs * one + (1 - probs) * zero).mean(-1)


def st_stall_probability(power: float, target: float = 0.45) -> float:
    """The probability at which straight-through's (tau = 1) mean gradient vanishes:
    ``pi (1-t)^(p-1) = (1 - pi) t^(p-1)``."""
    return 1 / (1 + ((1 - target) / target) ** (power - 1))


def _objective(power: Tensor, target: float) -> Callable[[Tensor], Tensor]:
    """``f(z) = mean_i |z_i - t|^p``: ``(n, P, S, V) -> (n, P, S)``, ``power`` of shape
    ``(P, 1, 1)``."""

    def f(z: Tensor) -> Tensor:
        return (z - target).abs().pow(power).mean(-1)

    return f
