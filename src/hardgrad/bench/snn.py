r"""The ``snn`` benchmark: a rate-coded spiking MLP on the digits, one run per step surrogate.

Each image (scikit-learn's 8x8 digits, ``x/16``, or the images of ``--data``) is presented
for ``T = 25`` time steps as Poisson-like spike trains: at every step pixel :math:`i`
spikes with probability :math:`x_i` (Bernoulli rate coding, drawn from a seeded generator).
The network is ``Linear(64, 128) -> LIF -> Linear(128, 10) -> LIF``
(:class:`hardgrad.nn.LIF`, :math:`\beta = 0.9`, threshold 1, reset by subtraction,
reset detached: snnTorch's ``Leaky`` defaults), run with :meth:`hardgrad.nn.LIF.sequence`
over time. The prediction is the output neuron that spikes most; the loss is the
cross-entropy of the output spike counts over the ``T`` steps (a rate code), trained by
back-propagation through time with Adam (Neftci, Mostafa & Zenke 2019,
https://arxiv.org/abs/1901.09948).

The only thing that changes between rows is the surrogate derivative of the spike,
:math:`\partial s_t / \partial m_t = \sigma'(m_t - \theta)`: every surrogate of the
registry that serves step functions, at its default setting (for ``fast_sigmoid`` the slope
25 of snnTorch's, SuperSpike's; ``atan`` with :math:`\alpha = 2`, snnTorch's default), plus
``sigmoid`` at slope 25 (snnTorch's ``surrogate.sigmoid()``; hardgrad's default slope is 1).
The table gives test accuracy (mean ± std over seeds), the mean spike rate of the hidden
layer (spikes per neuron per step, test set), and the milliseconds per training step
(forward and backward of one batch over all ``T`` steps). A surrogate *trains* when its
mean test accuracy is within ``close_to_best`` (5 pp) of the best surrogate's, *partly*
when it reaches ``trains_at`` (50 %, five times chance) but not that, and *does not train*
below; the notes name them.

Wall time on two shared cores: 54 s for the full run (3 seeds, 10 epochs, 10 surrogates),
6 s with ``--quick`` (1 seed, 3 epochs). Under ``torchrun`` every rank trains on the whole
training set (no sharding) and rank 0 reports.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import nn as hgnn
from .. import surrogates as _surrogates
from . import _distributed
from ._task import BenchSettings, Progress, Table, TaskResult, task
from .data import Dataset, load_dataset

__all__ = [
    "SnnConfig",
    "SpikingMLP",
    "default_config",
    "run",
    "surrogate_choices",
    "train_and_evaluate",
]


@dataclass(frozen=True)
class SnnConfig:
    """Settings of the ``snn`` benchmark.

    Attributes:
        steps: time steps per image (rate-coding window).
        hidden: hidden LIF neurons.
        beta: membrane decay of both LIF layers.
        surrogates: names of the step surrogates to compare (``None``: every registered
            one that serves ``"step"`` ops, plus ``"sigmoid25"``, the sigmoid at slope 25).
        epochs: passes over the training set.
        batch_size: examples per step.
        lr: Adam's learning rate.
        seeds: independent runs per surrogate.
        trains_at: the mean test accuracy from which a surrogate counts as (partly) training.
        close_to_best: how far below the best mean test accuracy a surrogate still counts
            as training fully.
        threads: intra-op threads while training (``None``: ``settings.threads``).
    """

    steps: int = 25
    hidden: int = 128
    beta: float = 0.9
    surrogates: tuple[str, ...] | None = None
    epochs: int = 10
    batch_size: int = 128
    lr: float = 5e-3
    seeds: int = 3
    trains_at: float = 0.5
    close_to_best: float = 0.05
    threads: int | None = 1


def default_config(quick: bool) -> SnnConfig:
    """The full setting (3 seeds, 10 epochs) or ``--quick`` (1 seed, 3 epochs)."""
    return SnnConfig(epochs=3, seeds=1) if quick else SnnConfig()


def surrogate_choices(config: SnnConfig) -> dict[str, _surrogates.Surrogate]:
    """The surrogates of one run, label to instance, in registry order."""
    names = config.surrogates
    if names is None:
        step = [n for n, cls in _surrogates.SURROGATES.items() if "step" in cls.applies_to]
        names = (*step, "sigmoid25")
    chosen: dict[str, _surrogates.Surrogate] = {}
    for name in names:
        if name == "sigmoid25":
            chosen[name] = _surrogates.Sigmoid(slope=25.0)
        else:
            chosen[name] = _surrogates.resolve(name, family="step", op="LIF")
    return chosen


class SpikingMLP(nn.Module):
    """``Linear -> LIF -> Linear -> LIF`` over time; returns the output spike counts and the
    hidden layer's spike rate."""

    def __init__(
        self, features: int, hidden: int, classes: int, beta: float, surrogate: Any
    ) -> None:
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.lif1 = hgnn.LIF(beta, surrogate=surrogate)
        self.fc2 = nn.Linear(hidden, classes)
        self.lif2 = hgnn.LIF(beta, surrogate=surrogate)

    def forward(self, spikes_in: Tensor) -> tuple[Tensor, Tensor]:
        """``spikes_in`` of shape ``(T, batch, features)``."""
        hidden, _ = self.lif1.sequence(self.fc1(spikes_in))
        out, _ = self.lif2.sequence(self.fc2(hidden))
        return out.sum(0), hidden.mean()


