"""The ``vq`` benchmark's settings (:class:`VQConfig`) and its variants: what its runner and its
report both read."""

from __future__ import annotations

from dataclasses import dataclass

VARIANTS = ("STE", "rotation", "Gumbel", "EMA", "FSQ", "LFQ")


@dataclass(frozen=True)
class VQConfig:
    """Settings of the ``vq`` benchmark.

    Attributes:
        variants: which bottlenecks to train (names from :data:`VARIANTS`).
        tokens: tokens per image.
        code_dim: D of the learned codebooks.
        num_codes: K (FSQ and LFQ use 64 codes: levels (4, 4, 4) and 6 bits).
        hidden: hidden width of encoder and decoder.
        steps: Adam steps per run.
        batch_size: images per step.
        lr: Adam's learning rate.
        gumbel_tau: the temperature of the code logits :math:`-d/\tau` of ``Gumbel`` (the
            squared distances of this model are about 1e-2).
        lfq_entropy_weight: LFQ's entropy-loss weight.
        kmeans_init: initialise every learned codebook from the first batch (k-means++ and
            a few Lloyd steps). Without it the codebook starts near the origin, where
            ST-Gumbel's logits -d/tau carry no signal: it did not learn (test MSE of the
            mean image), and the codebook gets no gradient through z_q to leave it.
        lfq_commitment_weight: LFQ's commitment weight. With the module's default 0.25 the
            commitment term outweighs this small model's reconstruction error (about 0.07
            at the start), pulls every z to ±1 on its initial sign pattern within 100
            steps, and every image gets the same code (recon error of the mean image);
            0.01 with entropy weight 0.1 trains (tried: 0.0/0.01, 0.01/0.1, 0.05/0.5).
        seeds: independent runs per configuration.
        residual_stages: the stage counts of the residual rows (:class:`hardgrad.nn.ResidualVQ`,
            ``num_codes`` codes of ``code_dim`` per stage, straight-through, EMA codebooks,
            k-means init, the gradient ``"total"``); empty: no residual rows.
        residual_compare: the stage count at which the residual rows also run with
            ``gradient="per_stage"`` and with quantizer dropout (0: neither).
        residual_seeds: seeds of the residual rows (``None``: ``seeds``).
        plot: write ``vq.png`` and ``vq_residual.png`` (needs matplotlib).
        threads: intra-op threads while training.
    """

    variants: tuple[str, ...] = VARIANTS
    tokens: int = 4
    code_dim: int = 8
    num_codes: int = 64
    hidden: int = 128
    steps: int = 3000
    batch_size: int = 64
    lr: float = 1e-3
    gumbel_tau: float = 0.01
    lfq_entropy_weight: float = 0.1
    kmeans_init: bool = True
    lfq_commitment_weight: float = 0.01
    seeds: int = 3
    residual_stages: tuple[int, ...] = (1, 2, 4, 8)
    residual_compare: int = 4
    residual_seeds: int | None = None
    plot: bool = True
    threads: int | None = 1


def default_config(quick: bool) -> VQConfig:
    """The full setting (3 seeds, 3000 steps; residual VQ with 1, 2, 4 and 8 stages) or
    ``--quick`` (2 seeds, 600 steps; residual VQ with 1, 2 and 4 stages, one seed)."""
    if quick:
        return VQConfig(steps=600, seeds=2, lr=2e-3, residual_stages=(1, 2, 4), residual_seeds=1)
    return VQConfig()
