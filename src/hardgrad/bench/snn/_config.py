"""The ``snn`` benchmark's settings (:class:`SnnConfig`) and its surrogates: what its runner and
its report both read."""

from __future__ import annotations

from dataclasses import dataclass

from ... import surrogates as _surrogates


@dataclass(frozen=True)
class SnnConfig:
    """Settings of the ``snn`` benchmark.

    Attributes:
        steps: time steps per image (rate-coding window).
        hidden: hidden LIF neurons.
        beta: membrane decay of both LIF layers.
        surrogates: names of the step surrogates to compare (``None``: every registered
            one that serves ``"step"`` ops, plus ``"sigmoid25"``, the sigmoid at slope 25).
        epochs: passes over the training set.
        batch_size: examples per step.
        lr: Adam's learning rate.
        seeds: independent runs per surrogate.
        trains_at: the mean test accuracy from which a surrogate counts as (partly) training.
        close_to_best: how far below the best mean test accuracy a surrogate still counts
            as training fully.
        threads: intra-op threads while training (``None``: ``settings.threads``).
    """

    steps: int = 25
    hidden: int = 128
    beta: float = 0.9
    surrogates: tuple[str, ...] | None = None
    epochs: int = 10
    batch_size: int = 128
    lr: float = 5e-3
    seeds: int = 3
    trains_at: float = 0.5
    close_to_best: float = 0.05
    threads: int | None = 1


def default_config(quick: bool) -> SnnConfig:
    """The full setting (3 seeds, 10 epochs) or ``--quick`` (1 seed, 3 epochs)."""
    return SnnConfig(epochs=3, seeds=1) if quick else SnnConfig()


def surrogate_choices(config: SnnConfig) -> dict[str, _surrogates.Surrogate]:
    """The surrogates of one run, label to instance, in registry order."""
    names = config.surrogates
    if names is None:
        step = [n for n, cls in _surrogates.SURROGATES.items() if "step" in cls.applies_to]
        names = (*step, "sigmoid25")
    chosen: dict[str, _surrogates.Surrogate] = {}
    for name in names:
        if name == "sigmoid25":
            chosen[name] = _surrogates.Sigmoid(slope=25.0)
        else:
            chosen[name] = _surrogates.resolve(name, family="step", op="LIF")
    return chosen
