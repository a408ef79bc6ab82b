r"""Soft sort and soft rank by projection onto the permutahedron (Blondel et al. 2020,
https://arxiv.org/abs/2002.08871), and :func:`isotonic_regression`: the isotonic problems
solved by :mod:`hardgrad.sorting._isotonic` (private; re-exported by
:mod:`hardgrad.sorting`)."""

from __future__ import annotations

from functools import partial
from typing import Any

import torch
from torch import Tensor

from .._core.kernels import opmath
from .._core.validation import check_positive
from ._common import (
    REGULARIZATIONS,
    _bounded,
    _bounded_scaled,
    _check_bool,
    _check_choice,
    _check_input,
    _rho,
)
from ._isotonic_function import isotonic_output
from ._soft_function import SoftRankAscending, SoftSort, use_functions

# --------------------------------------------------------------------------- isotonic


def _isotonic(s: Tensor, w: Tensor, regularization: str) -> Tensor:
    """The decreasing isotonic solution :math:`v` itself (see :mod:`hardgrad.sorting._isotonic`)."""
    return isotonic_output(s, w, regularization, "dual")


def _primal(s: Tensor, w: Tensor, regularization: str) -> Tensor:
    r""":math:`s - v` without cancellation: :math:`(s_i - \bar s_B) + \bar w_B` over each
    entry's block :math:`B` (log-sum-exps for ``"kl"``), so that a block of one gives
    :math:`w_i` bit for bit however large :math:`s` is."""
    return isotonic_output(s, w, regularization, "primal")


def isotonic_regression(y: Tensor, *, dim: int = -1, increasing: bool = True) -> Tensor:
    r"""Least-squares isotonic regression along a dimension.

    .. math::

        v = \arg\min_{v_1 \le v_2 \le \dots \le v_n} \tfrac12 \lVert v - y \rVert^2

    (:math:`\ge` with ``increasing=False``), by pool-adjacent-violators (:math:`O(n)` per
    row) or, for rows shorter than :data:`~hardgrad.sorting._isotonic.PAV_MIN_LENGTH`, the
    equivalent min-max formula :math:`v_i = \max_{j \le i} \min_{k \ge i} \bar y_{j..k}`
    (see :mod:`hardgrad.sorting`).
    Differentiable: the gradient of :math:`v_i` is :math:`1/|B|` on the entries of
    :math:`i`'s block :math:`B`.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.sorting.isotonic_regression(torch.tensor([1.0, 3.0, 2.0, 4.0, 3.5]))
        tensor([1.0000, 2.5000, 2.5000, 3.7500, 3.7500])
    """
    d = _check_input(y, dim, "y")
    _check_bool(increasing, "increasing")
    z = _to_last(opmath(y), d)
    v = -_isotonic(-z, torch.zeros_like(z), "l2") if increasing else _isotonic(z, 0 * z, "l2")
    return _from_last(v, d).to(y.dtype)


# --------------------------------------------------------------------------- soft sort / rank


def _to_last(x: Tensor, d: int) -> Tensor:
    """``x`` with dimension ``d`` last (``x`` itself when it is: no view, no autograd node)."""
    return x if d == x.dim() - 1 else x.movedim(d, -1)


def _from_last(x: Tensor, d: int) -> Tensor:
    """The inverse of :func:`_to_last`."""
    return x if d == x.dim() - 1 else x.movedim(-1, d)


def _soft_sort(
    x: Tensor,
    strength: float,
    regularization: str,
    descending: bool,
    fast: bool = True,
    out_dtype: torch.dtype | None = None,
) -> Tensor:
    """Soft sort along the last dimension (already in the compute dtype): the eager fast
    path unless ``fast=False`` (the differentiable composition); ascending is
    :math:`-s(-x)`. ``out_dtype``: the fast path's result dtype (rounded once from its
    float64 solution; default ``x``'s)."""
    n = x.shape[-1]
    x = _bounded(x, n)
    if fast and use_functions(x):
        composition = partial(
            _soft_sort,
            strength=strength,
            regularization=regularization,
            descending=descending,
            fast=False,
        )
        kl = regularization == "kl"
        return SoftSort.apply(x, strength, kl, descending, composition, out_dtype or x.dtype)
    if descending:
        return _soft_sort_desc(x, strength, regularization)
    return 0.0 - _soft_sort_desc(-x, strength, regularization)  # 0 - (...): no -0.0


