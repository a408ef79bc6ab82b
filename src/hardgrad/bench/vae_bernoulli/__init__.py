r"""The ``vae-bernoulli`` benchmark: a Bernoulli VAE on dynamically binarised digits.

Model (:mod:`hardgrad.bench._vae`): ``latent_bits`` Bernoulli latents (32; 16 with
``--quick``), a one-hidden-layer encoder and decoder (``hidden`` units, leaky ReLU), a
uniform Bernoulli(1/2) prior, and a Bernoulli likelihood over the pixels. Every batch is
binarised afresh, :math:`x_{bin} \sim \mathrm{Bern}(x)`. Loss: the per-example -ELBO with
the KL in closed form and :math:`E_q[-\log p(x \mid b)]` through :func:`hardgrad.expectation`
with the estimator under test.

Estimators: every registered one defined for Bernoulli variables except ``"exact"``, each
at the same budget of ``evaluations`` (2) evaluations of the decoder per example and step:
two samples for the pathwise estimators, REINFORCE and RLOO, one antithetic pair for ARM
and DisARM, and one draw (3 evaluations: the hard sample and two relaxed ones) for REBAR
and RELAX, whose temperature and scale train in the same Adam optimizer.

Measured per estimator: the final train and test -ELBO (the training images and the test
images each binarised once with a fixed seed; the reconstruction term averaged over
``test_samples`` draws of q), the test -ELBO along training (``vae_bernoulli_curves.png``),
and at ``checkpoints`` the variance of the encoder-logit gradient of the reconstruction
term on a fixed batch of ``diag_batch`` training images (``num_draws`` independent draws
from :func:`hardgrad.diagnostics.gradient_samples`; the sum over the batch's logits of the
per-coordinate variance): along each estimator's own training
(``vae_bernoulli_variance.png``), and for every estimator at the *same* parameters, those
of the ``reference`` (DisARM) run at its checkpoints, which is the fair comparison of
variances at equal evaluations.

Measured wall times (digits, 2 CPU cores shared with other jobs, load average about 5):
``--quick`` 54 s; ``--quick`` under ``torchrun --nproc_per_node 2`` (one thread per rank)
75 s. The full run (32 bits, 3000 steps, 13 estimators): 447 s on that loaded machine
(Gumbel-Rao alone 150 s); 230 s on idle cores (the run in ``docs/results/full/``), where
``--quick`` takes 21 s.

Under ``torchrun --nproc_per_node N`` every rank trains on its shard of the training
images with DistributedDataParallel (see :mod:`hardgrad.bench._distributed`).
"""

from ._config import BernoulliVAEConfig, default_config
from ._run import run

__all__ = ["BernoulliVAEConfig", "default_config", "run"]
