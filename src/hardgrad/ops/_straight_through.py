r"""Build your own straight-through op from any hard function (or a hard value) and any soft one.

Straight-through estimation: Bengio et al. (2013), https://arxiv.org/abs/1308.3432; the
"value of one tensor, gradient to another" pattern is the VQ-VAE's, van den Oord et al.
(2017), https://arxiv.org/abs/1711.00937.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .. import surrogates as _surrogates
from .._core.kernels import storable_mask, without_grad
from .._core.validation import check_floating, is_dense_floating
from ._autograd import (
    IdentityGradient,
    _is_wrapped,
    apply_function,
    base_apply,
    cached_signature,
    forward_mode,
    masked,
    native_value,
    plain_apply,
    records_value_natively,
)

TensorFn = Callable[[Tensor], Tensor]
HardLike = TensorFn | Tensor


def _name(fn: object) -> str:
    if isinstance(fn, Tensor):
        return f"<{str(fn.dtype).removeprefix('torch.')} tensor of shape {tuple(fn.shape)}>"
    return getattr(fn, "__name__", None) or repr(fn)


class _ValueWithSurrogate(torch.autograd.Function):
    r"""Forward: ``value``, handed back as is; backward: :math:`\bar y\, s'(x)` to ``x`` only.

    The output is a view of the input ``value`` with this Function as its ``grad_fn``: ``value``'s own tensor and graph are
    never touched, nothing flows back to ``value``, and an in-place change to either
    afterwards raises autograd's "view created inside a custom Function" error instead of
    silently changing the other. What backward needs is saved as for the hard ops: nothing
    for the identity, the bool mask ``keep`` (computed by the caller) for an indicator
    surrogate, ``x`` itself otherwise. Written with ``ctx`` in ``forward`` (a Python call
    fewer per op); ``torch.func`` uses :class:`_ValueWithSurrogateJVP`.
    """

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, value: Tensor, keep: Tensor | None, surrogate: _surrogates.Surrogate
    ) -> Tensor:
        _ValueWithSurrogate._save(ctx, x, keep, surrogate)
        # A view rather than ``value`` itself: ``value`` may be ``x``, which backward saves.
        return value.view_as(value)

    @staticmethod
    def _save(ctx: Any, x: Tensor, keep: Tensor | None, surrogate: _surrogates.Surrogate) -> None:
        ctx.surrogate = surrogate
        if keep is not None:
            ctx.save_for_backward(keep)
        elif surrogate.kind != "identity":
            ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        return _ValueWithSurrogate._times_derivative(ctx, grad), None, None, None

    @staticmethod
    def _times_derivative(ctx: Any, vector: Tensor) -> Tensor:
        surrogate = ctx.surrogate
        if surrogate.kind == "identity":
            return vector
        (saved,) = ctx.saved_tensors
        if surrogate.kind == "indicator":
            return masked(vector, saved)
        result: Tensor = surrogate.backward(vector, saved)
        return result


@forward_mode(_ValueWithSurrogate)
@cached_signature
class _ValueWithSurrogateJVP(_ValueWithSurrogate):
    """:class:`_ValueWithSurrogate` in the ``setup_context`` form ``torch.func`` needs, with
    its forward-mode rule."""

    generate_vmap_rule = True

    @staticmethod
    def forward(  # type: ignore[override]
        x: Tensor, value: Tensor, keep: Tensor | None, surrogate: _surrogates.Surrogate
    ) -> Tensor:
        # A copy, not a view: forward-mode AD (torch.autograd.forward_ad) requires the jvp
        # of a Function whose output is a view of an input to be a view of that input's
        # tangent, and ``value`` has none (the tangent is x's, times the surrogate's
        # derivative): a view ended in autograd's "forward is returning a view ... but the
        # jvp is not returning a view" error. Only this twin copies (transforms and
        # forward-AD levels); plain eager calls keep the view.
        return value.clone()

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        x, _, keep, surrogate = inputs
        _ValueWithSurrogate._save(ctx, x, keep, surrogate)
        if keep is not None:
            ctx.save_for_forward(keep)
        elif surrogate.kind != "identity":
            ctx.save_for_forward(x)

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_others: Any) -> Tensor:
        # Elementwise: the tangent of x times what backward multiplies by (none from value).
        return _ValueWithSurrogate._times_derivative(ctx, tangent)


def value_with_identity_gradient(value: Tensor, x: Tensor) -> Tensor:
    """``straight_through(value)(x)`` for callers that already hold ``value`` with ``x``'s
    shape, dtype and device: the same op (a view of ``value``, or a copy on small CPU
    tensors; the gradient to ``x`` unchanged), without re-checking them (3 µs of a VQ
    layer's call)."""
    if records_value_natively(x):
        return native_value(x, value)
    out: Tensor = apply_function(_ValueWithSurrogate, x, value, None, _IDENTITY)
    return out


class StraightThrough:
    """The callable that :func:`straight_through` returns: ``y(x)``."""

    def __init__(self, hard: HardLike, soft: TensorFn | _surrogates.Surrogate | None) -> None:
        self.hard = hard
        self.soft = soft

    def __repr__(self) -> str:
        if self.soft is None:
            soft = "None"
        elif isinstance(self.soft, _surrogates.Surrogate):
            soft = repr(self.soft)
        else:
            soft = _name(self.soft)
        return f"straight_through(hard={_name(self.hard)}, soft={soft})"

    def _eager_identity(self, x: Tensor) -> Tensor:
        """The plain straight-through of a callable in eager mode (no compile, transform or
        forward-mode level): the common case, with its checks made once."""
        # without_grad and _check_like inlined (eager mode known): measured 0.1-0.3 µs of a
        # 14 µs call (16,384 elements).
        enabled = torch.is_grad_enabled()
        torch._C._set_grad_enabled(False)
        try:
            value = self.hard(x)  # type: ignore[operator]
        finally:
            torch._C._set_grad_enabled(enabled)
        if (
            type(value) is not Tensor
            or value.shape != x.shape
            or value.dtype != x.dtype
            or value.device != x.device
        ):
            _check_like(value, x, "hard(x)")  # raises, or passes a subclass
        if records_value_natively(x):
            return native_value(x, value)
        if _held_only_here(value, x):
            # A new tensor no one else holds becomes the output itself: no view to protect
            # it, and 4 µs less a call than the view (64 x 256, fwd+bwd). (The C++ apply
            # straight away: plain_apply held, and x is not a left-over functorch wrapper.)
            if _is_wrapped(x):
                out: Tensor = apply_function(IdentityGradient, x, lambda _: value)
            else:
                out = base_apply(IdentityGradient)(x, lambda _: value)
        else:
            out = apply_function(_ValueWithSurrogate, x, value, None, _IDENTITY)
        return out

    def _hard_value(self, x: Tensor) -> Tensor:
        """``hard(x)`` (or the hard tensor), checked, outside any graph."""
        if isinstance(self.hard, Tensor):
            value = self.hard
            _check_like(value, x, "hard", call=False)
        else:
            value = without_grad(self.hard, x)
            _check_like(value, x, "hard(x)")
        return value

    def __call__(self, x: Tensor) -> Tensor:
        if not is_dense_floating(x):
            check_floating(x, "x")  # raises the TypeError naming `x`
        if self.soft is None and not isinstance(self.hard, Tensor) and plain_apply():
            return self._eager_identity(x)
        value = self._hard_value(x)
        if self.soft is None or isinstance(self.soft, _surrogates.Surrogate):
            surrogate = _IDENTITY if self.soft is None else self.soft
            keep = None
            if surrogate.kind == "indicator":
                keep = storable_mask(without_grad(surrogate.support, x))
            if surrogate.kind != "smooth" and records_value_natively(x):
                return native_value(x, value, keep)
            y: Tensor = apply_function(_ValueWithSurrogate, x, value, keep, surrogate)
            return y
        soft = self.soft(x)
        _check_like(soft, x, "soft(x)")
        # y = hard - (sg[soft] - soft): the subtracted term is +0 wherever soft(x) is finite,
        # so y equals hard(x) bit for bit (signed zeros, inf and NaN included), while its
        # gradient is that of soft. Where soft(x) is not finite the term is dropped.
        frozen = soft.detach()
        zero = torch.where(torch.isfinite(frozen), frozen - soft, 0)
        return value.detach() - zero


_IDENTITY = _surrogates.get("identity")


def _held_only_here(value: Tensor, x: Tensor) -> bool:
    """Whether ``value`` (which ``hard(x)`` returned) is a new tensor that nothing else
    holds: not ``x``, not a view, and referenced only by the caller's variable (CPython
    counts that one, this function's parameter and ``getrefcount``'s argument). A tensor
    the callable keeps (a constant, a cache, ``x`` itself) is referenced elsewhere too
    and keeps the view that protects it."""
    return value is not x and not value._is_view() and sys.getrefcount(value) <= 3


def _check_like(y: object, x: Tensor, name: str, *, call: bool = True) -> None:
    if not isinstance(y, Tensor):
        found = type(y).__name__
        raise TypeError(
            f"Expected `{name}` to return a tensor, but found {found}"
            if call
            else f"Expected `{name}` to be a callable or a tensor, but found {found}"
        )
    if y.shape != x.shape or y.dtype != x.dtype or y.device != x.device:
        raise ValueError(
            f"Expected `{name}` to have the shape, dtype and device of `x` "
            f"({tuple(x.shape)}, {x.dtype}, {x.device}), "
            f"but found ({tuple(y.shape)}, {y.dtype}, {y.device})"
        )


def straight_through(
    hard: HardLike, soft: TensorFn | str | _surrogates.Surrogate | None = None
) -> StraightThrough:
    r"""Make an op whose forward is ``hard(x)`` exactly and whose backward is ``soft``'s.

    .. math::

        y = h(x), \qquad \frac{\partial L}{\partial x} =
        \frac{\partial L}{\partial y} \, s'(x),

    where :math:`s` is ``soft``: ``None`` for the identity (plain straight-through,
    Bengio et al. 2013, https://arxiv.org/abs/1308.3432), a surrogate (name or instance,
    :mod:`hardgrad.surrogates`), or any differentiable callable, whose full vector-Jacobian
    product is used (so a ``soft`` that mixes entries, like a softmax, works too).

    ``hard`` is a function of ``x``, or a **tensor**: the value to return. The tensor form is
    the VQ-VAE pattern "the value of ``z_q``, the gradient to ``z``" (van den Oord et al.
    2017, https://arxiv.org/abs/1711.00937): write ``hg.straight_through(z_q)(z)`` where
    code has ``z + (z_q - z).detach()``. Unlike that expression it returns ``z_q``'s
    value bit for bit (the sum and difference round), and like it, it leaves ``z_q`` alone.

    What the op guarantees, whatever ``hard`` returns (a new tensor, ``x`` itself, a
    tensor computed earlier with a graph of its own):

    * the output is a new tensor; the tensor ``hard`` gives is not modified (its
      ``grad_fn`` and ``requires_grad`` stay as they were), so a loss built from it
      afterwards (a VQ codebook loss on ``z_q``) still trains what produced it;
    * the gradient reaches ``x`` and only ``x``: nothing flows from the output into
      whatever produced the hard value (``hard`` runs without building a graph);
    * with ``soft=None`` or a surrogate, the output is a view of the hard value (no copy):
      modifying either in place afterwards raises autograd's error about views made in a
      custom Function rather than silently changing the other. (In eager mode, when
      ``hard(x)`` made a new tensor that nothing else references, there is no other to
      protect: that tensor becomes the output itself, which saves the view's cost.) On a
      CPU tensor of at most 65,536 elements in eager mode the output is instead a copy
      of the hard value, recorded with autograd's own nodes (``x.clone()`` or
      ``x * mask``, then overwritten): faster there than a Python backward, and just as
      separate from the hard value. With a callable ``soft`` the output is computed as
      ``hard(x) - (sg[soft(x)] - soft(x))``, a new tensor.

    ``hard`` (or the tensor) must have ``x``'s shape, dtype and device.

    With a callable ``soft`` the subtracted term is exactly +0 where ``soft(x)`` is finite,
    so the forward is bit-identical to ``hard(x)`` (unlike the common
    ``soft + (hard - soft).detach()``, which rounds), and it composes with
    ``torch.compile`` and ``torch.func``.

    Example:
        >>> import torch, hardgrad as hg
        >>> stair = hg.straight_through(torch.round, torch.sin)
        >>> x = torch.tensor([0.4, 2.6], requires_grad=True)
        >>> y = stair(x); y.sum().backward()
        >>> y.detach(), x.grad
        (tensor([0., 3.]), tensor([ 0.9211, -0.8569]))

        The value of a codebook row, the gradient to the encoder output:

        >>> z = torch.tensor([[0.2, 0.9]], requires_grad=True)
        >>> codebook = torch.tensor([[0.0, 1.0], [1.0, 0.0]], requires_grad=True)
        >>> z_q = codebook[torch.cdist(z, codebook).argmin(-1)]
        >>> y = hg.straight_through(z_q)(z)
        >>> y.detach()
        tensor([[0., 1.]])
        >>> codebook_loss = (z_q - z.detach()).pow(2).sum()
        >>> (y.sum() + codebook_loss).backward()
        >>> z.grad, codebook.grad
        (tensor([[1., 1.]]), tensor([[-0.4000,  0.2000],
                [ 0.0000,  0.0000]]))
    """
    if not (callable(hard) or isinstance(hard, Tensor)):
        raise TypeError(
            f"Expected `hard` to be a callable or a tensor, but found {type(hard).__name__}"
        )
    if isinstance(hard, Tensor):
        check_floating(hard, "hard")
    if isinstance(soft, str):
        _surrogates.SURROGATES.get(soft, "soft")  # an unknown name: ValueError naming `soft`
        return StraightThrough(hard, _surrogates.get(soft))
    if soft is None or isinstance(soft, _surrogates.Surrogate) or callable(soft):
        return StraightThrough(hard, soft)
    raise TypeError(
        "Expected `soft` to be None, a surrogate name or instance, or a callable, "
        f"but found {type(soft).__name__}"
    )
