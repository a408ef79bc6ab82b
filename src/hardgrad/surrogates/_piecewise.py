r"""The piecewise-polynomial surrogates with kinks: :class:`Triangle` and
:class:`ApproxSign`, exact near their kinks."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import ClassVar

import torch
from torch import Tensor

from .._core.ulp import split
from ._base import _SURROGATES, _check_params, _Kernel, _remember


@_SURROGATES.register("triangle")
@dataclass(frozen=True)
class Triangle(_Kernel):
    r"""Piecewise-linear (triangle) surrogate of the Heaviside step.

    .. math::

        s'(x) = \frac{1}{w}\max\!\big(0,\ 1 - |x|/w\big)
              = \frac{\max(0,\ w - |x|)}{w^2}, \qquad
        s(x) = \begin{cases} 0 & x \le -w \\ \tfrac12 (1 + x/w)^2 & -w < x \le 0 \\
        1 - \tfrac12 (1 - x/w)^2 & 0 < x < w \\ 1 & x \ge w \end{cases}

    with ``width`` :math:`w` (default 1); it integrates to 1. Esser et al. (2016),
    https://arxiv.org/abs/1603.08270; Bellec et al. (2018), https://arxiv.org/abs/1803.09574.

    Numerics: :math:`w - |x|` is formed exactly near the kinks :math:`|x| = w` (with
    :math:`w` as a sum of two numbers of the dtype), where :math:`1 - |x|/w` would lose
    every digit; float32/float64 within 3 ulps of :math:`g\, s'(x)` evaluated exactly,
    half types within 1 ulp.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.surrogates.Triangle().derivative(torch.tensor([0.0, 0.5, -2.0]))
        tensor([1.0000, 0.5000, 0.0000])
    """

    width: float = 1.0
    name: ClassVar[str] = "triangle"

    def __post_init__(self) -> None:
        _check_params(self)
        constants = {}
        for dtype in (torch.float32, torch.float64):
            hi, lo = split(self.width, dtype)
            scale = float(Fraction(1) / Fraction(self.width) ** 2)
            tiny, big = torch.finfo(dtype).tiny, torch.finfo(dtype).max
            fits = math.isfinite(hi) and tiny <= scale <= big
            rounded = float(torch.tensor(scale, dtype=torch.float64).to(dtype))
            constants[dtype] = (hi, lo, rounded) if fits else None
        _remember(self, _constants=constants)

    def function(self, x: Tensor) -> Tensor:
        u = torch.clamp(x / self.width, -1, 1)
        return torch.where(u <= 0, 0.5 * (1 + u) ** 2, 1 - 0.5 * (1 - u) ** 2)

    def _kernel(self, grad: Tensor, x: Tensor, dtype: torch.dtype) -> Tensor:
        constants = self._constants.get(x.dtype)  # type: ignore[attr-defined]
        if constants is None and x.dtype != torch.float64:
            # A width whose 1/w^2 leaves the dtype's normal range: compute in float64.
            return self._kernel(grad.double(), x.double(), dtype).to(x.dtype)
        if constants is None:
            t = torch.clamp(torch.rsub(x.abs(), self.width), min=0)
            return torch.mul(grad, t).div_(self.width).div_(self.width)
        hi, lo, scale = constants
        t = torch.rsub(x.abs(), hi)  # exact where |x| is near w (Sterbenz)
        if lo:
            t.add_(lo)
        return torch.mul(grad, torch.clamp(t, min=0)).mul_(scale)


@_SURROGATES.register("approx_sign")
@dataclass(frozen=True)
class ApproxSign(_Kernel):
    r"""Bi-Real Net's piecewise-quadratic approximation of the sign.

    .. math::

        s(x) = \begin{cases} -1 & x < -1 \\ 2x + x^2 & -1 \le x < 0 \\
        2x - x^2 & 0 \le x < 1 \\ 1 & x \ge 1 \end{cases}, \qquad
        s'(x) = 2 \max(0,\ 1 - |x|).

    Liu et al. (2018), https://arxiv.org/abs/1808.00278. Numerics: :math:`1 - |x|` is
    exact near the kinks; float32/float64 within 2 ulps of :math:`g\, s'(x)` evaluated
    exactly (the derivative alone within 1), half types within 1 ulp.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.surrogates.ApproxSign().derivative(torch.tensor([0.0, 0.5, -1.5]))
        tensor([2., 1., 0.])
    """

    name: ClassVar[str] = "approx_sign"

    def function(self, x: Tensor) -> Tensor:
        u = torch.clamp(x, -1, 1)
        return 2 * u - u * u.abs()

    def _kernel(self, grad: Tensor, x: Tensor, dtype: torch.dtype) -> Tensor:
        return torch.mul(grad, torch.clamp(torch.rsub(x.abs(), 1.0), min=0)).mul_(2)
