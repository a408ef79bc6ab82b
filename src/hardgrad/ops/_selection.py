r"""Hard selections along a dimension: one-hot argmax and top-k masks, with smooth backwards."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .._core.kernels import (
    _QUARTER_MAX,
    argmax,
    cast,
    eager_plain,
    finite,
    one_hot,
    opmath,
    opmath_dtype,
    remember,
    softmax_vjp,
)
from .._core.validation import (
    check_dense,
    check_dim,
    check_floating,
    check_int,
    check_normal,
    check_positive,
)
from ._autograd import apply_function, cached_signature, forward_mode, records_natively

# Logits beyond +-this many temperatures from the threshold saturate the sigmoid in every
# dtype we compute in (sigma(-40) ~ 4e-18 is below float64's resolution next to 1).
_SATURATION = 40.0
_NEWTON_STEPS = 12  # Newton converges in <= 6 from the midpoint start; the rest is margin


#: Checked ``(dim, tau)`` settings of selections by (dtype, rank, exact types and values):
#: a repeated call skips their checks (1.5 -> 0.4 µs of a small one-hot argmax's forward).
#: Cleared when full.
_CHECKED_SETTINGS: dict[tuple[Any, ...], tuple[int, float]] = {}
_MAX_CHECKED_SETTINGS = 256


def _check_selection(x: Tensor, dim: Any, tau: Any, name: str) -> tuple[int, float]:
    """``(dim, tau)`` checked for ``x`` (a floating tensor with an entry along ``dim``):
    ``dim`` made non-negative, ``tau`` a float."""
    check_dense(x, name)  # (before the cache: its key does not hold the layout)
    if (
        type(dim) is int
        and type(tau) in (int, float)
        and isinstance(x, Tensor)
        and not torch.compiler.is_compiling()
    ):
        key = (x.dtype, x.dim(), dim, type(tau), tau)  # (only floating dtypes get an entry)
        checked = _CHECKED_SETTINGS.get(key)
        if checked is None:
            checked = remember(
                _CHECKED_SETTINGS, key, _check_settings(x, dim, tau, name), _MAX_CHECKED_SETTINGS
            )
    else:
        checked = _check_settings(x, dim, tau, name)
    if x.shape[checked[0]] == 0:
        raise ValueError(
            f"Expected `{name}` to have at least one entry along dim={dim}, but found shape {tuple(x.shape)}"
        )
    return checked


def _check_settings(x: Tensor, dim: Any, tau: Any, name: str) -> tuple[int, float]:
    check_floating(x, name)
    if x.dim() == 0:
        raise ValueError(
            f"Expected `{name}` to have at least 1 dimension, but found a 0-dim tensor"
        )
    d = check_dim(x, dim)
    # tau must stay a normal number where the backward computes (float32 for half types):
    # below that, logits / tau and the division by tau give inf and NaN.
    return d, check_normal(check_positive(tau, "tau"), "tau", opmath_dtype(x.dtype))


class _OneHotArgmax(torch.autograd.Function):
    """Forward: the one-hot argmax; backward: the softmax VJP at the saved logits. Written
    with ``ctx`` in ``forward`` (a Python call fewer per op); ``torch.func`` uses
    :class:`_OneHotArgmaxJVP`."""

    @staticmethod
    def forward(ctx: Any, logits: Tensor, dim: int, tau: float) -> Tensor:
        ctx.save_for_backward(logits)
        ctx.dim, ctx.tau = dim, tau
        if logits.is_cpu and not torch.compiler.is_compiling():
            # :func:`argmax` and :func:`one_hot` in plain eager mode on CPU (the mode this
            # class runs in outside compile), without their mode checks.
            index = torch.max(logits, dim, keepdim=True).indices
            return torch.zeros_like(logits).scatter_(dim, index, 1.0)
        return one_hot(logits, dim, argmax(logits, dim))

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        (logits,) = ctx.saved_tensors
        return softmax_vjp(logits, grad, ctx.dim, ctx.tau), None, None


@forward_mode(_OneHotArgmax)
@cached_signature
class _OneHotArgmaxJVP(_OneHotArgmax):
    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, dim: int, tau: float) -> Tensor:  # type: ignore[override]
        return one_hot(logits, dim, argmax(logits, dim))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        logits, dim, tau = inputs
        ctx.save_for_backward(logits)
        ctx.dim, ctx.tau = dim, tau
        ctx.save_for_forward(logits)

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, _dim: Any, _tau: Any) -> Tensor:
        # The softmax Jacobian diag(p) - p p^T (over tau) is symmetric: the JVP is the VJP.
        (logits,) = ctx.saved_tensors
        return softmax_vjp(logits, tangent, ctx.dim, ctx.tau)


def _native_one_hot_argmax(logits: Tensor, dim: int, tau: float) -> Tensor:
    r""":class:`_OneHotArgmax` recorded with autograd's own nodes, for non-empty float32 or
    float64 logits that :func:`~hardgrad.ops._autograd.records_natively` accepts: the
    softmax of the finite logits, copied (``clone``) and the copy overwritten with the
    one-hot outside autograd. Backward is torch's softmax node, the kernel the Function
    calls, so the gradient is the same bit for bit, with no Python in it.

    The finite logits: ``logits`` themselves when every row's maximum (which ``torch.max``
    gives with the index) lies in :math:`(-\text{big}, \infty)`, ``big`` being
    :func:`~hardgrad._core.kernels.finite`'s stand-in for infinity. Then no entry is NaN or
    :math:`+\infty`, and a :math:`-\infty` entry has weight exactly 0 as it would have
    at :math:`-\text{big}` (:math:`e^{-\text{big} - m}` underflows), so the softmax is
    the same bit for bit. Otherwise, and for ``tau != 1``, a copy (``logits.clone()`` or
    ``logits / tau``) made finite in place outside autograd: the gradient passes through it
    unchanged, or divided by ``tau``.

    Why: inside a model, a Python Function node costs a backward pass about 8 µs, against
    3 µs for a C++ copy node (chains of ``tanh(h @ W)`` layers, 2 threads), more than it
    costs alone. A hard-attention model ((64, 32) logits) took 1.055-1.063x the detach
    code's training step with the Function, 1.022x with this; the (64, 64) op alone,
    forward and backward, 1.02-1.03x and 0.97-0.98x."""
    big = _QUARTER_MAX[logits.dtype]
    set_grad_enabled = torch._C._set_grad_enabled  # (enabled: records_natively checked it)
    set_grad_enabled(False)
    try:
        values, index = torch.max(logits, dim, keepdim=True)
        finite_as_is = False
        if tau == 1:
            lowest, highest = torch.aminmax(values)
            finite_as_is = lowest.item() > -big and highest.item() < math.inf
        set_grad_enabled(True)
        finite_logits = logits
        if not finite_as_is:
            finite_logits = logits.clone() if tau == 1 else logits / tau
            set_grad_enabled(False)
            finite_logits.nan_to_num_(nan=0.0, posinf=big, neginf=-big)  # (no node saved it)
            set_grad_enabled(True)
        out = torch.softmax(finite_logits, dim).clone()  # (the softmax node saves its own)
        set_grad_enabled(False)
        out.zero_().scatter_(dim, index, 1.0)
    finally:
        set_grad_enabled(True)
    return out


def one_hot_argmax(logits: Tensor, *, dim: int = -1, tau: float = 1.0) -> Tensor:
    r"""One-hot of the argmax along a dimension, with the softmax's gradient in backward.

    .. math::

        y = \operatorname{onehot}\big(\arg\max_i \ell_i\big), \qquad
        \frac{\partial L}{\partial \ell} = \frac{1}{\tau}\, p \odot
        \Big(\frac{\partial L}{\partial y} - \Big\langle \frac{\partial L}{\partial y},
        p \Big\rangle\Big), \quad p = \operatorname{softmax}(\ell / \tau),

    i.e. the forward is the hard choice and the backward is that of
    ``softmax(logits / tau)`` (the straight-through softmax, Bengio et al. 2013,
    https://arxiv.org/abs/1308.3432; as in the hard Gumbel-softmax of Jang et al. 2017,
    https://arxiv.org/abs/1611.01144, without noise). Biased. Ties go to the first index,
    NaN counts as the largest value (``torch.argmax``); in backward NaN logits are read as 0
    and infinite ones as large finite values, so the gradient stays finite. Only the logits
    are saved (no copy), and the softmax is recomputed in backward; on float32/float64 CPU
    tensors of at most 8,192 elements in eager mode the op is recorded with torch's own
    softmax and copy nodes instead (``grad_fn`` ``CloneBackward0``), which save the
    softmax: the same values and gradients, with no Python in backward. Logits changed in
    place after the forward: the Function (which saves them) raises torch's in-place
    error in backward; the native nodes, like ``torch.softmax``, give the gradient at the
    logits they were given.

    Args:
        logits: floating tensor with at least one dimension.
        dim: the category dimension.
        tau: temperature of the backward's softmax, > 0 and a normal number of the dtype
            the backward computes in (float32 for half types; e.g. >= 1.2e-38 there).

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.tensor([1.0, 3.0, 3.0, 0.0], requires_grad=True)
        >>> y = hg.one_hot_argmax(logits)
        >>> y
        tensor([0., 1., 0., 0.], grad_fn=<CloneBackward0>)
        >>> (y * torch.tensor([0.0, 1.0, 0.0, 0.0])).sum().backward(); logits.grad
        tensor([-0.0283,  0.2482, -0.2094, -0.0104])
    """
    d, t = _check_selection(logits, dim, tau, "logits")
    if logits.dtype in _NATIVE_DTYPES and logits.numel() and records_natively(logits):
        return _native_one_hot_argmax(logits, d, t)
    return apply_function(_OneHotArgmax, logits, d, t)


#: The logits' dtypes that :func:`_native_one_hot_argmax` takes (half types compute in
#: float32 and take the Function).
_NATIVE_DTYPES = (torch.float32, torch.float64)


def _soft_topk(x: Tensor, k: int, dim: int, tau: float) -> Tensor:
    r"""Solve :math:`m = \sigma((x - t)/\tau)` with :math:`\sum m = k` along ``dim``.

    Safeguarded Newton on the threshold :math:`t`, from the midpoint of the k-th and
    (k+1)-th largest values, inside the bracket
    :math:`[\min x - 40\tau, \max x + 40\tau]`, for a fixed number of steps (no
    data-dependent control flow, so it compiles).
    """
    x = finite(opmath(x))
    n = x.shape[dim]
    if k == 0:
        return torch.zeros_like(x)
    if k == n:
        return torch.ones_like(x)
    top = torch.topk(x, k + 1, dim).values
    t = 0.5 * (top.narrow(dim, k - 1, 1) + top.narrow(dim, k, 1))
    lo = x.amin(dim, keepdim=True) - _SATURATION * tau
    hi = x.amax(dim, keepdim=True) + _SATURATION * tau
    # In eager, two full-size buffers serve every iteration (fresh tensors of the input's
    # size would each page-fault in); elsewhere the functional form.
    reuse = eager_plain(x)
    m, bell = (torch.empty_like(x), torch.empty_like(x)) if reuse else (x, x)
    for _ in range(_NEWTON_STEPS):
        if reuse:
            torch.sub(x, t, out=m).div_(tau).sigmoid_()
            torch.mul(m, m, out=bell)
            torch.sub(m, bell, out=bell)
        else:
            m = torch.sigmoid((x - t) / tau)
            bell = m * (1 - m)
        excess = m.sum(dim, keepdim=True) - k  # decreasing in t
        lo = torch.where(excess > 0, t, lo)
        hi = torch.where(excess > 0, hi, t)
        slope = bell.sum(dim, keepdim=True) / tau
        newton = t + excess / slope.clamp_min(torch.finfo(x.dtype).tiny)
        # Inclusive: once Newton has converged, its step rounds to t itself, which is
        # then a bracket end; a strict test would throw the solution away for a bisection.
        inside = (newton >= lo) & (newton <= hi)
        t = torch.where(inside, newton, 0.5 * (lo + hi))
    return torch.sigmoid((x - t) / tau)


def _soft_topk_vjp(m: Tensor, grad: Tensor, dim: int, tau: float) -> Tensor:
    r"""VJP of the sigmoid-threshold top-k: :math:`a \odot (g - \langle g, a\rangle / \sum a)`,
    :math:`a = m(1 - m)/\tau` (implicit differentiation through :math:`\sum m = k`).

    Computed with :math:`m(1 - m)` and divided by :math:`\tau` last (the bracket does not
    depend on the scale of :math:`a`), so that a small ``tau`` overflows to inf only where
    the gradient itself does, never to ``0 * inf`` = NaN."""
    a = m * (1 - m)
    g = opmath(grad)
    total = a.sum(dim, keepdim=True).clamp_min(torch.finfo(a.dtype).tiny)
    return (a * (g - (g * a).sum(dim, keepdim=True) / total) / tau).to(grad.dtype)


@cached_signature
class _TopKMask(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x: Tensor, k: int, dim: int, tau: float) -> Tensor:
        index = torch.topk(x, k, dim).indices
        return one_hot(x, dim, index)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        x, k, dim, tau = inputs
        ctx.save_for_backward(x)
        ctx.k, ctx.dim, ctx.tau = k, dim, tau

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        (x,) = ctx.saved_tensors
        if torch.is_grad_enabled():
            # create_graph: the relaxation as its own differentiable op (its backward is
            # exact, so the VJP's derivatives are the relaxation's second derivatives);
            # the Newton iterations themselves are not differentiated.
            m = apply_function(_SoftTopKMask, x, ctx.k, ctx.dim, ctx.tau)
        else:
            m = _soft_topk(x, ctx.k, ctx.dim, ctx.tau)
        return _soft_topk_vjp(m, grad, ctx.dim, ctx.tau), None, None, None


@forward_mode(_TopKMask)
@cached_signature
class _TopKMaskJVP(_TopKMask):
    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _TopKMask.setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_settings: Any) -> Tensor:
        # The relaxation's Jacobian (diag(a) - a a^T / sum a) / tau is symmetric.
        (x,) = ctx.saved_tensors
        m = _soft_topk(x, ctx.k, ctx.dim, ctx.tau)
        return _soft_topk_vjp(m, tangent, ctx.dim, ctx.tau)


@cached_signature
class _SoftTopKMask(torch.autograd.Function):
    generate_vmap_rule = True

    @staticmethod
    def forward(x: Tensor, k: int, dim: int, tau: float) -> Tensor:
        return _soft_topk(x, k, dim, tau)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _, _, dim, tau = inputs
        ctx.save_for_backward(output)
        ctx.dim, ctx.tau = dim, tau

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        (m,) = ctx.saved_tensors
        return _soft_topk_vjp(m, grad, ctx.dim, ctx.tau), None, None, None


@forward_mode(_SoftTopKMask)
@cached_signature
class _SoftTopKMaskJVP(_SoftTopKMask):
    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _SoftTopKMask.setup_context(ctx, inputs, output)
        ctx.save_for_forward(output)

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_settings: Any) -> Tensor:
        (m,) = ctx.saved_tensors  # the Jacobian is symmetric (see _TopKMask.jvp)
        return _soft_topk_vjp(m, tangent, ctx.dim, ctx.tau)


def _check_topk(x: Tensor, k: Any, dim: Any, tau: Any) -> tuple[int, int, float]:
    d, t = _check_selection(x, dim, tau, "x")
    return check_int(k, "k", low=0, high=x.shape[d]), d, t


def topk_mask(x: Tensor, k: int, *, dim: int = -1, tau: float = 1.0) -> Tensor:
    r"""The 0/1 mask of the k largest entries along a dimension, with a smooth backward.

    Forward: :math:`y_i = 1` for the ``k`` largest :math:`x_i` (ties as :func:`torch.topk`
    breaks them), else 0. Backward: the gradient of the relaxation :func:`soft_topk_mask`,

    .. math::

        m = \sigma\big((x - t)/\tau\big) \text{ with } t \text{ such that } \textstyle\sum_i m_i = k,
        \qquad
        \frac{\partial L}{\partial x} = a \odot \Big(g - \frac{\langle g, a \rangle}{\sum_i a_i}\Big),
        \quad a = \frac{m (1 - m)}{\tau},

    where :math:`g = \partial L / \partial y`. :math:`m` is the entropy-regularised
    projection onto :math:`\{m \in [0, 1]^n : \sum m = k\}` (the LML layer, Amos et al.
    2019, https://arxiv.org/abs/1905.04919); :math:`\tau \to 0` approaches the hard mask.
    Biased. The gradient sums to zero along ``dim`` (the mask's total is fixed). Only ``x``
    is saved; :math:`t` is found in backward by safeguarded Newton iterations. Twice
    differentiable: with ``create_graph=True`` the backward records the relaxation as
    :func:`soft_topk_mask`, whose derivatives are exact, so second derivatives are the
    relaxation's.

    Args:
        x: floating tensor with at least one dimension.
        k: how many entries to keep, ``0 <= k <= x.shape[dim]``.
        dim: the dimension to select along.
        tau: temperature of the relaxation, > 0 and a normal number of the dtype the
            backward computes in (float32 for half types; e.g. >= 1.2e-38 there).

    Example:
        >>> import torch, hardgrad as hg
        >>> x = torch.tensor([0.1, 2.0, -1.0, 1.5], requires_grad=True)
        >>> y = hg.topk_mask(x, 2)
        >>> y
        tensor([0., 1., 0., 1.], grad_fn=<_TopKMaskBackward>)
        >>> (y * torch.tensor([1.0, 0.0, 0.0, 0.0])).sum().backward(); x.grad
        tensor([ 0.1587, -0.0516, -0.0411, -0.0659])
    """
    k, d, t = _check_topk(x, k, dim, tau)
    return apply_function(_TopKMask, x, k, d, t)


def soft_topk_mask(x: Tensor, k: int, *, dim: int = -1, tau: float = 1.0) -> Tensor:
    r"""The smooth top-k relaxation whose gradient :func:`topk_mask` uses.

    .. math::

        m = \sigma\big((x - t)/\tau\big), \quad \textstyle\sum_i m_i = k,

    values in (0, 1) summing to ``k`` along ``dim``; the solution of
    :math:`\max_m \langle x, m \rangle + \tau \sum_i H(m_i)` over
    :math:`\{m \in [0,1]^n : \sum m = k\}` with the binary entropy :math:`H` (Amos et al.
    2019, https://arxiv.org/abs/1905.04919). Differentiable, with the exact gradient
    (implicit differentiation through the constraint). Computed in float32 for half
    inputs and cast back.

    Example:
        >>> import torch, hardgrad as hg
        >>> m = hg.ops.soft_topk_mask(torch.tensor([0.1, 2.0, -1.0, 1.5]), 2, tau=0.5)
        >>> m, m.sum()
        (tensor([0.2202, 0.9266, 0.0303, 0.8228]), tensor(2.))
    """
    k, d, t = _check_topk(x, k, dim, tau)
    return cast(apply_function(_SoftTopKMask, x, k, d, t), x.dtype)
