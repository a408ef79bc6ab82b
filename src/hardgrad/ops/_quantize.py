r"""Fake quantization with a straight-through backward and LSQ gradients for the scale
and zero point (Esser et al. 2020, https://arxiv.org/abs/1902.08153; Bhalgat et al. 2020,
https://arxiv.org/abs/2004.09576): the public :func:`quantize`, :func:`quantize_step_size`
(what :class:`hardgrad.nn.Quantize` calls) and the cached checked settings of repeated
calls. The autograd Functions are in :mod:`hardgrad.ops._quantize_functions`, the choice of
path in :mod:`hardgrad.ops._quantize_routes`, the grid's arithmetic in
:mod:`hardgrad.ops._quantize_grid`, its checks in :mod:`hardgrad.ops._quantize_checks`."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .. import surrogates as _surrogates
from .._core.kernels import cast, remember
from .._core.validation import (
    check_broadcastable_to,
    check_dense,
    check_floating,
    check_int,
    check_normal,
    check_positive,
    check_real,
)
from ._quantize_args import as_number, check_finite_number
from ._quantize_checks import _check_grid_fits, _check_in_range
from ._quantize_functions import _SMALL_LSQ_APPLY
from ._quantize_grid import _compute_dtype, _NumberScale, _reciprocal
from ._quantize_routes import (
    _SMALL_LSQ,
    _UNRECORDED,
    _apply_fake_quantize,
    _apply_plan,
    _eager_route,
    _mask_in_forward,
    _scanned_fake_quantize,
    _values_alone,
)


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


def quantize_step_size(
    x: Tensor,
    step: Tensor,
    *,
    quant_min: int,
    quant_max: int,
    identity: bool,
    grad_scale: float | torch.SymFloat,
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
