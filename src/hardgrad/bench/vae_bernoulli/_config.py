"""The ``vae-bernoulli`` benchmark's settings (:class:`BernoulliVAEConfig`): what its runner and its
report both read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BernoulliVAEConfig:
    """Settings of the ``vae-bernoulli`` benchmark.

    Attributes:
        latent_bits: Bernoulli latent variables.
        hidden: hidden units of the encoder and of the decoder (``0``: linear).
        steps, batch, lr: Adam steps, examples per step (per rank), learning rate.
        evaluations: decoder evaluations per example and step, for every estimator.
        estimators: registry names; ``None``: every Bernoulli-capable one but ``"exact"``.
        reference: the run whose checkpoints every estimator is measured at.
        curve_points: test -ELBO points along training.
        checkpoints: gradient diagnostics along training (including step 0 and the end).
        diag_batch: images of the fixed diagnostic batch.
        num_draws: gradient draws per diagnostic.
        curve_samples, test_samples: draws of q per image for the curves / final -ELBO.
        plot: write the PNGs (needs matplotlib).
    """

    latent_bits: int = 32
    hidden: int = 128
    steps: int = 3000
    batch: int = 100
    lr: float = 1e-3
    evaluations: int = 2
    estimators: tuple[str, ...] | None = None
    reference: str = "disarm"
    curve_points: int = 16
    checkpoints: int = 4
    diag_batch: int = 32
    num_draws: int = 400
    curve_samples: int = 10
    test_samples: int = 100
    plot: bool = True


def default_config(quick: bool) -> BernoulliVAEConfig:
    """The full setting, or the ``--quick`` one: 16 bits, fewer steps and draws."""
    if quick:
        return BernoulliVAEConfig(
            latent_bits=16,
            steps=300,
            curve_points=6,
            checkpoints=3,
            num_draws=100,
            curve_samples=4,
            test_samples=20,
        )
    return BernoulliVAEConfig()
