"""Hard operations with a chosen backward (re-exported at the top level).

Papers: the straight-through estimator, Bengio et al. (2013),
https://arxiv.org/abs/1308.3432; its clipped form for binarized networks, Hubara et al.
(2016), https://arxiv.org/abs/1602.02830; fake quantization, Jacob et al. (2018),
https://arxiv.org/abs/1712.05877, with LSQ step sizes, Esser et al. (2020),
https://arxiv.org/abs/1902.08153, and LSQ+ zero points, Bhalgat et al. (2020),
https://arxiv.org/abs/2004.09576; ternary weights, Li, Zhang & Liu (2016),
https://arxiv.org/abs/1605.04711; stochastic rounding, Gupta et al. (2015),
https://arxiv.org/abs/1502.02551. Each op's docstring says which applies.

Forward values are bit-identical to the hard operation; only the backward changes. Every
op is listed in :data:`OPS`, the registry that drives the conformance tests, the CLI's
``list`` and the benchmarks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from .._core.registry import Registry
from ._elementwise import binarize, ceil, clamp, floor, heaviside, round, sign, trunc
from ._lowbit import stochastic_round, ternarize
from ._quantize import quantize
from ._selection import one_hot_argmax, soft_topk_mask, topk_mask
from ._straight_through import StraightThrough, straight_through

__all__ = [
    "OPS",
    "OpSpec",
    "StraightThrough",
    "binarize",
    "ceil",
    "clamp",
    "floor",
    "heaviside",
    "one_hot_argmax",
    "quantize",
    "round",
    "sign",
    "soft_topk_mask",
    "stochastic_round",
    "straight_through",
    "ternarize",
    "topk_mask",
    "trunc",
]


@dataclass(frozen=True)
class OpSpec:
    """What the conformance suite, CLI and benchmarks need to know about one op.

    Attributes:
        name: public name (``hg.<name>``).
        op: the function.
        reference: the hard forward as plain torch, ``reference(x)``; the op called with
            ``kwargs`` must equal it bit for bit.
        family: the surrogate family it accepts (``None`` when it takes no surrogate).
        default_surrogate: the name its ``surrogate`` argument defaults to.
        kwargs: extra keyword arguments used by the tests and benchmarks.
        special_points: inputs exactly on its discontinuities.
    """

    name: str
    op: Callable[..., Tensor]
    reference: Callable[[Tensor], Tensor]
    family: str | None
    default_surrogate: str | None
    kwargs: dict[str, Any] = field(default_factory=dict)
    special_points: tuple[float, ...] = ()

    @property
    def summary(self) -> str:
        """First line of the op's docstring."""
        return (self.op.__doc__ or "").strip().splitlines()[0]

    def __call__(self, x: Tensor, **overrides: Any) -> Tensor:
        return self.op(x, **{**self.kwargs, **overrides})


#: The registry of hard ops, name to :class:`OpSpec`; ``OPS.names()`` lists them.
OPS: Registry[OpSpec] = Registry("op")

_HALVES = (-2.5, -1.5, -0.5, 0.5, 1.5, 2.5)
_STEP = (-1.0, -0.0, 0.0, 1.0)

for _spec in (
    OpSpec(
        "round", round, torch.round, "staircase", "identity", special_points=(*_HALVES, 0.0, -0.0)
    ),
    OpSpec(
        "floor",
        floor,
        torch.floor,
        "staircase",
        "identity",
        special_points=(-1.0, 0.0, -0.0, 1.0, -0.5),
    ),
    OpSpec(
        "ceil",
        ceil,
        torch.ceil,
        "staircase",
        "identity",
        special_points=(-1.0, 0.0, -0.0, 1.0, 0.5),
    ),
    OpSpec(
        "trunc",
        trunc,
        torch.trunc,
        "staircase",
        "identity",
        special_points=(-1.0, -0.5, 0.0, 0.5, 1.0),
    ),
    OpSpec("sign", sign, torch.sign, "step", "clipped", special_points=_STEP),
    OpSpec(
        "binarize",
        binarize,
        lambda x: torch.where(x >= 0, 1.0, -1.0).to(x.dtype),
        "step",
        "clipped",
        special_points=_STEP,
    ),
    OpSpec(
        "heaviside",
        heaviside,
        lambda x: (x > 0).to(x.dtype),
        "step",
        "sigmoid",
        special_points=_STEP,
    ),
    OpSpec(
        "clamp",
        clamp,
        lambda x: torch.clamp(x, -1.0, 1.0),
        "clamp",
        "masked",
        kwargs={"min": -1.0, "max": 1.0},
        special_points=(-1.0, 1.0, 0.0),
    ),
    OpSpec(
        "quantize",
        quantize,
        lambda x: torch.fake_quantize_per_tensor_affine(x.float(), 0.25, 0, -8, 7).to(x.dtype),
        "clamp",
        "masked",
        kwargs={"scale": 0.25, "quant_min": -8, "quant_max": 7},
        special_points=(0.125, -0.125, 0.375, -2.0, 1.75, 1.875, -2.125),
    ),
    OpSpec(
        "one_hot_argmax",
        one_hot_argmax,
        lambda x: torch.nn.functional.one_hot(x.argmax(-1), x.shape[-1]).to(x.dtype),
        None,
        None,
    ),
    OpSpec(
        "topk_mask",
        topk_mask,
        lambda x: torch.zeros_like(x).scatter(-1, x.topk(2, -1).indices, 1.0),
        None,
        None,
        kwargs={"k": 2},
    ),
):
    OPS.register(_spec.name)(_spec)
