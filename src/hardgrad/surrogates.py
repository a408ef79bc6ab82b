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
from typing import ClassVar

import torch
from torch import Tensor

from ._registry import Registry
from ._validation import check_positive, check_real, fit_to

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


class Surrogate(abc.ABC):
    """Base class of every surrogate gradient.

    Subclasses implement :meth:`function` and :meth:`derivative` in torch operations that
    keep the input's dtype and device. A surrogate should be immutable (a frozen dataclass
    is the easy way): ops may cache and compare instances.

    Class attributes:
        name: the registry name (empty for user-defined surrogates).
        applies_to: the op families it can serve (``"staircase"``, ``"step"``, ``"clamp"``).
        kind: how an op stores what backward needs: ``"identity"`` (nothing),
            ``"indicator"`` (a bool mask from :meth:`support`), or ``"smooth"`` (the input).
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

    def backward(self, grad: Tensor, x: Tensor) -> Tensor:
        """The op's input gradient, ``grad * derivative(x)``.

        Override only to compute the same product faster (a fused kernel); the result must
        equal ``grad * self.derivative(x)`` up to rounding.
        """
        return grad * self.derivative(x)


_SURROGATES: Registry[type[Surrogate]] = Registry("surrogate")
#: The registry of named surrogates, name to class; ``SURROGATES.names()`` lists them.
SURROGATES = _SURROGATES


def _check_params(surrogate: Surrogate) -> None:
    for field in fields(surrogate):  # type: ignore[arg-type]
        check_positive(getattr(surrogate, field.name), field.name)


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

    def function(self, x: Tensor) -> Tensor:
        width = fit_to(self.width, x.dtype)  # a width beyond x's dtype: its inf
        return torch.clamp(x, -width, width)

    def derivative(self, x: Tensor) -> Tensor:
        return self.support(x).to(x.dtype)

    def support(self, x: Tensor) -> Tensor:
        return x.abs() <= self.width


@_SURROGATES.register("masked")
@dataclass(frozen=True)
class Masked(Surrogate):
    r"""The gradient of a clamp: one where the op is not saturated, zero where it is.

    .. math::

        s(x) = \operatorname{clamp}(x, a, b), \qquad s'(x) = \mathbb 1[a \le x \le b].

    Used by :func:`hardgrad.clamp` and :func:`hardgrad.quantize`, which put their own
    range in place of ``min``/``max`` (:math:`a`, :math:`b`; boundaries included, so the
    gradient at a bound is 1, as torch.clamp gives). On its own (plots, tests) it uses its
    ``min`` and ``max``. For quantization this is the STE of Jacob et al. (2018),
    https://arxiv.org/abs/1712.05877.

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

    def function(self, x: Tensor) -> Tensor:
        return torch.clamp(x, fit_to(self.min, x.dtype), fit_to(self.max, x.dtype))

    def derivative(self, x: Tensor) -> Tensor:
        return self.support(x).to(x.dtype)

    def support(self, x: Tensor) -> Tensor:
        return (x >= self.min) & (x <= self.max)


@_SURROGATES.register("sigmoid")
@dataclass(frozen=True)
class Sigmoid(Surrogate):
    r"""Logistic surrogate of the Heaviside step.

    .. math::

        s(x) = \sigma(k x), \qquad s'(x) = k\,\sigma(k x)\,\sigma(-k x),

    with ``slope`` :math:`k` (default 1). The sigmoid-adjusted straight-through of
    Bengio et al. (2013), https://arxiv.org/abs/1308.3432; for spiking networks see
    Zenke & Vogels (2021), https://doi.org/10.1162/neco_a_01367.

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

    def derivative(self, x: Tensor) -> Tensor:
        kx = self.slope * x
        # The bell first: slope * sigmoid(kx) would overflow a half-precision tensor for a
        # large slope, and then times sigmoid(-kx) = 0 give NaN instead of 0.
        return self.slope * (torch.sigmoid(kx) * torch.sigmoid(-kx))

    def backward(self, grad: Tensor, x: Tensor) -> Tensor:
        s = torch.sigmoid(x if self.slope == 1 else self.slope * x)
        result = torch.ops.aten.sigmoid_backward(grad, s)  # grad * s * (1 - s), one pass
        return result if self.slope == 1 else result * self.slope


@_SURROGATES.register("tanh")
@dataclass(frozen=True)
class Tanh(Surrogate):
    r"""Hyperbolic-tangent surrogate of the sign.

    .. math:: s(x) = \tanh(k x), \qquad s'(x) = k\,(1 - \tanh^2(k x)),

    with ``slope`` :math:`k` (default 1). A smooth version of the clipped STE, used for
    binary networks, e.g. Darabi et al. (2018), https://arxiv.org/abs/1812.11800.

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

    def derivative(self, x: Tensor) -> Tensor:
        t = torch.tanh(self.slope * x)
        return self.slope * (1 - t * t)

    def backward(self, grad: Tensor, x: Tensor) -> Tensor:
        t = torch.tanh(x if self.slope == 1 else self.slope * x)
        result = torch.ops.aten.tanh_backward(grad, t)  # grad * (1 - t^2), one pass
        return result if self.slope == 1 else result * self.slope


