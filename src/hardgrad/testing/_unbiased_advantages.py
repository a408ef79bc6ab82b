r""":func:`assert_unbiased_advantages`: a z-test of a user's advantage function (the policy
gradient it gives over sampled sequences) against the exact gradient by enumeration."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import Tensor

from .._core.validation import check_int
from ..diagnostics._sequences import _SequenceProblem
from ..policy import policy_loss
from ._unbiased import UnbiasednessTest, _check_test_args, _z_test

__all__ = ["assert_unbiased_advantages"]


def assert_unbiased_advantages(
    advantages: Callable[[Tensor, Tensor], Tensor],
    policy: Callable[[Tensor], Tensor],
    reward: Callable[[Tensor], Tensor],
    *,
    vocab_size: int,
    length: int,
    params: Tensor | Iterable[Tensor],
    group_size: int = 4,
    num_groups: int = 1,
    eos_token: int | None = None,
    num_draws: int = 4000,
    false_failure_rate: float = 1e-6,
    generator: torch.Generator | None = None,
) -> UnbiasednessTest:
    r"""Assert that your advantage function gives an unbiased policy gradient.

    The sibling of :func:`assert_unbiased` for :mod:`hardgrad.policy`'s setting (that one
    takes an estimator of :mod:`hardgrad.estimators` and an objective of one tensor of
    logits; here the samples are sequences of a small autoregressive policy and the code
    under test is a function of rewards and group ids).

    Each of :math:`D` = ``num_draws`` batches holds ``num_groups`` groups (ids
    ``0..num_groups-1``) of ``group_size`` sequences drawn from ``policy`` (seeded with
    ``generator``); ``advantages(rewards, groups)`` is called once per batch, as a trainer
    calls it, and the batch's gradient estimate is

    .. math:: \hat g = \frac1N \sum_{i=1}^N A_i\, \nabla_\theta \log\pi_\theta(y_i)

    (:func:`hardgrad.policy.policy_loss` with ``"token-sum"`` and normaliser :math:`N`),
    whose expectation is :math:`\nabla_\theta \mathbb{E}[R]` exactly when the advantages
    are unbiased. Each coordinate's mean over the batches is z-tested against
    :func:`hardgrad.policy.exact_sequence_gradient`'s gradient as in
    :func:`assert_unbiased` (Bonferroni over the coordinates that vary): an unbiased
    advantage fails with probability at most ``false_failure_rate`` (nominal, by the normal
    approximation of the mean of thousands of draws). A biased one fails when its bias
    exceeds about ``threshold`` standard errors (the result's ``detectable_bias``); a bias in
    scale alone (e.g. Dr. GRPO's :math:`(n-1)/n`) is a bias too.

    Args:
        advantages: your code, ``(rewards (N,), groups (N,) long) -> advantages (N,)``.
        policy, reward, vocab_size, length, params, eos_token: a small policy and reward,
            as for :func:`hardgrad.policy.exact_sequence_gradient` (:math:`V^L \le 10^5`).
        group_size: sequences per group (:math:`\ge 1`).
        num_groups: groups per batch.
        num_draws: batches :math:`D \ge 2`.
        false_failure_rate: :math:`\alpha \in (0, 1)`.
        generator: the source of randomness (seed it for a reproducible outcome).

    Returns:
        The :class:`UnbiasednessTest` over the flattened ``params``, when the test passes.

    Raises:
        AssertionError: the mean is too far from the exact gradient. The message gives the
            measured bias :math:`\lVert \bar g - g^* \rVert`, the scale
            :math:`\langle\bar g, g^*\rangle / \lVert g^*\rVert^2`, and for the worst
            coordinates the bias with its confidence interval at the test's (Bonferroni)
            level :math:`\pm c \cdot \text{se}`.
        TypeError, ValueError: bad arguments, or ``advantages`` returning a wrong shape.

    Example:
        >>> import torch, hardgrad as hg
        >>> from hardgrad.testing import assert_unbiased_advantages
        >>> table = torch.tensor([[1.5, 0.0, -1.0], [0.0, 1.0, -0.5]], dtype=torch.float64,
        ...                      requires_grad=True)  # logits of token 0, then token 1
        >>> policy = lambda prefix: table[prefix.shape[1]].expand(len(prefix), 3)
        >>> reward = lambda y: (y == 2).sum(1).double() + 3.0 * (y[:, 0] == 1)
        >>> def leave_one_out(rewards, groups):  # one group per batch here
        ...     n = len(rewards)
        ...     return rewards - (rewards.sum() - rewards) / (n - 1)
        >>> g = torch.Generator().manual_seed(0)
        >>> result = assert_unbiased_advantages(leave_one_out, policy, reward, vocab_size=3,
        ...                                     length=2, params=table, generator=g)
        >>> result.passed
        True
        >>> def grpo(rewards, groups):
        ...     return (rewards - rewards.mean()) / (rewards.std() + 1e-4)
        >>> assert_unbiased_advantages(grpo, policy, reward, vocab_size=3, length=2,
        ...                            params=table, generator=g)
        Traceback (most recent call last):
        ...
        AssertionError: grpo: BIASED; max |z| = ...
    """
    if not callable(advantages):
        raise TypeError(
            f"Expected `advantages` to be callable, but found {type(advantages).__name__}"
        )
    _check_test_args(num_draws, false_failure_rate)
    group_size = check_int(group_size, "group_size", low=1)
    num_groups = check_int(num_groups, "num_groups", low=1)
    problem = _SequenceProblem(
        policy, reward, vocab_size=vocab_size, length=length, params=params, eos_token=eos_token
    )
    size = group_size * num_groups

    def loss(rewards: Tensor, groups: Tensor, logprobs: Tensor, mask: Tensor) -> Tensor:
        adv = advantages(rewards, groups)
        if not isinstance(adv, Tensor) or adv.shape != rewards.shape:
            found = tuple(adv.shape) if isinstance(adv, Tensor) else type(adv).__name__
            raise ValueError(
                f"Expected `advantages` to return a tensor of shape ({len(rewards)},), one "
                f"advantage per sequence, but found {found}"
            )
        return policy_loss(logprobs, adv, mask, aggregation="token-sum", normalizer=size)

    index = problem.sample(num_draws * size, generator).reshape(num_draws, size)
    draws = problem.draws(loss, index, group_size, num_groups)
    name = getattr(advantages, "__name__", None) or repr(advantages)
    eps = torch.finfo(problem.probs.dtype).eps
    result = _z_test(name, draws, problem.exact, eps, false_failure_rate)
    if not result.passed:
        raise AssertionError(f"{result}; {_bias_text(result)}")
    return result


def _bias_text(result: UnbiasednessTest, count: int = 3) -> str:
    """The measured bias, the scale, and the worst coordinates' biases with their intervals."""
    difference = result.mean - result.exact
    norm = float(result.exact @ result.exact)
    scale = f"{float(result.mean @ result.exact) / norm:.4g}" if norm > 0 else "-"
    noise = math.sqrt(float((result.standard_error**2).sum()))
    parts = [
        f"measured bias |mean - exact| = {float(difference.norm()):.4g} (noise level "
        f"{noise:.2g}), mean = {scale} x exact along the exact gradient; worst coordinates "
        f"(bias, {1 - result.false_failure_rate:g} simultaneous interval):"
    ]
    for k in result.z.abs().argsort(descending=True)[:count].tolist():
        half = result.threshold * float(result.standard_error[k])
        bias = float(difference[k])
        parts.append(
            f"[{k}] bias {bias:.4g} in [{bias - half:.4g}, {bias + half:.4g}] (exact "
            f"{float(result.exact[k]):.4g}, z = {float(result.z[k]):.3g})"
        )
    return " ".join(parts)
