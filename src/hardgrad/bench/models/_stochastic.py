"""The stochastic binary MLP of the ``models`` benchmark: Bernoulli units with a
straight-through gradient, written out and with :func:`hardgrad.stochastic.bernoulli`."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ...stochastic import bernoulli as hg_bernoulli

# --------------------------------------------------------------------------- stochastic MLP


class _StochasticBinary(nn.Module):
    def __init__(self, hardgrad: bool, generator: torch.Generator) -> None:
        super().__init__()
        self.hardgrad = hardgrad
        self.generator = generator

    def forward(self, logits: Tensor) -> Tensor:
        if self.hardgrad:
            return hg_bernoulli(logits, estimator="st", generator=self.generator)
        p = torch.sigmoid(logits)
        return p + (torch.bernoulli(p, generator=self.generator) - p).detach()


def _stochastic_mlp(hardgrad: bool, generator: torch.Generator, n_in: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(n_in, 256),
        _StochasticBinary(hardgrad, generator),
        nn.Linear(256, 256),
        _StochasticBinary(hardgrad, generator),
        nn.Linear(256, 10),
    )


# --------------------------------------------------------------------------- running
