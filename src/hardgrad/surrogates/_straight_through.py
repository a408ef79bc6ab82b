r"""The straight-through surrogates: the identity, and the 0/1 windows of a clipped sign
(:class:`Clipped`) and of a clamp (:class:`Masked`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from .._core.kernels import constant
from .._core.ulp import round_toward
from .._core.validation import check_real, fit_to
from ._base import _DTYPES, _SURROGATES, FAMILIES, Surrogate, _check_params, _remember


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
