"""The health metrics of a codebook: the fraction of codes used and the perplexity."""

from __future__ import annotations

import torch
from torch import Tensor

from ._common import _check_indices


def codebook_usage(indices: Tensor, num_codes: int) -> tuple[Tensor, Tensor]:
    r"""The fraction of codes used and the perplexity of the code distribution in ``indices``.

    With :math:`n_k` the count of code :math:`k` and :math:`p_k = n_k / \sum_j n_j`:
    usage :math:`= |\{k : n_k > 0\}| / K` and perplexity
    :math:`= \exp(-\sum_k p_k \log p_k)` (between 1, one code, and :math:`K`, all equally).
    Empty ``indices`` give usage 0 and perplexity 1.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.vq.codebook_usage(torch.tensor([0, 0, 1, 3]), 4)
        (tensor(0.7500), tensor(2.8284))
    """
    if isinstance(num_codes, bool) or not isinstance(num_codes, int) or num_codes < 1:
        raise ValueError(f"Expected `num_codes` to be an int >= 1, but found {num_codes!r}")
    _check_indices(indices, num_codes)
    flat = indices.reshape(-1).long()
    counts = torch.zeros(num_codes, device=indices.device).index_add_(
        0, flat, torch.ones(flat.shape, device=indices.device)
    )
    return usage_from_counts(counts)


def usage_from_counts(counts: Tensor) -> tuple[Tensor, Tensor]:
    """:func:`codebook_usage` from per-code counts (float, shape (K,))."""
    p = counts / counts.sum().clamp_min(1)
    entropy = torch.special.xlogy(p, p).sum().neg_()  # (0 log 0 = 0)
    used = torch.count_nonzero(counts).to(counts.dtype) / counts.numel()
    return used, entropy.exp_()
