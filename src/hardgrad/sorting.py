r"""Differentiable sorting and ranking: exact sorts and ranks with chosen backwards, and
their relaxations.

Papers:

* Soft sort and soft rank by projection onto the permutahedron, computed by isotonic
  regression: Blondel et al. (2020), "Fast Differentiable Sorting and Ranking",
  https://arxiv.org/abs/2002.08871.
* NeuralSort: Grover et al. (2019), https://arxiv.org/abs/1903.08850.
* SoftSort: Prillo & Eisenschlos (2020), https://arxiv.org/abs/2006.16038.

:func:`soft_sort` and :func:`soft_rank` are smooth functions (their gradient is exact);
as ``strength`` goes to 0 they equal the hard sort and rank. :func:`sort` and :func:`rank`
return the exact sorted values and ranks (ranks are 1-based, in the input's dtype), with the
gradient of a chosen relaxation: ``backward="soft"`` (the isotonic soft sort/rank),
``"neuralsort"`` or ``"softsort"`` (relaxed permutation matrices, see
:func:`neural_sort_permutation`, :func:`soft_sort_permutation`).

Isotonic regression: the projections reduce to
:math:`\arg\min_{v_1 \ge \dots \ge v_n} \sum_i \ell_i(v_i)`, whose solution is piecewise
constant on blocks. :mod:`hardgrad._isotonic` finds the blocks by pool-adjacent-violators
(PAV, :math:`O(n)` per row after the :math:`O(n \log n)` sort; a Python scan on the CPU,
wrapped as an operator that ``torch.compile`` and ``torch.vmap`` accept) for rows of
:data:`~hardgrad._isotonic.PAV_MIN_LENGTH` entries or more, and for shorter rows by the
equivalent min-max formula :math:`v_i = \min_{j \le i}\max_{k \ge i} m(j, k)`
(:math:`m(j, k)` the solution on the block :math:`j..k`; :math:`O(n^2)` but a handful of
batched kernels on the input's device). Autograd differentiates the blocks' statistics
exactly: PAV's Jacobian (the block's mean).
Computed in float32 for half types (and returned in the input's dtype).
The relaxations read NaN as 0 and cap magnitudes at the dtype's maximum over :math:`8n`
(beyond every regularisation's reach), so every result and gradient is finite for any
finite input and any positive ``strength`` or ``tau``; :func:`sort` and :func:`rank` keep
``torch.sort``'s exact forward (NaN sorts last).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ._core.kernels import opmath
from ._core.validation import check_dim, check_floating, check_positive, check_real
from ._isotonic import block_statistics
from .ops._autograd import apply_function, cached_signature, forward_mode, jvp_by_reverse_mode

__all__ = [
    "REGULARIZATIONS",
    "SORT_BACKWARDS",
    "argsort",
    "isotonic_regression",
    "neural_sort_permutation",
    "quantile",
    "rank",
    "soft_quantile",
    "soft_rank",
    "soft_sort",
    "soft_sort_permutation",
    "sort",
]

#: Regularisations of :func:`soft_sort` and :func:`soft_rank`.
REGULARIZATIONS = ("l2", "kl")
#: Backwards of :func:`sort` and :func:`rank`.
SORT_BACKWARDS = ("soft", "neuralsort", "softsort")


# --------------------------------------------------------------------------- checks


def _check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(
            f"Expected `{name}` to be one of {', '.join(map(repr, choices))}, but found {value!r}"
        )
    return value


def _check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"Expected `{name}` to be a bool, but found {type(value).__name__}")
    return value


def _check_input(x: Any, dim: Any, name: str = "x") -> int:
    check_floating(x, name)
    d = check_dim(x, dim)
    if x.shape[d] == 0:
        raise ValueError(
            f"Expected `{name}` to have at least one entry along dim={dim}, but found shape {tuple(x.shape)}"
        )
    return d


# --------------------------------------------------------------------------- isotonic


def _isotonic(s: Tensor, w: Tensor, regularization: str) -> Tensor:
    """The decreasing isotonic solution :math:`v` itself (see :mod:`hardgrad._isotonic`)."""
    stat_s, stat_w = block_statistics(s, w, regularization)
    return stat_s - stat_w


def _primal(s: Tensor, w: Tensor, regularization: str) -> Tensor:
    r""":math:`s - v` without cancellation: :math:`(s_i - \bar s_B) + \bar w_B` over each
    entry's block :math:`B` (log-sum-exps for ``"kl"``), so that a block of one gives
    :math:`w_i` bit for bit however large :math:`s` is."""
    stat_s, stat_w = block_statistics(s, w, regularization)
    return (s - stat_s) + stat_w


def isotonic_regression(y: Tensor, *, dim: int = -1, increasing: bool = True) -> Tensor:
    r"""Least-squares isotonic regression along a dimension.

    .. math::

        v = \arg\min_{v_1 \le v_2 \le \dots \le v_n} \tfrac12 \lVert v - y \rVert^2

    (:math:`\ge` with ``increasing=False``), by pool-adjacent-violators (:math:`O(n)` per
    row) or, for rows shorter than :data:`~hardgrad._isotonic.PAV_MIN_LENGTH`, the
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
    z = opmath(y).movedim(d, -1)
    v = -_isotonic(-z, torch.zeros_like(z), "l2") if increasing else _isotonic(z, 0 * z, "l2")
    return v.movedim(-1, d).to(y.dtype)


