"""Argument forms of :func:`hardgrad.quantize`: NumPy numbers taken as Python numbers, and
a finite zero point (the dense-tensor check is :func:`hardgrad._core.validation.check_dense`).

Kept apart from :mod:`hardgrad.ops._quantize`, whose call paths are timed to the
microsecond: each helper here costs an attribute read or two on the common path."""

from __future__ import annotations

import math
import numbers
from typing import Any


def as_number(value: Any) -> Any:
    """``value`` as a Python ``int`` or ``float`` if it is a NumPy number (a scalar such as
    ``np.float32(0.1)``, or a 0-d array of a real dtype), else unchanged (a tensor, a
    Python number, or anything else, for the caller's checks to judge). NumPy bools stay
    as they are, so that the checks refuse them as they refuse ``True``.

    NumPy is not imported: its values are recognised by their type's module."""
    kind = type(value)
    if kind is int or kind is float or kind.__module__ != "numpy":
        return value
    if getattr(value, "shape", None) != () or getattr(value, "dtype", None) is None:
        return value  # (an array of another shape: refused by the caller, by its type)
    if value.dtype.kind in "iu":
        return int(value)
    if value.dtype.kind == "f":
        return float(value)
    return value  # (bool, complex, object, str: refused by the caller)


def check_finite_number(value: Any, name: str) -> float:
    """``value`` (a real number, already checked not NaN) must be finite."""
    result = float(value) if isinstance(value, numbers.Real) else math.nan
    if not -math.inf < result < math.inf:
        raise ValueError(f"Expected `{name}` to be finite, but found {name}={value!r}")
    return result


def check_finite_extremes(low: float, high: float, name: str) -> None:
    """``ValueError`` naming ``name`` unless the extremes of a tensor (NaN if it holds a
    NaN) are both finite."""
    if not (-math.inf < low and high < math.inf):
        raise ValueError(
            f"Expected every `{name}` to be finite, but found values from {low} to {high}"
        )
