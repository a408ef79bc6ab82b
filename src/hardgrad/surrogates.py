r"""Surrogate gradients: the smooth functions whose derivative a hard op's backward uses.

A hard operation :math:`h` (a step, a sign, a staircase, a clamp) keeps its exact forward
value; with a surrogate :math:`s` its backward multiplies the incoming gradient by
:math:`s'(x)` instead of :math:`h'(x)` (which is zero or undefined):

.. math::

    y = h(x), \qquad \frac{\partial L}{\partial x} = \frac{\partial L}{\partial y}\, s'(x).

Each surrogate documents :meth:`Surrogate.function` (:math:`s`) and
:meth:`Surrogate.derivative` (:math:`s'`). The derivative is used as it is, without
rescaling: surrogates that approximate a sign (range :math:`[-1, 1]`, e.g. ``"clipped"``,
``"tanh"``, ``"approx_sign"``, ``"swish"``) integrate to 2, those that approximate the
Heaviside step (range :math:`[0, 1]`, e.g. ``"sigmoid"``, ``"atan"``, ``"triangle"``)
integrate to 1.

Every registered surrogate computes :math:`g\, s'(x)` in a form that neither cancels nor
overflows, float16/bfloat16 in float32 rounded once, within a few ulps of the exact value
over the whole real line; each class states its bound (guide: "Numerical accuracy").

Every op accepts the surrogates that make sense for it. The families are
``"staircase"`` (round, floor, ceil, trunc), ``"step"`` (sign, binarize, heaviside) and
``"clamp"`` (clamp, quantize); :attr:`Surrogate.applies_to` says which a surrogate fits.

Write your own by subclassing :class:`Surrogate`:

>>> import torch, hardgrad as hg
>>> from dataclasses import dataclass
>>> @dataclass(frozen=True)
... class Gaussian(hg.surrogates.Surrogate):
...     '''s(x) = Phi(x / sigma), s'(x) = exp(-x^2 / (2 sigma^2)) / (sigma sqrt(2 pi)).'''
...     sigma: float = 1.0
...     def function(self, x):
...         return 0.5 * (1 + torch.erf(x / (self.sigma * 2 ** 0.5)))
...     def derivative(self, x):
...         return torch.exp(-0.5 * (x / self.sigma) ** 2) / (self.sigma * (2 * torch.pi) ** 0.5)
>>> x = torch.tensor([-1.0, 0.5], requires_grad=True)
>>> hg.heaviside(x, surrogate=Gaussian(sigma=0.5)).sum().backward()
>>> x.grad
tensor([0.1080, 0.4839])
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, fields
from fractions import Fraction
from typing import Any, ClassVar

import torch
from torch import Tensor

from ._core.kernels import constant, eager_plain
from ._core.registry import Registry
from ._core.ulp import evaluate, power_of_two, product_error, round_toward, split
from ._core.validation import check_positive, check_real, fit_to

__all__ = [
    "SURROGATES",
    "ATan",
    "ApproxSign",
    "Clipped",
    "FastSigmoid",
    "Identity",
    "Masked",
    "Sigmoid",
    "Surrogate",
    "Swish",
    "Tanh",
    "Triangle",
    "get",
    "resolve",
]

#: Every family of hard op a surrogate can serve.
FAMILIES = frozenset({"staircase", "step", "clamp"})

_aten = torch.ops.aten
#: Float dtypes whose bounds and constants the surrogates precompute.
_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
#: Where ``softplus_backward`` stops evaluating sigma(t) and takes 1: sigma(40) rounds to 1
#: in float64 (and float32), and exp(40) does not overflow float32.
_THRESHOLD = 40.0


class Surrogate(abc.ABC):
    """Base class of every surrogate gradient.

    Subclasses implement :meth:`function` and :meth:`derivative` in torch operations that
    keep the input's dtype and device. A surrogate should be immutable (a frozen dataclass
    is the easy way): ops may cache and compare instances.

    Class attributes:
        name: the registry name (empty for user-defined surrogates).
        applies_to: the op families it can serve (``"staircase"``, ``"step"``, ``"clamp"``).
        kind: how an op stores what backward needs: ``"identity"`` (nothing),
            ``"indicator"`` (a mask from :meth:`support`: bool, 1 byte per element, or 0/1
            in the input's dtype below 65,536 elements in eager mode, where that is
            faster), or ``"smooth"`` (the input).
    """

    name: ClassVar[str] = ""
    applies_to: ClassVar[frozenset[str]] = frozenset({"step"})
    kind: ClassVar[str] = "smooth"

    @abc.abstractmethod
    def function(self, x: Tensor) -> Tensor:
        """The smooth function :math:`s(x)` whose derivative backward uses."""

    @abc.abstractmethod
    def derivative(self, x: Tensor) -> Tensor:
        """:math:`s'(x)`: what backward multiplies the incoming gradient by."""

    def support(self, x: Tensor) -> Tensor:
        """For ``kind == "indicator"``: the bool mask where :meth:`derivative` is 1."""
        raise NotImplementedError(f"{type(self).__name__} is not an indicator surrogate")

    def _support_into(self, x: Tensor, out: Tensor) -> Tensor:
        """:meth:`support` as 0/1 written into ``out`` (a float tensor like ``x``), which
        the ops save for backward on small tensors; subclasses write it directly."""
        return out.copy_(self.support(x))

    def backward(self, grad: Tensor, x: Tensor) -> Tensor:
        """The op's input gradient, ``grad * derivative(x)``.

        Override only to compute the same product faster or more accurately (a fused
        kernel); the result must equal ``grad * self.derivative(x)`` up to rounding.
        """
        return grad * self.derivative(x)


class _Kernel(Surrogate):
    r"""A registered smooth surrogate: :meth:`derivative` and :meth:`backward` share one kernel.

    The kernel computes :math:`g\, s'(x)` in a numerically stable form; float16 and bfloat16
    inputs are computed in float32 and rounded once, so that their result is within one ulp
    of :math:`g\, s'(x)` evaluated exactly.
    """

    def derivative(self, x: Tensor) -> Tensor:
        """:math:`s'(x)`: what backward multiplies the incoming gradient by."""
        return evaluate(self._kernel, None, x)

    def backward(self, grad: Tensor, x: Tensor) -> Tensor:
        """The op's input gradient :math:`g\\, s'(x)`, computed in one rounding-aware kernel."""
        dtype = x.dtype
        if grad.dtype == dtype and (dtype == torch.float32 or dtype == torch.float64):
            return self._kernel(grad, x, dtype)  # what ops call: no conversions
        return evaluate(self._kernel, grad, x)

    @abc.abstractmethod
    def _kernel(self, grad: Tensor, x: Tensor, dtype: torch.dtype) -> Tensor:
        """``grad * s'(x)`` for ``grad`` and ``x`` of one dtype (float32 or float64), to be
        rounded to ``dtype`` (the same, or a half type)."""


_SURROGATES: Registry[type[Surrogate]] = Registry("surrogate")
#: The registry of named surrogates, name to class; ``SURROGATES.names()`` lists them.
SURROGATES = _SURROGATES


def _check_params(surrogate: Surrogate) -> None:
    for field in fields(surrogate):  # type: ignore[arg-type]
        check_positive(getattr(surrogate, field.name), field.name)


def _remember(surrogate: Surrogate, **values: Any) -> None:
    """Attach precomputed constants to a frozen dataclass instance (not fields: they take
    no part in ``==``, ``hash`` or ``repr``)."""
    for key, value in values.items():
        object.__setattr__(surrogate, key, value)


def _times(grad: Tensor, factor: float) -> Tensor:
    return grad if factor == 1 else grad * factor


@_SURROGATES.register("identity")
@dataclass(frozen=True)
class Identity(Surrogate):
    r"""The plain straight-through estimator: the gradient passes unchanged.

    .. math:: s(x) = x, \qquad s'(x) = 1.

    Biased for every hard op (it ignores the op entirely); the classic choice for
    rounding in quantization-aware training. Bengio et al. (2013),
    https://arxiv.org/abs/1308.3432.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.surrogates.Identity().derivative(torch.tensor([-3.0, 0.0, 2.0]))
        tensor([1., 1., 1.])
    """

    name: ClassVar[str] = "identity"
    applies_to: ClassVar[frozenset[str]] = FAMILIES
    kind: ClassVar[str] = "identity"

    def function(self, x: Tensor) -> Tensor:
        return x

    def derivative(self, x: Tensor) -> Tensor:
        return torch.ones_like(x)


@_SURROGATES.register("clipped")
@dataclass(frozen=True)
class Clipped(Surrogate):
    r"""Straight-through inside a window, zero outside (hard tanh).

    .. math::

        s(x) = \operatorname{clamp}(x, -w, w), \qquad s'(x) = \mathbb 1[|x| \le w].

    ``width`` :math:`w` (default 1) widens or narrows the window without scaling the
    gradient. The standard backward of binarized networks: Hubara et al. (2016),
    https://arxiv.org/abs/1602.02830.

    The window is exact in every dtype: :math:`|x| \le w` is decided for the real ``width``,
    not for ``width`` rounded to ``x``'s dtype (which could admit one more value).

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.surrogates.Clipped(width=2.0).derivative(torch.tensor([-3.0, -2.0, 0.5, 2.5]))
        tensor([0., 1., 1., 0.])
    """

    width: float = 1.0
    name: ClassVar[str] = "clipped"
    kind: ClassVar[str] = "indicator"

    def __post_init__(self) -> None:
        _check_params(self)
        _remember(self, _bound={d: round_toward(self.width, d, down=True) for d in _DTYPES})

    def function(self, x: Tensor) -> Tensor:
        width = fit_to(self.width, x.dtype)  # a width beyond x's dtype: its inf
        return torch.clamp(x, -width, width)

    def derivative(self, x: Tensor) -> Tensor:
        return self.support(x).to(x.dtype)

    def support(self, x: Tensor) -> Tensor:
        bound: dict[torch.dtype, float] = self._bound  # type: ignore[attr-defined]
        return x.abs() <= bound.get(x.dtype, self.width)

    def _support_into(self, x: Tensor, out: Tensor) -> Tensor:
        bound: dict[torch.dtype, float] = self._bound  # type: ignore[attr-defined]
        return torch.le(x.abs(), constant(bound.get(x.dtype, self.width), x), out=out)


@_SURROGATES.register("masked")
@dataclass(frozen=True)
class Masked(Surrogate):
    r"""The gradient of a clamp: one where the op is not saturated, zero where it is.

    .. math::

        s(x) = \operatorname{clamp}(x, a, b), \qquad s'(x) = \mathbb 1[a \le x \le b].

    Used by :func:`hardgrad.clamp` and :func:`hardgrad.quantize`, which put their own
    range in place of ``min``/``max`` (:math:`a`, :math:`b`; boundaries included, so the
    gradient at a bound is 1, as torch.clamp gives). On its own (plots, tests) it uses its
    ``min`` and ``max``, compared exactly in every dtype. For quantization this is the STE
    of Jacob et al. (2018), https://arxiv.org/abs/1712.05877.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.surrogates.Masked(min=0.0, max=1.0).derivative(torch.tensor([-0.5, 0.0, 1.0, 1.5]))
        tensor([0., 1., 1., 0.])
    """

    min: float = -1.0
    max: float = 1.0
    name: ClassVar[str] = "masked"
    applies_to: ClassVar[frozenset[str]] = frozenset({"clamp"})
    kind: ClassVar[str] = "indicator"

    def __post_init__(self) -> None:
        check_real(self.min, "min")
        check_real(self.max, "max")
        if self.min > self.max:
            raise ValueError(
                f"Expected `min` <= `max`, but found min={self.min!r}, max={self.max!r}"
            )
        _remember(
            self,
            _bounds={
                d: (round_toward(self.min, d, down=False), round_toward(self.max, d, down=True))
                for d in _DTYPES
            },
        )

    def function(self, x: Tensor) -> Tensor:
        return torch.clamp(x, fit_to(self.min, x.dtype), fit_to(self.max, x.dtype))

    def derivative(self, x: Tensor) -> Tensor:
        return self.support(x).to(x.dtype)

    def support(self, x: Tensor) -> Tensor:
        bounds: dict[torch.dtype, tuple[float, float]] = self._bounds  # type: ignore[attr-defined]
        low, high = bounds.get(x.dtype, (self.min, self.max))
        return (x >= low) & (x <= high)

    def _support_into(self, x: Tensor, out: Tensor) -> Tensor:
        # clamp leaves x unchanged exactly where low <= x <= high; NaN compares unequal.
        bounds: dict[torch.dtype, tuple[float, float]] = self._bounds  # type: ignore[attr-defined]
        low, high = bounds.get(x.dtype, (self.min, self.max))
        return torch.eq(torch.clamp(x, low, high), x, out=out)


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


#: The zero of Swish's factor 2 - u tanh(u/2) (u0 = 2.39935728...), as hi + lo in float64,
#: and the Taylor coefficients of (2 - u tanh(u/2)) / 2 about it, of delta^1 .. delta^18
#: (the delta^2 one is exactly 0: f''(u0) = (1 - tanh^2)(u0 tanh(u0/2)/2 - 1) = 0). Computed
#: with 60-digit arithmetic; tests/test_surrogate_ulps.py checks them independently.
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
        ``tests/test_surrogate_ulps.py``'s inputs for every tested ``beta``: correctly
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


def get(name: str) -> Surrogate:
    """The default instance of the surrogate registered as ``name``.

    Example:
        >>> import hardgrad as hg
        >>> hg.surrogates.get("sigmoid")
        Sigmoid(slope=1.0)
    """
    instance: Surrogate = _SURROGATES.default(name, "surrogate")
    return instance


def resolve(surrogate: str | Surrogate, *, family: str, op: str) -> Surrogate:
    """Turn ``surrogate`` (a name or an instance) into an instance usable by ``op``.

    Raises:
        TypeError: ``surrogate`` is neither a string nor a :class:`Surrogate`.
        ValueError: unknown name, or a surrogate that does not serve ``family``.
    """
    if isinstance(surrogate, str):
        cached = _RESOLVED.get((surrogate, family))
        if cached is not None:
            return cached
        instance = get(surrogate)
    elif isinstance(surrogate, Surrogate):
        instance = surrogate
    else:
        raise TypeError(
            "Expected `surrogate` to be a name or a hardgrad.surrogates.Surrogate, "
            f"but found {type(surrogate).__name__}"
        )
    if family not in instance.applies_to:
        usable = ", ".join(repr(n) for n, cls in _SURROGATES.items() if family in cls.applies_to)
        raise ValueError(
            f"Expected `surrogate` to be one that serves {family!r} ops like `{op}`, but found "
            f"{instance!r}, which serves {sorted(instance.applies_to)}; usable: {usable}"
        )
    if isinstance(surrogate, str):
        _RESOLVED[surrogate, family] = instance
    return instance


#: ``(name, family) -> default instance`` for names :func:`resolve` has accepted: a name's
#: default instance is made once and never replaced, so the checks need not run again
#: (they cost a tenth of a microsecond on every call of a small op).
_RESOLVED: dict[tuple[str, str], Surrogate] = {}


# The default instances are made now, at import, rather than on first use: their
# constructors round constants to every dtype with small tensors, which Dynamo cannot trace
# (``float(tensor)``), so a first use inside ``torch.compile`` broke the graph there, and a
# compiled ``hg.quantize`` kept running as five pieces (2.4 ms for all of them, once).
for _name in _SURROGATES:
    _SURROGATES.default(_name)
del _name
