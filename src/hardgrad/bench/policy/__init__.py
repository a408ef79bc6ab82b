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
machinery). Then training from one start, ``batch = 16`` sequences per step (``16 / n``
groups), with each estimator's loss under two optimizers: Adam (lr 0.01), which divides each
coordinate by its running RMS and so ignores a constant scale of the gradient (what differs
is direction and noise), and plain SGD (lr 0.1), whose steps shrink with the gradient's scale.
Per run, the exact expected reward after every step (all 1093 sequences); reported: E[R] after
``eval_step = 10`` steps and the steps until E[R] is 90 % of the way from the start (0.355)
to the best sequence's reward (4.40), mean ± sd over 5 seeds (``--quick``: 1), and E[R] at
step 10 against RLOO's paired by seed (the runs of a seed share the sampling seed). A run
stops at 100 steps (``--quick``: 40), or once it has reached 90 % and done 10 steps. The
verdict answers whether GRPO's std and length scalings bias the direction measurably here,
and by how much Dr. GRPO and RLOO remove it (Liu et al. 2025, https://arxiv.org/abs/2503.20783; Ahmadian et al. 2024,
https://arxiv.org/abs/2402.14740).
"""

from ._config import PolicyConfig, default_config
from ._run import run

__all__ = ["PolicyConfig", "default_config", "run"]
