"""The spiking MLPs of the ``models`` benchmark: SuperSpike's surrogate written out (Zenke and
Ganguli 2018), and the same network with hardgrad's spike and with :class:`hardgrad.nn.LIF`."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from ... import nn as hgnn
from ... import ops, surrogates

# --------------------------------------------------------------------------- SNN

SLOPE = 25.0
BETA = 0.9
THRESHOLD = 1.0


class _SuperSpike(torch.autograd.Function):
    """The spike as public code writes it: step forward, fast-sigmoid derivative backward."""

    @staticmethod
    def forward(ctx: Any, v: Tensor) -> Tensor:
        ctx.save_for_backward(v)
        return (v > 0).to(v.dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        (v,) = ctx.saved_tensors
        return grad / (SLOPE * v.abs() + 1.0) ** 2


class _SpikingMLP(nn.Module):
    def __init__(self, hardgrad: bool, n_in: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(n_in, 128)
        self.fc2 = nn.Linear(128, 10)
        self.hardgrad = hardgrad
        self.surrogate = surrogates.FastSigmoid(slope=SLOPE)

    def spike(self, v: Tensor) -> Tensor:
        if self.hardgrad:
            return ops.heaviside(v, surrogate=self.surrogate)
        return _SuperSpike.apply(v)

    def forward(self, spikes_in: Tensor) -> Tensor:
        """``spikes_in``: ``(T, batch, n_in)``; returns the output spike counts."""
        batch = spikes_in.shape[1]
        mem1 = spikes_in.new_zeros(batch, 128)
        mem2 = spikes_in.new_zeros(batch, 10)
        spk1, spk2 = torch.zeros_like(mem1), torch.zeros_like(mem2)
        counts = torch.zeros_like(mem2)
        for x_t in spikes_in:
            mem1 = BETA * mem1 + self.fc1(x_t) - THRESHOLD * spk1.detach()
            spk1 = self.spike(mem1 - THRESHOLD)
            mem2 = BETA * mem2 + self.fc2(spk1) - THRESHOLD * spk2.detach()
            spk2 = self.spike(mem2 - THRESHOLD)
            counts = counts + spk2
        return counts


class _LIFSpikingMLP(nn.Module):
    """:class:`_SpikingMLP`'s network with :class:`hardgrad.nn.LIF` neurons: the same
    dynamics (its reset is recomputed from the previous membrane, which is the detached
    previous spike) and the same surrogate."""

    def __init__(self, n_in: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(n_in, 128)
        self.fc2 = nn.Linear(128, 10)
        surrogate = surrogates.FastSigmoid(slope=SLOPE)
        self.lif1 = hgnn.LIF(BETA, THRESHOLD, surrogate=surrogate)
        self.lif2 = hgnn.LIF(BETA, THRESHOLD, surrogate=surrogate)

    def forward(self, spikes_in: Tensor) -> Tensor:
        mem1 = mem2 = None
        counts: Tensor | float = 0.0
        for x_t in spikes_in:
            spk1, mem1 = self.lif1(self.fc1(x_t), mem1)
            spk2, mem2 = self.lif2(self.fc2(spk1), mem2)
            counts = counts + spk2
        assert isinstance(counts, Tensor)
        return counts
