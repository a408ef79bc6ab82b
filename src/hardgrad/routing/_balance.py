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


def router_z_loss(logits: Tensor) -> Tensor:
    r"""The router z-loss of ST-MoE (Zoph et al. 2022, https://arxiv.org/abs/2202.08906, eq. 5).

    .. math::

        \mathcal{L}_z = \frac1N \sum_{t=1}^{N} \Big(\log \sum_{j=1}^{E} e^{\theta_{t,j}}\Big)^2

    over the ``N`` tokens (rows of ``logits`` ``(..., E)``). It penalises large router
    logits (the softmax's input), which keeps the router numerically stable in low
    precision; the paper adds it with weight 0.001. Backward: autograd,
    :math:`\partial \mathcal{L}_z/\partial\theta_{t} = \frac{2}{N}
    \operatorname{logsumexp}(\theta_t)\, \operatorname{softmax}(\theta_t)`. 0 for an empty
    batch. Computed in float32 (float64 for float64 logits), rounded once to the logits'
    dtype.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.routing.router_z_loss(torch.zeros(3, 4))   # log(4)^2
        tensor(1.9218)
    """
    check_floating(logits, "logits")
    if logits.dim() == 0:
        raise ValueError("Expected `logits` of shape (*batch, E), but found a 0-dim tensor")
    check_all_finite(logits, "logits")
    compute = torch.float64 if logits.dtype == torch.float64 else torch.float32
    rows = logits.reshape(-1, logits.shape[-1]).to(compute)
    z = torch.logsumexp(rows, -1).square().sum() / max(rows.shape[0], 1)
    return z.to(logits.dtype)


def cv_squared(x: Tensor) -> Tensor:
    r"""The squared coefficient of variation of the entries of ``x`` (Shazeer et al. 2017,
    https://arxiv.org/abs/1701.06538, eq. 6-7 and 10-11).

    .. math::

        \operatorname{CV}(x)^2 = \frac{\frac1n\sum_i (x_i - \bar x)^2}{\bar x^2 + 10^{-10}},
        \qquad \bar x = \frac1n \sum_i x_i,

    with the population variance (division by :math:`n`) and the :math:`10^{-10}` of the
    tensor2tensor code (``expert_utils.cv_squared``); ports of it that use ``torch.var``'s
    default (division by :math:`n - 1`) give :math:`n/(n-1)` times this. The paper's
    importance loss is ``cv_squared`` of each expert's summed gates, its load loss
    ``cv_squared`` of the smooth load (:func:`prob_in_top_k` summed over the tokens); each
    is scaled by a weight (0.01 or 0.1 in the paper). 0 for one entry or none. Computed in
    float32 (float64 for float64 input), rounded once.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.routing.cv_squared(torch.tensor([1.0, 3.0]))   # variance 1, mean 2
        tensor(0.2500)
    """
    check_floating(x, "x")
    check_all_finite(x, "x")
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    flat = x.reshape(-1).to(compute)
    n = max(flat.shape[0], 1)
    mean = flat.sum() / n
    variance = (flat - mean).square().sum() / n
    return (variance / (mean.square() + 1e-10)).to(x.dtype)