@_SURROGATES.register("fast_sigmoid")
@dataclass(frozen=True)
class FastSigmoid(Surrogate):
    r"""SuperSpike's fast sigmoid (no exponential), a surrogate of the spike step.

    .. math::

        s(x) = \frac{x}{1 + k|x|}, \qquad s'(x) = \frac{1}{(1 + k|x|)^2},

    with ``slope`` :math:`k` (default 25; peak derivative 1 at 0). Zenke & Ganguli (2018),
    https://doi.org/10.1162/neco_a_01086.

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

    def derivative(self, x: Tensor) -> Tensor:
        d = 1 + self.slope * x.abs()
        return 1 / (d * d)


@_SURROGATES.register("atan")
@dataclass(frozen=True)
class ATan(Surrogate):
    r"""Arctangent surrogate of the Heaviside step.

    .. math::

        s(x) = \tfrac12 + \tfrac1\pi \arctan\!\big(\tfrac{\pi}{2} \alpha x\big), \qquad
        s'(x) = \frac{\alpha / 2}{1 + (\tfrac{\pi}{2} \alpha x)^2},

    with ``alpha`` :math:`\alpha` (default 2; peak derivative :math:`\alpha/2`).
    Fang et al. (2021), https://arxiv.org/abs/2007.05785.

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

    def derivative(self, x: Tensor) -> Tensor:
        u = (0.5 * math.pi * self.alpha) * x
        return (0.5 * self.alpha) / (1 + u * u)


@_SURROGATES.register("triangle")
@dataclass(frozen=True)
class Triangle(Surrogate):
    r"""Piecewise-linear (triangle) surrogate of the Heaviside step.

    .. math::

        s'(x) = \frac{1}{w}\max\!\big(0,\ 1 - |x|/w\big), \qquad
        s(x) = \begin{cases} 0 & x \le -w \\ \tfrac12 (1 + x/w)^2 & -w < x \le 0 \\
        1 - \tfrac12 (1 - x/w)^2 & 0 < x < w \\ 1 & x \ge w \end{cases}

    with ``width`` :math:`w` (default 1); it integrates to 1. Esser et al. (2016),
    https://arxiv.org/abs/1603.08270; Bellec et al. (2018), https://arxiv.org/abs/1803.09574.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.surrogates.Triangle().derivative(torch.tensor([0.0, 0.5, -2.0]))
        tensor([1.0000, 0.5000, 0.0000])
    """

    width: float = 1.0
    name: ClassVar[str] = "triangle"

    def __post_init__(self) -> None:
        _check_params(self)

    def function(self, x: Tensor) -> Tensor:
        u = torch.clamp(x / self.width, -1, 1)
        return torch.where(u <= 0, 0.5 * (1 + u) ** 2, 1 - 0.5 * (1 - u) ** 2)

    def derivative(self, x: Tensor) -> Tensor:
        return torch.clamp(1 - x.abs() / self.width, min=0) / self.width


@_SURROGATES.register("approx_sign")
@dataclass(frozen=True)
class ApproxSign(Surrogate):
    r"""Bi-Real Net's piecewise-quadratic approximation of the sign.

    .. math::

        s(x) = \begin{cases} -1 & x < -1 \\ 2x + x^2 & -1 \le x < 0 \\
        2x - x^2 & 0 \le x < 1 \\ 1 & x \ge 1 \end{cases}, \qquad
        s'(x) = 2 \max(0,\ 1 - |x|).

    Liu et al. (2018), https://arxiv.org/abs/1808.00278.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.surrogates.ApproxSign().derivative(torch.tensor([0.0, 0.5, -1.5]))
        tensor([2., 1., 0.])
    """

    name: ClassVar[str] = "approx_sign"

    def function(self, x: Tensor) -> Tensor:
        u = torch.clamp(x, -1, 1)
        return 2 * u - u * u.abs()

    def derivative(self, x: Tensor) -> Tensor:
        return 2 * torch.clamp(1 - x.abs(), min=0)


@_SURROGATES.register("swish")
@dataclass(frozen=True)
class Swish(Surrogate):
    r"""SwishSign: the derivative of a swish-shaped (BNN+) approximation of the sign.

    With :math:`u = \beta x`,

    .. math::

        s(x) = 2\sigma(u)\,\big(1 + u\,(1 - \sigma(u))\big) - 1, \qquad
        s'(x) = \frac{\beta\,(2 - u \tanh(u/2))}{1 + \cosh u}
              = 2\beta\,\sigma(u)\sigma(-u)\,(2 - u\tanh(u/2)),

    the second form being the one computed (it cannot overflow). ``beta`` defaults to 5.
    Darabi et al. (2018), "BNN+", https://arxiv.org/abs/1812.11800.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.surrogates.Swish(beta=1.0).derivative(torch.tensor([0.0, 1.0]))
        tensor([1.0000, 0.6047])
    """

    beta: float = 5.0
    name: ClassVar[str] = "swish"

    def __post_init__(self) -> None:
        _check_params(self)

    def function(self, x: Tensor) -> Tensor:
        u = torch.clamp(self.beta * x, -1000.0, 1000.0)  # +-1 exactly there; no inf * 0
        sig = torch.sigmoid(u)
        return 2 * sig * (1 + u * torch.sigmoid(-u)) - 1

    def derivative(self, x: Tensor) -> Tensor:
        # Beyond |u| = 1000 the bell is 0 in every dtype; clamping keeps u * tanh(u / 2)
        # finite there, so that large or infinite x give 0, not 0 * inf = NaN.
        u = torch.clamp(self.beta * x, -1000.0, 1000.0)
        bell = torch.sigmoid(u) * torch.sigmoid(-u)
        return (2 * self.beta) * bell * (2 - u * torch.tanh(0.5 * u))


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
    return instance
