r"""The exact sorts and ranks (:func:`sort`, :func:`rank`, :func:`argsort`) whose backward
is the vector-Jacobian product of a chosen relaxation (private; documented and re-exported
by :mod:`hardgrad.sorting`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._core.kernels import opmath
from .._core.validation import check_positive
from ..ops._autograd import apply_function, cached_signature, forward_mode, jvp_by_reverse_mode
from ._common import REGULARIZATIONS, SORT_BACKWARDS, _check_bool, _check_choice, _check_input
from ._permutations import neural_sort_permutation, soft_sort_permutation
from ._soft import _soft_rank_asc, _soft_sort

# --------------------------------------------------------------------------- exact sort / rank


def _relaxed(
    x: Tensor, what: str, backward: str, descending: bool, strength: float, regularization: str
) -> Tensor:
    """The relaxation whose gradient :func:`sort` / :func:`rank` use, along the last dim,
    in the compute dtype."""
    if backward == "soft":
        if what == "sort":
            return _soft_sort(x, strength, regularization, descending)
        return _soft_rank_asc(-x if descending else x, strength, regularization)
    build = neural_sort_permutation if backward == "neuralsort" else soft_sort_permutation
    p = build(x, tau=strength, descending=descending)  # rows: positions, columns: entries
    if what == "sort":
        return (p @ x.unsqueeze(-1)).squeeze(-1)
    n = x.shape[-1]
    positions = torch.arange(1, n + 1, dtype=x.dtype, device=x.device)
    # Each entry's mean position under its column of P: the column sums of a row-stochastic
    # P are not 1, and the unnormalised sum_i i P_ij is not even increasing in x_j at high
    # temperature (the largest entry's "rank" falls as it grows).
    column = p.sum(-2).clamp_min(torch.finfo(p.dtype).tiny)
    return (positions.unsqueeze(-1) * p).sum(-2) / column


def _hard(x: Tensor, what: str, descending: bool) -> Tensor:
    values, perm = torch.sort(x, dim=-1, descending=descending, stable=True)
    if what == "sort":
        return values
    n = x.shape[-1]
    positions = torch.arange(1, n + 1, dtype=x.dtype, device=x.device).expand_as(x)
    return torch.empty_like(x).scatter(-1, perm, positions)


@cached_signature
class _SortWithBackward(torch.autograd.Function):
    """Forward: the exact sort or rank; backward: the VJP of the chosen relaxation."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        x: Tensor, what: str, backward: str, descending: bool, strength: float, reg: str
    ) -> Tensor:
        return _hard(x, what, descending)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        x, *settings = inputs
        ctx.save_for_backward(x)
        ctx.settings = settings

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        (x,) = ctx.saved_tensors
        what, backward, descending, strength, reg = ctx.settings

        def relaxed(z: Tensor) -> Tensor:
            return _relaxed(z, what, backward, descending, strength, reg)

        vjp = torch.func.vjp(relaxed, opmath(x))[1]
        (g,) = vjp(opmath(grad))
        return (g + 0.0).to(grad.dtype), None, None, None, None, None  # (+ 0.0: no -0.0)


