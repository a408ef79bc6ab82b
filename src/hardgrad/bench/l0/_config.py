"""The ``l0`` benchmark's settings (:class:`L0Config`): what its runner and its report both read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class L0Config:
    """Settings of the ``l0`` benchmark.

    Attributes:
        lambdas: the penalty weights :math:`\\lambda` (0 trains the gates without penalty).
        hidden: hidden units.
        steps, batch_size, lr: Adam training (the gates' log alpha at ``gate_lr``).
        gate_lr: learning rate of the gates' parameters.
        seeds: runs per :math:`\\lambda`.
        threads: intra-op threads while training.
        plot: write ``l0.png`` (accuracy against weights removed; needs matplotlib).
    """

    lambdas: tuple[float, ...] = (0.0, 0.3, 1.0, 3.0, 10.0)
    hidden: int = 128
    steps: int = 3000
    batch_size: int = 64
    lr: float = 2e-3
    gate_lr: float = 2e-2
    seeds: int = 3
    threads: int | None = 1
    plot: bool = True


def default_config(quick: bool) -> L0Config:
    """The full setting (3 seeds, 3000 steps) or ``--quick`` (2 seeds, 800 steps)."""
    if quick:
        return L0Config(steps=800, seeds=2)
    return L0Config()
