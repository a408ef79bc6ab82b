"""The ``vae-categorical`` benchmark's settings (:class:`CategoricalVAEConfig`): what its runner
and its report both read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CategoricalVAEConfig:
    """Settings of the ``vae-categorical`` benchmark.

    Attributes:
        configurations: ``(L, C)`` pairs: latent variables and categories.
        enc_hidden, dec_hidden: hidden widths of the encoder and decoder.
        steps, batch, lr: Adam steps, examples per step (per rank), learning rate.
        evaluations: decoder evaluations per example and step, for every estimator.
        estimators: registry names; ``None``: every categorical-capable one but ``"exact"``.
        reference: the run at whose checkpoints every estimator meets the exact gradient.
        curve_points: test -ELBO points along training.
        checkpoints: diagnostics along training (including step 0 and the end).
        diag_batch: images of the fixed diagnostic batch (enumeration cost: C^L each).
        num_draws: gradient draws per diagnostic.
        curve_samples, test_samples: draws of q per image for the curves / final -ELBO.
        plot: write the PNGs (needs matplotlib).
    """

    configurations: tuple[tuple[int, int], ...] = ((8, 4), (4, 6))
    enc_hidden: tuple[int, ...] = (256, 128)
    dec_hidden: tuple[int, ...] = (128, 256)
    steps: int = 2000
    batch: int = 100
    lr: float = 1e-3
    evaluations: int = 2
    estimators: tuple[str, ...] | None = None
    reference: str = "rloo"
    curve_points: int = 11
    checkpoints: int = 4
    diag_batch: int = 4
    num_draws: int = 400
    curve_samples: int = 10
    test_samples: int = 100
    plot: bool = True


def default_config(quick: bool) -> CategoricalVAEConfig:
    """The full setting, or the ``--quick`` one: 4x6 only, fewer steps and draws."""
    if quick:
        return CategoricalVAEConfig(
            configurations=((4, 6),),
            steps=150,
            curve_points=6,
            checkpoints=3,
            num_draws=100,
            curve_samples=4,
            test_samples=20,
        )
    return CategoricalVAEConfig()
