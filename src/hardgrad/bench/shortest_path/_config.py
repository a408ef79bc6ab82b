"""The ``shortest-path`` benchmark's settings (:class:`ShortestPathConfig`) and its methods: what
its runner and its report both read."""

from __future__ import annotations

from dataclasses import dataclass

METHODS = (
    "two-stage",
    "perturbed",
    "perturbed FY",
    "I-MLE",
    "blackbox",
    "identity",
    "identity+proj",
)


@dataclass(frozen=True)
class ShortestPathConfig:
    """Settings of the ``shortest-path`` benchmark.

    Attributes:
        methods: which methods to train (names from :data:`METHODS`).
        grid: :math:`k`, the grid is :math:`k \\times k` cells.
        features: :math:`p`.
        deg: the polynomial degree of the true cost map.
        noise_width: :math:`\\bar\\varepsilon`, the multiplicative noise half-width.
        train, test: instances.
        hidden: hidden width of the cost network.
        steps, batch_size, lr: Adam training.
        sigma, num_samples: :func:`hardgrad.perturbed`'s noise scale and samples.
        imle_lam, imle_tau: :func:`hardgrad.imle`'s :math:`\\lambda` and noise temperature.
        blackbox_lam: :func:`hardgrad.blackbox`'s :math:`\\lambda`.
        seeds: independent runs per method.
        threads: intra-op threads while training.
        plot: write ``shortest_path.png`` (regret per method; needs matplotlib).
    """

    methods: tuple[str, ...] = METHODS
    grid: int = 5
    features: int = 5
    deg: int = 4
    noise_width: float = 0.5
    train: int = 1000
    test: int = 1000
    hidden: int = 32
    steps: int = 1500
    batch_size: int = 32
    lr: float = 5e-3
    sigma: float = 2.0
    num_samples: int = 8
    imle_lam: float = 20.0
    imle_tau: float = 3.0
    blackbox_lam: float = 20.0
    seeds: int = 3
    threads: int | None = 1
    plot: bool = True


def default_config(quick: bool) -> ShortestPathConfig:
    """The full setting (3 seeds, 1500 steps) or ``--quick`` (2 seeds, 300 steps)."""
    if quick:
        return ShortestPathConfig(steps=300, seeds=2, train=500, test=500)
    return ShortestPathConfig()
