"""The ``models`` benchmark's runner: each pair checked, then timed step against step, and
the registered task (see :mod:`hardgrad.bench.models`)."""

from __future__ import annotations

import functools
import math
import random
from typing import Any

from .._task import BenchSettings, Progress, Table, TaskResult, task
from .._timing import (
    UNRESOLVED,
    median,
    ms,
    ratio_interval,
    ratio_verdict,
    round_ratios,
    time_interleaved,
)
from ._config import MODELS, ModelsConfig, default_config
from ._pairs import Training, _restart_all, build_pair, check_pair


@task(
    "models",
    "one training step of small models written the way public code writes them (LSQ MLP, "
    "PACT MLP, BinaryNet MLP, TWN MLP, spiking MLP over 25 steps (spike op, LIF module), "
    "stochastic-neuron MLP, VQ-VAE, FSQ autoencoder, top-2 MoE, L0-gated MLP): "
    "hand-written vs hardgrad, interleaved; ms per step and ratios",
    default_config,
)
def run(settings: BenchSettings, config: ModelsConfig, progress: Progress) -> TaskResult:
    unknown = [m for m in config.models if m not in MODELS]
    if unknown:
        raise ValueError(f"Unknown model(s) {unknown} for `models`; available: {', '.join(MODELS)}")
    progress.start("models", len(config.models))
    rng = random.Random(settings.seed)
    results: dict[str, Any] = {}
    for name in config.models:
        pair = build_pair(name, settings, config)
        errors = check_pair(pair)
        trainings = {which: Training(pair, which) for which in ("original", "hardgrad")}
        for training in trainings.values():  # warm-up: allocator, Adam state, lazy init
            training.step()
            training.step()
            training.keep()

        times = time_interleaved(
            {which: training.step for which, training in trainings.items()},
            rounds=config.rounds,
            min_run_time=config.min_run_time,
            threads=settings.threads,
            rng=rng,
            after_round=functools.partial(_restart_all, list(trainings.values())),
            budget_s=config.budget_s,
        )
        paired = round_ratios(times, "hardgrad", "original")
        results[name] = {
            "original_ms": ms(median(times["original"])),
            "hardgrad_ms": ms(median(times["hardgrad"])),
            "ratio": median(times["hardgrad"]) / median(times["original"]),
            "round_ratios": paired,
            "rounds_faster": sum(r < 1.0 for r in paired),
            "ratio_ci": list(ratio_interval(paired)),
            "verdict": ratio_verdict(paired),
            "original_rounds_ms": [ms(t) for t in times["original"]],
            "hardgrad_rounds_ms": [ms(t) for t in times["hardgrad"]],
            "check": errors,
        }
        progress.advance(f"{name} done")
    progress.finish()
    table = Table(
        "One training step: hand-written original vs hardgrad (median over interleaved rounds)",
        ["model", "original ms", "hardgrad ms", "ratio", "hardgrad faster", "check"],
    )
    for name, entry in results.items():
        check = entry["check"]
        checked = (
            f"grad rel. err {check['gradient']:.1e}"
            if math.isnan(check["loss"])
            else f"loss {check['loss']:.1e}, grads {check['gradient']:.1e}"
        )
        table.rows.append(
            [
                name,
                f"{entry['original_ms']:.3f}",
                f"{entry['hardgrad_ms']:.3f}",
                f"{entry['ratio']:.2f}"
                + (" unresolved (noise)" if entry["verdict"] == UNRESOLVED else ""),
                f"{entry['rounds_faster']}/{len(entry['round_ratios'])}",
                checked,
            ]
        )
    table.notes.append(
        f"batch {config.batch}, Adam, float32, {settings.threads} thread(s), device "
        f"{settings.device}; up to {config.rounds} rounds of at least "
        f"{config.min_run_time:g} s per candidate"
        + (f" (fewer once a model's rounds pass {config.budget_s:g} s)" if config.budget_s else "")
        + "; ratio = hardgrad / original (below 1: hardgrad faster); unresolved (noise): the "
        "confidence interval of the median per-round ratio contains 1."
    )
    return TaskResult(
        name="models",
        summary="training-step time of hand-written models against the same with hardgrad",
        settings={
            "models": list(config.models),
            "batch": config.batch,
            "time_steps": config.time_steps,
            "rounds": config.rounds,
            "min_run_time": config.min_run_time,
            "budget_s": config.budget_s,
        },
        data={"models": results},
        tables=[table],
    )
