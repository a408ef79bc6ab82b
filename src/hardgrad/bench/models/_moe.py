"""The mixture of experts of the ``models`` benchmark: a hand-written top-k router with a
load-balancing loss, and the same layer with :class:`hardgrad.nn.MoE`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ... import nn as hgnn

# --------------------------------------------------------------------------- MoE

EXPERTS, TOP_K, EXPERT_HIDDEN, BALANCE_WEIGHT = 8, 2, 128, 0.01
EXPERT_PARAMETERS = ("w1", "b1", "w2", "b2")


class _MoEOriginal(nn.Module):
    """The top-k MoE layer as hand-written code writes it (parameters named and laid out
    as :class:`hardgrad.nn.MoE`'s, so that both start alike)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.router = nn.Linear(width, EXPERTS, bias=False)
        self.w1 = nn.Parameter(torch.empty(EXPERTS, width, EXPERT_HIDDEN))
        self.b1 = nn.Parameter(torch.empty(EXPERTS, EXPERT_HIDDEN))
        self.w2 = nn.Parameter(torch.empty(EXPERTS, EXPERT_HIDDEN, width))
        self.b2 = nn.Parameter(torch.empty(EXPERTS, width))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        probs = F.softmax(self.router(x), -1)
        gates, chosen = probs.topk(TOP_K, -1)
        gates = gates / gates.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(EXPERTS):
            token, slot = (chosen == e).nonzero(as_tuple=True)
            if token.numel() == 0:
                continue
            hidden = F.gelu(x[token] @ self.w1[e] + self.b1[e])
            expert = hidden @ self.w2[e] + self.b2[e]
            out.index_add_(0, token, expert * gates[token, slot].unsqueeze(-1))
        load = F.one_hot(chosen, EXPERTS).sum((0, 1)) / chosen.numel()
        balance = EXPERTS * (load * probs.mean(0)).sum()
        return out, balance


class _MoENet(nn.Module):
    def __init__(self, hardgrad: bool, n_in: int) -> None:
        super().__init__()
        self.inputs = nn.Linear(n_in, 64)
        self.moe: nn.Module = (
            hgnn.MoE(64, num_experts=EXPERTS, k=TOP_K, hidden_features=EXPERT_HIDDEN)
            if hardgrad
            else _MoEOriginal(64)
        )
        self.outputs = nn.Linear(64, 10)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = self.inputs(x)
        if isinstance(self.moe, hgnn.MoE):
            mixed, _, balance = self.moe(h)
        else:
            mixed, balance = self.moe(h)
        return self.outputs(h + mixed), balance


def _moe_loss(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    logits, balance = model(inputs)
    return F.cross_entropy(logits, targets) + BALANCE_WEIGHT * balance
