r"""The ``poly`` benchmark: ReinMax's polynomial programming (Liu et al. 2023, sec. 6).

The problem: ``V = 128`` binary variables :math:`z_i \sim \operatorname{Bern}(\sigma(\theta_i))`
and

.. math:: L_p(\theta) = E\Big[\tfrac1V \sum_i |z_i - t|^p\Big], \qquad t = 0.45,
          \quad p \in \{1.5, 2, 3\}.

The loss is separable, so its exact value follows from the probabilities
:math:`\pi_i = \sigma(\theta_i)` in closed form,
:math:`L_p = \tfrac1V \sum_i [\pi_i (1-t)^p + (1-\pi_i) t^p]`, minimised at :math:`\pi = 0`
with :math:`L_p^* = t^p` (0.301869, 0.2025, 0.091125). Every curve and every number in
the tables is this exact loss of the current probabilities, not a Monte-Carlo value.

**Training.** :math:`\theta` starts at ``init_logit`` (0: :math:`\pi = 1/2`) and Adam
(``lr``) follows each estimator through :func:`hardgrad.expectation`, with ``f`` returning
the per-run loss :math:`\tfrac1V\sum_i |z_i - t|^p` (one value per run: score-function
estimators see the whole 128-variable loss, as in the paper, not one term per variable).
The batch of 64 is ``num_samples``: each step spends a budget of ``batch`` evaluations of
``f`` at the current :math:`\theta` and averages them, so estimators are compared at equal
evaluations: pathwise estimators, REINFORCE and RLOO draw 64 samples, ARM and DisARM 32
antithetic pairs, REBAR and RELAX (3 evaluations per sample) ``64 // 3 = 21`` draws (63
evaluations). The tables report the evaluations each one used.

Seeds are independent rows of one logits tensor: :math:`\theta` has shape
``(P, seeds, V)`` and ``f`` returns ``(n, P, seeds)``, so every power and seed is its own run
(Adam is elementwise, and each row's estimate depends only on its own samples). Stateful
estimators (``reinforce(ema)``, ``rebar``, ``relax``, ``relax(mlp)``) are run once per
power, their parameters in the same Adam as :math:`\theta` and shared by that power's seeds
(as they would be across a batch): a moving-average baseline or a control variate
shared across powers would mix losses of different scales.

``exact`` is not run: exact enumeration needs :math:`2^{128}` configurations per run.
The closed-form gradient :math:`\partial L_p/\partial\theta_i = \pi_i(1-\pi_i)((1-t)^p -
t^p)/V` is run instead as the reference, labelled ``closed-form``.

**Reported.** Per estimator and power: the final exact loss (mean, spread over seeds), its
relative gap to :math:`L_p^*`, the first recorded step at which the loss is within 1 % of
:math:`L_p^*` (per seed; "not reached" otherwise), and the wall time. Straight-through's
mean gradient :math:`\pi(p(1-t)^{p-1}) - (1-\pi)p\,t^{p-1}` (times :math:`\sigma'/V`)
vanishes at :math:`\pi^\circ = 1/(1 + ((1-t)/t)^{p-1})`, away from the optimum; the notes
compare its final loss with the loss there. Plot: ``poly_curves.png``.

**--quick.** 400 steps at lr 2e-2 (20 times fewer steps at 20 times the learning rate,
so that Adam can move :math:`\theta` as far as in the full run), 2 seeds, a batch of 16
evaluations per step (REBAR/RELAX: 5 draws, 15 evaluations) and without ``relax(mlp)``, to
stay near 30 s on two idle cores (28 s measured; Gumbel-Rao's 10 conditional draws and REBAR/RELAX's inner
gradients dominate).

**Wall time.** The full run took 2228 s on two idle cores (``docs/results/poly/``):
Gumbel-Rao (10 conditional draws per sample) 1243 s of it, REBAR/RELAX 135-205 s each,
every other estimator 14-110 s. Leave ``gumbel_rao`` out (``estimators``) for a run of
about 16 minutes.

**torchrun.** ``poly`` has no data: every rank runs the whole benchmark with its own
sampling seeds (:func:`hardgrad.bench._distributed.rank_seed`); stateful estimators
average their state across ranks as they always do; only rank 0 reports.
"""

from __future__ import annotations