def _encode(x: Tensor, steps: int, generator: torch.Generator) -> Tensor:
    """Bernoulli rate code: ``(steps, batch, features)`` spikes with probability ``x``."""
    u = torch.rand((steps, *x.shape), generator=generator, device="cpu").to(x.device)
    return (u < x).to(x.dtype)


def _evaluate(
    model: SpikingMLP, x: Tensor, y: Tensor, steps: int, seed: int, batch: int
) -> tuple[float, float]:
    generator = torch.Generator().manual_seed(seed)
    correct, rates = 0, []
    with torch.no_grad():
        for start in range(0, len(x), batch):
            xb, yb = x[start : start + batch], y[start : start + batch]
            counts, rate = model(_encode(xb, steps, generator))
            correct += int((counts.argmax(-1) == yb).sum())
            rates.append(float(rate) * len(xb))
    return correct / max(len(y), 1), sum(rates) / max(len(y), 1)


def train_and_evaluate(
    surrogate: Any, data: Dataset, config: SnnConfig, seed: int, device: str
) -> dict[str, float]:
    """Train the spiking MLP with ``surrogate`` from ``seed``: test accuracy, hidden spike
    rate, last-epoch training loss, ms per training step and the seconds it took."""
    t0 = time.perf_counter()
    classes = int(max(int(data.y_train.max()), int(data.y_test.max()))) + 1
    torch.manual_seed(seed)
    model = SpikingMLP(data.features, config.hidden, classes, config.beta, surrogate).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    generator = torch.Generator().manual_seed(seed + 1)
    x_train, y_train = data.x_train, data.y_train
    step_times: list[float] = []
    loss_sum, batches = 0.0, 0
    for _epoch in range(config.epochs):
        order = torch.randperm(len(x_train), generator=generator).to(x_train.device)
        loss_sum, batches = 0.0, 0
        for start in range(0, len(x_train), config.batch_size):
            index = order[start : start + config.batch_size]
            spikes_in = _encode(x_train[index], config.steps, generator)
            t_step = time.perf_counter()
            counts, _ = model(spikes_in)
            loss = F.cross_entropy(counts, y_train[index])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step_times.append(time.perf_counter() - t_step)
            loss_sum += float(loss.detach())
            batches += 1
    test_accuracy, rate = _evaluate(
        model, data.x_test, data.y_test, config.steps, seed + 2, config.batch_size
    )
    timed = step_times[1:] or step_times  # the first step pays for allocations
    return {
        "test_accuracy": test_accuracy,
        "spike_rate": rate,
        "final_loss": loss_sum / max(batches, 1),
        "ms_per_step": 1000 * statistics.median(timed),
        "seconds": time.perf_counter() - t0,
    }


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
        "min": min(values),
        "max": max(values),
    }


def _table(rows: list[dict[str, Any]], config: SnnConfig) -> Table:
    table = Table(
        f"Spiking MLP on digits, {config.steps} steps, rate-coded: test accuracy (%) per step "
        f"surrogate, mean ± std over {config.seeds} seed(s), {config.epochs} epochs",
        [
            "surrogate",
            "σ'(0)",
            "test acc",
            "min–max",
            "spike rate",
            "train loss",
            "ms/step",
            "trains",
        ],
    )
    for r in rows:
        acc = r["test_accuracy"]
        spread = f" ± {100 * acc['std']:.1f}" if config.seeds > 1 else ""
        table.rows.append(
            [
                r["label"],
                f"{r['peak']:.3g}",
                f"{100 * acc['mean']:.1f}{spread}",
                f"{100 * acc['min']:.1f}–{100 * acc['max']:.1f}",
                f"{r['spike_rate']:.3f}",
                f"{statistics.fmean(r['final_loss']):.3f}",
                f"{r['ms_per_step']:.1f}",
                r["verdict"],
            ]
        )
    return table


