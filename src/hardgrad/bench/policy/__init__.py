r"""The ``policy`` benchmark: policy-gradient estimators for sampled sequences (REINFORCE,
RLOO, GRPO, Dr. GRPO and the loss aggregations) against the exact gradient of a tiny
autoregressive policy.

The policy is an MLP (one-hot of the padded prefix, ``tanh`` hidden layer) over
:math:`V = 4` tokens and at most :math:`L = 6` of them; token 0 ends a sequence, so lengths
vary (1093 distinct sequences). The reward depends on the whole sequence and its length. For
each estimator of :data:`hardgrad.policy._estimators.SEQUENCE_ESTIMATORS` and group size
:math:`n \in \{2, 4, 8, 16\}`: bias, cosine and scale of the mean gradient against the exact
one (:func:`hardgrad.policy.exact_sequence_gradient`), the summed variance, with standard
errors, from seeded Monte-Carlo groups (:func:`hardgrad.diagnostics.compare_sequence_estimators`'s
machinery); and the exact expected reward after training with Adam for a fixed number of
steps at the same number of sequences per step. The verdict answers whether GRPO's std and
length scalings bias the direction measurably here, and by how much Dr. GRPO and RLOO remove
it (Liu et al. 2025, https://arxiv.org/abs/2503.20783; Ahmadian et al. 2024,
https://arxiv.org/abs/2402.14740).
"""

from ._config import PolicyConfig, default_config
from ._run import run

__all__ = ["PolicyConfig", "default_config", "run"]
