r"""Straight-through estimators: the exact sample forward, the softmax (sigmoid) Jacobian of
the logits or the identity backward: ST and ST-identity (notation in
:mod:`hardgrad.estimators._pathwise`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from .._core.kernels import opmath, softmax_vjp, without_grad
from ..ops._autograd import apply_function, cached_signature, native_value, records_natively
from ._base import ESTIMATORS, Estimator, accepts_logistic_difference
from ._pathwise import (
    _binary_sample,
    _BinarySample,
    _gumbel_max,
    _Tempered,
)
from ._shift import shift_to_zero


def _sigmoid_slope(x: Tensor, tau: float) -> Tensor:
    r""":math:`\sigma'(x/\tau)/\tau` in ``x``'s dtype, as :func:`_times_sigmoid_slope`
    reads ``x`` (NaN as 0, :math:`\pm\infty` giving 0): :math:`s - s^2` at
    :math:`s = \sigma(-|x|/\tau) \le 1/2`, where :math:`s^2 \le s/2` (no cancellation)."""
    magnitude = x.abs().nan_to_num_(0.0, posinf=math.inf)
    scaled = magnitude if tau == 1 else magnitude.div_(tau)
    s = scaled.neg_().sigmoid_()
    slope = torch.addcmul(s, s, s, value=-1)
    return slope if tau == 1 else slope.div_(tau)


def _sample_and_slope(logits: Tensor, noise: Tensor, tau: float) -> tuple[Tensor, Tensor]:
    return _binary_sample(logits, noise)[0], _sigmoid_slope(logits, tau)


def _native_straight_through(logits: Tensor, noise: Tensor, tau: float) -> Tensor | None:
    r"""The ST Bernoulli sample recorded with autograd's own product by its slope
    :math:`\sigma'(\ell/\tau)/\tau` (:func:`~hardgrad.ops._autograd.native_value`), on
    small CPU float32/float64 log-odds (:func:`~hardgrad.ops._autograd.records_natively`);
    ``None`` elsewhere. No Python runs in backward: forward and backward of 32 log-odds,
    121 -> 110 µs, of 1,024, 114 -> 107 µs (one interleaved run; ``torch.bernoulli`` with
    the detach trick: 52 and 67 µs, a floor of fewer kernels this path keeps). The slope is
    made in forward, so the product rounds as :math:`\bar y\,(s - s^2)` where the
    Function's backward rounds :math:`(\bar y\,(1 - s))\,s`: the same gradient to the
    last bit's rounding."""
    if logits.dtype not in (torch.float32, torch.float64) or not records_natively(logits):
        return None
    sample, slope = without_grad(_sample_and_slope, logits, noise, tau)
    return native_value(logits, sample, slope)


@cached_signature
class _StraightThroughSample(torch.autograd.Function):
    """Forward the Gumbel-max sample; backward :math:`J(\\operatorname{softmax}(\\ell/\\tau))^\\top \\bar y / \\tau`."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, gumbel: Tensor, dim: int, tau: float) -> Tensor:
        return _gumbel_max(logits, gumbel, dim)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        logits, _, ctx.dim, ctx.tau = inputs
        ctx.save_for_backward(logits)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        (logits,) = ctx.saved_tensors
        # shifted (softmax does not change): -inf then stays below every finite logit
        shifted = shift_to_zero(opmath(logits), ctx.dim)
        return softmax_vjp(shifted, grad, ctx.dim, ctx.tau), None, None, None


@cached_signature
class _IdentitySample(torch.autograd.Function):
    """Forward the Gumbel-max sample; backward copies the gradient onto the logits."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, gumbel: Tensor, dim: int) -> Tensor:
        return _gumbel_max(logits, gumbel, dim)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        return grad, None, None


@ESTIMATORS.register("st")
@dataclass(frozen=True)
class ST(_Tempered):
    r"""Straight-through with the softmax (sigmoid for Bernoulli) of the logits.

    Forward: the exact sample :math:`D`. Backward:
    :math:`\partial L/\partial \ell = \tfrac1\tau J(\operatorname{softmax}(\ell/\tau))^\top \bar y`;
    for a Bernoulli unit :math:`\sigma'(\ell/\tau)\,\bar y / \tau` (the sigmoid-adjusted
    straight-through). Biased: on the Bernoulli toy :math:`E[(b - t)^2]` its mean is
    :math:`2(p - t)p(1-p)` instead of :math:`p(1-p)(1 - 2t)`. Bengio et al. (2013),
    https://arxiv.org/abs/1308.3432.

    With ``probs``: :math:`\partial b/\partial p = \sigma'(\ell/\tau)/(\tau p(1-p))`, which
    is 1 at :math:`\tau = 1` (the straight-through of published stochastic-neuron code);
    at :math:`p \in \{0, 1\}` its limit, 0 for :math:`\tau < 1`, 1 for :math:`\tau = 1`,
    infinite for :math:`\tau > 1` (``ValueError`` while validated, see
    :func:`hardgrad.bernoulli`). Categorical at :math:`\tau = 1`:
    :math:`\bar y_i - \langle \bar y, q\rangle`.

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.tensor([0.0, 1.0, -1.0], requires_grad=True)
        >>> y = hg.categorical(logits, estimator=hg.estimators.ST(tau=2.0),
        ...                    generator=torch.Generator().manual_seed(0))
        >>> y
        tensor([0., 1., 0.], grad_fn=<_StraightThroughSampleBackward>)
    """

    logistic_bernoulli_noise: ClassVar[bool] = True
    name: ClassVar[str] = "st"
    probs_kind: ClassVar[str | None] = "st"

    def categorical(self, logits: Tensor, noise: Tensor, dim: int) -> Tensor:
        return apply_function(_StraightThroughSample, logits, noise, dim, self.tau)

    @accepts_logistic_difference
    def bernoulli(self, logits: Tensor, noise: Tensor) -> Tensor:
        native = _native_straight_through(logits, noise, self.tau)
        if native is not None:
            return native
        return apply_function(_BinarySample, logits, noise, "st", self.tau)


@ESTIMATORS.register("st_identity")
@dataclass(frozen=True)
class STIdentity(Estimator):
    r"""Straight-through that copies the gradient onto the logits unchanged.

    Forward: the exact sample :math:`D`. Backward:
    :math:`\partial L / \partial \ell = \bar y`. Biased. Bengio et al. (2013),
    https://arxiv.org/abs/1308.3432 (the plain, "identity" straight-through).

    The copy reaches every logit, an infinite one included (the one estimator whose
    gradient there is not 0).

    With ``probs`` the gradient is copied onto the probabilities unchanged,
    :math:`\partial L/\partial p = \bar y` (not the logits' chain rule), at 0 and 1 too.

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.zeros(4, requires_grad=True)
        >>> y = hg.bernoulli(logits, estimator="st_identity", generator=torch.Generator().manual_seed(1))
        >>> (y * torch.arange(4.0)).sum().backward(); logits.grad
        tensor([0., 1., 2., 3.])
    """

    logistic_bernoulli_noise: ClassVar[bool] = True
    name: ClassVar[str] = "st_identity"
    probs_kind: ClassVar[str | None] = "identity"

    def categorical(self, logits: Tensor, noise: Tensor, dim: int) -> Tensor:
        return apply_function(_IdentitySample, logits, noise, dim)

    @accepts_logistic_difference
    def bernoulli(self, logits: Tensor, noise: Tensor) -> Tensor:
        return apply_function(_BinarySample, logits, noise, "identity", 1.0)
