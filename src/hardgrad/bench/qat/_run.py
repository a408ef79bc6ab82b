"""The ``qat`` benchmark's runner: the runs per variant and seed, and the registered task
(see :mod:`hardgrad.bench.qat`)."""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ... import nn as hgnn
from .. import _distributed
from .._task import BenchSettings, Progress, TaskResult, task
from ..data import Dataset, load_dataset
from ._config import QatConfig, default_config
from ._model import _MIN_SCALE, Variant, build_model, variants
from ._report import _notes, _spread, _summary, _tables, plot_accuracy

# --------------------------------------------------------------------------- training


def _accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    was_training = model.training
    model.eval()
    with torch.no_grad():
        correct = int((model(x).argmax(-1) == y).sum())
    model.train(was_training)
    return correct / max(len(y), 1)


def train_and_evaluate(
    variant: Variant, data: Dataset, config: QatConfig, seed: int, device: str
) -> dict[str, float]:
    """Train one configuration from ``seed``; its final test and train accuracy, the last
    epoch's mean training loss and the seconds it took."""
    t0 = time.perf_counter()
    classes = int(max(int(data.y_train.max()), int(data.y_test.max()))) + 1
    torch.manual_seed(seed)  # the same initial weights on every rank
    model = build_model(variant, data.features, config.hidden, classes).to(device)
    x_train, y_train = _distributed.shard(data.x_train), _distributed.shard(data.y_train)
    if len(x_train) == 0:
        raise ValueError("Expected at least one training example per rank, but found none")
    batch = max(1, config.batch_size // _distributed.world_size())
    generator = torch.Generator().manual_seed(_distributed.rank_seed(seed))
    order = torch.randperm(len(x_train), generator=generator).to(x_train.device)
    # Calibration: the quantizers set their scales on the first batch (averaged across
    # ranks), before DDP sees the parameters, whose shapes this fixes.
    # Eval mode, so that BatchNorm's running statistics do not count this batch.
    model.eval()
    with torch.no_grad():
        model(x_train[order[:batch]])
    model.train()
    wrapped = _distributed.wrap(model)
    lr = config.binary_lr if variant.kind in ("binary", "ternary") else config.lr
    scales = [m.scale for m in model.modules() if isinstance(m, hgnn.Quantize) and m.learn_scale]
    others = [p for p in wrapped.parameters() if all(p is not s for s in scales)]
    groups: list[dict[str, Any]] = [{"params": others}]
    if scales:
        groups.append({"params": scales, "lr": config.scale_lr})
    optimizer = torch.optim.Adam(groups, lr=lr)
    loss_sum, steps = 0.0, 0
    for _epoch in range(config.epochs):
        order = torch.randperm(len(x_train), generator=generator).to(x_train.device)
        loss_sum, steps = 0.0, 0
        for start in range(0, len(x_train), batch):
            index = order[start : start + batch]
            loss = F.cross_entropy(wrapped(x_train[index]), y_train[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            hgnn.clip_latent_weights_(model)  # binary latent weights to [-1, 1]
            with torch.no_grad():
                for scale in scales:  # a scale must stay positive
                    scale.clamp_(min=_MIN_SCALE)
            loss_sum += float(loss.detach())
            steps += 1
    return {
        "test_accuracy": _distributed.mean_across_ranks(_accuracy(model, data.x_test, data.y_test)),
        "train_accuracy": _distributed.mean_across_ranks(_accuracy(model, x_train, y_train)),
        "final_loss": _distributed.mean_across_ranks(loss_sum / max(steps, 1)),
        "seconds": time.perf_counter() - t0,
    }


# --------------------------------------------------------------------------- the task


def _run_variant(
    variant: Variant,
    data: Dataset,
    config: QatConfig,
    settings: BenchSettings,
    progress: Progress,
    classes: int,
) -> dict[str, Any]:
    """Train ``variant`` from every seed; its row of results."""
    runs = []
    for s in range(config.seeds):
        progress.advance(f"{variant.label}, seed {s + 1}/{config.seeds}", steps=0)
        seed = settings.seed * 1000 + s  # the same seeds for every configuration
        runs.append(train_and_evaluate(variant, data, config, seed, settings.device))
        progress.advance()
    test = [r["test_accuracy"] for r in runs]
    train = [r["train_accuracy"] for r in runs]
    row = {
        "label": variant.label,
        "kind": variant.kind,
        "bits": variant.bits,
        "precision": variant.precision,
        "gradient": variant.gradient,
        "classes": classes,
        "test_accuracy": {**_summary(test), "values": test},
        "train_accuracy": {**_summary(train), "values": train},
        "final_loss": [r["final_loss"] for r in runs],
        "seconds_mean": statistics.fmean(r["seconds"] for r in runs),
    }
    progress.log(f"{variant.label}: test accuracy {_spread(row)} %")
    return row


@task(
    "qat",
    "MLP on digits: float vs 8/4/2-bit QAT (STE, LSQ) vs binary vs ternary; test accuracy",
    default_config,
)
def run(settings: BenchSettings, config: QatConfig, progress: Progress) -> TaskResult:
    """Train every configuration from ``config.seeds`` seeds and report test accuracy."""
    t_start = time.perf_counter()
    if config.seeds < 1 or config.epochs < 1:
        raise ValueError(
            f"Expected `seeds` and `epochs` >= 1, but found {config.seeds} and {config.epochs}"
        )
    data = load_dataset(settings.data, settings.seed).to(settings.device)
    classes = int(max(int(data.y_train.max()), int(data.y_test.max()))) + 1
    chosen = variants(config)
    progress.start("qat", len(chosen) * config.seeds)
    threads = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(max(1, config.threads))
    try:
        rows = [_run_variant(v, data, config, settings, progress, classes) for v in chosen]
    finally:
        torch.set_num_threads(threads)
    progress.finish()
    figures: list[str] = []
    if settings.out is not None and config.plot and _distributed.is_main():
        name = plot_accuracy(rows, config, settings.out, quick=settings.quick)
        if name is not None:
            figures.append(name)
    result = TaskResult(
        name="qat",
        summary=f"MLP on {data.name}: float vs fake-quantized (STE, LSQ) vs binary vs ternary, test "
        f"accuracy over {config.seeds} seed(s) ({settings.device})",
        settings=dataclasses.asdict(config),
        data={
            "dataset": data.name,
            "n_train": len(data.x_train),
            "n_test": len(data.x_test),
            "world_size": _distributed.world_size(),
            "threads": torch.get_num_threads() if config.threads is None else config.threads,
            "rows": rows,
            "figures": figures,
        },
        wall_s=time.perf_counter() - t_start,
    )
    result.tables = _tables(rows, config)
    result.notes = _notes(rows, config, data)
    result.figures = figures
    return result
