r"""What the two VAE benchmarks share: the model, the ELBO, training and gradient diagnostics.

The model (:class:`VAE`) has discrete latents :math:`b` (``latents`` Bernoulli bits, or
``latents`` categorical variables of ``categories`` classes, one-hot), an MLP encoder that
gives the logits of :math:`q(b \mid x)` and an MLP decoder that gives the logits of a
Bernoulli likelihood :math:`p(x \mid b)` over the pixels (binary cross-entropy, which takes
binarised or [0, 1] targets). The prior is uniform. The training loss per example is

.. math:: -\mathrm{ELBO}(x) = E_{q(b \mid x)}[-\log p(x \mid b)] + \mathrm{KL}(q(b \mid x)\,\|\,p(b)),

the KL in closed form (:func:`kl_bernoulli`, :func:`kl_categorical`) and the
reconstruction expectation through :func:`hardgrad.expectation` with the estimator under
test: its gradient for the encoder's logits is the estimator, the decoder gets the
ordinary pathwise gradient of the samples' values.

Every estimator gets the same number of evaluations of :math:`f` (the decoder) per example
and step where it can (``evaluations``, :func:`samples_for`); REBAR and RELAX evaluate
:math:`f` three times per draw, so with a budget of 2 they get one draw (3 evaluations),
and the tables say so.

Under ``torchrun`` the model is wrapped in ``DistributedDataParallel``
(:func:`hardgrad.bench._distributed.wrap`), every rank trains on its own shard of the
training images with its own sampling seed, and the estimators' own parameters (REBAR,
RELAX) are averaged across ranks by the estimators themselves. Evaluations and diagnostics
use seeds that do not depend on the rank, so every rank computes the same numbers.
"""

from ._model import VAE, Objective, kl_bernoulli, kl_categorical, negative_elbo
from ._report import fmt, plot_checkpoints, plot_curves
from ._train import (
    Setup,
    build_model,
    chosen_names,
    diagnose,
    estimator_names,
    exact_reference,
    few_threads,
    fixed_inputs,
    make_estimator,
    parameter_digest,
    public,
    samples_for,
    seed_of,
    shared_diagnostics,
    spaced,
    train,
)

__all__ = [
    "VAE",
    "Objective",
    "Setup",
    "build_model",
    "chosen_names",
    "diagnose",
    "estimator_names",
    "exact_reference",
    "few_threads",
    "fixed_inputs",
    "fmt",
    "kl_bernoulli",
    "kl_categorical",
    "make_estimator",
    "negative_elbo",
    "parameter_digest",
    "plot_checkpoints",
    "plot_curves",
    "public",
    "samples_for",
    "seed_of",
    "shared_diagnostics",
    "spaced",
    "train",
]
