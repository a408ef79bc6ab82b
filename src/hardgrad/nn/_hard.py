r"""Hard elementwise ops and the one-hot argmax as modules, each with a fixed surrogate.

Each module calls the matching function of :mod:`hardgrad.ops` (see there for the forward
and backward math and the papers); straight-through estimation goes back to Bengio et al.
(2013), https://arxiv.org/abs/1308.3432.
"""

from __future__ import annotations

from torch import Tensor, nn

from .. import ops
from .. import surrogates as _surrogates
from .._core.validation import check_int, check_positive, check_real

SurrogateLike = str | _surrogates.Surrogate


class _SurrogateOp(nn.Module):
    """A module applying one elementwise op with a fixed surrogate."""

    family = "step"
    default = "clipped"

    def __init__(self, *, surrogate: SurrogateLike | None = None) -> None:
        super().__init__()
        name = type(self).__name__.lower()
        self.surrogate = _surrogates.resolve(
            self.default if surrogate is None else surrogate, family=self.family, op=name
        )

    def extra_repr(self) -> str:
        return f"surrogate={self.surrogate!r}"


class Round(_SurrogateOp):
    """:func:`hardgrad.round` as a module (straight-through rounding).

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.nn.Round()(torch.tensor([0.4, 2.5]))
        tensor([0., 2.])
    """

    family, default = "staircase", "identity"

    def forward(self, x: Tensor) -> Tensor:
        return ops.round(x, surrogate=self.surrogate)


class Sign(_SurrogateOp):
    """:func:`hardgrad.sign` as a module (clipped straight-through by default).

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.nn.Sign()(torch.tensor([-0.2, 0.0, 3.0]))
        tensor([-1.,  0.,  1.])
    """

    def forward(self, x: Tensor) -> Tensor:
        return ops.sign(x, surrogate=self.surrogate)


class Binarize(_SurrogateOp):
    """:func:`hardgrad.binarize` as a module: :math:`\\pm 1`, clipped STE by default.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.nn.Binarize()(torch.tensor([-0.2, 0.0]))
        tensor([-1.,  1.])
    """

    def forward(self, x: Tensor) -> Tensor:
        return ops.binarize(x, surrogate=self.surrogate)


class Heaviside(_SurrogateOp):
    """:func:`hardgrad.heaviside` as a module (a spiking or gating step).

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.nn.Heaviside(surrogate=hg.surrogates.ATan(alpha=4.0))
        Heaviside(surrogate=ATan(alpha=4.0))
    """

    default = "sigmoid"

    def forward(self, x: Tensor) -> Tensor:
        return ops.heaviside(x, surrogate=self.surrogate)


class Clamp(_SurrogateOp):
    """:func:`hardgrad.clamp` as a module with number bounds.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.nn.Clamp(0.0, 6.0, surrogate="identity")
        Clamp(min=0.0, max=6.0, surrogate=Identity())
    """

    family, default = "clamp", "masked"

    def __init__(
        self,
        min: float | None = None,
        max: float | None = None,
        *,
        surrogate: SurrogateLike = "masked",
    ) -> None:
        super().__init__(surrogate=surrogate)
        if min is None and max is None:
            raise ValueError("Expected at least one of `min` and `max`, but found both None")
        self.min = None if min is None else check_real(min, "min")
        self.max = None if max is None else check_real(max, "max")
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"Expected `min` <= `max`, but found min={min!r}, max={max!r}")

    def forward(self, x: Tensor) -> Tensor:
        return ops.clamp(x, self.min, self.max, surrogate=self.surrogate)

    def extra_repr(self) -> str:
        return f"min={self.min}, max={self.max}, {super().extra_repr()}"


class OneHotArgmax(nn.Module):
    """:func:`hardgrad.one_hot_argmax` as a module (hard choice, softmax backward).

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.nn.OneHotArgmax(tau=0.5)(torch.tensor([[0.1, 0.7, 0.2]]))
        tensor([[0., 1., 0.]])
    """

    def __init__(self, *, dim: int = -1, tau: float = 1.0) -> None:
        super().__init__()
        self.dim = check_int(dim, "dim")
        self.tau = check_positive(tau, "tau")

    def forward(self, logits: Tensor) -> Tensor:
        return ops.one_hot_argmax(logits, dim=self.dim, tau=self.tau)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, tau={self.tau}"
