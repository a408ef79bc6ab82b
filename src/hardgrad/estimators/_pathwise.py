r"""Pathwise estimators: a sample (or relaxation) whose backward carries the estimate. This
module holds what they share; one file per family: ``_straight_through`` (ST, ST-identity),
``_gumbel_softmax`` (Gumbel-softmax, ST-Gumbel), ``_gumbel_rao``, ``_reinmax`` and ``_gst``.

Notation, along the category dimension: logits :math:`\ell`, probabilities
:math:`\pi = \operatorname{softmax}(\ell)`, Gumbel noise :math:`g`, the exact sample
:math:`D = \operatorname{onehot}(\arg\max_i \ell_i + g_i)` (Gumbel-max), the incoming
gradient :math:`\bar y = \partial L / \partial y`, and for a probability vector :math:`p`
the softmax Jacobian product :math:`J(p)^\top \bar y = p \odot (\bar y - \langle \bar y, p\rangle)`.

With ``probs=`` (:func:`hardgrad.bernoulli`, :func:`hardgrad.categorical`) each estimator's
backward, defined in logit space, is taken to the probabilities by the chain rule through
:math:`\ell = \log q`, computed so that it stays finite at probabilities of 0 and 1, where
it is the formula's limit (:mod:`hardgrad.estimators._probs`); each class says its limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .._core.kernels import argmax, cast, constant, eager_plain, finite, one_hot, opmath
from .._core.validation import check_normal, check_positive
from ..ops._autograd import cached_signature, mark_non_differentiable
from ._base import Estimator
from ._shift import shift_to_zero


def _perturbed(logits: Tensor, gumbel: Tensor, dim: int, check: bool = True) -> Tensor:
    r""":math:`s + g` for the logits shifted to a largest entry of 0,
    :math:`s = \ell - \max_j \ell_j` (:mod:`hardgrad.estimators._shift`: the sample then
    depends on logit differences only, and infinities are exact), in the noise's dtype.
    ``check``: refuse rows of -inf only (while value checks apply)."""
    shifted = shift_to_zero(cast(logits, gumbel.dtype), dim, check="logits" if check else None)
    return shifted.add_(gumbel) if eager_plain(shifted) else shifted + gumbel


def _gumbel_max(logits: Tensor, gumbel: Tensor, dim: int) -> Tensor:
    """The exact one-hot sample ``onehot(argmax(logits - max(logits) + gumbel))`` in
    ``logits``' dtype (:func:`_perturbed`)."""
    index = argmax(_perturbed(logits, gumbel, dim), dim)
    return one_hot(logits, dim, index)


def _softmax_jacobian_product(grad: Tensor, p: Tensor, dim: int) -> Tensor:
    """:math:`J(p)^\top g = p \\odot (g - \\langle g, p\rangle)` in one fused pass."""
    return torch._softmax_backward_data(grad, p, dim, p.dtype)


def _check_tau(tau: Any) -> float:
    """A positive finite number, normal in float64 (a subnormal ``tau`` has ``1 / tau = inf``
    in every dtype); the samplers check it again against the dtype they compute in."""
    return check_normal(check_positive(tau, "tau"), "tau", torch.float64)


def _perturbed_log_odds(logits: Tensor, gumbel: Tensor) -> Tensor:
    r""":math:`d = \ell + g_1 - g_0` in the noise's (compute) dtype, for the two-class noise
    pair ``gumbel`` (shape ``(*logits.shape, 2)``) or the difference :math:`g_1 - g_0`
    alone (``logits``' shape, see :func:`~hardgrad.estimators._base.accepts_logistic_difference`)."""
    if gumbel.dim() == logits.dim():
        return cast(logits, gumbel.dtype) + gumbel
    g0, g1 = gumbel.unbind(-1)
    difference = cast(logits, gumbel.dtype) + g1
    return difference.sub_(g0) if eager_plain(difference) else difference - g0


def _binary_sample(logits: Tensor, gumbel: Tensor) -> tuple[Tensor, Tensor]:
    """Class 1 of the Gumbel-max sample of ``[0, logits]`` and the perturbed log-odds.

    ``argmax(g0, logits + g1)`` picks class 1 unless ``logits + g1 <= g0`` (ties go to the
    first class, NaN counts as the largest), which is ``d <= 0`` for the perturbed log-odds
    ``d = logits + g1 - g0``: the sign of a difference of floats is exact, and the noise is
    finite. Both come from ``d``, so that the noise is read once (under ``torch.compile``
    a second reader makes inductor write the noise pair out).
    """
    difference = _perturbed_log_odds(logits, gumbel)
    if not eager_plain(difference):
        return 1 - torch.le(difference, 0).to(logits.dtype), difference
    # Written straight into the sample's dtype, with 0-d constants: 2 kernels, not 3 (and
    # no wrapped Python numbers), which is most of the cost on small tensors.
    sample = torch.le(difference, constant(0.0, difference), out=torch.empty_like(logits))
    return torch.sub(constant(1.0, sample), sample, out=sample), difference


def _binary_relaxation(logits: Tensor, gumbel: Tensor, tau: float) -> tuple[Tensor, Tensor]:
    r"""Class 1 of the two-class Gumbel-softmax, :math:`\sigma(d/\tau)` in ``logits``'
    dtype, and the perturbed log-odds :math:`d = \ell + g_1 - g_0` (compute dtype)."""
    difference = _perturbed_log_odds(logits, gumbel)
    scaled = finite(difference if tau == 1 else difference / tau)
    relaxed = scaled.sigmoid_() if eager_plain(scaled) else scaled.sigmoid()
    return cast(relaxed, logits.dtype), difference


