"""The ``poly`` benchmark's runner: estimators and variants, the Adam runs, and the
registered task (see :mod:`hardgrad.bench.poly`)."""

from __future__ import annotations

import dataclasses
import time
import zlib
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ... import estimators as _estimators
from ...estimators import RELAX, Estimator, Exact, Reinforce, ScoreFunctionEstimator
from ...stochastic._expectation import expectation
from .. import _distributed
from .._task import BenchSettings, Progress, TaskResult, task
from ._config import REFERENCE, STATEFUL, PolyConfig, _supports_bernoulli, default_config
from ._problem import _objective, exact_loss, optimum, st_stall_probability
from ._report import notes, plot_curves, tables

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
    """Run the polynomial-programming benchmark; see the package docstring."""
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
        figure = plot_curves(data, config, settings.out, quick=settings.quick)
        if figure is not None:
            result.figures.append(figure)
            data["figures"][figure] = "data.runs[*].powers[*]: exact loss per estimator"
    return result
