"""The ``moe`` benchmark's runner: the runs per variant and seed, and the registered task
(see :mod:`hardgrad.bench.moe`)."""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import torch

from .._seeds import mean_std
from .._task import BenchSettings, Progress, Table, TaskResult, task
from ._config import ESTIMATORS, MoEConfig, default_config
from ._report import _dropped, _fmt, _paired_table, _plot, _verdict
from ._train import _flops, interleaved_times, make_data, train_one


@task(
    "moe",
    "toy MoE (8 experts, top-2): router-gradient bias vs the exact gradient, routing accuracy, cost",
    default_config,
)
def run(settings: BenchSettings, config: MoEConfig, progress: Progress) -> TaskResult:
    """Train the MoE with every router gradient from ``config.seeds`` seeds; report."""
    t_start = time.perf_counter()
    if config.seeds < 1 or config.steps < 1 or config.probes < 1:
        raise ValueError(
            "Expected `seeds`, `steps` and `probes` >= 1, but found "
            f"{config.seeds}, {config.steps} and {config.probes}"
        )
    for name in config.estimators:
        if name not in ESTIMATORS:
            raise ValueError(
                f"Unknown estimator {name!r} in `estimators`; available: {', '.join(ESTIMATORS)}"
            )
    progress.start("moe", len(config.estimators) * config.seeds)
    threads = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(max(1, config.threads))
    rows: dict[str, dict[str, Any]] = {}
    try:
        for name in config.estimators:
            runs = []
            for s in range(config.seeds):
                seed = settings.seed * 1000 + s
                progress.advance(f"{name}, seed {s + 1}/{config.seeds}", steps=0)
                runs.append(train_one(name, make_data(config, seed), config, seed))
                progress.advance()
            row: dict[str, Any] = {"estimator": name, "runs": runs}
            for key in (
                "cosine",
                "bias",
                "std",
                "accuracy",
                "test_mse",
                "ms_per_step",
                "dropped_train",
                "dropped_test",
            ):
                values = [float(r[key]) for r in runs if not math.isnan(float(r[key]))]
                row[key] = mean_std(values) if values else {"mean": math.nan, "std": 0.0}
            row["zero_gradient_probes"] = sum(r["zero_gradient_probes"] for r in runs)
            row["flops"] = _flops(name, config)
            rows[name] = row
            progress.log(
                f"{name}: cosine {row['cosine']['mean']:.3f}, accuracy "
                f"{row['accuracy']['mean']:.3f}, test MSE {row['test_mse']['mean']:.4f}"
            )
        progress.advance("interleaved timing", steps=0)
        timing_ms = interleaved_times(config, make_data(config, settings.seed), settings.seed)
        for name, ms in timing_ms.items():
            rows[name]["timed_ms_per_step"] = ms
    finally:
        torch.set_num_threads(threads)
    progress.finish()
    base = rows.get("sparse")
    table = Table(
        f"Toy MoE ({config.experts} experts, top-{config.k}), {config.steps} Adam steps, "
        f"mean ± std over {config.seeds} seed(s); router-gradient figures against the exact "
        f"gradient of the expected loss under stochastic top-{config.k} routing",
        [
            "estimator",
            "grad cosine",
            "grad bias",
            "grad std",
            "routing acc",
            "test MSE",
            "FLOPs ×sparse",
            "time ×sparse",
            "dropped % train / test",
        ],
    )
    for name, row in rows.items():
        flops = row["flops"] / base["flops"] if base else float("nan")
        timing = row["timed_ms_per_step"] / base["timed_ms_per_step"] if base else float("nan")
        table.rows.append(
            [
                name,
                _fmt(row["cosine"]),
                _fmt(row["bias"]),
                _fmt(row["std"]),
                _fmt(row["accuracy"]),
                _fmt(row["test_mse"], 4),
                f"{flops:.2f}",
                f"{timing:.2f}",
                _dropped(name, row),
            ]
        )
    table.notes.append(
        "grad bias and std are relative to the exact gradient's norm; deterministic estimators "
        "(sparse, dense, default) have std 0; the figures are means over the probes of each "
        "run. time ×sparse: medians of an interleaved timing run (3 steps per estimator and "
        f"round, {config.timing_rounds} rounds in shuffled orders); FLOPs: expert MLPs only "
        "(with a capacity, at most the figure: dropped assignments are not evaluated)."
    )
    table.notes.append(
        f"noisy_topk: noisy top-k gating (Shazeer et al. 2017; noise map from 0), trained with "
        f"{config.noisy_weight:g} x (importance + load CV²) in place of Switch's loss, sparse "
        "gradient, its router gradient taken through fresh noise per draw. sparse_cC: capacity "
        f"factor C (each expert takes at most ceil(C N k / E) assignments of a call's N tokens: "
        f"{config.batch_size} in training, {config.test_tokens} at test), Switch's loss on; "
        "dropped %: the share of the N k assignments past capacity, mean over the last quarter "
        "of the training steps / in the test forward (- without a capacity)."
    )
    notes = [_verdict(rows, config, "dense"), _verdict(rows, config, "default")]
    notes += [_verdict(rows, config, name) for name in ("noisy_topk", "sparse_c1.0")]
    for name, row in rows.items():
        if row["zero_gradient_probes"]:
            total = config.probes * config.seeds
            notes.append(
                f"{name}: the router gradient was exactly 0 at {int(row['zero_gradient_probes'])} of "
                f"{total} probes (cosine over the others)"
                + (
                    ": SparseMixer's sparsity mask (jitter_eps = 0.01) leaves a single "
                    "candidate expert per slot unless logits are within 2 % of the largest, "
                    "and then pi_D (e_D - pi) = 0."
                    if name == "sparsemixer"
                    else "."
                )
            )
    result = TaskResult(
        name="moe",
        summary=f"toy MoE, {len(rows)} router gradients at {config.steps} steps, "
        f"{config.seeds} seed(s)",
        settings=dataclasses.asdict(config),
        data={"rows": list(rows.values())},
        wall_s=time.perf_counter() - t_start,
    )
    figures: list[str] = []
    if settings.out is not None and config.plot:
        figure = _plot(rows, config, settings.out, quick=settings.quick)
        if figure is not None:
            figures.append(figure)
    result.figures = figures
    result.tables = [table]
    if "sparse" in rows and config.seeds > 1:
        result.tables.append(_paired_table(rows, config))
    result.notes = notes
    return result
