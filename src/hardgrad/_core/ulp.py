r"""Ulp-level numerics for the surrogates (private).

* :func:`ulp` and :func:`ulp_error`: the unit in the last place of a floating dtype at a
  reference value, and by how many of those a result misses the reference: the measure
  the surrogates' accuracy is stated in. For a result :math:`y` of a dtype with :math:`p`
  significand bits and smallest normal exponent :math:`e_{\min}`, and a reference
  :math:`r` (float64, or better),

  .. math::

      \operatorname{err}(y) = \frac{|y - r|}{2^{\max(\lfloor \log_2 |r| \rfloor,\,
      e_{\min}) - p + 1}},

  so that below the smallest normal number the unit is the smallest subnormal; a correctly
  rounded result scores at most 1/2. (``tests/surrogates/test_ulps.py`` and
  ``docs/results/surrogate_ulps.py`` carry independent copies, so that they can measure
  older checkouts too; the test checks this one against its own.)
* :func:`evaluate`: runs a surrogate kernel ``grad * s'(x)`` in the precision its result
  needs (float32 for float16/bfloat16 inputs, rounded once at the end).
* :func:`split`, :func:`round_toward`: constants as ``hi + lo`` pairs of a dtype, and
  rounded down or up to it (for exact comparisons).
* :func:`power_of_two`, :func:`product_error`: whether ``k * x`` is exact, and what its
  rounding lost (Dekker's exact product), for the surrogates' first-order corrections.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import torch
from torch import Tensor

from .compat import VMAP_LACKS_VIEW_DTYPE, truncated_significand

#: Significand bits (with the implicit one) and smallest normal binary exponent.
FORMATS: dict[torch.dtype, tuple[int, int, int]] = {
    torch.float64: (53, -1022, 1023),
    torch.float32: (24, -126, 127),
    torch.float16: (11, -14, 15),
    torch.bfloat16: (8, -126, 127),
}

#: The dtypes computed in float32 and rounded once.
HALF = (torch.float16, torch.bfloat16)


def ulp(reference: Tensor, dtype: torch.dtype) -> Tensor:
    r"""The unit in the last place of ``dtype`` at each value of ``reference`` (float64).

    :math:`2^{\max(\lfloor \log_2 |r| \rfloor, e_{\min}) - p + 1}`: for a reference in the
    subnormal range (or 0) the smallest subnormal of ``dtype``; beyond the largest finite
    value, the ulp of the largest binade.
    """
    bits, emin, emax = FORMATS[dtype]
    r = reference.to(torch.float64)
    exponent = torch.frexp(r).exponent - 1  # floor(log2 |r|) for finite nonzero r
    exponent = torch.where(r == 0, emin, exponent)  # frexp(0) gives exponent 0
    exponent = torch.clamp(exponent, emin, emax) - (bits - 1)
    return torch.ldexp(torch.ones_like(r), exponent)


def ulp_error(actual: Tensor, expected: Tensor) -> Tensor:
    """How many ulps of ``actual.dtype`` each value of ``actual`` is from ``expected``.

    ``expected`` is a more precise reference (float64); the result is float64: a correctly
    rounded value scores at most 0.5. An infinity counts 0 where the reference rounds to
    it (overflows) and ``inf`` otherwise; two NaNs count 0, one NaN ``inf``. For ``actual``
    in float64 the reference is itself a float64, so the measure is against the correctly
    rounded value and may be off by half an ulp.
    """
    dtype = actual.dtype
    got = actual.to(torch.float64)
    ref = expected.to(torch.float64)
    err = (got - ref).abs() / ulp(ref, dtype)
    overflow = torch.isinf(got) & (ref.to(dtype).to(torch.float64) == got)
    same = (got == ref) | (got.isnan() & ref.isnan()) | overflow
    err = torch.where(torch.isnan(err), math.inf, err)
    return torch.where(same, 0.0, err)


def evaluate(
    kernel: Callable[[Tensor, Tensor, torch.dtype], Tensor], grad: Tensor | None, x: Tensor
) -> Tensor:
    """``kernel(grad, x, dtype)``: float16/bfloat16 computed in float32 and rounded once.

    ``dtype`` is the result's, the one ``grad * x`` would have (``x``'s without ``grad``,
    which then means 1); the kernel gets ``grad`` and ``x`` in float32 when ``dtype`` is a
    half type, unchanged (float32 or float64) otherwise, and may skip refinements the
    result's precision cannot show.
    """
    dtype = (
        x.dtype
        if grad is None or grad.dtype == x.dtype
        else torch.promote_types(grad.dtype, x.dtype)
    )
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    work = torch.float32 if dtype in HALF else dtype
    if x.dtype != work:
        x = x.to(work)
    if grad is None:
        grad = torch.ones((), dtype=work, device=x.device).expand_as(x)
    elif grad.dtype != work:
        grad = grad.to(work)
    out = kernel(grad, x, dtype)
    return out if out.dtype == dtype else out.to(dtype)


def split(value: float | Fraction, dtype: torch.dtype) -> tuple[float, float]:
    """``(hi, lo)``: ``hi`` is ``value`` rounded to ``dtype``, ``lo`` the rest rounded to it.

    ``hi + lo`` carries about twice the precision of ``dtype`` (float64 Python floats are
    exact, the rest of ``value`` is computed with fractions).
    """
    exact = Fraction(value)
    hi = float(torch.tensor(float(exact), dtype=torch.float64).to(dtype))
    if math.isinf(hi):
        return hi, 0.0
    lo = float(torch.tensor(float(exact - Fraction(hi)), dtype=torch.float64).to(dtype))
    return hi, lo


def round_toward(value: float, dtype: torch.dtype, *, down: bool) -> float:
    """The largest number of ``dtype`` that is ``<= value`` (``down``), or the smallest that is
    ``>= value``: comparing a tensor of ``dtype`` with it is the exact comparison with
    ``value`` (a comparison with ``value`` itself would round it to ``dtype`` first)."""
    t = torch.tensor(value, dtype=torch.float64).to(dtype)
    rounded = float(t)
    if (rounded > value) if down else (rounded < value):
        toward = torch.tensor(-math.inf if down else math.inf, dtype=dtype)
        rounded = float(torch.nextafter(t, toward))
    return rounded


def power_of_two(value: float) -> bool:
    """Whether ``value`` is +-2^n: multiplying by it is exact (barring over/underflow)."""
    return value != 0 and math.isfinite(value) and math.frexp(value)[0] in (0.5, -0.5)


#: Per dtype: the integer view, a mask that clears the low half of the fraction bits (what
#: is left has 26 significant bits in float64, 12 in float32), and that many bits.
_SPLIT = {
    torch.float64: (torch.int64, -(1 << 27), 26),
    torch.float32: (torch.int32, -(1 << 12), 12),
}


def _split_float(value: float, bits: int) -> tuple[float, float]:
    """``value = hi + lo`` exactly, ``hi`` with ``bits`` significant bits."""
    mantissa, exponent = math.frexp(value)
    hi = math.ldexp(math.trunc(math.ldexp(mantissa, bits)), exponent - bits)
    return hi, value - hi


def product_error(
    x: Tensor, factor: float, product: Tensor | None = None, *, finite: bool = False
) -> Tensor:
    r"""``factor * x - (x * factor)``: what the rounded product ``x * factor`` lost.

    For float64 or float32 ``x``; ``x * factor`` is torch's product, in which ``factor`` is
    first rounded to ``x``'s dtype (:math:`k' = \operatorname{fl}(k)`). Dekker's product:
    with :math:`x = x_h + x_l` (the high half of the significand, by masking the bit
    pattern, and the rest) and :math:`k' = k_h + k_l` likewise,
    :math:`kx - p = ((k_h x_h - p) + k_h x_l + k_l x_h) + k_l x_l + (k - k')x`, the
    products exact but the float64 :math:`k_l x_l` (54 bits, off by :math:`2^{-107}|kx|`).
    Where the product overflows, or ``x`` is not finite, the result is 0 (``finite=True``
    skips that pass for inputs known to be safe). ``product``, when given, is ``x * factor``.
    """
    int_type, mask, bits = _SPLIT[x.dtype]
    rounded = float(torch.tensor(factor, dtype=torch.float64).to(x.dtype))
    k_hi, k_lo = _split_float(rounded, bits)
    rest = factor - rounded
    # (The same bits by frexp; the transform test is one Dynamo traces, unlike a tensor's.)
    if VMAP_LACKS_VIEW_DTYPE and torch._C._are_functorch_transforms_active():
        x_hi = truncated_significand(x, bits)
    else:
        x_hi = x.view(int_type).bitwise_and(mask).view(x.dtype)
    x_lo = x - x_hi
    error = torch.mul(x_hi, k_hi).sub_(x * factor if product is None else product)
    error.add_(x_lo, alpha=k_hi).add_(x_hi, alpha=k_lo).add_(x_lo, alpha=k_lo)
    if rest:
        error.add_(x, alpha=rest)
    return error if finite else torch.nan_to_num(error, nan=0.0, posinf=0.0, neginf=0.0)
