r"""The autograd Functions of fake quantization: :class:`_FakeQuantize` (the general one),
:class:`_SmallLSQ` (a learned scale on a small tensor in eager mode) and
:class:`_FakeQuantizeJVP` (``torch.func`` and forward mode), with the LSQ backward they
share: the masked straight-through gradient of ``x`` and the summed partials of the scale
and zero point (Esser et al. 2020, https://arxiv.org/abs/1902.08153; Bhalgat et al. 2020,
https://arxiv.org/abs/2004.09576)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._core.kernels import cast, constant, eager_plain, mask_condition, storable_mask, without_grad
from ._autograd import base_apply, cached_signature, forward_mode, mark_non_differentiable, masked
from ._quantize_grid import (
    _affine_partials,
    _compute_dtype,
    _fake_quantize,
    _quantized_values,
    _quantized_with_partials,
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
