r"""Quantiles: ``torch.quantile``'s interpolation of the exact sort with a relaxed
backward (:func:`quantile`) or of the soft sort (:func:`soft_quantile`) (private;
re-exported by :mod:`hardgrad.sorting`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._core.kernels import opmath
from .._core.validation import check_real
from ._common import _check_bool
from ._hard import _check_hard, sort
from ._soft import _check_soft, _soft_sort

# --------------------------------------------------------------------------- quantiles


def _check_q(q: Any) -> float:
    value = check_real(q, "q")
    if not 0 <= value <= 1:
        raise ValueError(f"Expected `q` in [0, 1], but found q={q!r}")
    return value


def _interpolate(values: Tensor, q: float, keepdim: bool) -> Tensor:
    """``torch.quantile``'s linear interpolation of ascending ``values`` (last dimension):
    position :math:`q(n-1)` computed in the values' dtype, as torch does, so that exact
    sorted values give ``torch.quantile`` bit for bit."""
    n = values.shape[-1]
    ranks = torch.full((), q, dtype=values.dtype, device=values.device) * (n - 1)
    below = ranks.floor()
    lo = below.long().reshape(1)
    hi = (lo + 1).clamp_max(n - 1)
    out = torch.lerp(values.index_select(-1, lo), values.index_select(-1, hi), ranks - below)
    return out if keepdim else out.squeeze(-1)


def quantile(
    x: Tensor,
    q: float,
    dim: int = -1,
    *,
    keepdim: bool = False,
    backward: str = "soft",
    strength: float = 1.0,
    regularization: str = "l2",
) -> Tensor:
    r"""The ``q``-quantile along ``dim`` (linear interpolation), with the gradient of a
    relaxed sort.

    Forward: :math:`(1 - t)\,x_{(\lfloor p\rfloor)} + t\,x_{(\lfloor p\rfloor + 1)}`,
    :math:`p = q(n - 1)`, :math:`t = p - \lfloor p\rfloor`, over the ascending sorted values
    :math:`x_{(i)}`: ``torch.quantile(x, q, dim)`` bit for bit for float32 and float64 (and
    computed the same way for the half types, which ``torch.quantile`` refuses). Backward:
    the same interpolation of :func:`sort`'s relaxation ``backward`` (the soft sort of
    Blondel et al. 2020, https://arxiv.org/abs/2002.08871, by default), so the gradient is
    spread over the entries near the quantile instead of landing on the one or two order
    statistics.

    Example:
        >>> import torch, hardgrad as hg
        >>> x = torch.tensor([2.0, 0.0, 1.0, 5.0], requires_grad=True)
        >>> m = hg.sorting.quantile(x, 0.5, strength=2.0); m
        tensor(1.5000, grad_fn=<SqueezeBackward1>)
        >>> m.backward(); x.grad
        tensor([0.2500, 0.2500, 0.2500, 0.2500])
    """
    d = _check_hard(x, dim, False, backward, strength, regularization)
    q = _check_q(q)
    _check_bool(keepdim, "keepdim")
    values = sort(
        x.movedim(d, -1), backward=backward, strength=strength, regularization=regularization
    )
    out = _interpolate(opmath(values), q, keepdim).to(x.dtype)
    return out.movedim(-1, d) if keepdim else out


def soft_quantile(
    x: Tensor,
    q: float,
    *,
    dim: int = -1,
    keepdim: bool = False,
    strength: float = 1.0,
    regularization: str = "l2",
) -> Tensor:
    r"""The ``q``-quantile of the soft sort: ``torch.quantile``'s linear interpolation applied
    to :func:`soft_sort` (Blondel et al. 2020, https://arxiv.org/abs/2002.08871). Smooth,
    exact gradient; as ``strength`` goes to 0 it equals ``torch.quantile``.

    Example:
        >>> import torch, hardgrad as hg
        >>> x = torch.tensor([2.0, 0.0, 1.0, 5.0])
        >>> hg.sorting.soft_quantile(x, 0.5, strength=0.01), torch.quantile(x, 0.5)
        (tensor(1.5000), tensor(1.5000))
        >>> hg.sorting.soft_quantile(x, 0.5, strength=1.0)
        tensor(2.)
    """
    d = _check_soft(x, dim, strength, regularization, False)
    q = _check_q(q)
    _check_bool(keepdim, "keepdim")
    z = opmath(x).movedim(d, -1)
    values = _soft_sort(z, strength, regularization, descending=False)
    out = _interpolate(values, q, keepdim).to(x.dtype)
    return out.movedim(-1, d) if keepdim else out
