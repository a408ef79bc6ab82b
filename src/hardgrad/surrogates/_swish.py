r"""SwishSign (:class:`Swish`), with the Taylor series about the zero of its derivative's
factor that keeps its result accurate there."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

import torch
from torch import Tensor

from .._core.kernels import eager_plain
from .._core.ulp import power_of_two, product_error, split
from ._base import _SURROGATES, _check_params, _Kernel, _remember

#: The zero of Swish's factor 2 - u tanh(u/2) (u0 = 2.39935728...), as hi + lo in float64,
#: and the Taylor coefficients of (2 - u tanh(u/2)) / 2 about it, of delta^1 .. delta^18
#: (the delta^2 one is exactly 0: f''(u0) = (1 - tanh^2)(u0 tanh(u0/2)/2 - 1) = 0). Computed
#: with 60-digit arithmetic; tests/surrogates/test_ulps.py checks them independently.
_SWISH_ROOT = (2.3993572805154675, 1.8464872855353363e-16)
_SWISH_TAYLOR = tuple(
    0.5 * c
    for c in (
        -1.1996786402577337,
        0.0,
        0.030510173388064096,
        -0.012715977581091808,
        0.002248725923422533,
        0.00012244467631752294,
        -0.0001839436560395359,
        4.8798917544170514e-05,
        -3.19807505440145e-06,
        -2.1431242875903015e-06,
        8.627407780510399e-07,
        -1.277632964329009e-07,
        -1.5976429579810104e-08,
        1.3081983663033934e-08,
        -2.994904113211425e-09,
        8.253457692188269e-11,
        1.663095487085917e-10,
        -5.63533423643315e-11,
    )
)
#: The band of :meth:`Swish._float32_kernel`, in |u| - u0.
_SWISH_WIDE_BAND = 2.0**-10
#: The half-width of the band |beta x - u0| where float64 results use the Taylor series,
#: and how many of its terms (relative truncation error at the band's edge: 2^-55, a
#: quarter of an ulp).
_SWISH_BAND = (0.5, 18)


@_SURROGATES.register("swish")
@dataclass(frozen=True)
class Swish(_Kernel):
    r"""SwishSign: the derivative of a swish-shaped (BNN+) approximation of the sign.

    With :math:`u = \beta x`,

    .. math::

        s(x) = 2\sigma(u)\,\big(1 + u\,(1 - \sigma(u))\big) - 1, \qquad
        s'(x) = \frac{\beta\,(2 - u \tanh(u/2))}{1 + \cosh u}
              = \frac{\beta}{2} \cdot \frac{2 - u \tanh(u/2)}{\cosh^2(u/2)}.

    ``beta`` defaults to 5. Darabi et al. (2018), "BNN+", https://arxiv.org/abs/1812.11800.

    Numerics: float32 inputs (and float16/bfloat16, computed in float32) are evaluated in
    float64 and rounded once (:meth:`_float32_kernel`): correctly rounded, as measured over
    the ulp tests' inputs for every tested ``beta``. float64 inputs: with :math:`v = |u|`,
    :math:`m = -v/2` and :math:`r = e^{m}/\cosh m = 1 - \tanh(v/2)`, the factor is
    :math:`f/2 = (1 + m) - m r` and the result :math:`((g \beta) \cdot f/2) / \cosh m /
    \cosh m` (no term overflows or leaves the normal range before the result does).
    :math:`f` has a simple zero at :math:`|u| = u_0 = 2.3993572805\ldots`, where any formula
    evaluated at a rounded :math:`u = \beta x` has unbounded relative error; within
    :math:`\big||u| - u_0\big| < 1/2` the factor is its Taylor series in :math:`\delta =
    \beta\,\big((|x| - x_0^{hi}) - x_0^{lo}\big) = |u| - u_0`, with :math:`x_0 = u_0/\beta`
    a constant carried to twice the working precision, so that :math:`\delta` (and the
    result) keeps full relative accuracy up to the zero. Elsewhere, for a :math:`\beta`
    that is not a power of two, the rounding of :math:`m` (which :math:`f` near its zero
    and :math:`\cosh^2` in the tails would amplify) is corrected to first order with
    Dekker's exact product. Accuracy against :math:`g\, s'(x)` evaluated exactly, over the
    whole line, zero included: within 7 ulps for every :math:`\beta`
    (``docs/results/surrogate_ulps.md``).

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.surrogates.Swish(beta=1.0).derivative(torch.tensor([0.0, 1.0]))
        tensor([1.0000, 0.6047])
    """

    beta: float = 5.0
    name: ClassVar[str] = "swish"

    def __post_init__(self) -> None:
        _check_params(self)
        root = (Fraction(_SWISH_ROOT[0]) + Fraction(_SWISH_ROOT[1])) / Fraction(self.beta)
        _remember(self, _root={d: split(root, d) for d in (torch.float32, torch.float64)})

    def function(self, x: Tensor) -> Tensor:
        u = torch.clamp(self.beta * x, -1000.0, 1000.0)  # +-1 exactly there; no inf * 0
        sig = torch.sigmoid(u)
        return 2 * sig * (1 + u * torch.sigmoid(-u)) - 1

    def _kernel(self, grad: Tensor, x: Tensor, dtype: torch.dtype) -> Tensor:
        if x.dtype == torch.float32:
            return self._float32_kernel(grad, x, dtype)
        beta = self.beta
        # |x| capped where s' is 0 in every dtype (|u| = 4000), so that no inf * 0 = NaN.
        a = torch.clamp(x.abs(), max=4000.0 / beta)
        m = a * (-0.5 * beta)  # -|u| / 2
        c = torch.cosh(m)
        r = torch.exp(m) / c  # 1 - tanh(|u|/2) = 2 sigma(-|u|), no cancellation
        half_f = torch.addcmul(m + 1, m, r, value=-1)  # (2 - u tanh(u/2)) / 2
        # m = fl(-|u|/2) = -|u|/2 - d. Where the result keeps float32 precision or more, and
        # d is not 0, the factor and 1/cosh^2 are taken at -|u|/2 to first order in d.
        exact = not power_of_two(beta)  # (x is float64 here: float32 took the wide route)
        error = product_error(a, -0.5 * beta, m, finite=True) if exact else None
        if error is not None:
            tanh_half = torch.rsub(r, 1.0)
            # d/dm [(1 + m) - m r] = (1 - r) - m r (2 - r) = tanh(|u|/2) - m / cosh^2 m
            slope = torch.sub(tanh_half, torch.div(m, c).div_(c))
            half_f = torch.addcmul(half_f, slope, error)
        # Near the zero u0: Taylor series in delta = |u| - u0, formed without rounding u.
        x0_hi, x0_lo = self._root[x.dtype]  # type: ignore[attr-defined]
        delta = (a - x0_hi).sub_(x0_lo).mul_(beta)
        radius, terms = _SWISH_BAND
        series = torch.mul(delta, _SWISH_TAYLOR[terms - 1])  # Horner's scheme, times delta
        for coefficient in reversed(_SWISH_TAYLOR[: terms - 1]):
            series.add_(coefficient).mul_(delta)
        half_f = torch.where(delta.abs() <= radius, series, half_f)
        result = (grad * beta).mul_(half_f).div_(c).div_(c)
        if error is not None:
            # 1/cosh^2(m + d) = 1/cosh^2(m) (1 - 2 tanh(m) d), tanh(m) = r - 1.
            result = torch.addcmul(result, result, tanh_half.mul_(error), value=2)
        return result

    def _float32_kernel(self, grad: Tensor, x: Tensor, dtype: torch.dtype) -> Tensor:
        r"""``grad * s'(x)`` for float32 ``x`` and ``grad`` (half inputs come as float32),
        evaluated in float64 and rounded once to ``dtype``: with :math:`m = -|\beta x|`
        (capped at -800, where :math:`s'` is 0 in float32) and :math:`w = \sigma(m)
        \le 1/2`,

        .. math:: g\, s'(x) = 2 g \beta\, f\, w (1 - w), \qquad
                  f = 2 - |u| \tanh(|u|/2) = 2 + m - 2 m w,

        (:math:`1/(1 + \cosh u) = 2 w (1 - w)`, :math:`\tanh(|u|/2) = 1 - 2w`): no term
        overflows, and :math:`w - w^2` does not cancel. float64's rounding errors are far
        below a float32 ulp except where :math:`f` cancels, next to its zero :math:`u_0`:
        there, for :math:`\big||u| - u_0\big| \le 2^{-10}`, :math:`f` is its Taylor series
        to :math:`\delta^4` in :math:`\delta = |u| - u_0` (relative truncation error below
        :math:`10^{-14}`), :math:`\delta` formed from :math:`x_0 = u_0/\beta` in
        double-double so that it keeps its relative accuracy up to the zero; on the CPU in
        eager mode only calls with such an element compute it (a host read). Measured over
        ``tests/surrogates/test_ulps.py``'s inputs for every tested ``beta``: correctly
        rounded (0.5 ulp) in float32, float16 and bfloat16. 13 kernels (17 with the check
        of the band) where the float32 evaluation with Dekker's product took about 30:
        on a BNN+ layer's 64 x 256 activations, 441 -> 235 µs."""
        beta = self.beta
        a = x.double().abs_()
        m = torch.mul(a, -beta).clamp_(min=-800.0)  # -|u| (-inf -> -800; NaN stays NaN)
        w = torch.sigmoid(m)
        f = torch.addcmul(m + 2.0, m, w, value=-2.0)  # 2 + m - 2 m w
        near = (m + _SWISH_ROOT[0]).abs_() <= _SWISH_WIDE_BAND
        if not (x.is_cpu and eager_plain(x)) or bool(near.any()):  # (no sync on a GPU)
            x0_hi, x0_lo = self._root[torch.float64]  # type: ignore[attr-defined]
            delta = (a - x0_hi).sub_(x0_lo).mul_(beta)
            c1, _, c3, c4 = _SWISH_TAYLOR[:4]
            square = delta * delta
            series = (square * c4).mul_(delta).add_(square * c3).add_(c1).mul_(delta).mul_(2.0)
            f = torch.where(near, series, f)
        bell = torch.addcmul(w, w, w, value=-1.0)  # w (1 - w)
        result = (grad.double() * (2.0 * beta)).mul_(f).mul_(bell)
        return result.to(dtype)
