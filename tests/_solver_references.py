"""Toy solvers and inputs the solver tests share (importable as
``from _solver_references import ...``: ``tests/conftest.py`` puts this folder on
``sys.path``): one-hot argmax/argmin, the top-2 indicator, a solver that records the
batches it was called with, and seeded inputs."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["Recorder", "argmax_solver", "argmin_solver", "data", "gen", "top2_solver"]


def argmax_solver(theta: torch.Tensor) -> torch.Tensor:
    return F.one_hot(theta.argmax(-1), theta.shape[-1]).to(theta.dtype)


def argmin_solver(cost: torch.Tensor) -> torch.Tensor:
    return F.one_hot(cost.argmin(-1), cost.shape[-1]).to(cost.dtype)


def top2_solver(theta: torch.Tensor) -> torch.Tensor:
    index = theta.topk(2, -1).indices
    return torch.zeros_like(theta).scatter(-1, index, 1.0)


class Recorder:
    """A solver that remembers every batch it was called with."""

    def __init__(self, solver=top2_solver):
        self.solver, self.calls = solver, []

    def __call__(self, theta):
        self.calls.append(theta.detach().clone())
        return self.solver(theta)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def data(shape=(3, 5), seed=0, dtype=torch.float64):
    g = gen(seed)
    return torch.randn(shape, generator=g, dtype=dtype), torch.randn(
        shape, generator=g, dtype=dtype
    )
