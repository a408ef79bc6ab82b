r"""Gapped straight-through (GST): ST-Gumbel's backward at deterministically gapped logits
instead of noisy ones (notation in :mod:`hardgrad.estimators._pathwise`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from .._core.kernels import argmax, cast, finite, one_hot, softmax_vjp
from .._core.validation import check_positive
from ..ops._autograd import apply_function, cached_signature, mark_non_differentiable
from ._base import ESTIMATORS, accepts_logistic_difference
from ._pathwise import _binary_sample, _BinaryPerturbedSample, _Tempered
from ._shift import shift_to_zero


@cached_signature
class _GappedSample(torch.autograd.Function):
    """Forward the Gumbel-max sample; backward through the softmax of the gapped logits."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        logits: Tensor, gumbel: Tensor, dim: int, tau: float, gap: float
    ) -> tuple[Tensor, Tensor]:
        ell = shift_to_zero(cast(logits, gumbel.dtype), dim, check="logits")
        sample = one_hot(logits, dim, argmax(ell + gumbel, dim))
        ell = finite(ell)
        top = ell.amax(dim, keepdim=True)
        # The sampled logit is lifted to the maximum, every other one kept at least `gap`
        # below: D top + (1 - D) min(l, top - gap), exact (one product is 0, both factors
        # finite); a bool D would be what inductor's partitioner saves, and stores slowly.
        on = cast(sample, ell.dtype)
        return sample, top * on + torch.minimum(ell, top - gap) * (1 - on)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        _, _, ctx.dim, ctx.tau, _ = inputs
        gapped = output[1]
        mark_non_differentiable(ctx, gapped)
        ctx.save_for_backward(gapped)

    @staticmethod
    def backward(
        ctx: Any, grad: Tensor, _grad_gapped: Any
    ) -> tuple[Tensor, None, None, None, None]:
        (gapped,) = ctx.saved_tensors
        return softmax_vjp(gapped, grad, ctx.dim, ctx.tau), None, None, None, None


@cached_signature
class _BinaryGappedSample(_BinaryPerturbedSample):
    r"""GST's direct Bernoulli form: the two-class unit :math:`[0, \ell]` in closed form.

    With :math:`t = \max(0, \ell)` (the larger of the two logits), the gapped logits are
    :math:`(z_0, z_1) = (\min(0, t - \kappa), t)` when :math:`b = 1` and
    :math:`(t, \min(\ell, t - \kappa))` when :math:`b = 0`; the backward of class 1 with
    respect to :math:`\ell` is :math:`\bar y\, \sigma'(d/\tau)/\tau` with
    :math:`d = z_1 - z_0`, what the two-class softmax Jacobian gives. As :math:`\kappa > 0`,
    that difference is :math:`d = \max(\ell, \kappa)` when :math:`b = 1` and
    :math:`\min(\ell, -\kappa)` when :math:`b = 0`, computed so, without rounding. Same
    sample and, up to rounding, the same gradient as :class:`_GappedSample` on
    ``[0, logits]``. Saves ``d`` and differentiates as :class:`_BinaryPerturbedSample`
    (whose third argument, the kind, is here the gap).
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(  # type: ignore[override]
        logits: Tensor, gumbel: Tensor, gap: float, tau: float
    ) -> tuple[Tensor, Tensor]:
        sample, _ = _binary_sample(logits, gumbel)
        ell = finite(cast(logits, gumbel.dtype))
        # b max(l, gap) + (1 - b) min(l, -gap): exact, as one product is 0 (l is finite),
        # and no bool tensor, which inductor's partitioner would save (and CPU code stores
        # slowly) in place of the difference
        on = cast(sample, ell.dtype)
        return sample, ell.clamp_min(gap) * on + ell.clamp_max(-gap) * (1 - on)


@ESTIMATORS.register("gst")
@dataclass(frozen=True)
class GST(_Tempered):
    r"""Gapped straight-through: ST-Gumbel with a deterministic perturbation instead of noise.

    Forward: the exact sample :math:`D`. Backward: the softmax Jacobian at the *gapped*
    logits :math:`z = \ell + \operatorname{sg}(m_1 - m_2)`, where
    :math:`m_1 = (\max_j \ell_j - \ell) \odot D` lifts the sampled logit to the maximum
    and :math:`m_2 = \operatorname{relu}(\ell - \max_j \ell_j + \kappa) \odot (1 - D)`
    pushes every other logit at least the gap :math:`\kappa` below it:

    .. math::

        z_i = \begin{cases} \max_j \ell_j & D_i = 1 \\ \min(\ell_i, \max_j \ell_j - \kappa) & D_i = 0 \end{cases},
        \qquad \frac{\partial L}{\partial \ell} = \tfrac1\tau J(\operatorname{softmax}(z/\tau))^\top \bar y.

    The perturbation depends only on the sample, so the backward carries none of the Gumbel
    noise's variance beyond the sample itself. Biased. Fan et al. (2022), "Training
    Discrete Deep Generative Models via Gapped Straight-Through Estimator",
    https://arxiv.org/abs/2206.07235.

    With ``probs``: the chain rule through :math:`\ell = \log q`, the gapped logits
    written as a perturbation of :math:`\log q` (0 for a class of probability 0); at a
    probability of 0 the limit is 0 for :math:`\tau < 1`, infinite for :math:`\tau > 1`,
    and (Bernoulli) 1 for :math:`\tau = 1`.

    Args:
        tau: temperature of the backward's softmax, > 0.
        gap: the margin :math:`\kappa` kept between the sampled logit and the others, > 0.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.estimators.GST(tau=0.5, gap=1.0)
        GST(tau=0.5, gap=1.0)
    """

    gap: float = 1.0
    logistic_bernoulli_noise: ClassVar[bool] = True
    name: ClassVar[str] = "gst"
    probs_kind: ClassVar[str | None] = "gst"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self.gap, "gap")

    def categorical(self, logits: Tensor, noise: Tensor, dim: int) -> Tensor:
        sample, _ = apply_function(_GappedSample, logits, noise, dim, self.tau, self.gap)
        return sample

    @accepts_logistic_difference
    def bernoulli(self, logits: Tensor, noise: Tensor) -> Tensor:
        return apply_function(_BinaryGappedSample, logits, noise, self.gap, self.tau)[0]