def _notes(rows: list[dict[str, Any]], config: SnnConfig, data: Dataset) -> list[str]:
    classes = rows[0]["classes"] if rows else 10
    trains = [r["label"] for r in rows if r["verdict"] == "yes"]
    partly = [r["label"] for r in rows if r["verdict"] == "partly"]
    fails = [r["label"] for r in rows if r["verdict"] == "no"]
    notes = [
        f"Data: {data.name}, {len(data.x_train)} train / {len(data.x_test)} test images, "
        f"Bernoulli rate code over {config.steps} steps; network {data.features}-"
        f"{config.hidden}-{classes}, LIF beta {config.beta}, threshold 1, subtract reset; Adam "
        f"lr {config.lr}, batch {config.batch_size}, {config.epochs} epochs, {config.seeds} "
        f"seed(s); loss: cross-entropy of the output spike counts. Chance: {100 / classes:.0f} %.",
        f"Train (mean test accuracy within {100 * config.close_to_best:.0f} pp of the best): "
        + (", ".join(trains) or "none")
        + f". Partly (at least {100 * config.trains_at:.0f} %, but further below the best): "
        + (", ".join(partly) or "none")
        + ". Do not train: "
        + (", ".join(fails) or "none")
        + ".",
        "spike rate: spikes per hidden neuron per time step on the test set; σ'(0): the "
        "surrogate's derivative at the threshold; ms/step: median wall time of one training "
        "step (forward and backward through all time steps).",
    ]
    if rows:
        best = max(rows, key=lambda r: r["test_accuracy"]["mean"])
        notes.append(
            f"Best: {best['label']} at {100 * best['test_accuracy']['mean']:.1f} % test accuracy."
        )
    return notes


@task(
    "snn",
    "Rate-coded spiking MLP (LIF) on digits over 25 steps, per step surrogate: accuracy, "
    "spike rate, ms/step",
    default_config,
)
def run(settings: BenchSettings, config: SnnConfig, progress: Progress) -> TaskResult:
    """Train the spiking MLP with every surrogate from ``config.seeds`` seeds."""
    t_start = time.perf_counter()
    if config.seeds < 1 or config.epochs < 1 or config.steps < 1:
        raise ValueError(
            "Expected `seeds`, `epochs` and `steps` >= 1, but found "
            f"{config.seeds}, {config.epochs} and {config.steps}"
        )
    chosen = surrogate_choices(config)
    data = load_dataset(settings.data, settings.seed).to(settings.device)
    classes = int(max(int(data.y_train.max()), int(data.y_test.max()))) + 1
    progress.start("snn", len(chosen) * config.seeds)
    threads = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(max(1, config.threads))
    rows: list[dict[str, Any]] = []
    try:
        for label, surrogate in chosen.items():
            runs = []
            for s in range(config.seeds):
                progress.advance(f"{label}, seed {s + 1}/{config.seeds}", steps=0)
                seed = settings.seed * 1000 + s
                runs.append(train_and_evaluate(surrogate, data, config, seed, settings.device))
                progress.advance()
            accuracy = _summary([r["test_accuracy"] for r in runs])
            peak = float(surrogate.derivative(torch.zeros((), dtype=torch.float64)))
            rows.append(
                {
                    "label": label,
                    "surrogate": repr(surrogate),
                    "peak": peak,
                    "classes": classes,
                    "test_accuracy": {**accuracy, "values": [r["test_accuracy"] for r in runs]},
                    "spike_rate": statistics.fmean(r["spike_rate"] for r in runs),
                    "final_loss": [r["final_loss"] for r in runs],
                    "ms_per_step": statistics.fmean(r["ms_per_step"] for r in runs),
                    "seconds_mean": statistics.fmean(r["seconds"] for r in runs),
                    "trains": accuracy["mean"] >= config.trains_at,
                }
            )
            progress.log(f"{label}: test accuracy {100 * accuracy['mean']:.1f} %")
    finally:
        torch.set_num_threads(threads)
    progress.finish()
    best = max((r["test_accuracy"]["mean"] for r in rows), default=0.0)
    for r in rows:
        mean = r["test_accuracy"]["mean"]
        r["verdict"] = (
            "yes"
            if mean >= config.trains_at and mean >= best - config.close_to_best
            else "partly"
            if mean >= config.trains_at
            else "no"
        )
    result = TaskResult(
        name="snn",
        summary=f"Spiking MLP on {data.name}, {config.steps} steps: test accuracy per step "
        f"surrogate over {config.seeds} seed(s) ({settings.device})",
        settings=dataclasses.asdict(config),
        data={
            "dataset": data.name,
            "n_train": len(data.x_train),
            "n_test": len(data.x_test),
            "world_size": _distributed.world_size(),
            "rows": rows,
        },
        wall_s=time.perf_counter() - t_start,
    )
    result.tables = [_table(rows, config)]
    result.notes = _notes(rows, config, data)
    return result
