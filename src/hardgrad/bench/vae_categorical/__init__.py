r"""The ``vae-categorical`` benchmark: a categorical VAE on the digits, against exact gradients.

Model (:mod:`hardgrad.bench._vae`): ``L`` categorical latents of ``C`` classes (one-hot),
encoder ``64-256-128-(L*C)`` and decoder ``(L*C)-128-256-64`` (leaky ReLU), a uniform
categorical prior, and a Bernoulli likelihood on the pixels ``x / 16`` in [0, 1] (binary
cross-entropy with continuous targets). Loss: the per-example -ELBO with the KL in closed
form and :math:`E_q[-\log p(x \mid b)]` through :func:`hardgrad.expectation`.
Configurations ``L x C``: 8x4 and 4x6 (``--quick``: 4x6 only).

Estimators: every registered one defined for categorical variables except ``"exact"``
(``st``, ``st_identity``, ``gumbel_softmax``, ``st_gumbel``, ``gumbel_rao``, ``reinmax``,
``gst``, ``reinforce``, ``rloo``, ``rebar``, ``relax``), each at ``evaluations`` (2)
decoder evaluations per example and step (REBAR and RELAX: one draw, 3 evaluations).

Measured: the final train and test -ELBO per estimator (reconstruction term averaged over
``test_samples`` draws of q), the test -ELBO along training (``vae_categorical_curves.png``),
and the quality of each estimator's encoder-logit gradient of the reconstruction term on a
fixed batch of ``diag_batch`` training images: at the checkpoints of the ``reference`` run
(the same parameters for every estimator), ``num_draws`` draws
(:func:`hardgrad.diagnostics.gradient_samples`) summarised by
:func:`hardgrad.diagnostics` against the *exact* gradient, computed by enumerating all
:math:`C^L` configurations of every image (:func:`hardgrad.diagnostics.exact_gradient`;
4^8 = 65,536 for 8x4): relative ``bias``, ``std`` and ``cosine``
(``vae_categorical_bias.png``). ``bias floor`` is ``std/sqrt(num_draws)``, the bias an
unbiased estimator shows from the finite number of draws alone. Along each estimator's own
training the gradient variance is recorded too (no exact reference there: enumeration is
the expensive part).

Measured wall times (digits, 2 CPU cores shared with other jobs, load average about 5):
``--quick`` 66 s for the task at 200 steps, so the quick setting was cut to 150 steps
(17 s on idle cores). The full run (two
configurations, 11 estimators, 2000 steps each, exact 8x4 enumeration at 4 checkpoints)
took 377 s on idle cores (the run in ``docs/results/full/``; lower ``steps`` for a shorter
run).
"""

from ._config import CategoricalVAEConfig, default_config
from ._run import run

__all__ = ["CategoricalVAEConfig", "default_config", "run"]
