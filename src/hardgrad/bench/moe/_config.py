"""The ``moe`` benchmark's settings (:class:`MoEConfig`) and the routing estimators it compares:
what its runner and its report both read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ... import routing

#: The router gradients, in table order.
ESTIMATORS = (
    "sparse",
    "dense",
    "default",
    "sparsemixer",
    "sparsemixer_eps0.1",
    "st_gumbel",
    "reinmax",
    "rloo",
    "exact",
    "noisy_topk",
    "sparse_c1.0",
    "sparse_c1.25",
    "sparse_c2.0",
)
#: The layer options of the rows beyond the router gradient: noisy top-k gating (trained with
#: the importance and load CV² losses instead of Switch's) and capacity factors (sparse gradient).
OPTIONS: dict[str, dict[str, Any]] = {
    "noisy_topk": {"noisy_gating": True},
    "sparse_c1.0": {"capacity_factor": 1.0},
    "sparse_c1.25": {"capacity_factor": 1.25},
    "sparse_c2.0": {"capacity_factor": 2.0},
}
#: How each name trains: the MoE layer's estimator (``None``: the layer routes sparsely and
#: the loss is hg.routing.expectation's with this name).
_LAYER: dict[str, Any] = {
    "sparse": "sparse",
    "dense": "dense",
    "default": "default",
    "sparsemixer": "sparsemixer",
    "sparsemixer_eps0.1": routing.SparseMixer(jitter_eps=0.1),
    "st_gumbel": "st_gumbel",
    "reinmax": "reinmax",
    "rloo": None,
    "exact": None,
    **dict.fromkeys(OPTIONS, "sparse"),
}


@dataclass(frozen=True)
class MoEConfig:
    """Settings of the ``moe`` benchmark.

    Attributes:
        estimators: router gradients to train with (names from :data:`ESTIMATORS`).
        experts: E (also the number of true clusters).
        k: experts per token.
        features: input size; ``outputs``: target size; ``hidden``: experts' width.
        spread: the clusters' noise :math:`\\sigma` (centres have norm about 3).
        steps: Adam steps per run; ``batch_size``: tokens per step; ``lr``: Adam's rate.
        probes: points of each run (evenly spaced, the first at step 0) where the router
            gradient is compared with the exact one; ``probe_tokens`` tokens each,
            ``draws`` gradient draws per estimator.
        test_tokens: tokens of the test set.
        balance_weight: the load-balancing loss's weight.
        noisy_weight: ``noisy_topk``'s weight of ``importance + load`` (tensor2tensor's
            default ``moe_loss_coef``, in place of Switch's loss).
        seeds: independent runs per estimator.
        plot: write ``moe.png`` (needs matplotlib).
        timing_rounds: rounds of the interleaved timing (each: 3 steps of every
            estimator, in a shuffled order); ``time ×sparse`` is the ratio of the medians.
        threads: intra-op threads while training.
    """

    estimators: tuple[str, ...] = ESTIMATORS
    experts: int = 8
    k: int = 2
    features: int = 8
    outputs: int = 4
    hidden: int = 16
    spread: float = 0.6
    steps: int = 1500
    batch_size: int = 128
    lr: float = 3e-3
    probes: int = 4
    probe_tokens: int = 32
    draws: int = 128
    test_tokens: int = 2048
    balance_weight: float = 0.01
    noisy_weight: float = 0.01
    seeds: int = 5
    timing_rounds: int = 20
    plot: bool = True
    threads: int | None = 1


def default_config(quick: bool) -> MoEConfig:
    """The full setting (5 seeds, 1500 steps) or ``--quick`` (1 seed, 400 steps, without
    the capacity factor 2.0)."""
    if quick:
        estimators = tuple(e for e in ESTIMATORS if e != "sparse_c2.0")
        return MoEConfig(
            estimators=estimators, steps=400, seeds=1, probes=3, draws=64, timing_rounds=8
        )
    return MoEConfig()
