"""The ``qat`` benchmark's settings (:class:`QatConfig`): what its runner and its report both read."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class QatConfig:
    """Settings of the ``qat`` benchmark.

    Attributes:
        hidden: widths of the hidden layers (two or more for the binary network).
        bits: bit widths of the fake-quantized networks.
        methods: quantizer gradients to compare, ``"ste"`` (fixed scale) and ``"lsq"``.
        binary: also train the binary network.
        ternary: also train the ternary-weight network.
        epochs: passes over the training set.
        batch_size: examples per step (split across ranks under ``torchrun``).
        lr: Adam's learning rate for the float and quantized networks.
        scale_lr: Adam's learning rate for LSQ's scales (Adam ignores LSQ's gradient
            scaling, and the weights' rate would move a scale of ~0.02 by 5 % a step).
        binary_lr: Adam's learning rate for the binary network.
        seeds: independent runs per configuration.
        plot: write ``qat_accuracy.png`` (needs matplotlib).
        threads: intra-op threads while training (``None``: ``settings.threads``). 1 by
            default: the matrices are too small to share between cores, and on a busy
            machine two threads ran a quick run about ten times slower than one.
    """

    hidden: tuple[int, ...] = (256, 256)
    bits: tuple[int, ...] = (8, 4, 2)
    methods: tuple[str, ...] = ("ste", "lsq")
    binary: bool = True
    ternary: bool = True
    epochs: int = 30
    batch_size: int = 64
    lr: float = 1e-3
    scale_lr: float = 1e-4
    binary_lr: float = 1e-3
    seeds: int = 3
    plot: bool = True
    threads: int | None = 1


def default_config(quick: bool) -> QatConfig:
    """The full setting (3 seeds, 30 epochs) or the ``--quick`` one (1 seed, fewer epochs)."""
    if quick:
        return QatConfig(epochs=12, seeds=1)
    return QatConfig()