# --------------------------------------------------------------------------- soft sort / rank


def _rho(n: int, like: Tensor) -> Tensor:
    """:math:`\\rho = (n, n-1, \\dots, 1)`."""
    return torch.arange(n, 0, -1, dtype=like.dtype, device=like.device)


def _bounded(x: Tensor, n: int) -> Tensor:
    """``x`` with NaN -> 0 and magnitudes capped at ``max / (8 n)``: differences and means of
    such values stay finite, and a value that large already sits a gap beyond every
    regularisation (only entries that all hit the cap lose their order)."""
    big = torch.finfo(x.dtype).max / (8 * max(n, 1))
    return torch.nan_to_num(x, nan=0.0).clamp(-big, big)


def _soft_sort_desc(x: Tensor, strength: float, regularization: str) -> Tensor:
    """Descending soft sort along the last dimension (already in the compute dtype)."""
    n = x.shape[-1]
    w = torch.sort(_bounded(x, n), -1, descending=True).values
    z = _bounded(_rho(n, x) / strength, n).expand_as(w)
    return _primal(z, w, regularization)


def _soft_rank_asc(x: Tensor, strength: float, regularization: str) -> Tensor:
    """Ascending soft rank (1 = smallest) along the last dimension."""
    n = x.shape[-1]
    z = _bounded(_bounded(x, n) / strength, n)
    s, perm = torch.sort(z, -1, descending=True)
    rho = _rho(n, x).expand_as(s)
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
    z = opmath(x).movedim(d, -1)
    if descending:
        out = _soft_sort_desc(z, strength, regularization)
    else:  # 0 - (...) rather than -(...): no -0.0 in the result
        out = 0.0 - _soft_sort_desc(-z, strength, regularization)
    return out.movedim(-1, d).to(x.dtype)


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
    z = opmath(x).movedim(d, -1)
    out = _soft_rank_asc(-z if descending else z, strength, regularization)
    return out.movedim(-1, d).to(x.dtype)


# --------------------------------------------------------------------------- permutation relaxations


def _check_tau(tau: Any) -> float:
    return check_positive(tau, "tau")


