"""Which path a fake quantization call takes (:func:`_eager_route`): in plain eager mode
the lean ones (values alone, the small LSQ Function, a fixed scale's straight-through
ops), elsewhere :class:`~hardgrad.ops._quantize_functions._FakeQuantize`."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import Tensor

from .._core.kernels import constant
from .._core.validation import validation_enabled, value_checks_apply
from ._autograd import (
    MASK_CONVERT_MIN_NUMEL,
    _is_wrapped,
    apply_function,
    apply_identity,
    apply_masked,
    plain_apply,
)
from ._quantize_checks import _check_tensor_grid
from ._quantize_functions import _SMALL_LSQ_APPLY, _FakeQuantize
from ._quantize_grid import (
    _compute_dtype,
    _fake_quantize,
    _number_scale_grid,
    _quantized_values,
    _step,
)

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


def _apply_fake_quantize(x: Tensor, *args: Any) -> Tensor:
    """``y`` of :class:`_FakeQuantize` (or of its twin, which also returns the mask)."""
    out = apply_function(_FakeQuantize, x, *args)
    if isinstance(out, Tensor):
        return out
    y: Tensor = out[0]
    return y
