r"""The Gumbel-softmax relaxation and straight-through Gumbel-softmax (ST-Gumbel), which
differentiates the relaxation at the exact sample (notation in :mod:`hardgrad.estimators._pathwise`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from .._core.kernels import argmax, cast, eager_plain, finite, one_hot, opmath, softmax_vjp
from ..ops._autograd import apply_function, cached_signature, mark_non_differentiable
from ._base import ESTIMATORS, accepts_logistic_difference
from ._pathwise import _BinaryPerturbedSample, _perturbed, _softmax_jacobian_product, _Tempered


@cached_signature
class _GumbelStraightThroughSample(torch.autograd.Function):
    """Forward the Gumbel-max sample; backward through :math:`\\operatorname{softmax}((\\ell + g)/\\tau)`."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, gumbel: Tensor, dim: int, tau: float) -> tuple[Tensor, Tensor]:
        perturbed = _perturbed(logits, gumbel, dim)
        return one_hot(logits, dim, argmax(perturbed, dim)), perturbed

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        _, _, ctx.dim, ctx.tau = inputs
        perturbed = output[1]
        mark_non_differentiable(ctx, perturbed)
        ctx.save_for_backward(perturbed)  # the one tensor backward needs: 4 bytes/element

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _grad_perturbed: Any) -> tuple[Tensor, None, None, None]:
        (perturbed,) = ctx.saved_tensors
        return softmax_vjp(perturbed, grad, ctx.dim, ctx.tau), None, None, None


def _relaxed_softmax(
    logits: Tensor, gumbel: Tensor, dim: int, tau: float, check: bool = True
) -> Tensor:
    r""":math:`\operatorname{softmax}((\ell + g)/\tau)` along ``dim`` in the compute dtype,
    from the shifted logits (:func:`_perturbed`), NaN read as 0."""
    perturbed = _perturbed(logits, gumbel, dim, check)
    if tau != 1:
        perturbed = perturbed.div_(tau) if eager_plain(perturbed) else perturbed / tau
    return torch.softmax(finite(perturbed), dim)


@cached_signature
class _Relaxation(torch.autograd.Function):
    r"""The Gumbel-softmax relaxation :math:`y = \operatorname{softmax}((\ell + g)/\tau)`
    with its exact backward :math:`\tfrac1\tau J(y)^\top \bar y`, from the saved output
    (nothing else) for float32/float64 logits; half-precision ones save their logits and
    noise, and the backward recomputes :math:`y` in float32."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, gumbel: Tensor, dim: int, tau: float) -> Tensor:
        return cast(_relaxed_softmax(logits, gumbel, dim, tau), logits.dtype)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        logits, gumbel, ctx.dim, ctx.tau = inputs
        ctx.from_output = output.dtype == gumbel.dtype
        ctx.save_for_backward(*((output,) if ctx.from_output else (logits, gumbel)))

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        if ctx.from_output:
            (relaxed,) = ctx.saved_tensors
        else:
            logits, gumbel = ctx.saved_tensors
            relaxed = _relaxed_softmax(logits, gumbel, ctx.dim, ctx.tau, check=False)
        vjp = _softmax_jacobian_product(opmath(grad), relaxed, ctx.dim)
        return cast(vjp if ctx.tau == 1 else vjp / ctx.tau, grad.dtype), None, None, None


@ESTIMATORS.register("gumbel_softmax")
@dataclass(frozen=True)
class GumbelSoftmax(_Tempered):
    r"""The Gumbel-softmax (Concrete) relaxation: a soft sample, not a discrete one.

    Forward: :math:`y = \operatorname{softmax}((\ell + g)/\tau)`, values in (0, 1) summing
    to 1 (for Bernoulli units :math:`\sigma((\ell + L)/\tau)` with logistic :math:`L`).
    Backward: its exact (pathwise) gradient. Biased for the discrete objective, unbiased for
    the relaxed one; :math:`\tau \to 0` approaches the discrete sample with growing
    variance. Jang et al. (2017), https://arxiv.org/abs/1611.01144; Maddison et al. (2017),
    https://arxiv.org/abs/1611.00712.

    With ``probs``: :math:`y = \operatorname{softmax}((\log q + g)/\tau)`, exactly 0 for a
    class of probability 0; its gradient with respect to :math:`q` is ST-Gumbel's (below).

    Example:
        >>> import torch, hardgrad as hg
        >>> y = hg.categorical(torch.zeros(3), estimator=hg.estimators.GumbelSoftmax(tau=0.5),
        ...                    generator=torch.Generator().manual_seed(0))
        >>> y.sum()
        tensor(1.)
    """

    logistic_bernoulli_noise: ClassVar[bool] = True
    name: ClassVar[str] = "gumbel_softmax"
    probs_kind: ClassVar[str | None] = "gumbel_softmax"
    discrete: ClassVar[bool] = False

    def categorical(self, logits: Tensor, noise: Tensor, dim: int) -> Tensor:
        return apply_function(_Relaxation, logits, noise, dim, self.tau)

    @accepts_logistic_difference
    def bernoulli(self, logits: Tensor, noise: Tensor) -> Tensor:
        r"""Class 1 of the two-class relaxation in its direct form,
        :math:`\sigma((\ell + g_1 - g_0)/\tau)` (:math:`g_1 - g_0` is logistic): the
        two-class softmax's value up to rounding, without the stacked logits."""
        return apply_function(_BinaryPerturbedSample, logits, noise, "relaxed", self.tau)[0]


@ESTIMATORS.register("st_gumbel")
@dataclass(frozen=True)
class STGumbel(_Tempered):
    r"""Straight-through Gumbel-softmax: the exact sample forward, the relaxation backward.

    Forward: :math:`D = \operatorname{onehot}(\arg\max(\ell + g))`. Backward:
    :math:`\tfrac1\tau J(\operatorname{softmax}((\ell + g)/\tau))^\top \bar y`, with the same
    :math:`g`: the backward of ``F.gumbel_softmax(hard=True)``, whose forward this matches
    except that it is exactly one-hot. Biased. Jang et al. (2017),
    https://arxiv.org/abs/1611.01144.

    With ``probs``: the chain rule through :math:`\ell = \log q`; at a probability of 0
    the limit is 0 for :math:`\tau < 1`, infinite for :math:`\tau > 1`, and for
    :math:`\tau = 1` finite on every draw (Bernoulli: :math:`e^{g_1 - g_0}` at
    :math:`p = 0`, :math:`e^{g_0 - g_1}` at 1), with a mean over draws that grows like
    :math:`\log(1/p)` as :math:`p \to 0`.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.categorical(torch.tensor([[2.0, 0.0, 0.0]]), estimator="st_gumbel",
        ...                generator=torch.Generator().manual_seed(0))
        tensor([[1., 0., 0.]])
    """

    logistic_bernoulli_noise: ClassVar[bool] = True
    name: ClassVar[str] = "st_gumbel"
    probs_kind: ClassVar[str | None] = "st_gumbel"

    def categorical(self, logits: Tensor, noise: Tensor, dim: int) -> Tensor:
        sample, _ = apply_function(_GumbelStraightThroughSample, logits, noise, dim, self.tau)
        return sample

    @accepts_logistic_difference
    def bernoulli(self, logits: Tensor, noise: Tensor) -> Tensor:
        return apply_function(_BinaryPerturbedSample, logits, noise, "st_gumbel", self.tau)[0]
