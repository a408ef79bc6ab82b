r""":func:`compare_sequence_estimators`: :func:`compare` for the policy-gradient estimators of
:mod:`hardgrad.policy`, on a user's small autoregressive policy and reward."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence

import torch
from torch import Tensor

from .._core.validation import check_int
from ..policy._estimators import _SequenceEstimator
from ._sequences import (
    LossFn,
    SequenceComparison,
    _entries,
    _SequenceProblem,
    summarize_draws,
)


def compare_sequence_estimators(
    policy: Callable[[Tensor], Tensor],
    reward: Callable[[Tensor], Tensor],
    *,
    vocab_size: int,
    length: int,
    params: Tensor | Iterable[Tensor],
    estimators: Sequence[str | LossFn] | Mapping[str, str | LossFn],
    group_size: int = 4,
    num_groups: int = 1,
    num_draws: int = 1000,
    eos_token: int | None = None,
    exact_expectation: bool | None = None,
    max_sequences: int = 10**5,
    generator: torch.Generator | None = None,
) -> SequenceComparison:
    r"""Bias, variance and cosine of policy-gradient estimators for sequences against the
    exact gradient, with standard errors, on your own small policy and reward.

    The sibling of :func:`compare` for :mod:`hardgrad.policy`: ``compare`` takes an
    objective of samples of one tensor of logits and estimators from
    :mod:`hardgrad.estimators`; here the randomness is a sequence drawn token by token from
    ``policy``, the parameters are the policy's, and an estimator is an advantage with a
    loss aggregation, drawn in groups.

    Each of ``num_draws`` batches holds ``num_groups`` groups of ``group_size`` sequences
    drawn from the policy (seeded with ``generator``; the same batches for every estimator);
    an estimator's gradient estimate for the batch is :math:`-\nabla_\theta \text{loss}`. The
    estimates are compared with :func:`hardgrad.policy.exact_sequence_gradient`'s gradient
    :math:`g^*` of :math:`\mathbb{E}[R]` (the definitions of ``bias``, ``bias_se``,
    ``noise_floor``, ``variance``, ``cosine``, ``scale`` and ``exact_cosine`` are in
    :mod:`hardgrad.diagnostics._sequences`). A bias is measured when ``bias`` exceeds
    ``noise_floor`` by several ``bias_se``; a direction bias when ``1 - cosine`` exceeds a
    few ``cosine_se``.

    Args:
        policy: prefixes ``(M, t)`` -> next-token logits ``(M, V)`` (as for
            :func:`hardgrad.policy.exact_sequence_gradient`).
        reward: sequences ``(M, L)`` -> rewards ``(M,)`` (not depending on ``params``).
        vocab_size, length, params, eos_token: as for
            :func:`hardgrad.policy.exact_sequence_gradient`; :math:`V^L` at most
            ``max_sequences``.
        estimators: a list, or a dict by label, of

            * names: ``"reinforce"`` (no baseline), ``"reinforce-ema"`` (an
              :class:`~hardgrad.policy.EMABaseline` of decay 0.9 over past batches),
              ``"rloo"``, ``"dr-grpo"``, ``"grpo-token-sum"`` (with ``"token-sum"`` over
              the batch's :math:`N` sequences), ``"rloo-token-mean"``,
              ``"rloo-sequence-mean"``, ``"grpo"`` (std scaling, sequence-mean: the
              original), ``"grpo-no-std"`` (sequence-mean);
            * callables ``(rewards (N,), groups (N,), logprobs (N, L), mask (N, L)) ->
              loss``, your own trainer's loss, called once per batch (group ids
              ``0..num_groups-1``).
        group_size: sequences per group, :math:`n \ge 1` (RLOO needs 2).
        num_groups: groups per batch.
        num_draws: batches :math:`D \ge 2`.
        exact_expectation: also enumerate all :math:`M^n` groups for the named
            estimators' exact expectations (``exact_bias``, ``exact_cosine``); None: when
            there are at most :math:`10^6` groups and ``num_groups`` is 1.
        generator: the source of randomness.

    Returns:
        A :class:`SequenceComparison`: one row per estimator; ``exact`` is :math:`g^*`
        flattened over ``params``.

    Example:
        >>> import torch, hardgrad as hg
        >>> table = torch.tensor([[1.5, 0.0, -1.0], [0.0, 1.0, -0.5]], dtype=torch.float64,
        ...                      requires_grad=True)  # logits of token 0, then token 1
        >>> policy = lambda prefix: table[prefix.shape[1]].expand(len(prefix), 3)
        >>> reward = lambda y: (y == 2).sum(1).double() + 3.0 * (y[:, 0] == 1)
        >>> mine = lambda r, g, lp, m: hg.policy.policy_loss(  # a trainer's loss
        ...     lp, r - r.mean(), m, aggregation="token-sum", normalizer=len(r))
        >>> result = hg.diagnostics.compare_sequence_estimators(
        ...     policy, reward, vocab_size=3, length=2, params=table, group_size=2,
        ...     estimators={"rloo": "rloo", "grpo": "grpo", "mine": mine},
        ...     num_draws=2000, generator=torch.Generator().manual_seed(0))
        >>> [(r.estimator, round(r.cosine, 2), round(r.cosine_se, 3)) for r in result.rows]
        [('rloo', 1.0, 0.001), ('grpo', 0.97, 0.007), ('mine', 1.0, 0.001)]
        >>> [(r.estimator, r.exact_cosine and round(r.exact_cosine, 3)) for r in result.rows]
        [('rloo', 1.0), ('grpo', 0.978), ('mine', None)]

        ``mine`` (the batch mean as baseline, the sample included) is Dr. GRPO: unbiased in
        direction, its ``scale`` is :math:`(n-1)/n`; GRPO's std scaling tilts the direction
        (here at :math:`n = 2`, the advantage is :math:`\pm 1/\sqrt 2`, a sign).
    """
    group_size = check_int(group_size, "group_size", low=1)
    num_groups = check_int(num_groups, "num_groups", low=1)
    num_draws = check_int(num_draws, "num_draws", low=2)
    if exact_expectation is not None and not isinstance(exact_expectation, bool):
        raise TypeError(
            f"Expected `exact_expectation` to be a bool or None, but found "
            f"{type(exact_expectation).__name__}"
        )
    entries = _entries(estimators)
    problem = _SequenceProblem(
        policy,
        reward,
        vocab_size=vocab_size,
        length=length,
        params=params,
        eos_token=eos_token,
        max_sequences=max_sequences,
    )
    size = num_groups * group_size
    index = problem.sample(num_draws * size, generator).reshape(num_draws, size)
    enumerable = num_groups == 1 and len(problem.probs) ** group_size <= 10**6
    rows = []
    for label, estimator in entries:
        start = time.perf_counter()
        draws = problem.draws(estimator, index, group_size, num_groups)
        seconds = time.perf_counter() - start
        expected = None
        if (
            isinstance(estimator, _SequenceEstimator)  # a named estimator
            and estimator.ema_decay is None
            and num_groups == 1
            and (exact_expectation or (exact_expectation is None and enumerable))
        ):
            expected = problem.expected(estimator, group_size)
        rows.append(summarize_draws(draws, problem.exact, label, group_size, seconds, expected))
    settings = {
        "vocab_size": vocab_size,
        "length": length,
        "eos_token": eos_token,
        "group_size": group_size,
        "num_groups": num_groups,
        "num_draws": num_draws,
        "sequences": len(problem.probs),
    }
    return SequenceComparison(rows, problem.exact, settings)  # type: ignore[arg-type]
