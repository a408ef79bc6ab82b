"""The three autograd Functions behind every elementwise hard op.

Each has a forward-mode twin (see :func:`forward_mode`) for ``torch.func.jvp``, ``jacfwd``
and ``torch.autograd.forward_ad``: an elementwise op's surrogate Jacobian is diagonal, so
the tangent is multiplied by exactly what backward multiplies the incoming gradient by.

Each computes ``hard(x)`` exactly in forward and differs only in what it saves:

* :class:`IdentityGradient`: nothing; backward returns the incoming gradient.
* :class:`MaskedGradient`: a mask computed in forward, bool (1 byte per element), or 0/1
  in the input's dtype on small eager tensors (:func:`saved_mask`), uint8 under
  ``torch.compile`` (:func:`hardgrad._core.kernels.storable_mask`); backward keeps the gradient
  where the mask is set and zeroes it elsewhere.
* :class:`SurrogateGradient`: the input itself (no copy); backward multiplies by the
  surrogate's derivative at the input.

``hard`` and ``mask`` are plain callables of the input (``torch.round``, a
``functools.partial`` of ``torch.clamp``, a surrogate's ``support``) so that one
Function serves every op, under ``torch.compile`` and ``torch.func`` alike.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import torch
import torch.autograd.forward_ad as _forward_ad
from torch import Tensor
from torch._functorch.utils import unwrap_dead_wrappers

from .._core.compat import fresh_output
from .._core.kernels import constant, eager_plain, storable_mask, without_grad
from ..surrogates import Surrogate

HardFn = Callable[[Tensor], Tensor]

_is_wrapped = torch._C._functorch.is_functorch_wrapped_tensor
F = TypeVar("F", bound=torch.autograd.Function)
G = TypeVar("G", bound=torch.autograd.Function)


#: From this many elements on, :func:`masked` converts the mask and multiplies in place
#: (1.10 vs 1.34 ms at 4M elements on CPU); below it one mixed-dtype multiply is cheaper
#: (3.3 vs 3.9 µs at 4,096: one kernel launch instead of two).
MASK_CONVERT_MIN_NUMEL = 65536


def keeps_float_mask(x: Tensor) -> bool:
    """Whether a mask saved for ``x`` is 0/1 in its dtype (see :func:`saved_mask`)."""
    return eager_plain(x) and x.numel() < MASK_CONVERT_MIN_NUMEL  # (no size guard in graphs)


def saved_mask(
    compare: Callable[..., Tensor], a: Tensor, b: Tensor | float, dtype: torch.dtype
) -> Tensor:
    """``compare(a, b)``, the in-range mask that backward multiplies the gradient by.

    A bool tensor (1 byte per element saved), except on tensors below
    :data:`MASK_CONVERT_MIN_NUMEL` elements in eager mode, where it is 0/1 in ``dtype``
    (the input's), written straight by the comparison: at 4,096 elements the comparison
    takes 1.6 µs instead of 2.7 and ``grad * mask`` 1.2 µs instead of 3.2, a tenth of a
    small op's forward and backward. The gradient is the same bit for bit.
    """
    if keeps_float_mask(a):
        return float_mask(compare, a, b, dtype)
    return compare(a, b)


def float_mask(
    compare: Callable[..., Tensor], a: Tensor, b: Tensor | float, dtype: torch.dtype
) -> Tensor:
    """``compare(a, b)`` written straight as 0/1 in ``dtype`` (eager mode: ``out=``)."""
    return compare(a, b, out=torch.empty_like(a, dtype=dtype))


def masked(grad: Tensor, keep: Tensor) -> Tensor:
    """``grad`` where ``keep`` is set, 0 elsewhere (``grad * keep``: a NaN or infinite
    ``grad`` where ``keep`` is unset gives NaN)."""
    if eager_plain(grad) and grad.numel() >= MASK_CONVERT_MIN_NUMEL:
        return keep.to(grad.dtype).mul_(grad)
    return grad * keep


def float_compare(compare: Callable[..., Tensor], x: Tensor, value: float) -> Tensor:
    """``compare(x, value)`` as 0/1 in ``x``'s dtype, written straight in that dtype."""
    if eager_plain(x):
        return float_mask(compare, x, constant(value, x), x.dtype)
    return compare(x, value).to(x.dtype)


def cached_signature(cls: type[F]) -> type[F]:
    """Store ``forward``'s signature on it once.

    ``Function.apply`` binds its arguments with ``inspect.signature(cls.forward)`` on every
    call when ``setup_context`` is defined; a stored ``__signature__`` makes that lookup
    cheap, which halves the fixed cost per call on small tensors.
    """
    forward: Any = cls.forward
    forward.__signature__ = inspect.signature(forward)
    return cls


def forward_mode(traceable: type[F]) -> Callable[[type[G]], type[G]]:
    """Register the decorated subclass of ``traceable`` as its forward-mode twin.

    The twin adds ``jvp`` (and saves what it needs with ``ctx.save_for_forward``).
    :func:`apply_function` uses it only where forward mode can be active: inside a
    ``torch.func`` transform or a ``torch.autograd.forward_ad.dual_level``. Elsewhere the
    plain class runs: torch 2.13's Dynamo refuses to trace a Function with a custom ``jvp``
    (so ``torch.compile`` gets the plain class), and plain eager calls pay nothing for
    forward mode.
    """

    def register(twin: type[G]) -> type[G]:
        traceable.forward_twin = twin  # type: ignore[attr-defined]
        return twin

    return register


def jvp_by_reverse_mode(fn: Callable[[Tensor], Tensor], x: Tensor, tangent: Tensor) -> Tensor:
    """``J t`` for the Jacobian ``J`` of ``fn`` at ``x``, by reverse mode twice: the VJP
    ``u -> J^T u`` is linear in ``u``, and its own VJP at any ``u`` applied to ``t`` is
    ``J t``. For the ``jvp`` of a Function whose backward is a smooth map's VJP: a nested
    ``torch.func.jvp`` would fail inside a ``torch.autograd.forward_ad`` dual level."""
    out, pullback = torch.func.vjp(fn, x)[:2]
    transpose = torch.func.vjp(lambda u: pullback(u)[0], torch.zeros_like(out))[1]
    result: Tensor = transpose(tangent)[0]
    return result


def has_tangent(x: Tensor) -> bool:
    """Whether ``x`` carries a forward-mode tangent: a dual tensor of
    ``torch.autograd.forward_ad`` or a tensor inside a ``torch.func`` transform (which may
    be ``jvp``)."""
    if torch._C._are_functorch_transforms_active():
        return True
    return _forward_ad._current_level >= 0 and _forward_ad.unpack_dual(x).tangent is not None


def plain_apply() -> bool:
    """Whether :func:`apply_function` calls the plain Function in eager mode now: no
    ``torch.compile``, no ``torch.func`` transform, no forward-AD dual level."""
    return (
        not torch.compiler.is_compiling()
        and not torch._C._are_functorch_transforms_active()
        and _forward_ad._current_level < 0
    )


def mark_non_differentiable(ctx: Any, *outputs: Tensor) -> None:
    """``ctx.mark_non_differentiable(*outputs)``, and in eager mode no zeros for their
    gradients in backward.

    Autograd hands a Function's backward a zero tensor for every output that got no
    gradient, non-differentiable ones included, unless told otherwise: an allocation and a
    pass per mask or auxiliary output, on every backward, for an argument the backward
    ignores (``None`` is passed instead). The differentiable outputs' gradients are still
    materialized. Not under ``torch.compile``, where Dynamo does not trace the setting
    (and AOTAutograd makes its own choice for the compiled graph's Function).
    """
    ctx.mark_non_differentiable(*outputs)
    if not torch.compiler.is_compiling():
        ctx._materialize_non_diff_grads = False


def apply_function(function: type[torch.autograd.Function], *args: Any) -> Any:
    """``function.apply(*args)`` without its per-call cost in plain eager mode.

    ``Function.apply`` binds its arguments to ``forward``'s signature on every call when
    ``setup_context`` is defined (which ``torch.func`` needs), a pure-Python step that costs
    about as much as the rest of a small op's forward and backward. hardgrad passes every
    argument positionally and its forwards have no defaults, so the binding is a no-op: in
    eager mode without an active ``torch.func`` transform this calls the C++ ``apply`` that
    ``Function.apply`` ends in, after the same unwrapping of tensors left over from exited
    transforms. Under ``torch.compile`` it is ``function.apply`` itself, the call Dynamo
    recognises; under a ``torch.func`` transform or inside a forward-mode dual level it is
    the ``apply`` of the function's forward-mode twin (:func:`forward_mode`), if it has one.

    ``torch.compile`` of a ``torch.func`` transform (``torch.compile(torch.func.grad(f))``)
    gets a graph break here, so that the transform runs this op eagerly: torch 2.13's
    Dynamo inlines a custom Function's ``forward`` under a transform and drops its
    ``backward`` and ``jvp``, so the gradient of a straight-through op came out as the
    hard op's own (zero) derivative, silently (pytorch/pytorch#193279).
    """
    if torch.compiler.is_compiling():
        if torch._C._are_functorch_transforms_active():
            torch._dynamo.graph_break()
            return getattr(function, "forward_twin", function).apply(*args)
        return function.apply(*args)
    if torch._C._are_functorch_transforms_active() or _forward_ad._current_level >= 0:
        return getattr(function, "forward_twin", function).apply(*args)
    apply = base_apply(function)
    for arg in args:  # (a dead wrapper is a functorch-wrapped tensor: rare, checked cheaply)
        if isinstance(arg, Tensor) and _is_wrapped(arg):
            return apply(*unwrap_dead_wrappers(args))
    return apply(*args)


def base_apply(function: type[torch.autograd.Function]) -> Callable[..., Any]:
    """The C++ ``_FunctionBase.apply`` bound to ``function`` (looked up once per class):
    what :func:`apply_function` calls in plain eager mode, for callers that have checked
    that mode themselves."""
    apply = _BASE_APPLY.get(function)
    if apply is None:
        apply = _BASE_APPLY[function] = super(torch.autograd.Function, function).apply  # type: ignore[misc]
    return apply


#: ``Function -> its C++ apply``, for :func:`base_apply`.
_BASE_APPLY: dict[type[torch.autograd.Function], Callable[..., Any]] = {}


class IdentityGradient(torch.autograd.Function):
    """Forward ``hard(x)``; backward passes the gradient through unchanged.

    Written in the form with ``ctx`` in ``forward`` (no ``setup_context``): there is nothing
    to save, and this form skips a Python call per op (0.15 µs of a 15 µs small round trip).
    ``torch.func`` transforms and forward mode use :class:`IdentityGradientJVP`, which has
    the ``setup_context`` form they need.
    """

    @staticmethod
    def forward(ctx: Any, x: Tensor, hard: HardFn) -> Tensor:
        return fresh_output(hard(x))

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad, None


@forward_mode(IdentityGradient)
@cached_signature
class IdentityGradientJVP(IdentityGradient):
    """:class:`IdentityGradient` in the ``setup_context`` form, with its forward-mode rule:
    the tangent unchanged."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: Tensor, hard: HardFn) -> Tensor:  # type: ignore[override]
        return hard(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        pass

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, _hard: Any) -> Tensor:
        return tangent


#: On CPU tensors of at most this many elements, in plain eager mode, the ops whose
#: backward is the identity or a saved mask record autograd's own C++ nodes (a copy, a
#: multiply by the mask) instead of a Python :class:`torch.autograd.Function`: there the
#: Python backward costs more than the extra pass over the data. See
#: :func:`records_natively`.
NATIVE_NODE_MAX_NUMEL = 8192


#: Up to this many elements, in plain eager mode on CPU, a clamp with tensor bounds and the
#: masked backward is torch's own clamp (its C++ node computes the same gradients); see
#: :func:`eager_small_cpu`. One training step of a PACT MLP (a learned clipping bound,
#: then a 4-bit straight-through round), against the Function: 0.85x at 4,096 elements per
#: clamp; at 16,384 it measured 0.99x in one model and 1.03x (two runs) in another, where
#: the two-bound kernel's cost shows, so the limit is the other native ops' one.
NATIVE_CLAMP_MAX_NUMEL = 8192


def eager_small_cpu(x: Tensor, limit: int) -> bool:
    """Whether ``x`` is a CPU tensor of at most ``limit`` elements, in plain eager mode with
    grad enabled (no compile, ``torch.func`` transform or forward-AD level, and ``x`` not
    a functorch tensor left over from an exited transform): where an op can record
    autograd's own nodes rather than a Python Function."""
    return (
        x.is_cpu
        and x.numel() <= limit
        and torch.is_grad_enabled()
        and _forward_ad._current_level < 0
        and not torch._C._are_functorch_transforms_active()
        and not torch.compiler.is_compiling()
        and not _is_wrapped(x)
    )


#: Up to this many elements (CPU, plain eager mode), :func:`hardgrad.straight_through` and
#: the VQ layers record the straight-through of a value they computed (a callable's
#: result, a codebook row) with autograd's own copy or mask product: see
#: :func:`records_value_natively`.
NATIVE_VALUE_MAX_NUMEL = 65536


def records_value_natively(x: Tensor) -> bool:
    """Whether the straight-through of an already computed value (:func:`native_value`) is
    recorded with autograd's own nodes: :func:`records_natively` with the larger limit
    :data:`NATIVE_VALUE_MAX_NUMEL`.

    Alone, the Python Function is the faster route from 16,384 elements on (see
    :func:`records_natively`); inside a training step it is not, because a Python node
    costs a backward pass more there (and the C++ copy node hands its gradient on to be
    reused in place). Training steps, original against hardgrad, 15 interleaved rounds from
    one snapshot, Function route against this one: a VQ-VAE's layer (32,768 elements)
    1.014 / 1.008 / 1.036 against 1.004 / 0.989 / 1.004 in three runs; DoReFa-quantized
    weights (16,384 and 65,536 elements) 1.015 against 1.004; PACT activations (16,384)
    1.010 against 1.011."""
    return x.requires_grad and eager_small_cpu(x, NATIVE_VALUE_MAX_NUMEL)


def records_natively(x: Tensor) -> bool:
    """Whether an identity or masked op on ``x`` records autograd's own nodes: a CPU tensor
    of at most :data:`NATIVE_NODE_MAX_NUMEL` elements that needs a gradient, in plain eager
    mode (no compile, ``torch.func`` transform or forward-AD level, and ``x`` not a
    functorch tensor left over from an exited transform).

    Forward and backward, native against Function, median of 21 interleaved rounds on CPU
    (2 threads): ``hg.round`` 0.93 / 0.93 / 0.98 / 0.95, ``hg.clamp`` 0.96 / 0.97 / 0.98 /
    0.99, a ``straight_through`` callable 0.98 / 0.99 / 0.98 / 1.00 at 256 / 1,024 / 4,096 /
    8,192 elements; from 16,384 on the extra pass costs more (1.02-1.06 there, 1.04-1.16 at
    32,768). Not on GPUs, where the copy is one more kernel launch."""
    return x.requires_grad and eager_small_cpu(x, NATIVE_NODE_MAX_NUMEL)


#: Elementwise hard functions with an in-place form, which :func:`apply_identity` runs on its
#: copy of the input (one pass fewer than copying a separate result in).
_IN_PLACE: dict[Callable[..., Any], Callable[[Tensor], Tensor]] = {
    torch.round: Tensor.round_,
    torch.floor: Tensor.floor_,
    torch.ceil: Tensor.ceil_,
    torch.trunc: Tensor.trunc_,
}


def apply_identity(x: Tensor, hard: HardFn) -> Tensor:
    """``hard(x)`` in forward, the incoming gradient unchanged in backward: the op of
    :class:`IdentityGradient`, for a ``hard`` whose result has ``x``'s shape, dtype and
    device.

    On a small CPU tensor (:func:`records_natively`) it is recorded as autograd's own copy,
    ``x.clone()``, whose values are then replaced by ``hard(x)`` outside autograd (in place
    for rounding): the copy's backward passes the gradient unchanged, in C++."""
    if records_natively(x):
        in_place = _IN_PLACE.get(hard)
        if in_place is None:
            return native_value(x, without_grad(hard, x))
        out = x.clone()
        without_grad(in_place, out)
        return out
    result: Tensor = apply_function(IdentityGradient, x, hard)
    return result


def native_value(x: Tensor, value: Tensor, keep: Tensor | None = None) -> Tensor:
    """A new tensor with ``value``'s values whose gradient to ``x`` is the incoming one
    (``keep`` None) or that times ``keep`` (a 0/1 mask, or any factor such as a
    straight-through slope), recorded with autograd's own nodes: the
    copy ``x.clone()`` or the product ``x * keep`` (``MulBackward0`` saves only ``keep``),
    its values then replaced by ``value`` outside autograd. Neither node saves the output,
    so the replacement is safe. For :func:`records_natively` tensors: ``value`` has ``x``'s
    shape, dtype and device, and is left as it is."""
    out = x.clone() if keep is None else x * keep
    torch._C._set_grad_enabled(False)  # (enabled: records_natively checked it)
    try:
        out.copy_(value)
    finally:
        torch._C._set_grad_enabled(True)
    return out


def _with_mask(x: Tensor, hard: HardFn, surrogate: Surrogate) -> tuple[Tensor, Tensor]:
    if keeps_float_mask(x):
        return hard(x), surrogate._support_into(x, torch.empty_like(x))
    return hard(x), surrogate.support(x)


class MaskedGradient(torch.autograd.Function):
    """Forward ``y`` of ``(y, mask) = hard_and_mask(x)``; backward keeps ``grad`` where
    ``mask`` is set.

    ``hard_and_mask`` computes both in one go, so that ops whose mask falls out of
    computing ``y`` (clamp: ``y == x``; quantize: the level before clamping) pay no extra pass.
    Written with ``ctx`` in ``forward``, which saves the mask as an intermediate: one output
    instead of a second, non-differentiable one (2 µs of a 20 µs small clamp round trip).
    ``torch.func`` transforms and forward mode use :class:`MaskedGradientJVP`, which returns
    ``(y, mask)`` in the ``setup_context`` form they need; :func:`apply_masked` takes ``y``
    from either.
    """

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, hard_and_mask: Callable[[Tensor], tuple[Tensor, Tensor]]
    ) -> Tensor:
        y, keep = hard_and_mask(x)
        ctx.save_for_backward(storable_mask(keep))
        return fresh_output(y)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        (keep,) = ctx.saved_tensors
        return masked(grad, keep), None


