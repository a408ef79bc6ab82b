r"""Exact enumeration: :math:`E[f]` summed over every configuration and differentiated by
ordinary autograd, through :func:`hardgrad.expectation`."""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor

from .._core.validation import check_int
from ._base import ESTIMATORS, ScoreFunctionEstimator
from ._problem import Problem


@ESTIMATORS.register("exact")
class Exact(ScoreFunctionEstimator):
    r"""The exact expectation, by enumerating every configuration.

    .. math:: E[f] = \sum_{b} p_\theta(b)\, f(b),

    differentiated by ordinary autograd (so its gradient is exact, of every order, for the
    logits and for ``f``'s parameters). The variables of each prefix entry are enumerated
    jointly (:math:`2^m` or :math:`C^m` configurations for :math:`m` variables per entry)
    and all prefix entries are enumerated in parallel. ``f`` is called once when it returns
    one value per batch entry; when its prefix is shorter, a first call on the
    per-entry configurations (2 or C of them) tells the prefix, then all are enumerated. ``num_samples`` must be left ``None``.
    With ``probs``, :math:`p(b)` is a product of probabilities (no logarithms), so the
    gradient is exact at probabilities of 0 and 1 too.

    Args:
        max_configurations: the most configurations it will enumerate; more raise
            ``ValueError``.

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.zeros(3, requires_grad=True)
        >>> hg.expectation(lambda b: b.sum(-1), logits, estimator="exact")
        tensor(1.5000, grad_fn=<SumBackward1>)
    """

    name: ClassVar[str] = "exact"

    def __init__(self, max_configurations: int = 2**16) -> None:
        self.max_configurations = check_int(max_configurations, "max_configurations", low=1)

    def __repr__(self) -> str:
        return f"Exact(max_configurations={self.max_configurations})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Exact) and other.max_configurations == self.max_configurations

    def __hash__(self) -> int:
        return hash((Exact, self.max_configurations))

    def default_num_samples(self) -> int:
        return 0

    def expectation(self, problem: Problem) -> Tensor:
        if problem.prefix_ndim is None:
            # Guess the commonest case, one value per batch entry (each variable alone:
            # 2 or C configurations); f's answer tells the real prefix, and only a shorter
            # one needs a second, full enumeration.
            guess = len(problem.batch_shape)
            configurations = problem.configurations(self.max_configurations, guess)
            values = problem.evaluate(configurations)
            if problem.prefix_ndim != guess:
                configurations = problem.configurations(self.max_configurations)
                values = problem.evaluate(configurations)
        else:
            configurations = problem.configurations(self.max_configurations)
            values = problem.evaluate(configurations)
        if problem.probs is not None:
            # A product of probabilities, no logarithms: exact gradients at 0 and 1.
            probabilities = problem.probability(configurations)
        else:
            # Shifted and finite (Problem.exact_logits): -inf excluded exactly, +inf a point
            # mass with log-probability 0 instead of inf - inf = NaN.
            work = problem.exact_logits()
            probabilities = problem.log_prob(configurations.to(work.dtype), work).exp()
        dtype = torch.promote_types(values.dtype, probabilities.dtype)
        return (probabilities.to(dtype) * values.to(dtype)).sum(0).to(values.dtype)
