r"""The Switch Transformer load-balancing loss (Fedus et al. 2021,
https://arxiv.org/abs/2101.03961) (private; re-exported by :mod:`hardgrad.routing`)."""

from __future__ import annotations

import torch
from torch import Tensor

from .._core.validation import check_all_finite, check_floating, check_int
from ._settings import _check_indices

# --------------------------------------------------------------------------- auxiliary loss


def load_balancing_loss(
    logits: Tensor, indices: Tensor, *, num_experts: int | None = None
) -> Tensor:
    r"""The Switch Transformer load-balancing loss (Fedus et al. 2021, eq. 4-6).

    .. math::

        \mathcal{L}_{\text{aux}} = E \sum_{j=1}^{E} f_j P_j, \qquad
        f_j = \frac{1}{N k}\sum_{t,r} 1[\text{slot } r \text{ of token } t = j], \qquad
        P_j = \frac1N \sum_t p_{t,j},

    over the ``N`` tokens (rows of ``logits`` ``(..., E)``), ``p = softmax(logits)``; the
    fractions :math:`f_j` count every (token, slot) assignment (for top-1 exactly the
    paper's). Gradient through :math:`P` only. Equals 1 for uniform routing; minimised by
    balanced loads; 0 for an empty batch. ``indices`` are int64 ``(..., k)`` with the
    logits' batch shape; ``num_experts``, if given, must equal E. Computed in float32
    (float64 for float64 logits), rounded once to the logits' dtype.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.routing.load_balancing_loss(torch.zeros(4, 2), torch.tensor([[0], [1], [0], [1]]))
        tensor(1.)
    """
    check_floating(logits, "logits")
    if logits.dim() == 0:
        raise ValueError("Expected `logits` of shape (*batch, E), but found a 0-dim tensor")
    experts = logits.shape[-1]
    if num_experts is not None and check_int(num_experts, "num_experts", low=1) != experts:
        raise ValueError(
            f"Expected `num_experts` = logits.shape[-1] = {experts}, but found "
            f"num_experts={num_experts}"
        )
    _check_indices(indices, logits.shape[:-1])
    check_all_finite(logits, "logits")
    compute = torch.float64 if logits.dtype == torch.float64 else torch.float32
    p = torch.softmax(logits.reshape(-1, experts).to(compute), -1)
    flat = indices.reshape(-1)
    counts = torch.zeros(experts, dtype=compute, device=logits.device).index_add(
        0, flat, torch.ones(flat.shape, dtype=compute, device=logits.device)
    )
    fraction = counts / max(flat.shape[0], 1)
    mean = p.sum(0) / max(p.shape[0], 1)  # (no NaN for an empty batch)
    return (experts * (fraction * mean).sum()).to(logits.dtype)
