r"""Advantages: rewards turned into the weights of a REINFORCE loss (REINFORCE with a
constant or moving-average baseline, RLOO, GRPO, Dr. GRPO).

All of them take ``rewards`` of shape ``(N,)``; the group estimators also take ``groups``, an
integer tensor ``(N,)`` of group ids (one id per prompt: the samples drawn for the same prompt
share it). Ids need not be sorted, contiguous or small. The advantage :math:`A_i` of sample
:math:`i` multiplies its score :math:`\nabla_\theta \log \pi_\theta(y_i)` in the gradient of
:func:`~hardgrad.policy.policy_loss`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from .._core.kernels import opmath_dtype
from .._core.validation import check_all_finite, check_floating, check_int, check_real

__all__ = [
    "EMABaseline",
    "dr_grpo_advantages",
    "grpo_advantages",
    "reinforce_advantages",
    "rloo_advantages",
]


# --------------------------------------------------------------------------- checks


def _check_rewards(rewards: Any) -> Tensor:
    """``rewards``: a 1-D floating tensor of finite values (the value scan can be switched
    off with :func:`hardgrad.set_validation`)."""
    check_floating(rewards, "rewards")
    if rewards.dim() != 1:
        raise ValueError(
            f"Expected `rewards` of shape (N,), but found shape {tuple(rewards.shape)}"
        )
    check_all_finite(rewards, "rewards")
    return rewards


def _check_groups(groups: Any, rewards: Tensor) -> Tensor:
    """``groups``: an integer tensor of the shape and device of ``rewards``."""
    if not isinstance(groups, Tensor):
        raise TypeError(
            f"Expected `groups` to be an integer torch.Tensor of group ids, but found "
            f"{type(groups).__name__}"
        )
    if groups.is_floating_point() or groups.is_complex() or groups.dtype is torch.bool:
        raise TypeError(
            f"Expected `groups` to be an integer tensor of group ids, but found "
            f"dtype={groups.dtype}"
        )
    if groups.shape != rewards.shape:
        raise ValueError(
            f"Expected `groups` of the shape of `rewards` {tuple(rewards.shape)}, but found "
            f"shape {tuple(groups.shape)}"
        )
    if groups.device != rewards.device:
        raise ValueError(
            f"Expected `groups` on the device of `rewards` ({rewards.device}), but found "
            f"device={groups.device}"
        )
    return groups


class _Groups:
    """Per-group statistics of ``rewards`` (computed in float32 for half types)."""

    def __init__(self, rewards: Tensor, groups: Tensor) -> None:
        ids, inverse, counts = torch.unique(groups, return_inverse=True, return_counts=True)
        self.ids, self.inverse, self.counts = ids, inverse, counts
        work = rewards.to(opmath_dtype(rewards.dtype))
        k = ids.numel()
        self.n = counts.to(work.dtype)
        mean = work.new_zeros(k).index_add(0, inverse, work) / self.n
        high = work.new_full((k,), -math.inf).scatter_reduce(0, inverse, work, "amax")
        low = work.new_full((k,), math.inf).scatter_reduce(0, inverse, work, "amin")
        #: True where every reward of the sample's group is equal (exactly): its centred
        #: reward is then exactly 0, not the rounding error of ``r - sum(r) / n``.
        self.constant = (high == low)[inverse]
        centred = work - mean[inverse]
        self.centred = torch.where(self.constant, torch.zeros_like(centred), centred)

    def std(self, correction: int) -> Tensor:
        """Each sample's group standard deviation, ``sqrt(sum (r - mean)^2 / (n - correction))``
        (0 for a group of one, or of ``correction`` or fewer samples)."""
        k = self.ids.numel()
        squares = self.centred.new_zeros(k).index_add(0, self.inverse, self.centred**2)
        dof = (self.n - correction).clamp_min(1)
        return (squares / dof).sqrt()[self.inverse]

    def require_two(self, what: str) -> None:
        """``ValueError`` naming ``groups`` if a group holds a single sample."""
        if self.counts.numel() and int(self.counts.min()) < 2:
            lone = self.ids[self.counts < 2]
            raise ValueError(
                f"Expected every group of `groups` to hold at least 2 samples ({what}), but "
                f"found {lone.numel()} group(s) of one sample, e.g. group id {int(lone[0])}"
            )


# --------------------------------------------------------------------------- group estimators


def rloo_advantages(rewards: Tensor, groups: Tensor) -> Tensor:
    r"""REINFORCE leave-one-out (RLOO) advantages: each reward minus the mean of the *other*
    rewards of its group.

    .. math::

        A_i = R_i - \frac{1}{n_g - 1} \sum_{j \in g,\, j \ne i} R_j
            = \frac{n_g}{n_g - 1}\,\bigl(R_i - \bar R_g\bigr),

    with :math:`g` the group of sample :math:`i`, :math:`n_g` its size and :math:`\bar R_g`
    its mean reward.

    **Unbiased.** The baseline of sample :math:`i` depends only on the other samples of its
    group, which are independent of :math:`y_i`, so
    :math:`\mathbb{E}[A_i \nabla \log \pi(y_i)] = \nabla_\theta \mathbb{E}_{y \sim
    \pi_\theta}[R(y)]` for each sample: :func:`policy_loss` with ``aggregation="token-sum"``
    and ``normalizer=N`` has the exact policy gradient as its expected (negative) gradient.
    This holds only because the baseline excludes the sample itself (a baseline that
    includes it is :func:`dr_grpo_advantages`, shrunk by :math:`(n_g - 1)/n_g`).

    Papers: Kool et al. (2019), "Buy 4 REINFORCE samples, get a baseline for free!",
    https://openreview.net/forum?id=r1lgTGL5DE; Ahmadian et al. (2024), "Back to basics",
    https://arxiv.org/abs/2402.14740.

    Args:
        rewards: ``(N,)`` floating rewards, finite.
        groups: ``(N,)`` integer group ids (any order); every group needs at least 2
            samples.

    Returns:
        ``(N,)`` advantages, dtype and device of ``rewards``. A group whose rewards are all
        equal gets exactly 0.

    Raises:
        ValueError: a group of one sample (it has no leave-one-out baseline), a NaN or
            infinite reward, or mismatched shapes.

    Example:
        >>> import torch, hardgrad as hg
        >>> rewards = torch.tensor([1.0, 0.0, 0.5, 0.25, 0.75, 0.0])
        >>> hg.policy.rloo_advantages(rewards, torch.tensor([0, 0, 0, 1, 1, 1]))
        tensor([ 0.7500, -0.7500,  0.0000, -0.1250,  0.6250, -0.5000])
    """
    _check_rewards(rewards)
    _check_groups(groups, rewards)
    stats = _Groups(rewards, groups)
    stats.require_two("a leave-one-out baseline needs another sample")
    n = stats.n[stats.inverse]
    return (stats.centred * (n / (n - 1))).to(rewards.dtype)


def grpo_advantages(
    rewards: Tensor,
    groups: Tensor,
    *,
    scale_std: bool = True,
    eps: float = 1e-4,
    correction: int = 1,
) -> Tensor:
    r"""GRPO advantages: each reward minus its group's mean, divided by the group's standard
    deviation (Shao et al. 2024, DeepSeekMath, https://arxiv.org/abs/2402.03300).

    .. math::

        A_i = \frac{R_i - \bar R_g}{s_g + \varepsilon}, \qquad
        s_g = \sqrt{\frac{1}{n_g - c} \sum_{j \in g} (R_j - \bar R_g)^2},

    with the *sample* standard deviation by default (:math:`c` = ``correction`` = 1,
    Bessel's correction, as ``torch.std`` computes it and as TRL's ``GRPOTrainer`` uses it)
    and :math:`\varepsilon` = ``eps`` = 1e-4 (TRL's constant) added to :math:`s_g`, not to
    the variance. ``correction=0`` gives the population standard deviation. With
    ``scale_std=False`` the advantage is :math:`R_i - \bar R_g`
    (:func:`dr_grpo_advantages`).

    **Biased.** Two distinct biases (Liu et al. 2025, "Understanding R1-Zero-like training:
    a critical perspective", https://arxiv.org/abs/2503.20783):

    * the mean includes :math:`R_i` itself, which shrinks the expected gradient by
      :math:`(n_g - 1)/n_g` (a scale, not a direction: it is :func:`rloo_advantages`
      times :math:`(n_g - 1)/n_g`, sample by sample);
    * dividing by :math:`s_g`, which depends on :math:`y_i`, changes the direction: within a
      prompt it replaces the reward by a rank-like transform (for :math:`n_g = 2` and
      :math:`\varepsilon = 0`, :math:`A_i = \pm 1/\sqrt 2` by the sign of
      :math:`R_i - R_j`, so the expected gradient is
      :math:`\tfrac{1}{2\sqrt 2}\nabla_\theta \mathbb{E}_{y \sim \pi_\theta}
      [\Pr_{y'}(R(y') < R(y)) - \Pr_{y'}(R(y') > R(y))]` with :math:`y' \sim \pi`
      held fixed), and across prompts it up-weights prompts whose rewards vary little.

    The length normalisation of GRPO is a separate bias, in the loss: see
    :func:`policy_loss`'s ``"sequence-mean"``.

    Args:
        rewards: ``(N,)`` floating rewards, finite.
        groups: ``(N,)`` integer group ids (any order).
        scale_std: divide by :math:`s_g + \varepsilon` (GRPO) or not (Dr. GRPO).
        eps: :math:`\varepsilon \ge 0`, added to the standard deviation.
        correction: :math:`c`, 1 (sample standard deviation, the default) or 0
            (population).

    Returns:
        ``(N,)`` advantages, dtype and device of ``rewards``. A group whose rewards are all
        equal (a group of one included) gets exactly 0, also with ``eps=0``: never NaN.

    Raises:
        ValueError: a NaN or infinite reward, ``eps < 0``, ``correction`` not 0 or 1, or
            mismatched shapes.

    Example:
        >>> import torch, hardgrad as hg
        >>> rewards = torch.tensor([1.0, 0.25, 0.0, 0.75, 0.5, 0.0])
        >>> groups = torch.tensor([7, 3, 7, 3, 7, 3])  # ids in any order
        >>> hg.policy.grpo_advantages(rewards, groups)
        tensor([ 0.9998, -0.2182, -0.9998,  1.0908,  0.0000, -0.8726])
        >>> hg.policy.grpo_advantages(torch.ones(4, dtype=torch.float64), torch.zeros(4, dtype=torch.long))
        tensor([0., 0., 0., 0.], dtype=torch.float64)
    """
    _check_rewards(rewards)
    _check_groups(groups, rewards)
    if not isinstance(scale_std, bool):
        raise TypeError(f"Expected `scale_std` to be a bool, but found {type(scale_std).__name__}")
    eps = check_real(eps, "eps")
    if not 0 <= eps < math.inf:
        raise ValueError(f"Expected `eps` >= 0 and finite, but found eps={eps!r}")
    correction = check_int(correction, "correction", low=0, high=1)
    stats = _Groups(rewards, groups)
    advantages = stats.centred
    if scale_std:
        scale = stats.std(correction) + eps
        advantages = torch.where(
            stats.constant, torch.zeros_like(advantages), advantages / scale.clamp_min(1e-30)
        )
    return advantages.to(rewards.dtype)


def dr_grpo_advantages(rewards: Tensor, groups: Tensor) -> Tensor:
    r"""Dr. GRPO advantages: each reward minus its group's mean, no standard-deviation
    scaling (Liu et al. 2025, https://arxiv.org/abs/2503.20783).

    .. math:: A_i = R_i - \bar R_g = \frac{n_g - 1}{n_g}\, A_i^{\mathrm{RLOO}}.

    **Unbiased in direction, shrunk in scale.** The expected gradient is exactly
    :math:`(n_g - 1)/n_g` times the policy gradient (the mean includes :math:`R_i`, whose
    share :math:`R_i/n_g` is a baseline correlated with :math:`y_i`). Dr. GRPO also drops
    GRPO's length normalisation: pair it with :func:`policy_loss`'s
    ``aggregation="token-sum"`` and a constant ``normalizer`` (e.g. ``N`` or
    ``N * max_length``), which keeps the direction unbiased.

    A group of one gets advantage 0 (it carries no signal), as does any group whose rewards
    are all equal.

    Args:
        rewards: ``(N,)`` floating rewards, finite.
        groups: ``(N,)`` integer group ids (any order).

    Returns:
        ``(N,)`` advantages, dtype and device of ``rewards``.

    Example:
        >>> import torch, hardgrad as hg
        >>> rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0])
        >>> hg.policy.dr_grpo_advantages(rewards, torch.tensor([0, 0, 0, 1, 1]))
        tensor([ 0.6667, -0.3333, -0.3333,  0.0000,  0.0000])
    """
    return grpo_advantages(rewards, groups, scale_std=False)


# --------------------------------------------------------------------------- REINFORCE


class EMABaseline:
    r"""An exponential moving average of past mean rewards, a baseline for
    :func:`reinforce_advantages`; explicit state, nothing global.

    .. math:: b_{k+1} = \beta\, b_k + (1 - \beta)\, \overline{R}^{(k)},

    with :math:`\overline{R}^{(k)}` the mean reward of the :math:`k`-th batch passed to
    :meth:`update` and :math:`\beta` = ``decay``; the first update sets :math:`b_1 =
    \overline{R}^{(0)}` (no shrinkage towards an arbitrary start). Before any update the
    baseline is 0.

    It is unbiased as long as each batch's advantages are computed **before** the batch
    updates the baseline (the baseline then depends only on past, independent batches).
    :meth:`state_dict` and :meth:`load_state_dict` checkpoint it with the rest of a
    trainer.

    Args:
        decay: :math:`\beta \in [0, 1)`.

    Example:
        >>> import torch, hardgrad as hg
        >>> baseline = hg.policy.EMABaseline(decay=0.5)
        >>> rewards = torch.tensor([1.0, 3.0])
        >>> hg.policy.reinforce_advantages(rewards, baseline=baseline)  # baseline 0 so far
        tensor([1., 3.])
        >>> baseline.update(rewards)
        >>> hg.policy.reinforce_advantages(torch.tensor([4.0]), baseline=baseline)
        tensor([2.])
        >>> baseline.state_dict()
        {'decay': 0.5, 'value': tensor(2.), 'steps': 1}
    """

    def __init__(self, decay: float = 0.9) -> None:
        decay = check_real(decay, "decay")
        if not 0 <= decay < 1:
            raise ValueError(f"Expected `decay` in [0, 1), but found decay={decay!r}")
        self.decay = decay
        #: The current baseline (a detached 0-dim tensor), ``None`` before the first update.
        self.value: Tensor | None = None
        #: How many batches have updated it.
        self.steps = 0

    def update(self, rewards: Tensor) -> None:
        """Fold the mean of ``rewards`` ``(N,)`` into the baseline (an empty batch changes
        nothing)."""
        _check_rewards(rewards)
        if rewards.numel() == 0:
            return
        mean = rewards.detach().to(opmath_dtype(rewards.dtype)).mean()
        if self.value is None:
            self.value = mean
        else:
            self.value = self.decay * self.value.to(mean) + (1 - self.decay) * mean
        self.steps += 1

    def state_dict(self) -> dict[str, Any]:
        """The state to checkpoint: ``decay``, ``value`` and ``steps``."""
        return {"decay": self.decay, "value": self.value, "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a state made by :meth:`state_dict`."""
        missing = {"decay", "value", "steps"} - set(state)
        if missing:
            raise ValueError(
                f"Expected `state` with keys decay, value and steps, but found it without "
                f"{', '.join(sorted(missing))}"
            )
        self.__init__(state["decay"])  # type: ignore[misc]
        value = state["value"]
        if value is not None and not isinstance(value, Tensor):
            raise TypeError(
                f"Expected `state['value']` to be a tensor or None, but found "
                f"{type(value).__name__}"
            )
        self.value = None if value is None else value.detach().clone()
        self.steps = check_int(state["steps"], "state['steps']", low=0)

    def __repr__(self) -> str:
        value = None if self.value is None else float(self.value)
        return f"EMABaseline(decay={self.decay}, value={value}, steps={self.steps})"


def reinforce_advantages(rewards: Tensor, baseline: float | Tensor | EMABaseline = 0.0) -> Tensor:
    r"""REINFORCE advantages with a baseline that does not depend on the sample:
    :math:`A_i = R_i - b`.

    **Unbiased** for any :math:`b` independent of :math:`y_i`, since
    :math:`\mathbb{E}[b\,\nabla\log\pi(y_i)] = 0` (Williams 1992, "Simple statistical
    gradient-following algorithms", https://doi.org/10.1007/BF00992696). The baseline only
    changes the variance.

    Args:
        rewards: ``(N,)`` floating rewards, finite.
        baseline: a number; a tensor broadcastable to ``(N,)`` (e.g. a value-function
            estimate per sample, which must not depend on the sampled :math:`y_i` itself,
            or the estimate is biased); or an :class:`EMABaseline`, whose current value is
            read and **not** updated (call its :meth:`~EMABaseline.update` after this).

    Returns:
        ``(N,)`` advantages, dtype and device of ``rewards``.

    Example:
        >>> import torch, hardgrad as hg
        >>> g = torch.Generator().manual_seed(0)
        >>> rewards = torch.rand(3, generator=g).round(decimals=2)
        >>> hg.policy.reinforce_advantages(rewards, baseline=0.5)
        tensor([ 0.0000,  0.2700, -0.4100])
    """
    _check_rewards(rewards)
    if isinstance(baseline, EMABaseline):
        if baseline.value is None:
            return rewards.clone()
        return rewards - baseline.value.to(rewards.device, rewards.dtype)
    if isinstance(baseline, Tensor):
        check_floating(baseline, "baseline")
        try:
            torch.broadcast_shapes(baseline.shape, rewards.shape)
        except RuntimeError:
            raise ValueError(
                f"Expected `baseline` broadcastable to the shape of `rewards` "
                f"{tuple(rewards.shape)}, but found shape {tuple(baseline.shape)}"
            ) from None
        if baseline.dim() > 1:
            raise ValueError(
                f"Expected `baseline` of shape () or (N,), but found shape {tuple(baseline.shape)}"
            )
        check_all_finite(baseline, "baseline")
        return rewards - baseline.to(rewards.dtype)
    value = check_real(baseline, "baseline")  # a TypeError naming `baseline` if not a number
    if not math.isfinite(value):
        raise ValueError(f"Expected a finite `baseline`, but found baseline={baseline!r}")
    return rewards - value
