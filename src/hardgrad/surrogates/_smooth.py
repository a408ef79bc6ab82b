r"""The sigmoid-shaped surrogates :class:`Sigmoid`, :class:`Tanh`, :class:`FastSigmoid` and
:class:`ATan`, each a closed-form kernel for :math:`g\, s'(x)` that neither cancels nor
overflows."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from .._core.ulp import power_of_two, product_error
from ._base import _SURROGATES, _check_params, _Kernel

_aten = torch.ops.aten
#: Where ``softplus_backward`` stops evaluating sigma(t) and takes 1: sigma(40) rounds to 1
#: in float64 (and float32), and exp(40) does not overflow float32.
_THRESHOLD = 40.0


def _times(grad: Tensor, factor: float) -> Tensor:
    return grad if factor == 1 else grad * factor


@_SURROGATES.register("sigmoid")
@dataclass(frozen=True)
class Sigmoid(_Kernel):
    r"""Logistic surrogate of the Heaviside step.

    .. math::

        s(x) = \sigma(k x), \qquad s'(x) = k\,\sigma(k x)\,\sigma(-k x)
             = \frac{k\, e^{-|kx|}}{(1 + e^{-|kx|})^2},

    with ``slope`` :math:`k` (default 1). The sigmoid-adjusted straight-through of
    Bengio et al. (2013), https://arxiv.org/abs/1308.3432; for spiking networks see
    Zenke & Vogels (2021), https://doi.org/10.1162/neco_a_01367.

    Numerics: the product of the two factors, each evaluated as :math:`e^{t}/(1 + e^{t})`
    with :math:`t \le 40` (two fused ``softplus_backward`` passes). It never forms
    :math:`1 - \sigma`, so nothing cancels, and the tails decay to the last subnormal
    instead of flushing to 0 at :math:`|kx| \approx 17` (float32). Accuracy against
    :math:`g\, s'(x)` evaluated exactly, over the whole line: float16 and bfloat16 within 1
    ulp (computed in float32, rounded once; measured: correctly rounded); float64 within 5
    ulps; float32 within 5 ulps when :math:`k` is a power of two (the default), and
    otherwise :math:`kx` is rounded to float32 first, which adds up to :math:`1.25|kx|`
    ulps (the conditioning of :math:`e^{-|kx|}`: the value is exact for an input within 1
    ulp of :math:`x`; float64 corrects this with Dekker's exact product, float32 does not,
    to keep the per-call cost). Where :math:`e^{-|kx|}` itself is below the smallest normal
    number (:math:`|kx| > 87.3` in float32, 708.4 in float64) it is rounded to a subnormal
    before it is scaled by :math:`gk`: the result is then within :math:`(1 + |gk|)/2`
    smallest subnormals of the exact value, and for :math:`|gk| > 1` may be 0 in the last
    :math:`\log_2 |gk|` binades above it.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.surrogates.Sigmoid(slope=4.0).derivative(torch.tensor([0.0, 1.0]))
        tensor([1.0000, 0.0707])
    """

    slope: float = 1.0
    name: ClassVar[str] = "sigmoid"

    def __post_init__(self) -> None:
        _check_params(self)

    def function(self, x: Tensor) -> Tensor:
        return torch.sigmoid(self.slope * x)

    def _kernel(self, grad: Tensor, x: Tensor, dtype: torch.dtype) -> Tensor:
        k = self.slope
        # g k sigma(kx), then times sigma(-kx): each factor as e^t / (1 + e^t), t <= 40.
        # (Under torch.compile the same two steps, so that compiled gradients equal eager
        # ones bit for bit; a one-exponential form, e/(1+e)^2, was 10% faster compiled at
        # 4M float32 but not bit-identical.)
        upper = _aten.softplus_backward(_times(grad, k), x, k, _THRESHOLD)
        result = _aten.softplus_backward(upper, x, -k, _THRESHOLD)
        if dtype == torch.float64 and not power_of_two(k):
            # s' was evaluated at p = fl(kx) = kx - d; to first order
            # s'(kx) = s'(p) (1 - tanh(p/2) d), d from Dekker's exact product.
            factor = torch.tanh(x * (0.5 * k)).mul_(product_error(x, k)).neg_().add_(1)
            result = result.mul_(factor)
        return result


@_SURROGATES.register("tanh")
@dataclass(frozen=True)
class Tanh(_Kernel):
    r"""Hyperbolic-tangent surrogate of the sign.

    .. math::

        s(x) = \tanh(k x), \qquad s'(x) = k\,(1 - \tanh^2(k x)) = \frac{k}{\cosh^2(kx)},

    with ``slope`` :math:`k` (default 1). A smooth version of the clipped STE, used for
    binary networks, e.g. Darabi et al. (2018), https://arxiv.org/abs/1812.11800.

    Numerics: computed as :math:`(g k / \cosh kx) / \cosh kx`, never as
    :math:`1 - \tanh^2`, which cancels to 0 for :math:`|kx| \gtrsim 9` in float32 where
    the true value is still far above the smallest subnormal; the intermediates never fall
    below the result. Accuracy against :math:`g\, s'(x)` evaluated exactly, over the whole
    line: float16/bfloat16 within 1 ulp (computed in float32, rounded once); float64 within
    4 ulps; float32 within 4 ulps for a power-of-two slope (the default), and otherwise the
    rounding of :math:`kx` to float32 adds up to :math:`2.5|kx|` ulps, as for
    :class:`Sigmoid`.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.surrogates.Tanh().derivative(torch.tensor([0.0, 1.0]))
        tensor([1.0000, 0.4200])
    """

    slope: float = 1.0
    name: ClassVar[str] = "tanh"

    def __post_init__(self) -> None:
        _check_params(self)

    def function(self, x: Tensor) -> Tensor:
        return torch.tanh(self.slope * x)

    def _kernel(self, grad: Tensor, x: Tensor, dtype: torch.dtype) -> Tensor:
        k = self.slope
        u = _times(x, k)
        c = torch.cosh(u)  # inf beyond |kx| ~ 89 (float32), where s' is 0 anyway
        result = torch.div(_times(grad, k), c).div_(c)
        if dtype == torch.float64 and not power_of_two(k):
            # sech^2(kx) = sech^2(p) (1 - 2 tanh(p) d) to first order, p = fl(kx) = kx - d.
            result = result.mul_(torch.tanh(u).mul_(product_error(x, k)).mul_(-2).add_(1))
        return result


@_SURROGATES.register("fast_sigmoid")
@dataclass(frozen=True)
class FastSigmoid(_Kernel):
    r"""SuperSpike's fast sigmoid (no exponential), a surrogate of the spike step.

    .. math::

        s(x) = \frac{x}{1 + k|x|}, \qquad s'(x) = \frac{1}{(1 + k|x|)^2},

    with ``slope`` :math:`k` (default 25; peak derivative 1 at 0). Zenke & Ganguli (2018),
    https://doi.org/10.1162/neco_a_01086.

    Numerics: :math:`(g / d) / d` with :math:`d = 1 + k|x|`, so the square never
    overflows (:math:`d^2` would for :math:`k|x| > 1.8 \cdot 10^{19}` in float32, where
    :math:`s'` is still representable). Well conditioned, for every slope: float32 and
    float64 within 6 ulps of :math:`g\, s'(x)` evaluated exactly, half types within 1 ulp
    (computed in float32, rounded once).

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.surrogates.FastSigmoid(slope=1.0).derivative(torch.tensor([0.0, 1.0, -3.0]))
        tensor([1.0000, 0.2500, 0.0625])
    """

    slope: float = 25.0
    name: ClassVar[str] = "fast_sigmoid"

    def __post_init__(self) -> None:
        _check_params(self)

    def function(self, x: Tensor) -> Tensor:
        return x / (1 + self.slope * x.abs())

    def _kernel(self, grad: Tensor, x: Tensor, dtype: torch.dtype) -> Tensor:
        d = x.abs().mul_(self.slope).add_(1)
        return torch.div(grad, d).div_(d)


@_SURROGATES.register("atan")
@dataclass(frozen=True)
class ATan(_Kernel):
    r"""Arctangent surrogate of the Heaviside step.

    .. math::

        s(x) = \tfrac12 + \tfrac1\pi \arctan\!\big(\tfrac{\pi}{2} \alpha x\big), \qquad
        s'(x) = \frac{\alpha / 2}{1 + (\tfrac{\pi}{2} \alpha x)^2},

    with ``alpha`` :math:`\alpha` (default 2; peak derivative :math:`\alpha/2`).
    Fang et al. (2021), https://arxiv.org/abs/2007.05785.

    Numerics: :math:`((g\alpha/2) / h) / h` with :math:`h = \operatorname{hypot}(1, u)`,
    :math:`u = \tfrac{\pi}{2}\alpha x`, so :math:`u^2` never overflows (it would for
    :math:`|u| > 1.8 \cdot 10^{19}` in float32, where :math:`s'` is still representable).
    Well conditioned, for every :math:`\alpha`: float32 and float64 within 7 ulps of
    :math:`g\, s'(x)` evaluated exactly (most of them from rounding :math:`u`, which
    :math:`1/(1 + u^2)` amplifies up to twice), half types within 1 ulp.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.surrogates.ATan().derivative(torch.tensor([0.0, 1.0]))
        tensor([1.0000, 0.0920])
    """

    alpha: float = 2.0
    name: ClassVar[str] = "atan"

    def __post_init__(self) -> None:
        _check_params(self)

    def function(self, x: Tensor) -> Tensor:
        return 0.5 + torch.atan((0.5 * math.pi * self.alpha) * x) / math.pi

    def _kernel(self, grad: Tensor, x: Tensor, dtype: torch.dtype) -> Tensor:
        u = x * (0.5 * math.pi * self.alpha)
        h = torch.hypot(u, torch.ones((), dtype=u.dtype, device=u.device))
        return torch.div(grad * (0.5 * self.alpha), h).div_(h)
