r"""Fake quantization with a straight-through backward and LSQ gradients for the scale
and zero point (Esser et al. 2020, https://arxiv.org/abs/1902.08153; Bhalgat et al. 2020,
https://arxiv.org/abs/2004.09576): the public :func:`quantize`, its autograd Functions
and their cached checked settings. The grid's arithmetic is in
:mod:`hardgrad.ops._quantize_grid`, its checks in :mod:`hardgrad.ops._quantize_checks`."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor

from .. import surrogates as _surrogates
from .._core.kernels import (
    cast,
    constant,
    eager_plain,
    mask_condition,
    remember,
    storable_mask,
    without_grad,
)
from .._core.validation import (
    check_broadcastable_to,
    check_dense,
    check_floating,
    check_int,
    check_normal,
    check_positive,
    check_real,
    validation_enabled,
    value_checks_apply,
)
from ._autograd import (
    MASK_CONVERT_MIN_NUMEL,
    _is_wrapped,
    apply_function,
    apply_identity,
    apply_masked,
    base_apply,
    cached_signature,
    forward_mode,
    mark_non_differentiable,
    masked,
    plain_apply,
)
from ._quantize_args import as_number, check_finite_number
from ._quantize_checks import _check_grid_fits, _check_in_range, _check_tensor_grid
from ._quantize_grid import (
    _affine_partials,
    _compute_dtype,
    _fake_quantize,
    _number_scale_grid,
    _NumberScale,
    _quantized_values,
    _quantized_with_partials,
    _reciprocal,
    _scale_partial,
    _scale_partial_and_mask,
    _step,
    _step_sign,
)


class _FakeQuantize(torch.autograd.Function):
    r"""Fake quantization; backward: masked STE for x, LSQ for scale and zero point.

    With ``step_bounds``, ``scale`` is a learned raw scale and the step size is
    :func:`_step` of it, with the gradient :func:`_step_sign` (one autograd node per call
    instead of two: :class:`hardgrad.nn.Quantize`).

    Written with ``ctx`` in ``forward`` (plain eager mode and ``torch.compile``), which
    saves what forward computed for backward (the step size, its reciprocal, the LSQ factor
    :math:`\pm g`) instead of recomputing it there: seven small kernels fewer in an LSQ
    backward, two more in forward (41 -> 29 µs backward, 70 -> 62 µs forward and backward
    together, for a 16-channel weight of 16 x 1 x 3 x 3 on CPU). ``torch.func`` transforms and forward mode use :class:`_FakeQuantizeJVP`, in
    the ``setup_context`` form, which returns the mask as a second output."""

    @staticmethod
    def forward(
        ctx: Any,
        x: Tensor,
        scale: Tensor,
        zero_point: Tensor | None,
        quant_min: int,
        quant_max: int,
        identity: bool,
        grad_scale: float,
        unrounded: bool,
        step_bounds: tuple[float, float] | None,
        mask_in_forward: bool,
    ) -> Tensor:
        step = _step(scale, step_bounds, _compute_dtype(x.dtype))
        inverse = torch.reciprocal(step)  # (what 1.0 / step computes)
        keep = None
        if not mask_in_forward:  # (plain eager, zero point 0: see _mask_in_forward)
            y = _quantized_values(x, step, inverse, quant_min, quant_max)
        else:
            y, keep = _fake_quantize(x, step, inverse, zero_point, quant_min, quant_max, unrounded)
            keep = storable_mask(keep)
        _save_settings(ctx, x, identity, grad_scale, unrounded, step_bounds, quant_min, quant_max)
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            factor = _lsq_factor(scale, step, grad_scale, step_bounds)
            ctx.factor = None if isinstance(factor, Tensor) else factor
            factor_t = factor if isinstance(factor, Tensor) else None
            ctx.save_for_backward(keep, x, scale, zero_point, step, inverse, factor_t)
        elif not identity:
            ctx.save_for_backward(keep)
        return y

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        saved = ctx.saved_tensors
        if len(saved) > 1:
            keep, x, raw, zero_point, step, inverse, factor = saved
            factor = ctx.factor if factor is None else factor
            grads = _lsq_backward(ctx, grad, keep, x, raw, zero_point, step, inverse, factor)
        else:
            grads = (grad if ctx.identity else masked(grad, saved[0]), None, None)
        return *grads, None, None, None, None, None, None, None


class _SmallLSQ(torch.autograd.Function):
    r""":class:`_FakeQuantize` for the common LSQ call in plain eager mode: a scale (and
    zero point) that learns, on fewer than 65,536 elements (:func:`_eager_route`).

    The same values bit for bit. Forward makes ``y``, the in-range mask and the partials
    :math:`\partial y/\partial s` (and :math:`\partial y/\partial z`) from one
    :math:`x/s` (:func:`_quantized_with_partials`) and saves them, not ``x``; backward is
    the masked gradient and the partials' sums (:func:`_lsq_backward_from_partials`).
    Four arguments instead of ten and none of the general Function's branches: at 4,096
    elements a training step's call (per-tensor scale) takes 45-46 µs against 54-55 for the
    general Function, where torch's fused learnable kernel takes 46-47.

    ``plan``: ``(bounds, unrounded, identity, grad_scale, step_bounds)``; with
    ``step_bounds`` the scale is the raw learned one (:func:`_step`)."""

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, scale: Tensor, zero_point: Tensor | None, plan: tuple[Any, ...]
    ) -> Tensor:
        bounds, unrounded, identity, grad_scale, step_bounds = plan
        step = _step(scale, step_bounds, _compute_dtype(x.dtype))
        needs = ctx.needs_input_grad
        y, keep, partial, partial_z = _quantized_with_partials(
            x, step, torch.reciprocal(step), zero_point, bounds, unrounded, (needs[1], needs[2])
        )
        factor = _lsq_factor(scale, step, grad_scale, step_bounds)
        tensor_factor = isinstance(factor, Tensor)  # (then with the scale's sign in it)
        ctx.identity, ctx.grad_scale = identity, grad_scale
        ctx.shapes = (step.shape, None if zero_point is None else zero_point.shape)
        ctx.factor = None if tensor_factor else factor
        raw = scale if step_bounds is not None and not tensor_factor else None  # (sign applies)
        ctx.save_for_backward(keep, partial, partial_z, factor if tensor_factor else None, raw)
        return y

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        keep, partial, partial_z, factor, raw = ctx.saved_tensors
        factor = ctx.factor if factor is None else factor
        grads = _lsq_backward_from_partials(ctx, grad, keep, (partial, partial_z), raw, factor)
        return *grads, None


_SMALL_LSQ_APPLY = base_apply(_SmallLSQ)


#: The routes of :func:`_eager_route`.
_SMALL_LSQ, _UNRECORDED, _FIXED_SCALE = "small LSQ", "unrecorded", "fixed scale"


def _eager_route(x: Tensor, scale: Tensor, zero_point: Tensor | None) -> str | None:
    """Which lean path a call takes in plain eager mode, with no argument a tensor left
    over from an exited ``torch.func`` transform (``None``: :class:`_FakeQuantize`):

    * :data:`_UNRECORDED`: grad mode off (``no_grad``, ``inference_mode``: evaluation), so
      nothing is recorded and the values alone are computed (:func:`_values_alone`);
    * :data:`_SMALL_LSQ`: a scale or zero point that learns, on fewer than 65,536
      elements (:class:`_SmallLSQ`);
    * :data:`_FIXED_SCALE`: a scale that learns nothing and a zero point of 0, whose
      backward is the straight-through one alone (:func:`_fixed_scale_forward`)."""
    if not _plain_eager_call(x, scale, zero_point):
        return None
    if not torch.is_grad_enabled():
        return _UNRECORDED
    if scale.requires_grad or (zero_point is not None and zero_point.requires_grad):
        return _SMALL_LSQ if x.numel() < MASK_CONVERT_MIN_NUMEL else None
    return _FIXED_SCALE if zero_point is None else None


def _plain_eager_call(x: Tensor, scale: Tensor, zero_point: Tensor | None) -> bool:
    """Plain eager mode (:func:`plain_apply`) and no argument a tensor left over from an
    exited ``torch.func`` transform: where a call may skip :func:`apply_function`."""
    return (
        plain_apply()
        and not _is_wrapped(x)
        and not _is_wrapped(scale)
        and (zero_point is None or not _is_wrapped(zero_point))
    )


def _save_settings(
    ctx: Any,
    x: Tensor,
    identity: bool,
    grad_scale: float,
    unrounded: bool,
    step_bounds: tuple[float, float] | None,
    quant_min: int,
    quant_max: int,
) -> None:
    ctx.step_bounds = step_bounds
    ctx.compute_dtype = _compute_dtype(x.dtype)
    ctx.identity = identity
    ctx.grad_scale = grad_scale
    ctx.unrounded = unrounded
    ctx.bounds = (quant_min, quant_max)


def _lsq_backward_from_partials(
    ctx: Any,
    grad: Tensor,
    keep: Tensor,
    partials: tuple[Tensor | None, Tensor | None],
    raw: Tensor | None,
    factor: Tensor | float,
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    r"""The gradients of ``(x, scale, zero_point)`` from the mask and the partials
    :math:`(\partial y/\partial s, \partial y/\partial z)` that
    :func:`_quantized_with_partials` made in forward (none modified here: a retained
    graph's second backward reads them again); ``raw``: the bounded raw scale whose sign
    still applies (else None), ``ctx.shapes``: the scale's and the zero point's."""
    dy_ds, dy_dz = partials
    scale_shape, zero_shape = ctx.shapes
    grad_x = grad if ctx.identity else grad * keep
    grad_scale = grad_zero_point = None
    if dy_ds is not None:
        grad_scale = _times_factor(torch.mul(dy_ds, grad).sum_to_size(scale_shape), factor)
        if raw is not None:
            grad_scale = _step_sign(raw, grad_scale)
    if dy_dz is not None:
        summed = torch.mul(dy_dz, grad).sum_to_size(zero_shape)
        grad_zero_point = _times_factor(summed, ctx.grad_scale)
    return grad_x, grad_scale, grad_zero_point


def _times_factor(summed: Tensor, factor: Tensor | float) -> Tensor:
    """``summed * factor`` in place, skipped for a factor of exactly 1 (the same bits)."""
    if isinstance(factor, float):
        if factor == 1.0:
            return summed
        if eager_plain(summed):  # (a 0-d operand: no wrapped-scalar conversion)
            return summed.mul_(constant(factor, summed))
    return summed.mul_(factor)


def _lsq_factor(
    raw: Tensor, step: Tensor, grad_scale: float, step_bounds: tuple[float, float] | None
) -> Tensor | float:
    r"""What the summed :math:`\sum \bar y\,\partial y/\partial s` is multiplied by in
    backward: :math:`g` (``grad_scale``), times :math:`\operatorname{sign}(s)` (1 at 0) for a
    bounded learned scale, as a tensor in the step's dtype made in forward; :math:`\pm g`
    rounds as :math:`g` does, so :math:`t\,(\pm g)` is :func:`_step_sign` of :math:`t\,g`
    bit for bit. (A raw scale in another dtype than the step keeps the two-step form.)"""
    if step_bounds is None or raw.dtype != step.dtype:
        return grad_scale
    if eager_plain(raw):  # (0-d operands: 1 µs less a kernel than Python numbers)
        negative = torch.lt(raw, constant(0.0, raw))  # (NaN: not negative, as in _step_sign)
        return torch.where(negative, constant(-grad_scale, raw), constant(grad_scale, raw))
    # (A tensor operand: Python numbers alone would make a tensor of the default dtype.)
    return torch.where(raw < 0, -grad_scale, torch.full_like(raw, grad_scale))


def _lsq_backward(
    ctx: Any,
    grad: Tensor,
    keep: Tensor | None,
    x: Tensor,
    raw: Tensor,
    zero_point: Tensor | None,
    step: Tensor,
    inverse: Tensor,
    factor: Tensor | float,
) -> tuple[Tensor | None, Tensor | None, Tensor | None]:
    """The gradients of ``(x, scale, zero_point)`` when a quantization parameter needs one,
    from what :class:`_FakeQuantize`'s forward saved (``factor``: :func:`_lsq_factor`).

    The mask and the partials are the surrogate Jacobian's entries, made without recording
    (:func:`_lsq_partials`): a backward that is itself differentiated
    (``create_graph=True``) is linear in ``grad`` with them as constants, as on the small
    path, whose forward made them. There the products are out of place; otherwise in
    place on the fresh partials (not under transforms: vmap batches ``grad``)."""
    signed_apart = ctx.step_bounds is not None and not isinstance(factor, Tensor)
    made_keep, dy_ds, dy_dz = without_grad(_lsq_partials, ctx, keep, x, zero_point, step, inverse)
    if keep is None:  # (the float 0/1 mask made with the partial, in eager mode)
        grad_x = grad if ctx.identity else grad * made_keep
        g = grad  # (its product with the float32 partial promotes: no cast needed)
    else:
        grad_x = grad if ctx.identity else masked(grad, keep)
        g = cast(grad, step.dtype)
    in_place = eager_plain(g) and not torch.is_grad_enabled()

    def weighted_sum(partial: Tensor, shape: torch.Size, by: Tensor | float) -> Tensor:
        if in_place:
            return _times_factor(partial.mul_(g).sum_to_size(shape), by)
        return (partial * g).sum_to_size(shape) * by

    grad_scale = grad_zero_point = None
    if dy_dz is None or ctx.needs_input_grad[1]:
        grad_scale = weighted_sum(dy_ds, step.shape, factor)
    if dy_dz is not None and zero_point is not None and ctx.needs_input_grad[2]:
        grad_zero_point = weighted_sum(dy_dz, zero_point.shape, ctx.grad_scale)
    if signed_apart and grad_scale is not None:
        grad_scale = _step_sign(raw, grad_scale)
    return grad_x, grad_scale, grad_zero_point


def _lsq_partials(
    ctx: Any,
    keep: Tensor | None,
    x: Tensor,
    zero_point: Tensor | None,
    step: Tensor,
    inverse: Tensor,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """``(in-range mask, dy/ds, dy/dz)`` for :func:`_lsq_backward` (``dy/dz`` None without a
    zero point): with ``keep`` None the mask comes with the scale's partial (LSQ in eager
    mode), else ``keep`` itself; a zero point's partials by arithmetic in eager mode
    (:func:`_affine_partials`), by ``torch.where`` elsewhere (:func:`_qparam_partials`)."""
    if keep is None:
        dy_ds, made_keep = _scale_partial_and_mask(ctx.bounds, ctx.unrounded, x, inverse)
        return made_keep, dy_ds, None
    if zero_point is None:
        return keep, _scale_partial(ctx.bounds, keep, x, inverse), None
    if eager_plain(x):
        _, dy_ds, dy_dz, _ = _affine_partials(
            x, inverse, step, zero_point, ctx.bounds, ctx.unrounded
        )
    else:
        dy_ds, dy_dz = _qparam_partials(ctx, keep, x, step, zero_point)
    return keep, dy_ds, dy_dz


def _mask_in_forward(x: Tensor, scale: Tensor, zero_point: Tensor | None, identity: bool) -> bool:
    """Whether :class:`_FakeQuantize`'s forward computes the in-range mask.

    In plain eager mode with a zero point of 0 it does not where nothing would read it: no
    graph is recorded (grad mode off, or neither ``x`` nor the scale requires grad), the
    identity surrogate without a scale gradient, or a scale that requires grad, whose
    backward recomputes the mask from ``x`` while it reads :math:`x/s` anyway
    (:func:`_scale_partial_and_mask`). That takes two of the forward's five passes (and
    the saved mask) away from LSQ's training step. Elsewhere (``torch.compile``,
    ``torch.func``, forward mode, a zero point) the forward computes it as always."""
    if zero_point is not None or not plain_apply():
        return True
    if not torch.is_grad_enabled() or scale.requires_grad:
        return False
    return x.requires_grad and not identity


def _qparam_partials(
    ctx: Any, keep: Tensor, x: Tensor, scale: Tensor, zero_point: Tensor | None
) -> tuple[Tensor, Tensor]:
    r"""Elementwise :math:`(\partial y/\partial s, \partial y/\partial z)` of LSQ.

    Outside the range :math:`y = (q_\pm - z)\,s`; inside :math:`y = \operatorname{round}(x/s)\,s`
    with the rounding treated as the identity: :math:`\partial y/\partial s =
    \operatorname{round}(x/s) - x/s`, :math:`\partial y/\partial z = 0`. The side of the range
    is read from what decides "in range": the level, or :math:`x/s + z` before rounding. A NaN
    ``x`` gives a NaN :math:`\partial y/\partial s` (as torch's learnable kernels do).
    """
    quant_min, quant_max = ctx.bounds
    keep = mask_condition(keep)
    x_over_s = x.to(scale.dtype) * (1.0 / scale)
    rounded = torch.round(x_over_s)
    offset = 0 if zero_point is None else zero_point
    side = x_over_s + offset if ctx.unrounded else rounded + offset
    # Outside the range (keep unset): below, above, or NaN (then ``side`` itself).
    above = torch.where(side > quant_max, quant_max - offset, side)
    saturated = torch.where(side < quant_min, quant_min - offset, above)
    dy_ds = torch.where(keep, rounded - x_over_s, saturated)
    dy_dz = torch.where(keep, 0, -scale)
    return dy_ds, dy_dz


@forward_mode(_FakeQuantize)
@cached_signature
class _FakeQuantizeJVP(torch.autograd.Function):
    r""":class:`_FakeQuantize` in the ``setup_context`` form ``torch.func`` needs (the mask a
    second, non-differentiable output; backward recomputes the step size), with its
    forward-mode rule, the transpose of its backward:
    :math:`\dot y = m\,\dot x + g\,(\partial_s y\,\dot s + \partial_z y\,\dot z)` with the
    in-range mask :math:`m` (1 everywhere for the identity surrogate) and the LSQ factor
    :math:`g` (``grad_scale``), so that ``jacfwd`` equals ``jacrev``."""

    generate_vmap_rule = True

    @staticmethod
    def forward(  # (the arguments of _FakeQuantize.forward; the mask is always computed)
        x: Tensor, scale: Tensor, zero_point: Tensor | None, *settings: Any
    ) -> tuple[Tensor, Tensor]:
        quant_min, quant_max, _identity, _grad_scale, unrounded, step_bounds = settings[:6]
        step = _step(scale, step_bounds, _compute_dtype(x.dtype))
        inverse = torch.reciprocal(step)  # (what 1.0 / step computes)
        y, keep = _fake_quantize(x, step, inverse, zero_point, quant_min, quant_max, unrounded)
        return y, storable_mask(keep)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        x, scale, zero_point, quant_min, quant_max, identity, grad_scale, unrounded = inputs[:8]
        keep = output[1]
        mark_non_differentiable(ctx, keep)
        _save_settings(ctx, x, identity, grad_scale, unrounded, inputs[8], quant_min, quant_max)
        ctx.save_for_backward(keep, x, scale, zero_point)
        ctx.save_for_forward(keep, x, scale, zero_point)

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _grad_keep: Any) -> tuple[Tensor | None, ...]:
        keep, x, raw, zero_point = ctx.saved_tensors
        if ctx.needs_input_grad[1] or ctx.needs_input_grad[2]:
            step = _step(raw, ctx.step_bounds, ctx.compute_dtype)
            inverse = torch.reciprocal(step)
            grads = _lsq_backward(
                ctx, grad, keep, x, raw, zero_point, step, inverse, ctx.grad_scale
            )
        else:
            grads = (grad if ctx.identity else masked(grad, keep), None, None)
        return *grads, None, None, None, None, None, None, None

    @staticmethod
    def jvp(
        ctx: Any,
        x_dot: Tensor | None,
        scale_dot: Tensor | None,
        zero_dot: Tensor | None,
        *_settings: Any,
    ) -> tuple[Tensor, None]:
        keep, x, raw, zero_point = ctx.saved_tensors
        scale = _step(raw, ctx.step_bounds, ctx.compute_dtype)
        if scale_dot is not None and ctx.step_bounds is not None:
            scale_dot = _step_sign(raw, scale_dot).to(scale.dtype)
        y_dot = torch.zeros_like(x, dtype=scale.dtype)
        if x_dot is not None:
            y_dot = y_dot + (x_dot if ctx.identity else x_dot * keep).to(scale.dtype)
        if scale_dot is not None or zero_dot is not None:
            dy_ds, dy_dz = _qparam_partials(ctx, keep, x, scale, zero_point)
            if scale_dot is not None:
                y_dot = y_dot + dy_ds * scale_dot * ctx.grad_scale
            if zero_dot is not None:
                y_dot = y_dot + dy_dz * zero_dot * ctx.grad_scale
        return y_dot.to(x.dtype), None


def _qparam(value: Any, name: str, x: Tensor, dtype: torch.dtype) -> Tensor:
    if isinstance(value, Tensor):
        if value.is_complex() or value.dtype == torch.bool:
            raise TypeError(f"Expected `{name}` to be a real tensor, but found dtype={value.dtype}")
        check_broadcastable_to(value, x.shape, name)
        return value.to(dtype)
    return torch.tensor(check_real(value, name), dtype=dtype, device=x.device)


#: Checked settings of number-scale calls (zero point 0), by :func:`_plan_key`: a repeated
#: call (an activation quantizer in a training loop) skips the argument checks and the
#: reciprocal, a third of its fixed cost at 4,096 elements. Cleared when full.
_NUMBER_PLANS: dict[tuple[Any, ...], tuple[bool, Any]] = {}
_MAX_PLANS = 256
_NUMBER_TYPES = (int, float)


def _plan_key(
    x: Any,
    scale: Any,
    zero_point: Any,
    quant_min: Any,
    quant_max: Any,
    surrogate: Any,
    grad_scale: Any,
    in_range: Any,
) -> tuple[Any, ...] | None:
    """The cache key of a number-scale call whose plan may be reused, or ``None``: plain
    ``int`` and ``float`` settings only (the exact types are part of the key, so ``True``
    never passes for ``1``) and :func:`_settings_key`'s conditions."""
    if type(scale) not in _NUMBER_TYPES or type(zero_point) not in _NUMBER_TYPES:
        return None
    settings = _settings_key(x, quant_min, quant_max, surrogate, grad_scale, in_range)
    if settings is None:
        return None
    # (x's device: the plan holds 0-d tensors on it)
    return (x.dtype, x.device, type(scale), scale, type(zero_point), zero_point, *settings)


def _settings_key(
    x: Any, quant_min: Any, quant_max: Any, surrogate: Any, grad_scale: Any, in_range: Any
) -> tuple[Any, ...] | None:
    """The part of a cache key shared by number- and tensor-scale calls, or ``None``:
    ``int`` bounds, a surrogate and ``in_range`` named by string, a number (or no)
    ``grad_scale`` with its type, a tensor ``x``, eager mode (under ``torch.compile`` the
    reciprocal must stay a tensor)."""
    if (
        type(quant_min) is not int
        or type(quant_max) is not int
        or type(surrogate) is not str
        or type(in_range) is not str
        or not (grad_scale is None or type(grad_scale) in _NUMBER_TYPES)
        or not isinstance(x, Tensor)
        or torch.compiler.is_compiling()
    ):
        return None
    return (quant_min, quant_max, surrogate, type(grad_scale), grad_scale, in_range)


#: Checked settings of tensor-scale calls with a zero point of 0 (LSQ), by
#: :func:`_tensor_plan_key`: ``(identity, grad factor, unrounded, compute dtype)``. A
#: repeated call skips the argument checks (not the scan of the scale's values).
_TENSOR_PLANS: dict[tuple[Any, ...], tuple[bool, float, bool, torch.dtype]] = {}


def _tensor_plan_key(
    x: Any,
    scale: Any,
    zero_point: Any,
    quant_min: Any,
    quant_max: Any,
    surrogate: Any,
    grad_scale: Any,
    in_range: Any,
) -> tuple[Any, ...] | None:
    """The cache key of a tensor-scale call whose checked settings may be reused, or
    ``None``: tensors ``x``, ``scale`` and (or a number 0) ``zero_point``, their shapes
    and dtypes in the key (what the checks read: not the devices), and the other settings
    as in :func:`_plan_key`."""
    if isinstance(zero_point, Tensor):
        zero_key: Any = (zero_point.shape, zero_point.dtype)
    elif type(zero_point) in _NUMBER_TYPES and zero_point == 0:
        zero_key = type(zero_point)
    else:
        return None
    if not isinstance(scale, Tensor):
        return None
    settings = _settings_key(x, quant_min, quant_max, surrogate, grad_scale, in_range)
    if settings is None:
        return None
    return (x.shape, x.dtype, scale.shape, scale.dtype, zero_key, settings)


def _apply_tensor_plan(
    x: Tensor,
    scale: Tensor,
    zero_point: Tensor | float,
    quant_min: int,
    quant_max: int,
    settings: tuple[bool, float, bool, torch.dtype],
) -> Tensor:
    """:func:`quantize` with a tensor scale and a tensor zero point or 0, its arguments
    checked (``settings``: what :data:`_TENSOR_PLANS` holds)."""
    identity, factor, unrounded, dtype = settings
    scale_t = cast(scale, dtype)
    zero_point_t = cast(zero_point, dtype) if isinstance(zero_point, Tensor) else None
    bounds = (quant_min, quant_max)
    return _scanned_fake_quantize(x, scale_t, zero_point_t, bounds, identity, factor, unrounded)


def _scanned_fake_quantize(
    x: Tensor,
    scale: Tensor,
    zero_point: Tensor | None,
    bounds: tuple[int, int],
    identity: bool,
    factor: float,
    unrounded: bool,
) -> Tensor:
    """The tensor-scale fake quantization, the scale and zero point (in the compute dtype)
    scanned first while validation is on (:func:`_check_tensor_grid`)."""
    quant_min, quant_max = bounds
    route = _eager_route(x, scale, zero_point)
    if route is None:
        if value_checks_apply(scale):
            _check_tensor_grid(scale, zero_point, quant_min, quant_max, x.dtype, scale.dtype)
    elif validation_enabled():  # (in plain eager mode: what value_checks_apply asks too)
        _check_tensor_grid(scale, zero_point, quant_min, quant_max, x.dtype, scale.dtype)
    if route is _SMALL_LSQ:
        plan = (bounds, unrounded, identity, factor, None)
        return _SMALL_LSQ_APPLY(x, scale, zero_point, plan)
    if route is _UNRECORDED:
        return _values_alone(x, scale, zero_point, bounds, unrounded, None)
    if route is _FIXED_SCALE:
        forward = functools.partial(_fixed_scale_forward, scale, bounds, unrounded, not identity)
        return _apply_plan(x, (identity, forward))
    return _apply_fake_quantize(
        x,
        scale,
        zero_point,
        quant_min,
        quant_max,
        identity,
        factor,
        unrounded,
        None,
        _mask_in_forward(x, scale, zero_point, identity),
    )


def _fixed_scale_forward(
    step: Tensor, bounds: tuple[int, int], unrounded: bool, masked: bool, x: Tensor
) -> Any:
    """The forward of :class:`_FakeQuantize` for a fixed tensor step (in the compute
    dtype) and a zero point of 0, bit for bit: ``(y, in_range)``, or ``y`` alone for the
    identity surrogate (``masked=False``). A single step on the CPU is read once and
    used as a number scale is (:func:`_number_scale_grid`: two kernels fewer). PACT's
    quantizer, a step made from a detached learned clipping level each call
    (``alpha.detach() / n``): 64 x 256 activations, forward and backward, 0.85-0.89x the
    general Function's time (interleaved rounds)."""
    inverse = torch.reciprocal(step)
    if step.is_cpu and step.numel() == 1:
        zero = constant(0.0, inverse)
        return _number_scale_grid(x, step.item(), inverse, zero, bounds, unrounded, masked)
    if masked:
        return _fake_quantize(x, step, inverse, None, *bounds, unrounded)
    return _quantized_values(x, step, inverse, *bounds)


def _values_alone(
    x: Tensor,
    scale: Tensor,
    zero_point: Tensor | None,
    bounds: tuple[int, int],
    unrounded: bool,
    step_bounds: tuple[float, float] | None,
) -> Tensor:
    """The forward's ``y`` alone, as :class:`_FakeQuantize` computes it, for a call that
    records nothing (:func:`_eager_route`): no Function and no mask (an evaluation call
    of a learned per-tensor quantizer on 4,096 elements: 16.5 -> 12.8 µs)."""
    step = _step(scale, step_bounds, _compute_dtype(x.dtype))
    inverse = torch.reciprocal(step)
    if zero_point is None:
        return _quantized_values(x, step, inverse, *bounds)
    return _fake_quantize(x, step, inverse, zero_point, *bounds, unrounded)[0]


def _apply_plan(x: Tensor, plan: tuple[bool, Any]) -> Tensor:
    identity, forward = plan
    if identity:
        return apply_identity(x, forward)
    y = apply_masked(x, forward)
    return y


def quantize(
    x: Tensor,
    scale: float | Tensor,
    zero_point: float | Tensor = 0,
    *,
    quant_min: int = -128,
    quant_max: int = 127,
    surrogate: str | _surrogates.Surrogate = "masked",
    grad_scale: float | None = None,
    in_range: str = "rounded",
) -> Tensor:
    r"""Fake quantization (quantize then dequantize) with STE and LSQ gradients.

    Forward, with :math:`s` = ``scale``, :math:`z` = ``zero_point`` and
    :math:`[q_-, q_+]` = ``[quant_min, quant_max]``:

    .. math::

        q = \operatorname{round}(x / s) + z, \qquad
        y = \big(\operatorname{clamp}(q, q_-, q_+) - z\big)\, s,

    bit-identical to :func:`torch.fake_quantize_per_tensor_affine` (float32, per-tensor
    scale, integral zero point): like it, :math:`x/s` is computed as :math:`x \cdot (1/s)`
    and ties round to even. float16/bfloat16 inputs are quantized in float32 and the result
    cast back. The grid must fit ``x``'s dtype: a scale whose outermost level
    :math:`(q_\pm - z)\,s` would be infinite in it (e.g. float16 with
    :math:`128\,s > 65504`) raises ``ValueError`` (for tensor scales when validation is on,
    :func:`hardgrad.set_validation`; with it off such a grid overflows to
    :math:`\pm\infty`, as torch's kernel does in float32); :class:`hardgrad.nn.Quantize`
    bounds its step size so that this cannot happen. NaN inputs give NaN (torch's kernel maps them to a bound).

    Backward for ``x``: ``"masked"`` (default) passes the gradient where the element is
    *in range* and zeroes it where it saturates (the STE of Jacob et al. 2018,
    https://arxiv.org/abs/1712.05877); ``"identity"`` passes it everywhere. What decides
    "in range" is ``in_range``:

    * ``"rounded"`` (default): the integer level, :math:`q_- \le q \le q_+` with
      :math:`q = \operatorname{round}(x/s) + z`; PyTorch's convention
      (:func:`torch.fake_quantize_per_tensor_affine` and its learnable variants);
    * ``"unrounded"``: the scaled value before rounding, :math:`q_- \le x/s + z \le q_+`;
      the convention of the LSQ paper (Esser et al. 2020, eq. 3, there with strict
      inequalities, which differ only on the measure-zero boundary) and of the common LSQ
      code ``round_pass(clamp(x / s, -Q_N, Q_P)) * s``.

    The two differ only in the half-step band at each end of the range,
    :math:`x/s + z \in [q_+, q_+ + \tfrac12)` and :math:`(q_- - \tfrac12, q_-)`, where the
    level rounds back into range: ``"rounded"`` treats those elements as inside (input
    gradient 1, scale gradient :math:`\operatorname{round}(x/s) - x/s`), ``"unrounded"`` as
    saturated (input gradient 0, scale gradient :math:`q_\pm - z`). The forward is the
    same. A mask (1 byte per element; in ``x``'s dtype below 65,536 elements in eager
    mode, where that is faster) is all that is saved unless the quantization parameters
    need gradients (nothing for ``"identity"`` with a number scale). Then ``x`` is saved
    too, and in eager mode with a zero point of 0 (LSQ) the backward recomputes the mask
    from it instead: ``x`` and the scale are all that is kept. Below 65,536 elements in
    eager mode the forward makes the mask and the partials :math:`\partial y/\partial s`
    (:math:`\partial y/\partial z`) from its own :math:`x/s` and keeps those instead of
    ``x``, in a leaner Function (``grad_fn`` ``_SmallLSQBackward``): the same values. As for
    :func:`hardgrad.clamp`, the mask multiplies the incoming gradient: a non-finite
    incoming gradient at a saturated entry gives NaN rather than 0.

    Backward for ``scale`` and ``zero_point`` when they are tensors that require grad: the
    LSQ gradients of Esser et al. (2020), https://arxiv.org/abs/1902.08153, extended to
    the zero point as in LSQ+ (Bhalgat et al. 2020, https://arxiv.org/abs/2004.09576),
    multiplied by ``grad_scale``:

    .. math::

        \frac{\partial y}{\partial s} = \begin{cases}
            \operatorname{round}(x/s) - x/s & \text{in range} \\
            q_- - z & \text{below} \\ q_+ - z & \text{above} \end{cases}, \qquad
        \frac{\partial y}{\partial z} = \begin{cases}
            0 & \text{in range} \\ -s & \text{otherwise} \end{cases}

    ("below"/"above" read from the same quantity as "in range": :math:`q`, or
    :math:`x/s + z` with ``in_range="unrounded"``), summed over the elements that share a
    scale. A ``scale`` (or ``zero_point``) whose shape
    broadcasts to ``x`` gives per-channel quantization, e.g. shape ``(C, 1)`` for rows.
    ``zero_point`` is used as given: an integral value is standard affine quantization; a
    non-integral (learned) one moves the clamping range while the grid stays :math:`s\mathbb Z`.

    Args:
        x: floating-point tensor, dense (sparse and nested tensors raise ``TypeError``);
            on the meta device shapes and dtypes propagate and no value is checked.
        scale: positive number (Python or NumPy, a 0-d array included), or positive
            floating tensor broadcastable to ``x``; a
            normal number of the dtype ``x`` is quantized in (float32 for float32 and half
            inputs, float64 for float64), so that :math:`1/s` and :math:`x/s` are finite.
        zero_point: finite number or tensor broadcastable to ``x`` (a tensor's values
            are checked while validation is on).
        quant_min, quant_max: integer range, ``quant_min < quant_max``, each within
            :math:`\pm 2^{24}` (:math:`\pm 2^{53}` for float64 inputs), so that every level
            is exact in the dtype ``x`` is quantized in.
        surrogate: ``"masked"`` or ``"identity"``. After a clamp to the grid's range
            (PACT: ``hg.clamp(x, 0, alpha)`` then ``quantize`` with ``scale = alpha / q_+``,
            ``quant_min=0``) every element is in range, so ``"identity"`` gives the same
            gradient without computing and saving the mask (64 x 256 activations, forward
            and backward: 115 -> 85 µs).
        grad_scale: factor for the scale and zero-point gradients; ``None`` means 1.
            LSQ recommends :math:`1/\sqrt{N q_+}` for :math:`N` elements per scale
            (:class:`hardgrad.nn.Quantize` uses that).
        in_range: ``"rounded"`` (default) or ``"unrounded"``: what decides whether an
            element is in range for the backward (above). The forward is the same.

    Example:
        >>> import torch, hardgrad as hg
        >>> x = torch.tensor([-1.0, 0.26, 0.5, 3.0], requires_grad=True)
        >>> scale = torch.tensor(0.1, requires_grad=True)
        >>> y = hg.quantize(x, scale, quant_min=-8, quant_max=7)
        >>> y
        tensor([-0.8000,  0.3000,  0.5000,  0.7000], grad_fn=<_SmallLSQBackward>)
        >>> y.sum().backward()
        >>> x.grad, scale.grad
        (tensor([0., 1., 1., 0.]), tensor(-0.6000))
    """
    if isinstance(x, Tensor) and (x.layout is not torch.strided or x.is_nested):
        check_dense(x, "x")  # (before the keys: a nested tensor has no shape to read)
    plan_key = _plan_key(
        x, scale, zero_point, quant_min, quant_max, surrogate, grad_scale, in_range
    )
    plan = _NUMBER_PLANS.get(plan_key) if plan_key is not None else None
    if plan is not None:  # the same settings as an earlier call, checked then
        return _apply_plan(x, plan)
    tensor_key = _tensor_plan_key(
        x, scale, zero_point, quant_min, quant_max, surrogate, grad_scale, in_range
    )
    settings = _TENSOR_PLANS.get(tensor_key) if tensor_key is not None else None
    if settings is not None:  # (tensor_key: scale is a tensor; quant_min, quant_max ints)
        return _apply_tensor_plan(x, scale, zero_point, quant_min, quant_max, settings)  # type: ignore[arg-type]
    check_floating(x, "x")
    scale, zero_point = as_number(scale), as_number(zero_point)
    quant_min, quant_max = as_number(quant_min), as_number(quant_max)
    unrounded = _check_in_range(in_range)
    chosen = _surrogates.resolve(surrogate, family="clamp", op="quantize")
    if chosen.kind not in ("identity", "indicator"):
        raise ValueError(
            f"Surrogate {chosen!r} cannot be used with `quantize`; use 'masked' or 'identity'"
        )
    dtype = _compute_dtype(x.dtype)
    # Every level must be an integer the compute dtype holds exactly (2**24 in float32).
    exact = 2 * round(1 / torch.finfo(dtype).eps)
    quant_min = check_int(quant_min, "quant_min", low=-exact, high=exact)
    quant_max = check_int(quant_max, "quant_max", low=-exact, high=exact)
    if quant_min >= quant_max:
        raise ValueError(
            f"Expected `quant_min` < `quant_max`, but found quant_min={quant_min}, "
            f"quant_max={quant_max}"
        )
    factor = 1.0 if grad_scale is None else check_positive(as_number(grad_scale), "grad_scale")
    if isinstance(scale, Tensor):
        check_floating(scale, "scale")
    elif isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise TypeError(
            "Expected `scale` to be a positive number or a floating-point tensor, "
            f"but found {type(scale).__name__}"
        )
    else:
        # A scale outside the compute dtype's normal range would round to 0 or inf there.
        check_normal(check_positive(scale, "scale"), "scale", dtype)
    if not isinstance(zero_point, Tensor):
        check_finite_number(check_real(zero_point, "zero_point"), "zero_point")
    zero_point_t = (
        None
        if not isinstance(zero_point, Tensor) and zero_point == 0
        else _qparam(zero_point, "zero_point", x, dtype)
    )
    identity = chosen.kind == "identity"
    if not isinstance(scale, Tensor) and not isinstance(zero_point, Tensor):
        _check_grid_fits(float(scale), float(zero_point), quant_min, quant_max, x.dtype, dtype)
    if not isinstance(scale, Tensor) and zero_point_t is None:
        # Number scale, zero point 0: nothing to learn, so Python numbers all the way (no
        # small tensors to make per call) and only the mask (or, for the identity, nothing)
        # is saved.
        value, inverse = float(scale), _reciprocal(float(scale), dtype, x.device)
        forward = _NumberScale(
            value, inverse, quant_min, quant_max, unrounded, masked=not identity, x=x
        )
        plan = (identity, forward)
        if plan_key is not None:
            remember(_NUMBER_PLANS, plan_key, plan, _MAX_PLANS)
        return _apply_plan(x, plan)
    if tensor_key is not None:
        checked = (identity, factor, unrounded, dtype)
        _qparam(scale, "scale", x, dtype)  # (the checks, before anything is kept)
        remember(_TENSOR_PLANS, tensor_key, checked, _MAX_PLANS)
        return _apply_tensor_plan(x, scale, zero_point, quant_min, quant_max, checked)  # type: ignore[arg-type]
    scale_t = _qparam(scale, "scale", x, dtype)
    bounds = (quant_min, quant_max)
    return _scanned_fake_quantize(x, scale_t, zero_point_t, bounds, identity, factor, unrounded)


def _apply_fake_quantize(x: Tensor, *args: Any) -> Tensor:
    """``y`` of :class:`_FakeQuantize` (or of its twin, which also returns the mask)."""
    out = apply_function(_FakeQuantize, x, *args)
    if isinstance(out, Tensor):
        return out
    y: Tensor = out[0]
    return y


def quantize_step_size(
    x: Tensor,
    step: Tensor,
    *,
    quant_min: int,
    quant_max: int,
    identity: bool,
    grad_scale: float,
    unrounded: bool,
    step_bounds: tuple[float, float] | None = None,
) -> Tensor:
    r""":func:`quantize` with a zero point of 0 and a tensor ``step`` already known to be a
    positive normal number of the compute dtype whose grid fits ``x``'s dtype (what
    :class:`hardgrad.nn.Quantize` guarantees by bounding its step size): the same Function,
    without the value checks and their device sync. The caller checks ``x`` and the range.

    With ``step_bounds=(low, high)``, ``step`` is the raw learned scale :math:`s` and the
    step size is :math:`\min(\max(|s|, low), high)`, with the gradient
    :math:`\operatorname{sign}(s)` (1 at 0) straight through the bounds, in the same
    Function: :class:`hardgrad.nn.Quantize`'s forward is then one autograd node."""
    check_broadcastable_to(step, x.shape, "scale")
    scale = step if step_bounds is not None else cast(step, _compute_dtype(x.dtype))
    route = _eager_route(x, scale, None)
    if route is _SMALL_LSQ:
        plan = ((quant_min, quant_max), unrounded, identity, grad_scale, step_bounds)
        return _SMALL_LSQ_APPLY(x, scale, None, plan)
    if route is _UNRECORDED:
        return _values_alone(x, scale, None, (quant_min, quant_max), unrounded, step_bounds)
    return _apply_fake_quantize(
        x,
        scale,
        None,
        quant_min,
        quant_max,
        identity,
        grad_scale,
        unrounded,
        step_bounds,
        _mask_in_forward(x, scale, None, identity),
    )
