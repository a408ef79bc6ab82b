r"""The fake-quantization grid's arithmetic: the values, the in-range mask and LSQ's partials.

Forward :math:`y = (\operatorname{clamp}(\operatorname{round}(x/s) + z, q_-, q_+) - z)\,s`
with :math:`x/s` computed as :math:`x \cdot (1/s)`, as PyTorch's fake-quantize kernels do
(:func:`torch.fake_quantize_per_tensor_affine`); the partials are those of LSQ (Esser et
al. 2020, https://arxiv.org/abs/1902.08153) and LSQ+ (Bhalgat et al. 2020,
https://arxiv.org/abs/2004.09576). Every path here gives the same values bit for bit: the
Functions of :mod:`hardgrad.ops._quantize` choose among them by mode and size.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._core.kernels import cast, constant, eager_plain, opmath_dtype, rounded_to
from ._autograd import float_mask, saved_mask

# Half types are quantized in float32 (then cast back): their own arithmetic would round
# ``x / scale`` before ``round`` sees it.
_compute_dtype = opmath_dtype


Scale = Tensor | float


def _reciprocal(scale: float, dtype: torch.dtype, device: torch.device) -> Scale:
    """``1 / scale`` rounded to ``dtype`` as torch's kernels compute it (``1.0f / sc`` in
    float32: the quotient of the float32-rounded scale, correctly rounded; computing it
    in double first is innocuous, double rounding of a quotient being exact).

    Under ``torch.compile`` the same roundings are done in tensor arithmetic and the
    result stays a 0-d tensor on ``device``: a float there may be symbolic
    (``dynamic=True``), with no bytes to pack, and ``.item()`` would break the graph."""
    if dtype == torch.float64:
        return 1.0 / scale
    if torch.compiler.is_compiling():
        return torch.reciprocal(torch.scalar_tensor(scale, dtype=torch.float32, device=device))
    return rounded_to(1.0 / rounded_to(scale, torch.float32), torch.float32)


def _grid(x: Tensor, inverse: Scale, zero_point: Tensor | None, dtype: torch.dtype) -> Tensor:
    """The unclamped integer level, ``round(x / scale) + zero_point``.

    ``x / scale`` is computed as ``x * (1 / scale)``, as PyTorch's fake-quantize kernels
    do, so that the result is bit-identical to theirs (ties land on the same side).
    ``zero_point=None`` stands for 0. Adding +0 turns the -0.0 that ``round`` gives small
    negative values into the +0.0 of torch's integer levels.
    """
    if not eager_plain(x):  # (out of place: see _fake_quantize)
        return torch.round(x.to(dtype) * inverse) + (0.0 if zero_point is None else zero_point)
    level = torch.mul(cast(x, dtype), inverse).round_()
    return level.add_(constant(0.0, level) if zero_point is None else zero_point)


def _fake_quantize(
    x: Tensor,
    scale: Scale,
    inverse: Scale,
    zero_point: Tensor | None,
    quant_min: int,
    quant_max: int,
    unrounded: bool = False,
) -> tuple[Tensor, Tensor]:
    """``(y, in_range)``; ``scale`` and ``inverse`` are both numbers or both tensors.

    ``in_range`` is decided on the rounded level (PyTorch's fake-quantize convention) or,
    with ``unrounded``, on :math:`x/s + z` before rounding (the LSQ paper's)."""
    plain = eager_plain(x)
    if unrounded and zero_point is None and plain:
        # x/s once, for the mask and (rounded in place) the level: 7 passes instead of 9.
        dtype = _compute_dtype(x.dtype)
        scaled = torch.mul(cast(x, dtype), inverse)
        keep = saved_mask(torch.eq, torch.clamp(scaled, quant_min, quant_max), scaled, x.dtype)
        y = scaled.round_().clamp_(quant_min, quant_max).mul_(scale)
        y = y.add_(constant(0.0, y))  # +0.0 for the -0.0 that round gives small negatives
        return cast(y, x.dtype), keep
    if unrounded:
        scaled = x.to(_compute_dtype(x.dtype)) * inverse
        if zero_point is not None:
            scaled = scaled + zero_point
        keep = (scaled >= quant_min) & (scaled <= quant_max)
    level = _grid(x, inverse, zero_point, _compute_dtype(x.dtype))
    clamped = torch.clamp(level, quant_min, quant_max)
    if not unrounded:
        keep = saved_mask(torch.eq, level, clamped, x.dtype)  # NaN: unset
    if not plain:
        # Out of place under torch.compile, and no ``.to`` of the same dtype (which
        # returns its receiver): torch 2.11's Dynamo drops the backward of an
        # autograd.Function whose output came from an in-place or ``out=`` kernel or such
        # a method, and the gradient comes out as 0 (torch 2.13 is fine; seen on CPU and
        # CUDA). Inductor fuses either form alike.
        if zero_point is not None:
            clamped = clamped - zero_point
        return cast(clamped * scale, x.dtype), keep
    if zero_point is not None:
        clamped.sub_(zero_point)
    y = clamped.mul_(scale)
    return cast(y, x.dtype), keep


def _fake_quantize_value(
    x: Tensor, scale: float, inverse: Scale, quant_min: int, quant_max: int
) -> Tensor:
    """Forward only (no mask), zero point 0, number scale."""
    level = _grid(x, inverse, None, _compute_dtype(x.dtype))
    if not eager_plain(x):  # (out of place under torch.compile: see _fake_quantize)
        return cast(torch.clamp(level, quant_min, quant_max) * scale, x.dtype)
    # clamp_min_/clamp_max_ rather than clamp_: vmap has batching rules for them only.
    return level.clamp_min_(quant_min).clamp_max_(quant_max).mul_(scale).to(x.dtype)


class _NumberScale:
    """The forward of a number-scale, zero-point-0 :func:`quantize` call (what a plan
    holds): ``(y, in_range)``, or ``y`` alone for the identity surrogate (``masked=False``).

    In plain eager mode it multiplies by ``1/scale`` as a 0-d tensor of the compute dtype
    and scales back with ``0 + scale * level`` (``torch.add`` with ``alpha``: one kernel that
    also turns the ``-0.0`` of small negative values into ``+0.0``). A Python number costs
    a wrapped-scalar conversion per kernel: at 4,096 elements this forward takes 9.6 µs
    where :func:`_fake_quantize` takes 15.7 (and torch's fused kernel 14.4). The values are
    the same bit for bit (one rounding of the same product). Under ``torch.compile`` and
    ``torch.func`` transforms it is :func:`_fake_quantize` (:func:`_fake_quantize_value`).
    """

    def __init__(
        self,
        scale: float,
        inverse: Scale,
        quant_min: int,
        quant_max: int,
        unrounded: bool,
        masked: bool,
        x: Tensor,
    ) -> None:
        self.scale, self.inverse = scale, inverse
        self.quant_min, self.quant_max = quant_min, quant_max
        self.unrounded, self.masked = unrounded, masked
        self.constants: tuple[Tensor, Tensor] | None = None
        if not torch.compiler.is_compiling():
            # Made outside inference mode: a plan may serve later calls that record autograd.
            with torch.inference_mode(False):
                dtype = _compute_dtype(x.dtype)
                self.constants = (
                    torch.tensor(inverse, dtype=dtype, device=x.device),
                    torch.zeros((), dtype=dtype, device=x.device),
                )

    def __call__(self, x: Tensor) -> Any:
        if self.constants is None or not eager_plain(x):
            if not self.masked:
                return _fake_quantize_value(
                    x, self.scale, self.inverse, self.quant_min, self.quant_max
                )
            return _fake_quantize(
                x, self.scale, self.inverse, None, self.quant_min, self.quant_max, self.unrounded
            )
        inverse, zero = self.constants
        bounds = (self.quant_min, self.quant_max)
        return _number_scale_grid(x, self.scale, inverse, zero, bounds, self.unrounded, self.masked)


def _number_scale_grid(
    x: Tensor,
    scale: float,
    inverse: Tensor,
    zero: Tensor,
    bounds: tuple[int, int],
    unrounded: bool,
    masked: bool,
) -> Any:
    """:class:`_NumberScale`'s forward in plain eager mode: ``inverse`` (:math:`1/s`) and
    ``zero`` are 0-d tensors of the compute dtype, ``scale`` the step as a Python number
    (the same value), so that ``0 + s * level`` is one kernel; ``(y, in_range)``, or ``y``
    alone when not ``masked``."""
    low, high = bounds
    scaled = torch.mul(cast(x, inverse.dtype), inverse)
    keep = None
    if masked and unrounded:  # decided before rounding (NaN: unset)
        keep = saved_mask(torch.eq, torch.clamp(scaled, low, high), scaled, x.dtype)
    level = scaled.round_()
    if masked and not unrounded:
        clamped = torch.clamp(level, low, high)
        keep = saved_mask(torch.eq, level, clamped, x.dtype)
    else:
        clamped = level.clamp_(low, high)
    y = torch.add(zero, clamped, alpha=scale, out=clamped)
    y = cast(y, x.dtype)
    return y if keep is None else (y, keep)


def _step(scale: Tensor, step_bounds: tuple[float, float] | None, dtype: torch.dtype) -> Tensor:
    r"""The step size the grid uses: ``scale`` itself, or with ``step_bounds`` the learned
    scale made positive and bounded, :math:`\min(\max(|s|, s_{\min}), s_{\max})` (in the
    scale's dtype, then cast to ``dtype``, the compute dtype)."""
    if step_bounds is not None:
        low, high = step_bounds
        scale = scale.abs()
        scale = scale.clamp_(low, high) if eager_plain(scale) else scale.clamp(low, high)
    return cast(scale, dtype)


def _step_sign(scale: Tensor, tangent: Tensor) -> Tensor:
    r"""``tangent`` times :math:`\operatorname{sign}(s)` with :math:`\operatorname{sign}(0) =
    1`: the derivative of :func:`_step`'s bounded step, straight through the bounds."""
    return torch.where(scale < 0, -tangent, tangent).to(scale.dtype)


def _quantized_values(
    x: Tensor, step: Tensor, inverse: Tensor, quant_min: int, quant_max: int
) -> Tensor:
    r""":math:`\operatorname{clamp}(\operatorname{round}(x/s), q_-, q_+)\,s` for a zero
    point of 0 in plain eager mode, as :func:`_fake_quantize` computes it but without the
    mask: adding +0 turns the ``-0.0`` that ``round`` gives small negative values into
    ``+0.0`` (``torch.addcmul`` would do both in one kernel, at 9 µs against 2.8 for
    the two on 16,384 floats)."""
    level = torch.mul(cast(x, inverse.dtype), inverse).round_().clamp_(quant_min, quant_max)
    y = level.mul_(step).add_(constant(0.0, level))
    return cast(y, x.dtype)


def _quantized_with_partials(
    x: Tensor,
    step: Tensor,
    inverse: Tensor,
    zero_point: Tensor | None,
    bounds: tuple[int, int],
    unrounded: bool,
    needs: tuple[bool, bool],
) -> tuple[Tensor, Tensor, Tensor | None, Tensor | None]:
    r"""``(y, in_range, dy/ds, dy/dz)`` in one go, in plain eager mode on a small ``x`` whose
    quantization parameters learn (``needs``: the scale's and the zero point's gradient):
    :func:`_fake_quantize`'s ``y`` and mask and the partials of :func:`_lsq_backward`, bit
    for bit, from one :math:`x/s`. Below 65,536 elements the kernels cost more than the
    tensors kept: LSQ (zero point 0) takes 9 kernels in forward and 4 in backward against
    5 and 13 (per-channel on 64 x 64, forward and backward: 57 -> 47 µs), a learned zero
    point 13 and 7 against 7 and 21, four of them ``torch.where`` (162 -> 70 µs with the
    checks that came with it).

    The mask is 0/1 in ``x``'s dtype; the partials are in the compute dtype."""
    if zero_point is None:
        y, keep, dy_ds = _quantized_with_scale_partial(x, step, inverse, bounds, unrounded)
        return y, keep, dy_ds, None
    keep, dy_ds, dy_dz, value = _affine_partials(
        x, inverse, step, zero_point, bounds, unrounded, with_value=True
    )
    assert value is not None
    return (
        cast(value, x.dtype),
        cast(keep, x.dtype),
        dy_ds if needs[0] else None,
        dy_dz if needs[1] else None,
    )


def _quantized_with_scale_partial(
    x: Tensor, step: Tensor, inverse: Tensor, bounds: tuple[int, int], unrounded: bool
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`_quantized_with_partials` for a zero point of 0: :func:`_quantized_values`'
    ``y`` and :func:`_scale_partial_and_mask`'s mask and partial, bit for bit."""
    wide, level, keep = _levels_and_mask(bounds, unrounded, x, inverse)
    if step.is_cpu and step.numel() == 1:  # 0 + s * level: one kernel (see _NumberScale)
        y = torch.add(constant(0.0, level), level, alpha=step.item())
    else:
        y = torch.mul(level, step).add_(constant(0.0, level))  # +0.0 for round's -0.0
    partial = level.addcmul_(wide, keep, value=-1)  # (wide * keep is exact: no FMA question)
    return cast(y, x.dtype), keep, partial


def _affine_partials(
    x: Tensor,
    inverse: Tensor,
    step: Tensor,
    zero_point: Tensor,
    bounds: tuple[int, int],
    unrounded: bool,
    with_value: bool = False,
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    r"""``(in_range, dy/ds, dy/dz, y)`` of a fake quantization with a zero point, in plain
    eager mode, in the compute dtype (``y`` only ``with_value``, else None):
    :func:`_qparam_partials`' values and :func:`_fake_quantize`'s ``y`` bit for bit, with
    arithmetic instead of ``torch.where`` (several times slower on CPU).

    With :math:`u = x/s` (infinities replaced by the largest finite value, which changes no
    decision and keeps every product finite), :math:`t = \operatorname{round}(u)`, the
    level :math:`q = t + z` and :math:`c = \operatorname{clamp}(q, q_-, q_+)`: ``y`` is
    :math:`(c - z)\,s`; in range :math:`\partial y/\partial s = t - u`, outside it the
    bound crossed minus :math:`z` (:math:`c - z`, or for ``unrounded`` the clamp of
    :math:`u + z` minus :math:`z`), chosen by ``lerp`` with the 0/1 mask as the weight,
    which returns either end exactly; :math:`\partial y/\partial z = (m - 1)\,s`. Four
    tensors of ``x``'s size are made (six for ``unrounded``), the rest in place: on large
    inputs each new one is page faults."""
    quant_min, quant_max = bounds
    largest = _FINFO[inverse.dtype].max
    scaled = torch.mul(cast(x, inverse.dtype), inverse).clamp_(-largest, largest)
    rounded = torch.round(scaled)
    level = torch.add(rounded, zero_point)
    clamped = torch.clamp(level, quant_min, quant_max)
    if unrounded:
        side = torch.add(scaled, zero_point)
        side_clamped = torch.clamp(side, quant_min, quant_max)
        keep = side.eq_(side_clamped)  # 0/1, in place of u + z
        outside = side_clamped.sub_(zero_point)
        offset = clamped.sub_(zero_point)
    else:
        keep = level.eq_(clamped)  # 0/1, in place of the level
        offset = outside = clamped.sub_(zero_point)
    y = torch.mul(offset, step) if with_value else None
    dy_ds = outside.lerp_(rounded.sub_(scaled), keep)
    dy_dz = torch.sub(keep, constant(1.0, keep), out=scaled).mul_(step)
    return keep, dy_ds, dy_dz, y


def _wide_levels(bounds: tuple[int, int], x: Tensor, inverse: Tensor) -> Tensor:
    """:math:`x/s` (as ``x * inverse``, ``inverse`` being ``1/s``) clamped to
    :math:`[q_- - 1, q_+ + 1]`, in the scale's dtype, in plain eager mode: finite, and in
    range exactly where :math:`x/s` is."""
    quant_min, quant_max = bounds
    scaled = torch.mul(cast(x, inverse.dtype), inverse)
    return scaled.clamp_(quant_min - 1, quant_max + 1)


def _scale_partial_and_mask(
    bounds: tuple[int, int], unrounded: bool, x: Tensor, inverse: Tensor
) -> tuple[Tensor, Tensor]:
    r""":func:`_scale_partial` and the in-range mask (0/1 in ``x``'s dtype) together, from
    ``x`` alone, in plain eager mode: :math:`\partial y/\partial s =
    \operatorname{round}(c) - m\,w` with :func:`_levels_and_mask`' :math:`w`,
    :math:`\operatorname{round}(c)` and :math:`m` (``inverse``: ``1/s``)."""
    wide, level, keep = _levels_and_mask(bounds, unrounded, x, inverse)
    return level.addcmul_(wide, keep, value=-1), keep  # (wide * keep is exact)


def _levels_and_mask(
    bounds: tuple[int, int], unrounded: bool, x: Tensor, inverse: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    r"""``(w, round(c), m)`` in plain eager mode: :math:`w` the wide clamp of :math:`x/s`
    (:func:`_wide_levels`), :math:`c = \operatorname{clamp}(w, q_-, q_+)`, and the
    in-range mask :math:`m` (0/1 in ``x``'s dtype): :math:`w = c` (decided before rounding)
    or :math:`\operatorname{round}(w) = \operatorname{round}(c)` (on the level), the
    forward's decision exactly (the same :math:`x/s`, integer bounds, so that
    :math:`\operatorname{round}(c) = \operatorname{clamp}(\operatorname{round}(w))`).
    Not recorded by autograd (its callers run without grad: in place)."""
    quant_min, quant_max = bounds
    wide = _wide_levels(bounds, x, inverse)
    if unrounded:
        level = torch.clamp(wide, quant_min, quant_max)
        keep = float_mask(torch.eq, wide, level, x.dtype)
        level.round_()
    else:
        rounded = torch.round(wide)
        level = torch.clamp(rounded, quant_min, quant_max)
        if rounded.dtype == x.dtype:  # 0/1 over the rounded values: one buffer less
            keep = rounded.eq_(level)
        else:
            keep = float_mask(torch.eq, rounded, level, x.dtype)
    return wide, level, keep


def _scale_partial(bounds: tuple[int, int], keep: Tensor, x: Tensor, inverse: Tensor) -> Tensor:
    r""":math:`\partial y/\partial s` of :func:`_qparam_partials` for a zero point of 0, in
    fewer passes: :math:`\operatorname{clamp}(\operatorname{round}(w), q_-, q_+) - m\,w`
    with :math:`w = \operatorname{clamp}(x/s, q_- - 1, q_+ + 1)` and the in-range mask
    :math:`m`. In range :math:`w = x/s` (in range, :math:`x/s` is within half a step of
    the range) and the clamp of the level is the identity; outside, :math:`m\,w = 0` and
    the level is the bound on the side that was crossed, whether "in range" was read before
    or after rounding (the bounds are integers, so rounding never crosses one). The wide
    clamp keeps :math:`w` finite, so the mask multiplies (no ``torch.where``, several
    times slower on CPU, and none of the slow bool reads of inductor) without making
    ``0 * inf``. A NaN ``x`` gives NaN, as in torch's learnable fake-quantize kernels.
    ``inverse`` is ``1/s`` (as ``torch.reciprocal`` computes it)."""
    quant_min, quant_max = bounds
    if eager_plain(x):
        wide = _wide_levels(bounds, x, inverse)
        level = torch.round(wide).clamp_(quant_min, quant_max)
        return level.sub_(wide.mul_(keep))
    wide = torch.clamp(x.to(inverse.dtype) * inverse, quant_min - 1, quant_max + 1)
    return torch.round(wide).clamp(quant_min, quant_max) - wide * keep


_FINFO = {dtype: torch.finfo(dtype) for dtype in (torch.float64, torch.float32)}
