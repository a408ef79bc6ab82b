r"""Policy gradients over sampled sequences: advantages, losses and KL penalties that drop into
a trainer, and the exact gradient of a small autoregressive policy to check them against.

Papers:

* REINFORCE: Williams (1992), https://doi.org/10.1007/BF00992696.
* RLOO, the leave-one-out baseline: Kool et al. (2019),
  https://openreview.net/forum?id=r1lgTGL5DE; for language models, Ahmadian et al. (2024),
  https://arxiv.org/abs/2402.14740.
* GRPO: Shao et al. (2024), DeepSeekMath, https://arxiv.org/abs/2402.03300.
* Dr. GRPO, GRPO's two biases (std scaling, length normalisation): Liu et al. (2025),
  https://arxiv.org/abs/2503.20783.
* The token-mean loss: Yu et al. (2025), DAPO, https://arxiv.org/abs/2503.14476.
* The k1, k2, k3 KL estimators: Schulman (2020), http://joschu.net/blog/kl-approx.html.

A group of :math:`n` sequences :math:`y_i` is sampled per prompt from the policy
:math:`\pi_\theta`, each gets a reward :math:`R_i`, an *advantage* :math:`A_i` is computed
from the rewards (:func:`rloo_advantages`, :func:`grpo_advantages`,
:func:`dr_grpo_advantages`, :func:`reinforce_advantages`), and :func:`policy_loss`
aggregates :math:`-A_i \log\pi_\theta(y_{i,t} \mid y_{i,<t})` over tokens. Its negative
gradient estimates :math:`\nabla_\theta \mathbb{E}[R]`; each docstring says whether that
estimate is unbiased, and if not, how it is biased.

:func:`exact_sequence_gradient` computes :math:`\mathbb{E}[R]` and its gradient exactly by
enumerating all :math:`V^L` sequences of a small policy, the ground truth the estimators are
tested against; :func:`sample_sequences` and :func:`sampled_sequence_gradient` sample.

>>> import torch, hardgrad as hg
>>> logprobs = torch.tensor([[-0.5, -1.0], [-2.0, 0.0]], requires_grad=True)
>>> mask = torch.tensor([[True, True], [True, False]])
>>> rewards, groups = torch.tensor([1.0, 0.0]), torch.tensor([0, 0])
>>> adv = hg.policy.rloo_advantages(rewards, groups)
>>> loss = hg.policy.policy_loss(logprobs, adv, mask, aggregation="token-sum", normalizer=2)
>>> loss.backward(); logprobs.grad
tensor([[-0.5000, -0.5000],
        [ 0.5000,  0.0000]])
"""

from __future__ import annotations

from ._advantages import (
    EMABaseline,
    dr_grpo_advantages,
    grpo_advantages,
    reinforce_advantages,
    rloo_advantages,
)
from ._exact import (
    SequenceGradient,
    SequenceSample,
    exact_sequence_gradient,
    sample_sequences,
    sampled_sequence_gradient,
)
from ._loss import AGGREGATIONS, KL_ESTIMATORS, kl_penalty, policy_loss

__all__ = [
    "AGGREGATIONS",
    "KL_ESTIMATORS",
    "EMABaseline",
    "SequenceGradient",
    "SequenceSample",
    "dr_grpo_advantages",
    "exact_sequence_gradient",
    "grpo_advantages",
    "kl_penalty",
    "policy_loss",
    "reinforce_advantages",
    "rloo_advantages",
    "sample_sequences",
    "sampled_sequence_gradient",
]
