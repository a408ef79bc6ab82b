"""The ``policy`` benchmark's runner: gradient statistics per estimator and group size, the
training runs, and the registered task (see :mod:`hardgrad.bench.policy`)."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch

from ...diagnostics._sequences import _SequenceProblem, summarize_draws
from ...policy._estimators import SEQUENCE_ESTIMATORS
from .._task import BenchSettings, Progress, TaskResult, task
from ._config import PolicyConfig, default_config, init_params, make_policy, make_reward
from ._report import _plot, notes_of, table_of, training_table
from ._train import check_training, summarize_runs, target_of, train_curve


@task(
    "policy",
    "policy gradients for sequences (REINFORCE, RLOO, GRPO, Dr. GRPO): bias, cosine, variance "
    "against the exact gradient; reward while training with Adam and SGD",
    default_config,
)
def run(settings: BenchSettings, config: PolicyConfig, progress: Progress) -> TaskResult:
    """Gradient statistics for every estimator and group size, then the training runs."""
    threads = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    try:
        return _run(settings, config, progress)
    finally:
        torch.set_num_threads(threads)


def _run(settings: BenchSettings, config: PolicyConfig, progress: Progress) -> TaskResult:
    unknown = [e for e in config.estimators if e not in SEQUENCE_ESTIMATORS]
    if unknown:
        raise ValueError(
            f"Unknown estimators {unknown}; expected names of {list(SEQUENCE_ESTIMATORS)}"
        )
    check_training(config)
    params = init_params(config, seed=0)
    policy, reward = make_policy(params, config), make_reward(config)
    runs = len(config.optimizers) * config.seeds
    total = len(config.group_sizes) * len(config.estimators) * (1 + runs)
    progress.start("policy", total)
    problem = _SequenceProblem(policy, reward, vocab_size=config.vocab_size, length=config.length,
                               params=params, eos_token=config.eos_token)  # fmt: skip
    exact_norm = float(problem.exact.norm())
    value = float((problem.probs * problem.rewards).sum())
    generator = torch.Generator().manual_seed(settings.seed)
    rows: list[dict[str, Any]] = []
    for n in config.group_sizes:
        draws = max(2, config.sequences // n)
        index = problem.sample(draws * n, generator).reshape(draws, n)
        for name in config.estimators:
            start = time.perf_counter()
            g = problem.draws(SEQUENCE_ESTIMATORS[name], index, n, 1)
            summary = summarize_draws(g, problem.exact, name, n, time.perf_counter() - start)
            rows.append(dataclasses.asdict(summary) | {
                "relative_bias": summary.bias / exact_norm,
                "relative_noise": summary.noise_floor / exact_norm,
                "relative_variance": summary.variance / exact_norm**2,
            })  # fmt: skip
            progress.advance(f"policy: {name}, n = {n}")
    target = target_of(value, float(problem.rewards.max()), config)
    for row in rows:
        row["training"] = {}
        for optimizer in config.optimizers:
            curves = []
            for seed in range(config.seeds):
                curves.append(train_curve(row["estimator"], row["group_size"], optimizer, config,
                                          settings.seed + seed, target))  # fmt: skip
                progress.advance(f"policy: training {row['estimator']}, n = {row['group_size']}")
            row["training"][optimizer] = summarize_runs(curves, config, target)
    progress.finish()
    data = {
        "rows": rows,
        "sequences": len(problem.probs),
        "parameters": int(problem.exact.numel()),
        "initial_reward": value,
        "exact_gradient_norm": exact_norm,
        "max_reward": float(problem.rewards.max()),
        "target_reward": target,
    }
    figures: list[str] = []
    if settings.out is not None and config.plot:
        figure = _plot(rows, settings.out, config, quick=settings.quick)
        if figure is not None:
            figures.append(figure)
    result = TaskResult(
        name="policy",
        summary=f"policy gradients for sequences: {len(config.estimators)} estimators x "
        f"{len(config.group_sizes)} group sizes",
        settings=dataclasses.asdict(config),
        data=data,
    )
    result.tables = [table_of(rows, config, data), training_table(rows, config, data)]
    result.notes = notes_of(rows, config, data)
    result.figures = figures
    return result
