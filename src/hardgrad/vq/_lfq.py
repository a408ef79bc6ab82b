r"""Lookup-free quantization (LFQ; Yu et al. 2023, MAGVIT-v2,
https://arxiv.org/abs/2310.05737): each channel to its sign, and the entropies of its loss."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .. import ops
from .._core.validation import check_all_finite, check_dim, check_floating, check_positive
from ._common import _check_indices, _compute_dtype, _flatten


def lfq(z: Tensor, *, dim: int = -1, surrogate: Any = "identity") -> tuple[Tensor, Tensor]:
    r"""Lookup-free quantization (Yu et al. 2023, MAGVIT-v2, https://arxiv.org/abs/2310.05737).

    Each channel is quantized to its sign, :math:`\hat z_i = +1` where :math:`z_i \ge 0`,
    else :math:`-1` (:func:`hardgrad.binarize`), with a straight-through gradient
    (``surrogate="identity"``: :math:`\partial \hat z_i/\partial z_i = 1`, as in the paper;
    any binarize surrogate may be given). The implicit codebook is :math:`\{-1, 1\}^d`
    and the index is :math:`\sum_i 1[\hat z_i > 0]\, 2^i`.

    Example:
        >>> import torch, hardgrad as hg
        >>> z_q, indices = hg.vq.lfq(torch.tensor([[0.3, -1.2, 0.0]]))
        >>> z_q, indices
        (tensor([[ 1., -1.,  1.]]), tensor([5]))
    """
    check_floating(z, "z")
    d = check_dim(z, dim)
    if z.shape[d] > 62:
        raise ValueError(f"Expected at most 62 channels (int64 indices), but found {z.shape[d]}")
    check_all_finite(z, "z")
    z_q = ops.binarize(z, surrogate=surrogate)
    with torch.no_grad():
        bits = (z_q.detach().movedim(d, -1) > 0).to(torch.int64)
        powers = 2 ** torch.arange(z.shape[d], device=z.device, dtype=torch.int64)
        indices = (bits * powers).sum(-1)
    return z_q, indices


def lfq_indices_to_codes(
    indices: Tensor, num_bits: int, *, dim: int = -1, dtype: torch.dtype | None = None
) -> Tensor:
    """The LFQ codes (±1) of ``indices``, the inverse of the index of :func:`lfq`."""
    if isinstance(num_bits, bool) or not isinstance(num_bits, int) or not 1 <= num_bits <= 62:
        raise ValueError(f"Expected `num_bits` an int in [1, 62], but found {num_bits!r}")
    _check_indices(indices, 2**num_bits)
    powers = 2 ** torch.arange(num_bits, device=indices.device, dtype=torch.int64)
    bits = (indices.unsqueeze(-1) // powers) % 2
    return (2 * bits - 1).to(dtype or torch.float32).movedim(-1, dim)


#: Up to this many channels :func:`lfq_entropy` enumerates the codebook exactly.
LFQ_EXACT_BITS = 16


def lfq_entropy(z: Tensor, *, dim: int = -1, tau: float = 1.0) -> tuple[Tensor, Tensor]:
    r"""The two entropies of LFQ's entropy loss (Yu et al. 2023, Eq. 5).

    The soft assignment of :math:`z` to code :math:`c \in \{-1,1\}^d` is
    :math:`q(c \mid z) \propto \exp(-\lVert z - c\rVert^2/\tau)`, which factorises over
    channels: :math:`q(c_i = +1 \mid z_i) = \sigma(4 z_i / \tau)`. Returns
    ``(per_sample, codebook)``:

    * :math:`\mathbb{E}_z[H(q(\cdot\mid z))] = \mathbb{E}_z \sum_i H(\sigma(4z_i/\tau))`
      (exact, by the factorisation);
    * :math:`H(\mathbb{E}_z[q(\cdot\mid z)])`, the entropy of the batch-averaged assignment
      over all :math:`2^d` codes, exact by enumeration for :math:`d \le 16`; above that the
      sum of per-channel entropies of the averaged bits (an upper bound: it ignores the
      dependence between channels).

    The paper's loss is ``per_sample - gamma * codebook`` (low per-sample entropy: confident
    codes; high codebook entropy: every code used). Computed in float32 (float64 for
    float64 inputs).

    Example:
        >>> import torch, hardgrad as hg
        >>> z = torch.tensor([[3.0, -3.0], [-3.0, 3.0], [3.0, 3.0], [-3.0, -3.0]])
        >>> per_sample, codebook = hg.vq.lfq_entropy(z)
        >>> round(float(per_sample), 4), round(float(codebook), 4)  # confident; 4 codes used
        (0.0002, 1.3863)
    """
    check_floating(z, "z")
    d = check_dim(z, dim)
    tau = check_positive(tau, "tau")
    check_all_finite(z, "z")
    return _lfq_entropy(z, d, tau)


def _lfq_entropy(z: Tensor, d: int, tau: float) -> tuple[Tensor, Tensor]:
    """:func:`lfq_entropy` after its checks (``d`` non-negative)."""
    compute = _compute_dtype(z.dtype)
    x = _flatten(z, d).to(compute) * (4 / tau)
    log_on, log_off = torch.nn.functional.logsigmoid(x), torch.nn.functional.logsigmoid(-x)
    p_on = log_on.exp()
    per_bit = -(p_on * log_on + (1 - p_on) * log_off)
    per_sample = per_bit.sum(-1).mean() if x.shape[0] else x.new_zeros(())
    bits = x.shape[-1]
    if x.shape[0] == 0:
        return per_sample, x.new_zeros(())
    if bits <= LFQ_EXACT_BITS:
        codes = lfq_indices_to_codes(torch.arange(2**bits, device=z.device), bits, dtype=compute)
        on = (codes > 0).to(compute)
        log_q = log_on @ on.T + log_off @ (1 - on).T  # (N, 2^d)
        mean_q = log_q.exp().mean(0)
    else:
        mean_on = p_on.mean(0)
        mean_q = torch.stack((mean_on, 1 - mean_on), -1)
    logs = torch.where(mean_q > 0, mean_q, 1).log()
    codebook = -(mean_q * logs).sum()
    return per_sample, codebook
