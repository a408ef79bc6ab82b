r"""ARM and DisARM: Bernoulli score-function estimators on antithetic pairs of uniforms
(notation in :mod:`hardgrad.estimators._score`)."""

from __future__ import annotations

import abc
from typing import ClassVar

import torch
from torch import Tensor

from .._core.kernels import eager_plain
from ._base import ESTIMATORS
from ._noise import uniform
from ._problem import Problem
from ._score import _WithoutSettings, attach_parameter_gradient


class _Antithetic(_WithoutSettings):
    """Bernoulli estimators built on antithetic pairs ``(u, 1 - u)``: ``num_samples`` is even
    and counts both members of every pair."""

    dists: ClassVar[tuple[str, ...]] = ("bernoulli",)
    min_samples: ClassVar[int] = 2
    sample_multiple: ClassVar[int] = 2

    def expectation(self, problem: Problem) -> Tensor:
        work = problem.work
        pairs = problem.num_samples // 2
        u = uniform(work, problem.generator, (pairs, *work.shape)).to(work.dtype)
        with_probs = problem.probs is not None
        both = self.stacked_pair(work, u, with_probs)
        first, second = both[:pairs], both[pairs:]
        values = problem.evaluate(both)
        f = values.detach().to(work.dtype)
        difference = problem.spread(f[:pairs] - f[pairs:])
        weight = self.weight_probs if with_probs else self.weight
        gradient = (difference * weight(work, u, first, second)).mean(0)
        return attach_parameter_gradient(problem, values.mean(0), gradient)

    def stacked_pair(self, work: Tensor, u: Tensor, with_probs: bool) -> Tensor:
        """:meth:`pair` (or :meth:`pair_probs`) of ``work``, the first samples then the
        second ones along dimension 0 (what ``f`` is evaluated on)."""
        first, second = self.pair_probs(work, u) if with_probs else self.pair(work, u)
        return torch.cat((first, second))

    @abc.abstractmethod
    def pair(self, theta: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        """The two samples of each pair, from the same uniforms."""

    @abc.abstractmethod
    def weight(self, theta: Tensor, u: Tensor, first: Tensor, second: Tensor) -> Tensor:
        """What multiplies ``f(first) - f(second)``."""

    @abc.abstractmethod
    def pair_probs(self, p: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`pair` from probabilities ``p``."""

    @abc.abstractmethod
    def weight_probs(self, p: Tensor, u: Tensor, first: Tensor, second: Tensor) -> Tensor:
        """:meth:`weight` for the gradient with respect to ``p`` (finite at 0 and 1)."""


@ESTIMATORS.register("arm")
class ARM(_Antithetic):
    r"""Augment-REINFORCE-merge (ARM) for Bernoulli variables.

    With :math:`u \sim U(0,1)^d` shared by a pair:

    .. math:: \hat g = \big(f(\mathbb 1[u > \sigma(-\theta)]) - f(\mathbb 1[u < \sigma(\theta)])\big)
        \,(u - \tfrac12),

    averaged over ``num_samples / 2`` pairs (two evaluations each). Unbiased. Bernoulli
    only (the categorical extension, ARSM, is not implemented). Where :math:`\sigma(\theta_i)`
    is exactly 0 or 1 in the compute dtype (infinite logits included) the pair always
    agrees on coordinate :math:`i` and its weight is 0, the term's conditional mean (so an
    infinite logit gets exactly 0). Yin & Zhou (2019),
    https://arxiv.org/abs/1807.11143.

    With ``probs``: the weight :math:`(u - \tfrac12)/(p(1-p))` inside (0, 1); at exactly 0
    or 1 it is 0. There the formula's limit is infinite (the pair agrees on this
    coordinate, but :math:`f(b) - f(\tilde b)` differs whenever another coordinate's pair
    does); 0 is that term's mean given the pair. Near 0 and 1 the variance grows like
    :math:`1/p^2`: prefer DisARM.

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.zeros(3, requires_grad=True)
        >>> value = hg.expectation(lambda b: (b - 0.4).square().sum(-1), logits,
        ...                        estimator="arm", generator=torch.Generator().manual_seed(0))
        >>> value.backward(); logits.grad.shape
        torch.Size([3])
    """

    name: ClassVar[str] = "arm"

    def pair(self, theta: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        return (u > torch.sigmoid(-theta)).to(u.dtype), (u < torch.sigmoid(theta)).to(u.dtype)

    def weight(self, theta: Tensor, u: Tensor, first: Tensor, second: Tensor) -> Tensor:
        # u - 1/2; 0 where sigma(theta) is exactly 0 or 1 (infinite logits, or beyond
        # about +-104 in float32): there the pair always agrees on this coordinate, u is
        # uniform on an interval symmetric about 1/2 given that, and f(b) - f(b~) does not
        # depend on it, so the term's mean is 0 and 0 is its value (unbiased, and the
        # gradient of an infinite logit is exactly 0, as for every estimator).
        certain = (torch.sigmoid(theta) * torch.sigmoid(-theta)) == 0
        return torch.where(certain, 0.0, u - 0.5)

    def pair_probs(self, p: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        return (u > 1 - p).to(u.dtype), (u < p).to(u.dtype)

    def weight_probs(self, p: Tensor, u: Tensor, first: Tensor, second: Tensor) -> Tensor:
        # (u - 1/2) / (p (1 - p)) inside (0, 1); at 0 and 1, where the limit is infinite
        # whenever another coordinate's pair differs, the term's mean given the pair: 0.
        inside = (p > 0) & (p < 1)
        return torch.where(inside, (u - 0.5) / torch.where(inside, p * (1 - p), 1), 0)


@ESTIMATORS.register("disarm")
class DisARM(_Antithetic):
    r"""DisARM: ARM with the uniforms integrated out given the antithetic pair.

    With :math:`b = \mathbb 1[u < \sigma(\theta)]` and :math:`\tilde b = \mathbb 1[1 - u < \sigma(\theta)]`:

    .. math:: \hat g_i = \tfrac12 \big(f(b) - f(\tilde b)\big)\,(-1)^{\tilde b_i}\,
        \mathbb 1[b_i \ne \tilde b_i]\, \sigma(|\theta_i|),

    averaged over ``num_samples / 2`` pairs. Unbiased, with variance never above ARM's; at
    :math:`\theta = 0` a pair always disagrees, so on a one-variable objective the
    variance is 0. Bernoulli only. Dong, Mnih & Tucker (2020),
    https://arxiv.org/abs/2006.10680.

    With ``probs``: the weight :math:`\sigma(|\theta_i|)/(p_i(1-p_i)) = 1/\min(p_i, 1-p_i)`
    where the pair disagrees; at 0 and 1 it never does, so the gradient is 0 (the limit).

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.zeros(1, requires_grad=True)   # the toy at phi = 0: exact every time
        >>> hg.expectation(lambda b: (b - 0.45).square().sum(-1), logits,
        ...                generator=torch.Generator().manual_seed(0)).backward()
        >>> logits.grad   # p(1-p)(1-2t) = 0.25 * 0.1
        tensor([0.0250])
    """

    name: ClassVar[str] = "disarm"

    def stacked_pair(self, work: Tensor, u: Tensor, with_probs: bool) -> Tensor:
        if not eager_plain(u):
            return super().stacked_pair(work, u, with_probs)
        # Both comparisons written as 0/1 straight into the halves of one tensor: 4 passes
        # where two conversions and a concatenation made 7. The same values.
        p = work if with_probs else torch.sigmoid(work)
        pairs = u.shape[0]
        both = u.new_empty((2 * pairs, *u.shape[1:]))
        torch.lt(u, p, out=both[:pairs])
        torch.lt(torch.sub(1, u), p, out=both[pairs:])
        return both

    def pair(self, theta: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        p = torch.sigmoid(theta)
        return (u < p).to(u.dtype), ((1 - u) < p).to(u.dtype)

    def weight(self, theta: Tensor, u: Tensor, first: Tensor, second: Tensor) -> Tensor:
        # (-1)^second [first != second] is first - second, exactly (a 0 where they agree)
        return torch.sigmoid(theta.abs()).mul(first - second).mul_(0.5)

    def pair_probs(self, p: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        return (u < p).to(u.dtype), ((1 - u) < p).to(u.dtype)

    def weight_probs(self, p: Tensor, u: Tensor, first: Tensor, second: Tensor) -> Tensor:
        # sigma(|theta|) / (p (1 - p)) = 1 / min(p, 1 - p); a pair never disagrees at 0 or 1.
        # The 0/1 mask multiplies, and moves the divisor off 0 where it is unset (CPU
        # torch.where branches per element, and whether a pair disagrees is a coin flip
        # near p = 1/2); + 0.0 turns the unset entries' -0 into 0. The same values.
        disagree = (first != second).to(second.dtype)
        smaller = torch.minimum(p, 1 - p) + (1 - disagree)
        return 0.5 * (1 - 2 * second) * disagree / smaller + 0.0