_sigmoid_backward = torch.ops.aten.sigmoid_backward.default


def _times_sigmoid_slope(grad: Tensor, x: Tensor, tau: float) -> Tensor:
    r""":math:`g\,\sigma'(x/\tau)/\tau` in ``grad``'s dtype, for ``x`` in the compute
    dtype, NaN read as 0 (the slope 1/4) and :math:`\pm\infty` giving 0.
    :math:`\sigma'` is even, so it is :math:`s(1 - s)` at :math:`s = \sigma(-|x|/\tau)
    \le 1/2`, where :math:`1 - s` has no cancellation (as accurate in the tails as
    :math:`\sigma(x)\sigma(-x)`), times :math:`g` in one fused kernel (what
    ``torch.sigmoid``'s own backward runs): 4 passes instead of 8."""
    magnitude = x.abs()
    if eager_plain(magnitude):
        magnitude = magnitude.nan_to_num_(0.0, posinf=math.inf)
    else:  # what inductor fuses best
        magnitude = torch.where(magnitude != magnitude, 0.0, magnitude)
    scaled = magnitude if tau == 1 else magnitude.div_(tau)
    s = torch.sigmoid(scaled.neg_())
    out = _sigmoid_backward(opmath(grad), s)
    return cast(out if tau == 1 else out.div_(tau), grad.dtype)


def _binary_reinmax_backward(grad: Tensor, logits: Tensor, sample: Tensor, tau: float) -> Tensor:
    r"""ReinMax's two-class backward, :math:`\bar y\,(2r(1 - r) - \tfrac12\sigma'(\ell))`
    with :math:`r = \tfrac12(\sigma(\ell/\tau) + b)`, in a form without cancellation.

    With :math:`a = \sigma((1 - 2b)\,\ell/\tau)`, the probability at temperature
    :math:`\tau` of the value not drawn, :math:`2r(1 - r) = a(2 - a)/2` for both values of
    :math:`b` (:math:`1 - r = a/2` when :math:`b = 1`: no :math:`1 - r` rounds to 0 for
    large :math:`\ell`). At :math:`\tau = 1`, :math:`\sigma'(\ell) = a(1 - a)`, so the
    factor is exactly :math:`a/2`. NaN logits are read as 0, infinite ones as large.
    """
    ell = finite(opmath(logits))
    flip = 1 - 2 * cast(sample, ell.dtype)  # +1 where b = 0, -1 where b = 1
    signed = ell * flip
    a = torch.sigmoid(signed if tau == 1 else signed.div_(tau))
    g = opmath(grad)
    if tau == 1:
        return cast((g * a).mul_(0.5), grad.dtype)
    s = torch.sigmoid(ell.abs().neg_())  # sigma'(l) = s (1 - s) at s = sigma(-|l|)
    factor = (a * (2 - a)).sub_(s * (1 - s))
    return cast((g * factor).mul_(0.5), grad.dtype)


@cached_signature
class _BinarySample(torch.autograd.Function):
    r"""The Bernoulli unit's direct form: class 1 of the two-class sample, with the binary
    version of the straight-through backward of ``kind``: "st" (the log-odds saved),
    "identity" (nothing saved) or "reinmax" (the log-odds and the sample). One output: the
    perturbed log-odds of the draw are not needed after forward (the kinds that need them
    are :class:`_BinaryPerturbedSample`'s)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, gumbel: Tensor, kind: str, tau: float) -> Tensor:
        return _binary_sample(logits, gumbel)[0]

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        logits, _, ctx.kind, ctx.tau = inputs
        if ctx.kind == "st":
            ctx.save_for_backward(logits)
        elif ctx.kind == "reinmax":
            ctx.save_for_backward(logits, output)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        kind, tau = ctx.kind, ctx.tau
        if kind == "identity":
            return grad, None, None, None
        if kind == "reinmax":
            logits, sample = ctx.saved_tensors
            return _binary_reinmax_backward(grad, logits, sample, tau), None, None, None
        (logits,) = ctx.saved_tensors
        return _times_sigmoid_slope(grad, opmath(logits), tau), None, None, None


@cached_signature
class _BinaryPerturbedSample(torch.autograd.Function):
    r"""The Bernoulli unit's direct form whose backward reads the perturbed log-odds
    :math:`d = \ell + g_1 - g_0` of the draw (the one tensor saved): class 1 of the
    two-class sample with ST-Gumbel's backward (``kind`` "st_gumbel"), or class 1 of the
    two-class Gumbel-softmax (``kind`` "relaxed") with its exact backward; both are
    :math:`\bar y\,\sigma'(d/\tau)/\tau`."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, gumbel: Tensor, kind: str, tau: float) -> tuple[Tensor, Tensor]:
        if kind == "relaxed":
            return _binary_relaxation(logits, gumbel, tau)
        return _binary_sample(logits, gumbel)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        ctx.tau = inputs[3]
        difference = output[1]
        mark_non_differentiable(ctx, difference)
        ctx.save_for_backward(difference)

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _grad_difference: Any) -> tuple[Tensor | None, ...]:
        (difference,) = ctx.saved_tensors
        return _times_sigmoid_slope(grad, opmath(difference), ctx.tau), None, None, None


@dataclass(frozen=True)
class _Tempered(Estimator):
    """An estimator with a temperature ``tau`` > 0 (the softmax/sigmoid of its backward)."""

    tau: float = 1.0

    def __post_init__(self) -> None:
        _check_tau(self.tau)