@forward_mode(MaskedGradient)
@cached_signature
class MaskedGradientJVP(MaskedGradient):
    """:class:`MaskedGradient` in the ``setup_context`` form (the mask a second,
    non-differentiable output), with its forward-mode rule: the tangent where the mask is
    set."""

    generate_vmap_rule = True

    @staticmethod
    def forward(  # type: ignore[override]
        x: Tensor, hard_and_mask: Callable[[Tensor], tuple[Tensor, Tensor]]
    ) -> tuple[Tensor, Tensor]:
        y, keep = hard_and_mask(x)
        return y, storable_mask(keep)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        keep = output[1]
        mark_non_differentiable(ctx, keep)
        ctx.save_for_backward(keep)
        ctx.save_for_forward(keep)

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _grad_mask: Any) -> tuple[Tensor, None]:  # type: ignore[override]
        (keep,) = ctx.saved_tensors
        return masked(grad, keep), None

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, _hard_and_mask: Any) -> tuple[Tensor, None]:
        (keep,) = ctx.saved_tensors
        return tangent * keep, None


def apply_masked(x: Tensor, hard_and_mask: Callable[[Tensor], tuple[Tensor, Tensor]]) -> Tensor:
    """``y`` of :class:`MaskedGradient` (or of its twin, which also returns the mask).

    On a small CPU tensor (:func:`records_natively`) the same op is recorded as autograd's
    own multiply by the mask, ``x * mask``, whose values are then overwritten with ``y`` outside
    autograd: the gradient is ``grad * mask``, the very product :func:`masked` computes
    there, and no Python runs in backward."""
    if records_natively(x):
        value, keep = without_grad(hard_and_mask, x)
        return native_value(x, value, keep)
    out = apply_function(MaskedGradient, x, hard_and_mask)
    if isinstance(out, Tensor):
        return out
    y: Tensor = out[0]
    return y


