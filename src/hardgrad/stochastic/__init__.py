r"""Stochastic binary and categorical units with pathwise gradient estimators.

``hg.categorical`` draws an exact one-hot sample of :math:`\operatorname{Cat}(\operatorname{softmax}(\ell))`
(Gumbel-max: :math:`\arg\max_i \ell_i + g_i`, :math:`g_i` standard Gumbel) whose backward is
the chosen estimator; ``hg.bernoulli`` is, by definition, the categorical unit on the
two-class logits :math:`[0, \ell]` (class 1 = "on"), so the two share every estimator.
Both take probabilities instead of logits as ``probs=`` (exactly 0 and 1 included; see
:func:`bernoulli`).

Randomness comes only from ``generator`` (the global RNG when it is ``None``); noise is
drawn on the logits' device, in their dtype, or in float32 for float16/bfloat16 logits so
that samples stay exact draws. Uniforms are kept in :math:`[\text{tiny}, 1 - \epsilon]`, so
no sample or gradient is NaN for finite logits.

Papers: the Gumbel-max trick (Maddison et al. 2014, https://arxiv.org/abs/1411.0030); the
Gumbel-softmax / Concrete relaxation (Jang et al. 2017, https://arxiv.org/abs/1611.01144;
Maddison et al. 2017, https://arxiv.org/abs/1611.00712); the straight-through estimator and
the stochastic-times-smooth and noisy-rectifier units (Bengio, Léonard & Courville 2013,
https://arxiv.org/abs/1308.3432).

The package holds ``_samplers`` (:func:`categorical`, :func:`bernoulli`), ``_bengio``
(:func:`stochastic_times_smooth`, :func:`noisy_rectifier`), ``_checks`` (the argument and
``probs`` checks they share) and ``_expectation`` (:func:`hardgrad.expectation`, the
score-function family's entry point, re-exported at the top level only).
"""

from __future__ import annotations

from ._bengio import noisy_rectifier, stochastic_times_smooth
from ._samplers import bernoulli, categorical

__all__ = ["bernoulli", "categorical", "noisy_rectifier", "stochastic_times_smooth"]
