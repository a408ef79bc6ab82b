r"""ReinMax: a second-order (Heun's method) straight-through estimator (notation in
:mod:`hardgrad.estimators._pathwise`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from .._core.kernels import finite, opmath
from ..ops._autograd import apply_function, cached_signature
from ._base import ESTIMATORS, accepts_logistic_difference
from ._pathwise import (
    _BinarySample,
    _gumbel_max,
    _softmax_jacobian_product,
    _Tempered,
)
from ._shift import finite_shifted


@cached_signature
class _ReinMaxSample(torch.autograd.Function):
    """Forward the Gumbel-max sample; backward ReinMax (Heun's method)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, gumbel: Tensor, dim: int, tau: float) -> Tensor:
        return _gumbel_max(logits, gumbel, dim)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        logits, _, ctx.dim, ctx.tau = inputs
        ctx.save_for_backward(logits, output)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        logits, sample = ctx.saved_tensors
        dim, tau = ctx.dim, ctx.tau
        ell = finite_shifted(opmath(logits), dim)
        g = opmath(grad)
        pi0 = torch.softmax(ell, dim)
        pi1 = 0.5 * (torch.softmax(finite(ell / tau), dim) + sample.to(ell.dtype))
        result = 2 * _softmax_jacobian_product(g, pi1, dim) - 0.5 * _softmax_jacobian_product(
            g, pi0, dim
        )
        return result.to(logits.dtype), None, None, None


@ESTIMATORS.register("reinmax")
@dataclass(frozen=True)
class ReinMax(_Tempered):
    r"""ReinMax: a second-order (Heun's method) straight-through estimator.

    Forward: the exact sample :math:`D`. Backward, with :math:`\pi_0 = \operatorname{softmax}(\ell)`
    and :math:`\pi_1 = \tfrac12(\operatorname{softmax}(\ell/\tau) + D)`:

    .. math::

        \frac{\partial L}{\partial \ell} = 2\,J(\pi_1)^\top \bar y - \tfrac12\,J(\pi_0)^\top \bar y.

    Biased in general, with second-order accuracy; the authors recommend
    :math:`\tau \ge 1`. Liu et al. (2023), https://arxiv.org/abs/2304.08612.

    With ``probs``: Bernoulli :math:`\partial b/\partial p = 2r(1-r)/(p(1-p)) - \tfrac12`,
    :math:`r = \tfrac12(\sigma(\ell/\tau) + b)`; at :math:`p \in \{0, 1\}` its limit,
    :math:`-\tfrac12` for :math:`\tau < 1`, :math:`\tfrac12` for :math:`\tau = 1`, infinite
    for :math:`\tau > 1` (``ValueError`` while validated: pass logits or keep probs inside
    (0, 1) with the recommended :math:`\tau > 1`).

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.estimators.ReinMax(tau=1.5)
        ReinMax(tau=1.5)
    """

    logistic_bernoulli_noise: ClassVar[bool] = True
    name: ClassVar[str] = "reinmax"
    probs_kind: ClassVar[str | None] = "reinmax"

    def categorical(self, logits: Tensor, noise: Tensor, dim: int) -> Tensor:
        return apply_function(_ReinMaxSample, logits, noise, dim, self.tau)

    @accepts_logistic_difference
    def bernoulli(self, logits: Tensor, noise: Tensor) -> Tensor:
        return apply_function(_BinarySample, logits, noise, "reinmax", self.tau)