def _soft_sort_desc(x: Tensor, strength: float, regularization: str) -> Tensor:
    """Descending soft sort of bounded ``x`` as differentiable operations."""
    n = x.shape[-1]
    z = _rho(n, x) / strength
    if not n / strength <= torch.finfo(x.dtype).max / (8 * n):
        z = _bounded(z, n)
    w = torch.sort(x, stable=True, dim=-1, descending=True).values
    return _primal(z.expand_as(w), w, regularization)


def _soft_rank_asc(
    x: Tensor, strength: float, regularization: str, out_dtype: torch.dtype | None = None
) -> Tensor:
    """Ascending soft rank (1 = smallest) along the last dimension (``out_dtype``: the fast
    path's result dtype, default ``x``'s)."""
    n = x.shape[-1]
    z = _bounded_scaled(x, n, strength)
    if use_functions(z):
        composition = partial(_soft_rank_scaled, regularization=regularization)
        kl = regularization == "kl"
        return SoftRankAscending.apply(z, kl, composition, out_dtype or z.dtype)
    return _soft_rank_scaled(z, regularization)


def _soft_rank_scaled(z: Tensor, regularization: str) -> Tensor:
    """Ascending soft rank of ``z`` = x / strength (bounded), as differentiable operations."""
    n = z.shape[-1]
    s, perm = torch.sort(z, stable=True, dim=-1, descending=True)
    rho = _rho(n, z).expand_as(s)
    w = rho if regularization == "l2" else torch.log(rho)
    primal = _primal(s, w, regularization)
    if regularization == "kl":
        primal = torch.exp(primal)
    return torch.empty_like(primal).scatter(-1, perm, primal)


def _check_soft(x: Any, dim: Any, strength: Any, regularization: Any, descending: Any) -> int:
    d = _check_input(x, dim)
    check_positive(strength, "strength")
    _check_choice(regularization, "regularization", REGULARIZATIONS)
    _check_bool(descending, "descending")
    return d


def soft_sort(
    x: Tensor,
    *,
    dim: int = -1,
    descending: bool = False,
    strength: float = 1.0,
    regularization: str = "l2",
) -> Tensor:
    r"""Soft sort by projection onto the permutahedron (Blondel et al. 2020,
    https://arxiv.org/abs/2002.08871).

    Descending (``descending=True``), with :math:`\rho = (n, n-1, \dots, 1)` and
    :math:`\varepsilon` = ``strength``:

    .. math::

        s_{\varepsilon}(x) = \arg\min_{\mu \in \mathcal P(x)}
        \tfrac12 \lVert \mu - \rho/\varepsilon \rVert^2
        = \rho/\varepsilon - v, \qquad
        v = \arg\min_{v_1 \ge \dots \ge v_n} \tfrac12
        \lVert v - (\rho/\varepsilon - x_{\downarrow})\rVert^2,

    where :math:`\mathcal P(x)` is the convex hull of the permutations of :math:`x` and
    :math:`x_\downarrow` is :math:`x` sorted in decreasing order (``"l2"``). With
    ``"kl"`` the squared distance is replaced by the entropic regulariser: the isotonic
    problem becomes :math:`\min_{v\downarrow} \langle e^{\rho/\varepsilon - v}, 1\rangle +
    \langle e^{x_\downarrow}, v\rangle` (block values
    :math:`\log\sum_B e^{\rho/\varepsilon} - \log\sum_B e^{x_\downarrow}`). Ascending
    (the default) is :math:`-s_\varepsilon(-x)`. Exact gradient (autograd through the
    isotonic solution; the Jacobian is block-constant). As :math:`\varepsilon \to 0` it
    equals ``torch.sort(x).values`` (once :math:`1/\varepsilon` exceeds the largest gap
    between consecutive sorted values, exactly up to rounding); as
    :math:`\varepsilon\to\infty` every entry tends to the mean (``"l2"``). The values sum to
    ``x.sum(dim)`` (``"l2"``). The same definitions and conventions as the authors' reference code
    (``fast_soft_sort``'s ``soft_sort`` with ``regularization_strength`` = ``strength``).

    Args:
        x: floating tensor.
        dim: the dimension to sort along.
        descending: sort in decreasing order.
        strength: :math:`\varepsilon > 0`.
        regularization: ``"l2"`` or ``"kl"``.

    Example:
        >>> import torch, hardgrad as hg
        >>> x = torch.tensor([2.0, 0.0, 1.0, 5.0])
        >>> hg.soft_sort(x, strength=0.1)  # 1/strength beyond every gap: the sort
        tensor([0., 1., 2., 5.])
        >>> hg.soft_sort(x, strength=1.0)
        tensor([0.5000, 1.5000, 2.5000, 3.5000])
    """
    d = _check_soft(x, dim, strength, regularization, descending)
    z = _to_last(opmath(x), d)
    out = _soft_sort(z, strength, regularization, descending, out_dtype=x.dtype)
    return _from_last(out, d).to(x.dtype)