import dataclasses
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from .. import estimators as _estimators
from .._expectation import expectation
from ..estimators import RELAX, Estimator, Exact, Reinforce, ScoreFunctionEstimator
from . import _distributed
from ._poly_report import notes, plot_curves, tables
from ._task import BenchSettings, Progress, TaskResult, task

__all__ = [
    "REFERENCE",
    "VARIANTS",
    "PolyConfig",
    "RunNet",
    "default_config",
    "exact_loss",
    "num_samples_for",
    "optimum",
    "run",
    "st_stall_probability",
]

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


# --------------------------------------------------------------------------- the problem


def optimum(power: float, target: float = 0.45) -> float:
    """``min_z E|z - t|^p`` over ``z`` in {0, 1}: ``min(t, 1 - t) ** p``."""
    return float(min(target, 1 - target) ** power)


def exact_loss(probs: Tensor, power: float | Tensor, target: float = 0.45) -> Tensor:
    """``mean_i [pi_i |1 - t|^p + (1 - pi_i) |t|^p]`` over the last dimension, the exact
    expected loss of independent Bernoulli variables with probabilities ``probs``
    (differentiable; ``power`` broadcasts against ``probs.shape[:-1]``)."""
    power = torch.as_tensor(power, dtype=probs.dtype, device=probs.device)
    power = power.reshape((*power.shape, 1))
    one = abs(1 - target) ** power
    zero = abs(target) ** power
    return (probs * one + (1 - probs) * zero).mean(-1)


def st_stall_probability(power: float, target: float = 0.45) -> float:
    """The probability at which straight-through's (tau = 1) mean gradient vanishes:
    ``pi (1-t)^(p-1) = (1 - pi) t^(p-1)``."""
    return 1 / (1 + ((1 - target) / target) ** (power - 1))


def _objective(power: Tensor, target: float) -> Callable[[Tensor], Tensor]:
    """``f(z) = mean_i |z_i - t|^p``: ``(n, P, S, V) -> (n, P, S)``, ``power`` of shape
    ``(P, 1, 1)``."""

    def f(z: Tensor) -> Tensor:
        return (z - target).abs().pow(power).mean(-1)

    return f


# --------------------------------------------------------------------------- estimators


class RunNet(torch.nn.Module):
    """RELAX's network for ``relax(mlp)``: ``V``-``hidden``-1 tanh MLP of the perturbed
    logits of one run, ``(n, P, S, V) -> (n, P, S)``."""

    def __init__(self, variables: int = 128, hidden: int = 32) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(variables, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1)
        )

    def forward(self, z: Tensor) -> Tensor:
        out: Tensor = self.net(z).squeeze(-1)
        return out


#: Labelled variants run next to the registry's default instances.
VARIANTS: dict[str, Callable[[PolyConfig], Estimator]] = {
    "reinforce(ema)": lambda config: Reinforce(baseline="ema"),
    "relax(mlp)": lambda config: RELAX(RunNet(config.variables)),
}


def _supports_bernoulli(cls: type[Estimator]) -> bool:
    return "bernoulli" in getattr(cls, "dists", ("bernoulli",))


def _resolve_names(config: PolyConfig) -> list[str]:
    if config.estimators is None:
        names = [
            n
            for n, cls in _estimators.ESTIMATORS.items()
            if _supports_bernoulli(cls) and not issubclass(cls, Exact)
        ]
        return names + list(VARIANTS)
    known = [n for n in _estimators.ESTIMATORS.names() if n != "exact"] + list(VARIANTS)
    for name in config.estimators:
        if name not in known:
            raise ValueError(
                f"Unknown estimator {name!r} in `estimators` (exact enumeration of 2^128 "
                "configurations is impossible); available: " + ", ".join(map(repr, known))
            )
    return list(config.estimators)


def _make(name: str, seed: int, config: PolyConfig, settings: BenchSettings) -> Estimator:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        est = VARIANTS[name](config) if name in VARIANTS else _estimators.get(name)
    if isinstance(est, RELAX) and est.control_variate is not None:
        est.control_variate.to(dtype=getattr(torch, config.dtype))
    if isinstance(est, torch.nn.Module):
        est.to(device=settings.device)
    return est


