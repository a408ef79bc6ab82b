"""The ``poly`` benchmark's settings (:class:`PolyConfig`) and labels: what its runner and
its report both read."""

from __future__ import annotations

from dataclasses import dataclass

from ... import estimators as _estimators
from ...estimators import Estimator, Exact

#: The label of the closed-form-gradient reference run.
REFERENCE = "closed-form"
#: Estimators with state (a moving average, learned control-variate parameters): run once
#: per power.
STATEFUL = ("rebar", "relax", "reinforce(ema)", "relax(mlp)")


@dataclass(frozen=True)
class PolyConfig:
    """Settings of the polynomial-programming benchmark.

    Attributes:
        powers: the exponents ``p``.
        variables: binary variables per run (``V``).
        target: ``t`` in ``|z - t|^p``.
        batch: evaluations of ``f`` per step (the batch; see :func:`num_samples_for`).
        lr: Adam's learning rate.
        steps: Adam steps.
        seeds: independent runs per estimator and power.
        record_every: keep the exact loss every this many steps.
        init_logit: the initial value of every logit.
        within: "reached" means an exact loss at most ``(1 + within)`` times the optimum.
        estimators: registry names and :data:`VARIANTS` to run; ``None``: every registered
            estimator that supports Bernoulli variables except ``exact``, then every variant
            (``--quick`` leaves out ``relax(mlp)``, the slowest).
        reference: also run the closed-form gradient (:data:`REFERENCE`).
        dtype: dtype of the logits.
        plot: write ``poly_curves.png`` (needs matplotlib).
    """

    powers: tuple[float, ...] = (1.5, 2.0, 3.0)
    variables: int = 128
    target: float = 0.45
    batch: int = 64
    lr: float = 1e-3
    steps: int = 8000
    seeds: int = 3
    record_every: int = 20
    init_logit: float = 0.0
    within: float = 0.01
    estimators: tuple[str, ...] | None = None
    reference: bool = True
    dtype: str = "float32"
    plot: bool = True


def default_config(quick: bool) -> PolyConfig:
    """The full setting, or ``--quick``: 400 steps at lr 2e-2 (same lr x steps), 2 seeds,
    16 evaluations per step."""
    if quick:
        names = [
            n
            for n, cls in _estimators.ESTIMATORS.items()
            if _supports_bernoulli(cls) and not issubclass(cls, Exact)
        ]
        return PolyConfig(
            steps=400,
            lr=2e-2,
            seeds=2,
            batch=16,
            record_every=4,
            estimators=(*names, "reinforce(ema)"),
        )
    return PolyConfig()


def _supports_bernoulli(cls: type[Estimator]) -> bool:
    return "bernoulli" in getattr(cls, "dists", ("bernoulli",))
