"""The L0-gated MLP of the ``models`` benchmark: Louizos et al.'s hard-concrete gates written
out, and the same model with :class:`hardgrad.nn.HardConcreteGate`."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ... import nn as hgnn

# --------------------------------------------------------------------------- L0 gates

L0_WEIGHT, GATE_BETA, GATE_GAMMA, GATE_ZETA = 1e-3, 2 / 3, -0.1, 1.1


class _HardConcreteOriginal(nn.Module):
    """Hard Concrete gates on the hidden units, written out (Louizos et al. 2018)."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.full((features,), math.log(0.9 / 0.1)))

    def forward(self, h: Tensor) -> Tensor:
        tiny = torch.finfo(h.dtype).tiny
        u = torch.rand_like(self.log_alpha).clamp(tiny, 1 - torch.finfo(h.dtype).eps)
        s = torch.sigmoid((u.log() - (1 - u).log() + self.log_alpha) / GATE_BETA)
        z = (s * (GATE_ZETA - GATE_GAMMA) + GATE_GAMMA).clamp(0, 1)
        return h * z

    def l0(self) -> Tensor:
        shift = GATE_BETA * math.log(-GATE_GAMMA / GATE_ZETA)
        return torch.sigmoid(self.log_alpha - shift).sum()


class _L0MLP(nn.Module):
    def __init__(self, hardgrad: bool, n_in: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(n_in, 256)
        self.gate: hgnn.HardConcreteGate | _HardConcreteOriginal = (
            hgnn.HardConcreteGate(256, beta=GATE_BETA, gamma=GATE_GAMMA, zeta=GATE_ZETA)
            if hardgrad
            else _HardConcreteOriginal(256)
        )
        self.outputs = nn.Linear(256, 10)

    def forward(self, x: Tensor) -> Tensor:
        return self.outputs(self.gate(F.relu(self.hidden(x))))


def _l0_loss(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    assert isinstance(model, _L0MLP)
    return F.cross_entropy(model(inputs), targets) + L0_WEIGHT * model.gate.l0()
