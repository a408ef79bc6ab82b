r"""The named sequence estimators (an advantage and a loss aggregation) that
:func:`hardgrad.diagnostics.compare_sequence_estimators` and the ``policy`` benchmark take
by name, and the exact expectation of an estimator's gradient by enumerating every group.

An estimator's gradient estimate from a batch of :math:`N` sequences :math:`y_i` is
:math:`\hat g = -\nabla_\theta \text{loss} = \sum_i k_i \nabla_\theta \log\pi(y_i)` when
its per-token weights are equal along a sequence (all three aggregations of
:func:`~hardgrad.policy.policy_loss`): :math:`k_i = A_i / N` (``"token-sum"``, normaliser
:math:`N`), :math:`A_i / (N |y_i|)` (``"sequence-mean"``) or :math:`A_i / \sum_j |y_j|`
(``"token-mean"``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from .._core.validation import check_int
from ._advantages import (
    EMABaseline,
    dr_grpo_advantages,
    grpo_advantages,
    reinforce_advantages,
    rloo_advantages,
)
from ._loss import AGGREGATIONS, policy_loss

Advantages = Callable[[Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class _SequenceEstimator:
    """An advantage function of ``(rewards, groups)`` and a :func:`policy_loss` aggregation
    (``"token-sum"`` divides by the batch's number of sequences). ``ema_decay`` set: the
    advantage is REINFORCE's with an :class:`EMABaseline` of that decay, updated after each
    batch (``advantages`` is then unused)."""

    name: str
    advantages: Advantages
    aggregation: str
    ema_decay: float | None = None
    summary: str = ""

    def loss(
        self,
        rewards: Tensor,
        groups: Tensor,
        logprobs: Tensor,
        mask: Tensor,
        baseline: EMABaseline | None = None,
    ) -> Tensor:
        """The loss to minimise on one batch (an ``ema_decay`` estimator reads ``baseline``
        and updates it afterwards)."""
        if self.ema_decay is not None:
            if baseline is None:
                raise ValueError(f"Expected an EMABaseline for {self.name!r}, but found None")
            adv = reinforce_advantages(rewards, baseline=baseline)
            baseline.update(rewards)
        else:
            adv = self.advantages(rewards, groups)
        normalizer = max(1, len(rewards)) if self.aggregation == "token-sum" else None
        return policy_loss(logprobs, adv, mask, aggregation=self.aggregation, normalizer=normalizer)

    def weights(self, rewards: Tensor, groups: Tensor, lengths: Tensor, batches: int) -> Tensor:
        """The per-sequence weights :math:`k_i` of the gradient estimate, for ``batches``
        consecutive batches of equal size at once (``groups`` unique across batches): the
        advantages are computed once for all of them, which is exact for an advantage that
        treats each group on its own."""
        size = len(rewards) // batches
        batch = torch.arange(batches, device=rewards.device).repeat_interleave(size)
        if self.ema_decay is not None:
            adv = rewards - _ema_baselines(rewards.reshape(batches, size), self.ema_decay)[batch]
        else:
            adv = self.advantages(rewards, groups)
        return _loss_weights(adv, lengths, batch, batches, self.aggregation)


def _ema_baselines(rewards: Tensor, decay: float) -> Tensor:
    """``(B,)`` the :class:`EMABaseline` each of ``B`` consecutive batches ``(B, n)`` sees
    (0 before the first update)."""
    means = rewards.double().mean(dim=1).tolist()
    out, value = [], None
    for mean in means:
        out.append(0.0 if value is None else value)
        value = mean if value is None else decay * value + (1 - decay) * mean
    return torch.tensor(out, dtype=rewards.dtype, device=rewards.device)


def _loss_weights(
    adv: Tensor, lengths: Tensor, batch: Tensor, batches: int, aggregation: str
) -> Tensor:
    """:math:`k_i` (module docstring) of each sequence, ``batch`` its batch id."""
    size = len(adv) // max(1, batches)
    if aggregation == "token-sum":
        return adv / size
    if aggregation == "sequence-mean":
        return adv / (lengths.clamp_min(1) * size)
    tokens = lengths.new_zeros(batches).index_add(0, batch, lengths)
    return adv / tokens.clamp_min(1)[batch]


def _reinforce(rewards: Tensor, groups: Tensor) -> Tensor:
    return reinforce_advantages(rewards)


def _grpo_no_std(rewards: Tensor, groups: Tensor) -> Tensor:
    return grpo_advantages(rewards, groups, scale_std=False)


#: Name -> estimator: what :func:`hardgrad.diagnostics.compare_sequence_estimators` and the
#: ``policy`` benchmark accept by name.
SEQUENCE_ESTIMATORS: dict[str, _SequenceEstimator] = {
    e.name: e
    for e in (
        _SequenceEstimator("reinforce", _reinforce, "token-sum", summary="R, token-sum / N"),
        _SequenceEstimator(
            "reinforce-ema",
            _reinforce,
            "token-sum",
            ema_decay=0.9,
            summary="R - EMA(0.9) of past batch means, token-sum / N",
        ),
        _SequenceEstimator("rloo", rloo_advantages, "token-sum", summary="RLOO, token-sum / N"),
        _SequenceEstimator(
            "rloo-token-mean", rloo_advantages, "token-mean", summary="RLOO, token-mean (DAPO)"
        ),
        _SequenceEstimator(
            "rloo-sequence-mean", rloo_advantages, "sequence-mean", summary="RLOO, sequence-mean"
        ),
        _SequenceEstimator(
            "grpo", grpo_advantages, "sequence-mean", summary="GRPO: std scaling, sequence-mean"
        ),
        _SequenceEstimator(
            "grpo-token-sum", grpo_advantages, "token-sum", summary="std scaling, token-sum / N"
        ),
        _SequenceEstimator(
            "grpo-no-std", _grpo_no_std, "sequence-mean", summary="no std, sequence-mean"
        ),
        _SequenceEstimator(
            "dr-grpo", dr_grpo_advantages, "token-sum", summary="Dr. GRPO: token-sum / N"
        ),
    )
}


def _resolve_estimator(entry: str) -> _SequenceEstimator:
    """The estimator named ``entry`` (``ValueError`` listing the names otherwise)."""
    if entry not in SEQUENCE_ESTIMATORS:
        raise ValueError(
            f"Unknown sequence estimator {entry!r}; expected one of "
            f"{', '.join(SEQUENCE_ESTIMATORS)}"
        )
    return SEQUENCE_ESTIMATORS[entry]


def _expected_gradient_weights(
    advantages: Advantages,
    aggregation: str,
    probs: Tensor,
    rewards: Tensor,
    lengths: Tensor,
    group_size: int,
    max_groups: int = 10**6,
) -> Tensor:
    r"""``(M,)`` the weights :math:`c_m` with :math:`E[\hat g] = \sum_m c_m
    \nabla\log\pi(y_m)` for one group of ``group_size`` sequences per batch, by enumerating
    all :math:`M^n` groups (tuple weight :math:`\prod_i \pi(y_i)`): the exact expectation of
    the estimator, biased or not, without Monte-Carlo error.

    ``probs``, ``rewards``, ``lengths`` ``(M,)`` of the enumerated sequences (e.g. a
    :class:`~hardgrad.policy.SequenceGradient`'s ``probs``, ``rewards`` and
    ``mask.sum(1)``); ``advantages`` is called once on all groups (ids unique per group)."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"Expected `aggregation` in {AGGREGATIONS}, but found {aggregation!r}")
    group_size = check_int(group_size, "group_size", low=1)
    count = len(probs)
    if count**group_size > max_groups:
        raise ValueError(
            f"Expected at most max_groups={max_groups} groups to enumerate, but found "
            f"{count}**{group_size} = {count**group_size}"
        )
    idx = torch.cartesian_prod(*[torch.arange(count, device=probs.device)] * group_size)
    idx = idx.reshape(-1, group_size)
    weight = probs[idx].prod(dim=1)
    groups = torch.arange(len(idx), device=probs.device).repeat_interleave(group_size)
    adv = advantages(rewards[idx].flatten(), groups)
    batch = groups
    k = _loss_weights(adv, lengths[idx].flatten().to(adv.dtype), batch, len(idx), aggregation)
    contrib = (weight[:, None] * k.reshape(-1, group_size)).flatten()
    return torch.zeros(count, dtype=contrib.dtype, device=probs.device).index_add_(
        0, idx.flatten(), contrib
    )
