r"""The learned step size of :class:`~hardgrad.nn.Quantize` (LSQ, Esser et al. 2020,
https://arxiv.org/abs/1902.08153): its bounds for each dtype and the autograd Function that
applies them, :math:`\hat s = \min(\max(|s|, s_{\min}), s_{\max})`, with the straight-through
gradient :math:`\operatorname{sign}(s)`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._core.kernels import opmath_dtype
from ..ops._autograd import cached_signature, forward_mode


def _compute_step_bounds(
    dtype: torch.dtype, stored: torch.dtype, levels: int
) -> tuple[float, float]:
    """``(s_min, s_max)`` of :class:`Quantize` for inputs of ``dtype``, a scale stored in
    ``stored`` and a grid reaching ``levels`` steps from 0."""
    compute = torch.finfo(opmath_dtype(dtype))
    kept = torch.finfo(stored)
    high = torch.finfo(dtype).max / levels * (1 - compute.eps)
    return max(compute.tiny, kept.tiny), min(high, kept.max)


_STEP_BOUNDS: dict[tuple[torch.dtype, torch.dtype, int], tuple[float, float]] = {}


def _step_bounds(dtype: torch.dtype, stored: torch.dtype, levels: int) -> tuple[float, float]:
    """:func:`_compute_step_bounds`, cached in eager mode (``finfo`` lookups cost more than
    the scalar arithmetic they feed; Dynamo folds them to constants anyway)."""
    if torch.compiler.is_compiling():
        return _compute_step_bounds(dtype, stored, levels)
    key = (dtype, stored, levels)
    bounds = _STEP_BOUNDS.get(key)
    if bounds is None:
        bounds = _STEP_BOUNDS[key] = _compute_step_bounds(dtype, stored, levels)
    return bounds


@cached_signature
class _StepSize(torch.autograd.Function):
    r""":math:`\hat s = \min(\max(|s|, s_{\min}), s_{\max})`; backward
    :math:`\operatorname{sign}(s)` with :math:`\operatorname{sign}(0) = 1`, straight through the
    bounds (see :class:`Quantize`)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(scale: Tensor, low: float, high: float) -> Tensor:
        return scale.abs().clamp(low, high)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        (scale,) = ctx.saved_tensors
        return torch.where(scale < 0, -grad, grad), None, None


@forward_mode(_StepSize)
@cached_signature
class _StepSizeJVP(_StepSize):
    """:class:`_StepSize` with its forward-mode rule: the tangent times sign(s)."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _StepSize.setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, _low: Any, _high: Any) -> Tensor:
        (scale,) = ctx.saved_tensors
        return torch.where(scale < 0, -tangent, tangent)
