"""Argument checks shared by every public function.

Messages follow one pattern: they name the argument, say what was expected and what was
found, e.g. ``ValueError: Expected `tau` > 0, but found tau=0.0``.

Shape and dtype checks always run. Checks that read tensor *values* (and so would force a
device synchronisation) run only while validation is enabled (the default) and only on
plain tensors in eager mode: never under ``torch.compile`` or inside ``torch.func``
transforms, where they would break the graph. Switch them off with
:func:`set_validation`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch
from torch import Tensor

_VALIDATION = True


def set_validation(enabled: bool) -> None:
    """Turn the value checks that need a device synchronisation on or off.

    Args:
        enabled: ``True`` (the default state) scans tensor arguments such as a quantizer's
            ``scale`` for invalid values; ``False`` skips those scans. Shape, dtype and
            Python-number checks always run.

    Example:
        >>> import hardgrad as hg
        >>> hg.set_validation(False)
        >>> hg.validation_enabled()
        False
        >>> hg.set_validation(True)
    """
    global _VALIDATION
    if not isinstance(enabled, bool):
        raise TypeError(f"Expected `enabled` to be a bool, but found {type(enabled).__name__}")
    _VALIDATION = enabled


def validation_enabled() -> bool:
    """Whether value checks that need a device synchronisation are on."""
    return _VALIDATION


def _is_transformed(x: Tensor) -> bool:
    """True when ``x`` is wrapped by a ``torch.func`` transform (vmap, grad, ...)."""
    try:
        return bool(torch._C._functorch.is_functorch_wrapped_tensor(x))
    except AttributeError:  # pragma: no cover - older or newer torch without this helper
        return False


def value_checks_apply(x: Tensor) -> bool:
    """Whether a value scan of ``x`` is allowed now (enabled, eager, untransformed)."""
    return _VALIDATION and not torch.compiler.is_compiling() and not _is_transformed(x)


def check_all_finite(x: Tensor, name: str) -> None:
    """``ValueError`` naming ``name`` if a value scan is allowed now (see
    :func:`value_checks_apply`) and ``x`` holds inf or NaN.

    Read from the sum first: inf or NaN anywhere makes an IEEE sum inf or NaN, so a finite
    sum clears ``x`` in one reduction and one read-back (4 against 15 µs on 32,768 floats
    for ``torch.aminmax``'s extremes, 54 µs for ``torch.isfinite(x).all()``). Only a sum
    that is not finite (inf or NaN in ``x``, or finite values whose sum overflows) takes
    the extremes, which decide. Half types are summed in float32 (a float16 sum of a few
    thousand large values would overflow)."""
    if not value_checks_apply(x) or x.numel() == 0:
        return
    values = x.detach()
    wide = torch.float32 if values.dtype in (torch.float16, torch.bfloat16) else None
    if math.isfinite(values.sum(dtype=wide).item()):
        return
    low, high = torch.aminmax(values)
    if not (math.isfinite(low.item()) and math.isfinite(high.item())):
        raise ValueError(f"Expected finite `{name}`, but found inf or NaN")


def check_dense(x: Any, name: str) -> Any:
    """``TypeError`` naming ``name`` when ``x`` is a sparse (COO, CSR, CSC, BSR, BSC) or a
    nested (strided or jagged) tensor: hardgrad's ops, samplers and estimators compute on
    a dense tensor's values, and would otherwise fail deep inside torch, or return a
    silently different result (a sparse tensor's implicit zeros). Anything else, tensor or
    not, passes unchanged (the caller's type check names a non-tensor). Called by
    :func:`check_tensor` (so by :func:`check_floating`), the entry check of every public
    function; two attribute reads, traceable by ``torch.compile``."""
    if isinstance(x, Tensor) and (x.layout is not torch.strided or x.is_nested):
        found = f"a nested tensor (layout={x.layout})" if x.is_nested else f"layout={x.layout}"
        raise TypeError(f"Expected `{name}` to be a dense (strided) tensor, but found {found}")
    return x


def is_dense_floating(x: Any) -> bool:
    """Whether ``x`` is a dense (strided, not nested) floating-point tensor: the fast test
    of an op's entry, which calls :func:`check_floating` (which raises) only when false."""
    return (
        isinstance(x, Tensor)
        and x.is_floating_point()
        and x.layout is torch.strided
        and not x.is_nested
    )


def check_tensor(x: Any, name: str) -> Tensor:
    """``x`` must be a dense tensor (:func:`check_dense`)."""
    if not isinstance(x, Tensor):
        raise TypeError(f"Expected `{name}` to be a torch.Tensor, but found {type(x).__name__}")
    if x.layout is not torch.strided or x.is_nested:
        check_dense(x, name)
    return x


def check_floating(x: Any, name: str) -> Tensor:
    """``x`` must be a floating-point tensor (float64, float32, float16, bfloat16)."""
    check_tensor(x, name)
    if not x.is_floating_point():
        raise TypeError(
            f"Expected `{name}` to be a floating-point tensor, but found dtype={x.dtype}"
        )
    return x


def check_real(value: Any, name: str) -> float:
    """``value`` must be a real Python number (bools are rejected) that is not NaN.

    A number too large for a float (an int such as ``10**400``) becomes ``+-inf``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"Expected `{name}` to be a real number, but found {type(value).__name__}")
    try:
        result = float(value)
    except OverflowError:
        result = math.inf if value > 0 else -math.inf  # type: ignore[operator]
    # Comparisons, not math.isnan/isfinite: under torch.compile(dynamic=True) a float
    # argument is symbolic, and comparing it is what Dynamo can trace (as a guard).
    if result != result:
        raise ValueError(f"Expected `{name}` to be a number, but found {name}=nan")
    return result


def check_positive(value: Any, name: str) -> float:
    """``value`` must be a finite real number > 0."""
    result = check_real(value, name)
    if not 0 < result < math.inf:
        raise ValueError(f"Expected `{name}` > 0 and finite, but found {name}={value!r}")
    return result


def check_normal(value: float, name: str, dtype: torch.dtype) -> float:
    """``value`` (a positive number, already checked) must lie in the positive normal range
    of ``dtype``, the dtype it is computed with: beyond it, it would round to 0 or inf there
    (and ``1 / value`` or ``x / value`` with it would be inf or NaN)."""
    info = torch.finfo(dtype)
    if not info.tiny <= value <= info.max:
        raise ValueError(
            f"Expected `{name}` between {info.tiny:.6g} and {info.max:.6g} (the positive normal "
            f"range of {dtype}, which it is computed in), but found {name}={value!r}"
        )
    return value


def fit_to(value: float, dtype: torch.dtype) -> float:
    """``value`` rounded to ``dtype`` where it lies beyond its range (to ``+-inf`` or
    ``+-finfo.max``, as a cast would round it), unchanged otherwise: torch refuses Python
    scalars it cannot convert to a tensor's dtype (``torch.clamp(half, 1e300)`` raises)."""
    if abs(value) <= 65504.0 or math.isinf(value) or abs(value) <= torch.finfo(dtype).max:
        return value  # (65504 = float16's max, the smallest: no finfo lookup in the common case)
    return float(torch.tensor(value, dtype=torch.float64).to(dtype))


def check_int(value: Any, name: str, *, low: int | None = None, high: int | None = None) -> int:
    """``value`` must be an int (not a bool) in ``[low, high]`` where given."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"Expected `{name}` to be an int, but found {type(value).__name__}")
    result = int(value)
    if low is not None and result < low:
        raise ValueError(f"Expected `{name}` >= {low}, but found {name}={result}")
    if high is not None and result > high:
        raise ValueError(f"Expected `{name}` <= {high}, but found {name}={result}")
    return result


def check_dim(x: Tensor, dim: Any, name: str = "dim") -> int:
    """``dim`` must index a dimension of ``x``; returns it as a non-negative int."""
    ndim = x.dim()
    if ndim == 0:
        raise ValueError(
            f"Expected a tensor with at least 1 dimension for `{name}`, but found a 0-dim tensor"
        )
    dim = check_int(dim, name)
    if not -ndim <= dim < ndim:
        raise ValueError(
            f"Expected `{name}` in [{-ndim}, {ndim - 1}] for a {ndim}-dim tensor, but found {name}={dim}"
        )
    return dim % ndim


def check_broadcastable_to(t: Tensor, shape: torch.Size, name: str, target: str = "x") -> None:
    """``t`` must broadcast to ``shape`` without changing it."""
    own = t.shape
    if len(own) <= len(shape) and all(
        size == 1 or size == target
        for size, target in zip(reversed(own), reversed(shape), strict=False)
    ):
        return  # (plain Python: torch.broadcast_shapes costs more than the op it guards)
    try:
        broadcast = torch.broadcast_shapes(t.shape, shape)
    except RuntimeError:
        broadcast = None
    if broadcast != shape:
        raise ValueError(
            f"Expected `{name}` to be broadcastable to `{target}`'s shape {tuple(shape)}, "
            f"but found shape {tuple(t.shape)}"
        )


def check_linear_input(x: Tensor, in_features: int) -> None:
    """``x`` of a Linear-like layer: ``in_features`` in its last dimension."""
    if x.shape[-1:] != (in_features,):
        raise ValueError(
            f"Expected `x` with {in_features} features in its last dimension, but "
            f"found shape {tuple(x.shape)}"
        )


def check_conv2d_input(x: Tensor, in_channels: int) -> None:
    """``x`` of a Conv2d-like layer: ``(N, C, H, W)`` or ``(C, H, W)`` with ``in_channels``."""
    if x.dim() not in (3, 4) or x.shape[-3] != in_channels:
        raise ValueError(
            f"Expected `x` of shape (N, {in_channels}, H, W) or ({in_channels}, H, "
            f"W), but found shape {tuple(x.shape)}"
        )
