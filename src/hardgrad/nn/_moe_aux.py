r"""The bookkeeping of :class:`hardgrad.nn.MoE` around its experts: its options' checks,
Default MoE's EMA update, the capacity's kept assignments and the auxiliary losses of a forward."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from .. import routing
from .._core.validation import check_int, check_real
from ..routing._noisy import _prob_in_top_k

#: The estimators noisy top-k gating composes with (deterministic top-k of the noisy logits).
NOISY_ESTIMATORS = ("sparse", "dense", "default")


def check_experts(
    experts: Any, num_experts: Any, hidden_features: Any
) -> tuple[nn.ModuleList | None, int]:
    """``experts``: None or a non-empty sequence of ``nn.Module`` s; with them
    ``num_experts`` None or their number and ``hidden_features`` None. Returns the
    modules and the number of experts (default 8)."""
    if experts is None:
        return None, check_int(8 if num_experts is None else num_experts, "num_experts", low=1)
    if isinstance(experts, nn.Module) and not isinstance(experts, nn.ModuleList):
        raise TypeError(
            "Expected `experts` to be a list of nn.Module (one per expert), but found a "
            f"single {type(experts).__name__}"
        )
    if not isinstance(experts, (list, tuple, nn.ModuleList)):
        raise TypeError(
            f"Expected `experts` to be a list of nn.Module, but found {type(experts).__name__}"
        )
    for j, module in enumerate(experts):
        if not isinstance(module, nn.Module):
            raise TypeError(
                f"Expected `experts[{j}]` to be an nn.Module, but found {type(module).__name__}"
            )
    if not len(experts):
        raise ValueError("Expected `experts` to hold at least one module, but found none")
    if num_experts is not None and num_experts != len(experts):
        raise ValueError(
            f"Expected `num_experts` = len(experts) = {len(experts)} or None, but found "
            f"num_experts={num_experts!r}"
        )
    if hidden_features is not None:
        raise ValueError(
            "Expected `hidden_features`=None with `experts` (the built-in MLPs' width), but "
            f"found hidden_features={hidden_features!r}"
        )
    return nn.ModuleList(experts), len(experts)


def check_options(
    resolved: Any, estimator: Any, noisy_gating: Any, noise_epsilon: Any, capacity_factor: Any
) -> tuple[bool, float, float | None]:
    """``noisy_gating`` (a bool, with a deterministic estimator), ``noise_epsilon`` (>= 0)
    and ``capacity_factor`` (> 0 or None), checked."""
    if not isinstance(noisy_gating, bool):
        raise TypeError(
            f"Expected `noisy_gating` to be a bool, but found {type(noisy_gating).__name__}"
        )
    if noisy_gating and resolved not in NOISY_ESTIMATORS:
        raise ValueError(
            f"Expected `estimator` in {NOISY_ESTIMATORS} with noisy_gating=True (a top-k of "
            f"the noisy logits), but found estimator={estimator!r}"
        )
    epsilon = check_real(noise_epsilon, "noise_epsilon")
    if not 0 <= epsilon < math.inf:
        raise ValueError(
            f"Expected `noise_epsilon` >= 0 and finite, but found noise_epsilon={noise_epsilon!r}"
        )
    if capacity_factor is not None:
        capacity_factor = check_real(capacity_factor, "capacity_factor")
        if not 0 < capacity_factor < math.inf:
            raise ValueError(
                "Expected `capacity_factor` > 0 and finite (or None), but found "
                f"capacity_factor={capacity_factor!r}"
            )
    return noisy_gating, epsilon, capacity_factor


@torch.no_grad()
def update_defaults(moe: Any, outputs: Tensor, indices: Tensor, keep: Tensor | None) -> None:
    """Default MoE's EMA of each expert's mean output over the tokens routed to it in this
    batch (the first batch that reaches an expert sets its default); dropped pairs excluded."""
    dtype = moe.default_outputs.dtype
    flat_out = outputs.detach().reshape(-1, moe.out_features).to(dtype)
    flat_idx = indices.reshape(-1)
    weight = torch.ones_like(flat_idx, dtype=dtype) if keep is None else keep.reshape(-1).to(dtype)
    sums = torch.zeros_like(moe.default_outputs).index_add(
        0, flat_idx, flat_out * weight.unsqueeze(-1)
    )
    counts = torch.zeros_like(moe.default_seen, dtype=dtype).index_add(0, flat_idx, weight)
    mean = sums / counts.clamp_min(1).unsqueeze(-1)
    hit = counts > 0
    decay = torch.where(moe.default_seen, moe.default_decay, 0.0).to(dtype)
    updated = decay.unsqueeze(-1) * moe.default_outputs + (1 - decay.unsqueeze(-1)) * mean
    moe.default_outputs.copy_(torch.where(hit.unsqueeze(-1), updated, moe.default_outputs))
    moe.default_seen.logical_or_(hit)


def capacity_keep(indices: Tensor, capacity_factor: float, num_experts: int) -> tuple[Tensor, int]:
    """Which (token, slot) assignments of ``indices`` ``(N, k)`` fit each expert's capacity
    :math:`\\lceil c N k / E \\rceil` (with a 1e-9 tolerance), in slot-major, then token
    order; and that capacity."""
    n, k = indices.shape
    capacity = math.ceil(capacity_factor * n * k / num_experts - 1e-9)
    order = indices.transpose(0, 1).reshape(-1)  # slot 1 of every token, then slot 2...
    onehot = torch.nn.functional.one_hot(order, num_experts)
    position = ((onehot.cumsum(0) - 1) * onehot).sum(-1)  # the assignment's place in line
    return (position < capacity).reshape(k, n).transpose(0, 1), capacity


def aux_losses(
    balance: Tensor,
    logits: Tensor,
    gates: Tensor,
    indices: Tensor,
    noisy: tuple[Tensor, Tensor, Tensor | None] | None,
) -> dict[str, Tensor]:
    """The auxiliary losses of one forward (see :class:`hardgrad.nn.MoE`): ``balance`` the
    Switch loss, the others from the routed ``logits`` ``(N, E)``, the ``gates`` and
    ``indices`` ``(N, k)`` and, for the smooth load, ``(clean logits, noise std,
    threshold)``."""
    num_experts = logits.shape[-1]
    flat = indices.reshape(-1)
    zeros = torch.zeros(num_experts, dtype=gates.dtype, device=gates.device)
    importance = zeros.index_add(0, flat, gates.reshape(-1))
    threshold = None if noisy is None else noisy[2]
    if noisy is not None and threshold is not None:
        clean, std, _ = noisy
        load = _prob_in_top_k(clean, logits, std, indices, threshold).sum(0)
    else:
        load = zeros.index_add(0, flat, torch.ones_like(flat, dtype=gates.dtype))
    return {
        "load_balancing": balance,
        "router_z": routing.router_z_loss(logits),
        "importance": routing.cv_squared(importance),
        "load": routing.cv_squared(load),
    }
