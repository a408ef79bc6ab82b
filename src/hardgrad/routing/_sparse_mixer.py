r"""SparseMixer (Liu et al. 2023; its top-2 form in GRIN / PhiMoE): sampled experts, the
midpoint/Heun multipliers in forward and its backward (private; used by
:func:`hardgrad.routing.topk_route`)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ..estimators._noise import gumbel_noise, uniform
from ..ops._autograd import apply_function, cached_signature
from ._settings import SparseMixer


@cached_signature
class _SparseMixerGate(torch.autograd.Function):
    r"""Forward :math:`\omega \pi_D`; backward :math:`\lambda \bar g \pi_D (e_D - \pi)` to the
    scores (:math:`\lambda` = 1 for version 2, 2 for version 1)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        scores: Tensor, pi: Tensor, selected: Tensor, omega: Tensor, scale: float
    ) -> Tensor:
        return pi.gather(-1, selected) * omega

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _, pi, selected, _, ctx.scale = inputs
        ctx.save_for_backward(pi, selected)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        pi, selected = ctx.saved_tensors
        weighted = grad.to(pi.dtype) * pi.gather(-1, selected) * ctx.scale
        out = (-pi * weighted).scatter_add(-1, selected, weighted)
        return out, None, None, None, None


def _sparsity_mask(scores: Tensor, masked: Tensor, eps: float) -> Tensor:
    """SparseMixer's mask: experts more than 2 eps (relative) below the largest remaining."""
    top = masked.amax(-1, keepdim=True)
    factor = scores.abs().clamp(min=top)
    gap = top - scores
    return torch.where(factor > 0, gap / torch.where(factor > 0, factor, 1), 0) > 2 * eps


def _sparsemixer(
    scores: Tensor,
    k: int,
    settings: SparseMixer,
    training: bool,
    generator: torch.Generator | None,
) -> tuple[Tensor, Tensor]:
    """SparseMixer along the last dim; see :func:`topk_route`."""
    compute = torch.float64 if scores.dtype == torch.float64 else torch.float32
    theta = scores.to(compute)
    eps = float(settings.jitter_eps)  # type: ignore[arg-type]
    v1 = settings.version == 1
    remaining = theta.detach()
    gates, chosen = [], []
    for _ in range(k):
        drop = _sparsity_mask(theta.detach(), remaining, eps)
        masked = remaining.masked_fill(drop, -math.inf)
        if training:
            selected = (masked + gumbel_noise(masked, generator)).argmax(-1, keepdim=True)
        else:
            selected = masked.argmax(-1, keepdim=True)
        pi = torch.softmax(masked, -1)
        if training:
            best = selected == pi.argmax(-1, keepdim=True)
            u = uniform(selected.to(compute), generator)
            one = best | (u > (0.5 if v1 else 0.75))
            low = torch.full_like(u, 0.5 if v1 else 0.3333)  # PhiMoE: 0.3333 + 0.6667 * one
            omega = torch.where(one, torch.ones_like(u), low)
        else:
            omega = torch.ones_like(selected, dtype=compute)
        scale = 2.0 if v1 and training else 1.0
        gate = apply_function(_SparseMixerGate, theta, pi, selected, omega, scale)
        gates.append(gate)
        chosen.append(selected)
        remaining = remaining.scatter(-1, selected, -math.inf)
    return torch.cat(gates, -1).to(scores.dtype), torch.cat(chosen, -1)
