"""The ``toy`` benchmark's settings (:class:`ToyConfig`) and the tolerances of its checks:
what its runner and its report both read."""

from __future__ import annotations

from dataclasses import dataclass

#: Relative tolerance of the closed-form checks.
TOLERANCE = 0.05
#: Standard errors within which a check off by more than the tolerance is 'unresolved'.
RESOLVE_Z = 4.0


@dataclass(frozen=True)
class ToyConfig:
    """Settings of the toy benchmark.

    Attributes:
        targets: the values of ``t`` in the table.
        phis: the logits ``phi`` in the table (``p = sigmoid(phi)``).
        replicas: independent estimates per estimator and setting (``M``).
        chunk: logits per call when warming up the EMA baseline (bounds memory).
        estimators: registry names and :data:`VARIANTS` to run; ``None``: every registered
            estimator that supports Bernoulli variables, then every variant.
        ema_warmup: calls that set ``reinforce(ema)``'s moving average before it is measured.
        curve_target: ``t`` of the optimisation curves.
        steps: Adam steps of each curve (0: no curves).
        lr: Adam's learning rate.
        seeds: runs per estimator (independent logits of one batch).
        record_every: keep ``p`` every this many steps.
        dtype: dtype of the logits (``"float64"`` or ``"float32"``).
        plot: write ``toy_curves.png`` and ``toy_variance.png`` (needs matplotlib).
    """

    targets: tuple[float, ...] = (0.45, 0.49, 0.499)
    phis: tuple[float, ...] = (0.0, -1.0)
    replicas: int = 2**18
    chunk: int = 2**17
    estimators: tuple[str, ...] | None = None
    ema_warmup: int = 20
    curve_target: float = 0.499
    steps: int = 3000
    lr: float = 0.01
    seeds: int = 16
    record_every: int = 10
    dtype: str = "float64"
    plot: bool = True


def default_config(quick: bool) -> ToyConfig:
    """The full setting, or the ``--quick`` one: fewer replicas, shorter curves."""
    if quick:
        return ToyConfig(replicas=2**14, chunk=2**14, steps=600, seeds=8, record_every=5)
    return ToyConfig()


# --------------------------------------------------------------------------- estimators
