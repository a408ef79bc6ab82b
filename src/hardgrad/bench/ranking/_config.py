"""The ``ranking`` benchmark's settings (:class:`RankingConfig`) and its methods: what its runner
reads."""

from __future__ import annotations

from dataclasses import dataclass

METHODS = (
    "soft_rank l2",
    "soft_rank kl",
    "rank: soft",
    "rank: neuralsort",
    "rank: softsort",
    "rank: none",
    "score MSE",
)


@dataclass(frozen=True)
class RankingConfig:
    """Settings of the ``ranking`` benchmark.

    Attributes:
        methods: names from :data:`METHODS`.
        items: items per list.
        features: :math:`p`.
        noise: standard deviation of the noise on the true scores.
        train, test: lists.
        hidden: hidden width of the scoring network.
        steps, batch_size, lr: Adam training.
        strength: the relaxations' strength (:math:`\\varepsilon` or :math:`\\tau`).
        seeds: runs per method.
        threads: intra-op threads while training.
    """

    methods: tuple[str, ...] = METHODS
    items: int = 10
    features: int = 8
    noise: float = 0.1
    train: int = 2000
    test: int = 1000
    hidden: int = 32
    steps: int = 1500
    batch_size: int = 32
    lr: float = 3e-3
    strength: float = 0.5
    seeds: int = 3
    threads: int | None = 1


def default_config(quick: bool) -> RankingConfig:
    """The full setting (3 seeds, 1500 steps) or ``--quick`` (2 seeds, 400 steps)."""
    if quick:
        return RankingConfig(steps=400, seeds=2)
    return RankingConfig()