def neural_sort_permutation(x: Tensor, *, tau: float = 1.0, descending: bool = True) -> Tensor:
    r"""NeuralSort's relaxed sorting matrix (Grover et al. 2019, https://arxiv.org/abs/1903.08850).

    For the last dimension of ``x`` (shape ``(..., n)``), the row-stochastic
    ``(..., n, n)`` matrix

    .. math::

        \hat P_{i,:} = \operatorname{softmax}\Big(\frac{(n + 1 - 2i)\,x - A_x \mathbf 1}{\tau}\Big),
        \qquad (A_x)_{jl} = |x_j - x_l|,

    whose row :math:`i` puts its mass on the :math:`i`-th largest entry: as
    :math:`\tau \to 0`, :math:`\hat P` is the permutation matrix that sorts :math:`x` in
    decreasing order (``descending=False``: rows reversed), and :math:`\hat P x` the sorted
    vector. Exact gradient. :math:`O(n^2)`.

    Example:
        >>> import torch, hardgrad as hg
        >>> p = hg.sorting.neural_sort_permutation(torch.tensor([0.0, 3.0, 1.0]), tau=0.01)
        >>> p.round(decimals=3)
        tensor([[0., 1., 0.],
                [0., 0., 1.],
                [1., 0., 0.]])
    """
    check_floating(x, "x")
    _check_input(x, -1)
    tau = _check_tau(tau)
    _check_bool(descending, "descending")
    n = x.shape[-1]
    z = _bounded(opmath(x), n * n)  # (n + 1 - 2i) x and the pairwise sums stay finite
    pairwise = (z.unsqueeze(-1) - z.unsqueeze(-2)).abs().sum(-1)  # A_x 1
    scale = n + 1 - 2 * torch.arange(1, n + 1, dtype=z.dtype, device=z.device)
    logits = (scale.unsqueeze(-1) * z.unsqueeze(-2) - pairwise.unsqueeze(-2)) / tau
    logits = logits.clamp(-torch.finfo(z.dtype).max / 4, torch.finfo(z.dtype).max / 4)
    p = torch.softmax(logits, -1)
    if not descending:
        p = p.flip(-2)
    return p.to(x.dtype)


def soft_sort_permutation(x: Tensor, *, tau: float = 1.0, descending: bool = True) -> Tensor:
    r"""SoftSort's relaxed sorting matrix (Prillo & Eisenschlos 2020, https://arxiv.org/abs/2006.16038).

    .. math::

        \hat P_{i,:} = \operatorname{softmax}\big(-|x_{\downarrow,i} - x| / \tau\big),

    row :math:`i` centred on the :math:`i`-th largest value :math:`x_{\downarrow,i}`
    (``descending=False``: the :math:`i`-th smallest). As :math:`\tau \to 0`, the
    permutation matrix of the sort. Gradients flow through both :math:`x` and the sorted
    values. :math:`O(n^2)`.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.sorting.soft_sort_permutation(torch.tensor([0.0, 3.0, 1.0]), tau=0.01).round(decimals=3)
        tensor([[0., 1., 0.],
                [0., 0., 1.],
                [1., 0., 0.]])
    """
    check_floating(x, "x")
    _check_input(x, -1)
    tau = _check_tau(tau)
    _check_bool(descending, "descending")
    z = _bounded(opmath(x), x.shape[-1])
    sorted_ = torch.sort(z, -1, descending=descending).values
    logits = -(sorted_.unsqueeze(-1) - z.unsqueeze(-2)).abs() / tau
    logits = logits.clamp_min(-torch.finfo(z.dtype).max / 4)  # a tiny tau: no -inf
    return torch.softmax(logits, -1).to(x.dtype)


# --------------------------------------------------------------------------- exact sort / rank


def _relaxed(
    x: Tensor, what: str, backward: str, descending: bool, strength: float, regularization: str
) -> Tensor:
    """The relaxation whose gradient :func:`sort` / :func:`rank` use, along the last dim,
    in the compute dtype."""
    if backward == "soft":
        if what == "sort":
            return (
                _soft_sort_desc(x, strength, regularization)
                if descending
                else -_soft_sort_desc(-x, strength, regularization)
            )
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
    :data:`~hardgrad._isotonic.PAV_MIN_LENGTH` entries on, :math:`O(n^2)` otherwise).

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
    values = 0.0 - _soft_sort_desc(-z, strength, regularization)
    out = _interpolate(values, q, keepdim).to(x.dtype)
    return out.movedim(-1, d) if keepdim else out