def num_samples_for(est: Estimator, batch: int) -> int:
    """Samples that spend at most ``batch`` evaluations of ``f`` (at least the estimator's
    minimum, and a multiple of its pair size)."""
    per = int(est.evaluations_per_sample)
    n = max(batch // per, 1)
    if isinstance(est, ScoreFunctionEstimator):
        n -= n % est.sample_multiple
        n = max(n, est.min_samples, est.sample_multiple)
    return n


def _seed(settings: BenchSettings, *parts: object) -> int:
    """A sampling seed per run (independent of the order runs are made in, and of the rank
    under ``torchrun``)."""
    key = "/".join(str(p) for p in parts).encode()
    return _distributed.rank_seed((settings.seed * 1_000_003 + zlib.crc32(key)) % 2**40)


# --------------------------------------------------------------------------- training


def _recorded_steps(config: PolyConfig) -> list[int]:
    kept = [0, *range(config.record_every, config.steps + 1, config.record_every)]
    if kept[-1] != config.steps:
        kept.append(config.steps)
    return kept


def _train(
    name: str, powers: tuple[float, ...], config: PolyConfig, settings: BenchSettings
) -> tuple[Tensor, dict[str, Any]]:
    """Adam with estimator ``name`` on every power in ``powers`` at once; returns the exact
    loss history ``(recorded steps, P, seeds)`` (float64, CPU) and facts about the run."""
    dtype = getattr(torch, config.dtype)
    device = settings.device
    seed = _seed(settings, name, *powers)
    shape = (len(powers), config.seeds, config.variables)
    theta = torch.full(shape, config.init_logit, dtype=dtype, device=device, requires_grad=True)
    power = torch.tensor(powers, dtype=dtype, device=device).reshape(-1, 1, 1)
    params = [theta]
    est: Estimator | None = None
    n = 0
    if name != REFERENCE:
        est = _make(name, seed, config, settings)
        if isinstance(est, torch.nn.Module):
            params += [q for q in est.parameters() if q.requires_grad]
        n = num_samples_for(est, config.batch)
    optimizer = torch.optim.Adam(params, lr=config.lr)
    generator = torch.Generator(device=device).manual_seed(seed)
    f = _objective(power, config.target)
    kept = _recorded_steps(config)
    history = torch.empty(len(kept), len(powers), config.seeds, dtype=torch.float64)
    power64 = power.reshape(-1, 1).to(torch.float64)

    def record(slot: int) -> None:
        probs = torch.sigmoid(theta.detach().to(torch.float64))
        history[slot] = exact_loss(probs, power64, config.target).cpu()

    record(0)
    slot = 1
    t0 = time.perf_counter()
    for step in range(1, config.steps + 1):
        optimizer.zero_grad(set_to_none=True)
        if est is None:
            loss = exact_loss(torch.sigmoid(theta), power.reshape(-1, 1), config.target)
        else:
            loss = expectation(f, theta, estimator=est, num_samples=n, generator=generator)
        loss.sum().backward()
        optimizer.step()
        if slot < len(kept) and step == kept[slot]:
            record(slot)
            slot += 1
    wall = time.perf_counter() - t0
    facts = {
        "unbiased": True if est is None else bool(est.unbiased),
        "pathwise": False if est is None else bool(est.pathwise),
        "stateful": name in STATEFUL,
        "num_samples": n,
        "evaluations_per_step": 0 if est is None else n * int(est.evaluations_per_sample),
        "wall_s": wall,
    }
    if isinstance(est, RELAX | _estimators.REBAR):
        facts["final_tau"] = est.tau
        facts["final_scale"] = float(est.scale.detach())
    return history, facts


def _summarise(
    history: Tensor, kept: list[int], power: float, config: PolyConfig
) -> dict[str, Any]:
    """Curves and final numbers of one estimator at one power (``history``: ``(K, S)``)."""
    best = optimum(power, config.target)
    gap = history / best - 1
    reached_mask = gap <= config.within
    first = torch.where(reached_mask.any(0), reached_mask.to(torch.int64).argmax(0), -1)
    reached = [kept[int(i)] if int(i) >= 0 else None for i in first]
    final = history[-1]
    # The gap three quarters of the way through, to tell a stall from slow progress.
    late = history[(3 * (len(kept) - 1)) // 4]
    return {
        "optimum": best,
        "mean": history.mean(1).tolist(),
        "min": history.amin(1).tolist(),
        "max": history.amax(1).tolist(),
        "final": final.tolist(),
        "final_mean": float(final.mean()),
        "final_std": float(final.std()) if final.numel() > 1 else 0.0,
        "gap": (final / best - 1).tolist(),
        "gap_mean": float((final / best - 1).mean()),
        "gap_std": float((final / best - 1).std()) if final.numel() > 1 else 0.0,
        "gap_at_three_quarters": float((late / best - 1).mean()),
        "gap_at_start": float((history[0] / best - 1).mean()),
        "steps_within": reached,
    }


# --------------------------------------------------------------------------- the task


@task(
    "poly",
    "ReinMax's polynomial programming: 128 bits, E[mean |z - 0.45|^p], p in {1.5, 2, 3}; "
    "Adam per estimator, exact loss vs the optimum",
    default_config,
)
def run(settings: BenchSettings, config: PolyConfig | None, progress: Progress) -> TaskResult:
    """Run the polynomial-programming benchmark; see the module docstring."""
    config = config if config is not None else default_config(settings.quick)
    if config.steps < 1 or config.seeds < 1 or config.batch < 1 or config.record_every < 1:
        raise ValueError(
            "Expected `steps`, `seeds`, `batch` and `record_every` >= 1, but found "
            f"{config.steps}, {config.seeds}, {config.batch}, {config.record_every}"
        )
    names = ([REFERENCE] if config.reference else []) + _resolve_names(config)
    kept = _recorded_steps(config)
    progress.start("poly", len(names))
    runs: dict[str, Any] = {}
    t_start = time.perf_counter()
    # Each step's tensors hold a few ten thousand elements: more intra-op threads only add
    # thread-pool overhead (and spin on a busy machine).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for name in names:
            stateful = name in STATEFUL
            groups = [(p,) for p in config.powers] if stateful else [config.powers]
            entry: dict[str, Any] = {"powers": {}, "wall_s": 0.0}
            for group in groups:
                history, facts = _train(name, group, config, settings)
                wall = facts.pop("wall_s")
                entry["wall_s"] += wall
                for key in ("final_tau", "final_scale"):
                    if key in facts:
                        entry.setdefault(key, {})[str(group[0])] = facts.pop(key)
                entry.update(facts)
                for j, power in enumerate(group):
                    entry["powers"][str(power)] = _summarise(history[:, j], kept, power, config)
            entry["ms_per_step"] = 1e3 * entry["wall_s"] / (len(groups) * config.steps)
            runs[name] = entry
            progress.advance(f"poly {name} ({entry['wall_s']:.1f} s)")
    finally:
        torch.set_num_threads(threads)
        progress.finish()
    data: dict[str, Any] = {
        "problem": f"E[mean_i |z_i - {config.target}|^p], {config.variables} bits "
        "z_i ~ Bernoulli(sigmoid(theta_i)); exact loss in closed form",
        "optima": {str(p): optimum(p, config.target) for p in config.powers},
        "st_stall": {
            str(p): {
                "probability": st_stall_probability(p, config.target),
                "loss": float(
                    exact_loss(
                        torch.tensor([st_stall_probability(p, config.target)], dtype=torch.float64),
                        p,
                        config.target,
                    )
                ),
            }
            for p in config.powers
        },
        "steps": kept,
        "runs": runs,
        "not_run": {"exact": f"2^{config.variables} configurations per run"},
        "figures": {},
    }
    result = TaskResult(
        name="poly",
        summary=f"Polynomial programming (ReinMax): {config.variables} bits, "
        f"p in {list(config.powers)}, Adam(lr={config.lr}) {config.steps} steps, "
        f"{config.seeds} seeds, {config.batch} f evaluations per step ({config.dtype}, "
        f"{settings.device})",
        settings=dataclasses.asdict(config),
        data=data,
        wall_s=time.perf_counter() - t_start,
    )
    result.tables = tables(data, config, settings.quick)
    result.notes = notes(data, config)
    if settings.out is not None and config.plot:
        figure = plot_curves(data, config, settings.out)
        if figure is not None:
            result.figures.append(figure)
            data["figures"][figure] = "data.runs[*].powers[*]: exact loss per estimator"
    return result