@forward_mode(_SortWithBackward)
@cached_signature
class _SortWithBackwardJVP(_SortWithBackward):
    """Forward mode: the tangent times the relaxation's Jacobian (its JVP), the transpose
    of what backward applies."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _SortWithBackward.setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_settings: Any) -> Tensor:
        (x,) = ctx.saved_tensors
        what, backward, descending, strength, reg = ctx.settings

        def relaxed(z: Tensor) -> Tensor:
            return _relaxed(z, what, backward, descending, strength, reg)

        return (jvp_by_reverse_mode(relaxed, opmath(x), opmath(tangent)) + 0.0).to(tangent.dtype)


def _check_hard(
    x: Any, dim: Any, descending: Any, backward: Any, strength: Any, regularization: Any
) -> int:
    d = _check_input(x, dim)
    _check_bool(descending, "descending")
    _check_choice(backward, "backward", SORT_BACKWARDS)
    check_positive(strength, "strength")
    _check_choice(regularization, "regularization", REGULARIZATIONS)
    return d


def sort(
    x: Tensor,
    dim: int = -1,
    *,
    descending: bool = False,
    backward: str = "soft",
    strength: float = 1.0,
    regularization: str = "l2",
) -> Tensor:
    r"""The exact sorted values along ``dim``, with the gradient of a relaxation.

    Forward: ``torch.sort(x, dim, descending=descending, stable=True).values``, bit for bit.
    Backward: the vector-Jacobian product of the relaxation ``backward`` at ``x``:

    * ``"soft"``: :func:`soft_sort` with ``strength`` and ``regularization`` (Blondel et al.
      2020, https://arxiv.org/abs/2002.08871);
    * ``"neuralsort"``: :math:`\hat P x` with :func:`neural_sort_permutation` at
      :math:`\tau` = ``strength`` (Grover et al. 2019, https://arxiv.org/abs/1903.08850);
    * ``"softsort"``: :math:`\hat P x` with :func:`soft_sort_permutation` (Prillo &
      Eisenschlos 2020, https://arxiv.org/abs/2006.16038).

    (Plain ``torch.sort`` already passes gradients: the permutation's, which is the limit of
    every relaxation as ``strength`` goes to 0. A relaxation spreads the gradient across
    entries near in value, which is what learning to rank and sort needs.) Biased (the
    gradient of a smoothed function). Only ``x`` is saved; the relaxation is recomputed in
    backward (:math:`O(n)` memory per row for ``"soft"`` from
    :data:`~hardgrad.sorting._isotonic.PAV_MIN_LENGTH` entries on, :math:`O(n^2)` otherwise).

    Args:
        x: floating tensor.
        dim: the dimension to sort along.
        descending: decreasing order.
        backward: ``"soft"``, ``"neuralsort"`` or ``"softsort"``.
        strength: the relaxation's :math:`\varepsilon` (``"soft"``) or :math:`\tau`, > 0.
        regularization: ``"l2"`` or ``"kl"`` (``"soft"`` only).

    Example:
        >>> import torch, hardgrad as hg
        >>> x = torch.tensor([2.0, 0.0, 1.0, 5.0], requires_grad=True)
        >>> y = hg.sort(x, strength=0.5); y
        tensor([0., 1., 2., 5.], grad_fn=<_SortWithBackwardBackward>)
        >>> y[-1].backward(); x.grad  # the soft sort's: 2 and 5 share a block at this strength
        tensor([0.5000, 0.0000, 0.0000, 0.5000])
    """
    d = _check_hard(x, dim, descending, backward, strength, regularization)
    last = d == x.dim() - 1
    z = x if last else x.movedim(d, -1)
    y = apply_function(
        _SortWithBackward, z, "sort", backward, descending, float(strength), regularization
    )
    return y if last else y.movedim(-1, d)


def rank(
    x: Tensor,
    dim: int = -1,
    *,
    descending: bool = False,
    backward: str = "soft",
    strength: float = 1.0,
    regularization: str = "l2",
) -> Tensor:
    r"""The exact 1-based ranks along ``dim`` (in ``x``'s dtype), with the gradient of a
    relaxation.

    Forward: rank :math:`r_i = 1 + \#\{j: x_j < x_i\}` (ascending; ties ranked by position,
    as a stable sort orders them; ``descending=True``: 1 for the largest). Its true
    derivative is 0 almost everywhere. Backward: the vector-Jacobian product of
    :func:`soft_rank` (``"soft"``, Blondel et al. 2020, https://arxiv.org/abs/2002.08871) or
    of the mean positions :math:`\sum_i i\,\hat P_{ij} / \sum_i \hat P_{ij}` under
    NeuralSort's or SoftSort's relaxed permutation (``"neuralsort"``, ``"softsort"``; :math:`\tau` =
    ``strength``). Biased.

    Args:
        x: floating tensor.
        dim: the dimension to rank along.
        descending: rank 1 for the largest entry.
        backward: ``"soft"``, ``"neuralsort"`` or ``"softsort"``.
        strength: the relaxation's :math:`\varepsilon` or :math:`\tau`, > 0.
        regularization: ``"l2"`` or ``"kl"`` (``"soft"`` only).

    Example:
        >>> import torch, hardgrad as hg
        >>> x = torch.tensor([2.0, 0.0, 1.0, 5.0], requires_grad=True)
        >>> r = hg.rank(x, strength=4.0); r
        tensor([3., 1., 2., 4.], grad_fn=<_SortWithBackwardBackward>)
        >>> r[0].backward(); x.grad  # one block: (1[i = 0] - 1/4) / 4
        tensor([ 0.1875, -0.0625, -0.0625, -0.0625])
    """
    d = _check_hard(x, dim, descending, backward, strength, regularization)
    last = d == x.dim() - 1
    z = x if last else x.movedim(d, -1)
    y = apply_function(
        _SortWithBackward, z, "rank", backward, descending, float(strength), regularization
    )
    return y if last else y.movedim(-1, d)


def argsort(x: Tensor, dim: int = -1, *, descending: bool = False) -> Tensor:
    """``torch.argsort(x, dim, descending=descending, stable=True)``: indices carry no
    gradient; use :func:`sort` or :func:`rank` (or the relaxed permutation matrices) where a
    gradient must flow. Here so that the three names sit together.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.sorting.argsort(torch.tensor([2.0, 0.0, 1.0]))
        tensor([1, 2, 0])
    """
    d = _check_input(x, dim)
    _check_bool(descending, "descending")
    return torch.argsort(x, dim=d, descending=descending, stable=True)