def soft_rank(
    x: Tensor,
    *,
    dim: int = -1,
    descending: bool = False,
    strength: float = 1.0,
    regularization: str = "l2",
) -> Tensor:
    r"""Soft ranks by projection onto the permutahedron (Blondel et al. 2020,
    https://arxiv.org/abs/2002.08871).

    Ascending ranks (1 for the smallest entry, :math:`n` for the largest), with
    :math:`\rho = (n, \dots, 1)` and :math:`\varepsilon` = ``strength``:

    .. math::

        r_\varepsilon(x) = \arg\min_{\mu \in \mathcal P(\rho)} \tfrac12
        \lVert \mu - x/\varepsilon \rVert^2
        = x/\varepsilon - v_{\sigma^{-1}}, \qquad
        v = \arg\min_{v_1 \ge \dots \ge v_n} \tfrac12 \lVert v - (s - \rho)\rVert^2,

    where :math:`\sigma` sorts :math:`x` decreasingly and :math:`s = x_\sigma/\varepsilon`
    (``"l2"``). ``"kl"``: :math:`r = \exp(s - v)_{\sigma^{-1}}` with
    :math:`v = \arg\min_{v\downarrow}\langle e^{s - v}, 1\rangle + \langle \rho, v\rangle`
    (positive soft ranks). ``descending=True`` ranks :math:`-x` (1 for the largest). As
    :math:`\varepsilon \to 0` it equals the hard ranks (:func:`rank`); as
    :math:`\varepsilon \to\infty` every rank tends to :math:`(n+1)/2` (``"l2"``). Exact
    gradient (autograd through the isotonic solution). The same definitions and conventions as the
    authors' reference code (``fast_soft_sort``'s ``soft_rank``).

    Args:
        x: floating tensor.
        dim: the dimension to rank along.
        descending: rank 1 for the largest entry.
        strength: :math:`\varepsilon > 0`.
        regularization: ``"l2"`` or ``"kl"``.

    Example:
        >>> import torch, hardgrad as hg
        >>> x = torch.tensor([2.0, 0.0, 1.0, 5.0])
        >>> hg.soft_rank(x, strength=0.1)
        tensor([3., 1., 2., 4.])
        >>> hg.soft_rank(x, strength=2.0)
        tensor([2.5000, 1.5000, 2.0000, 4.0000])
    """
    d = _check_soft(x, dim, strength, regularization, descending)
    z = _to_last(opmath(x), d)
    out = _soft_rank_asc(-z if descending else z, strength, regularization, x.dtype)
    return _from_last(out, d).to(x.dtype)