@cached_signature
class SurrogateGradient(torch.autograd.Function):
    """Forward ``hard(x)``; backward ``grad * surrogate.derivative(x)``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: Tensor, hard: HardFn, surrogate: Surrogate) -> Tensor:
        return fresh_output(hard(x))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        x, _, surrogate = inputs
        ctx.surrogate = surrogate
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        (x,) = ctx.saved_tensors
        return ctx.surrogate.backward(grad, x), None, None


@forward_mode(SurrogateGradient)
@cached_signature
class SurrogateGradientJVP(SurrogateGradient):
    """:class:`SurrogateGradient` with its forward-mode rule: ``tangent * s'(x)``."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        SurrogateGradient.setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, _hard: Any, _surrogate: Any) -> Tensor:
        (x,) = ctx.saved_tensors
        return ctx.surrogate.backward(tangent, x)


def apply_surrogate(x: Tensor, hard: HardFn, surrogate: Surrogate) -> Tensor:
    """``hard(x)`` in forward, ``grad * surrogate.derivative(x)`` in backward.

    Picks the Function that saves the least: nothing for the identity, a mask for
    indicator surrogates (as :func:`saved_mask` describes), the input otherwise.
    """
    if surrogate.kind == "identity":
        return apply_identity(x, hard)
    if surrogate.kind == "indicator":
        return apply_masked(x, functools.partial(_with_mask, hard=hard, surrogate=surrogate))
    return apply_function(SurrogateGradient, x, hard, surrogate)
