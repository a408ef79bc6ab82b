r"""The ``l0`` benchmark: L0 pruning of an MLP on the digits with Hard Concrete gates.

An MLP ``64-hidden-10`` (ReLU) classifies scikit-learn's 8x8 digits (``x/16``). A
:class:`hardgrad.nn.HardConcreteGate` sits on each of its 64 inputs and each hidden unit
(Louizos et al. 2018, https://arxiv.org/abs/1712.01312: group sparsity, a pruned input or
unit removes a row or column of weights). The loss is the cross-entropy plus
:math:`\lambda` times the expected share of non-zero gates
(:math:`\sum P(z \ne 0)` over all gates, divided by their number), for several
:math:`\lambda`. Reported on the test set with the deterministic test-time gates: accuracy,
the share of gates that are exactly 0, and the share of the two weight matrices' entries
that the pruned inputs and units remove; the trade-off of sparsity against accuracy.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import nn as hgnn
from ._pyplot import pyplot
from ._seeds import check_runs, train_over_seeds
from ._task import BenchSettings, Progress, Table, TaskResult, task
from .data import Dataset, load_dataset

__all__ = ["GatedMLP", "L0Config", "default_config", "run", "train_and_evaluate"]


@dataclass(frozen=True)
class L0Config:
    """Settings of the ``l0`` benchmark.

    Attributes:
        lambdas: the penalty weights :math:`\\lambda` (0 trains the gates without penalty).
        hidden: hidden units.
        steps, batch_size, lr: Adam training (the gates' log alpha at ``gate_lr``).
        gate_lr: learning rate of the gates' parameters.
        seeds: runs per :math:`\\lambda`.
        threads: intra-op threads while training.
        plot: write ``l0.png`` (accuracy against weights removed; needs matplotlib).
    """

    lambdas: tuple[float, ...] = (0.0, 0.3, 1.0, 3.0, 10.0)
    hidden: int = 128
    steps: int = 3000
    batch_size: int = 64
    lr: float = 2e-3
    gate_lr: float = 2e-2
    seeds: int = 3
    threads: int | None = 1
    plot: bool = True


def default_config(quick: bool) -> L0Config:
    """The full setting (3 seeds, 3000 steps) or ``--quick`` (2 seeds, 800 steps)."""
    if quick:
        return L0Config(steps=800, seeds=2)
    return L0Config()


class GatedMLP(nn.Module):
    """``gate(64) -> Linear -> ReLU -> gate(hidden) -> Linear``."""

    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.input_gate = hgnn.HardConcreteGate(features)
        self.fc1 = nn.Linear(features, hidden)
        self.hidden_gate = hgnn.HardConcreteGate(hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x: Tensor) -> Tensor:
        h = F.relu(self.fc1(self.input_gate(x)))
        return self.fc2(self.hidden_gate(h))

    def expected_density(self) -> Tensor:
        """The expected share of non-zero gates (differentiable)."""
        total = self.input_gate.features + self.hidden_gate.features
        return (self.input_gate.l0() + self.hidden_gate.l0()) / total

    def weight_density(self) -> float:
        """The share of fc1's and fc2's weights that the test-time gates keep."""
        with torch.no_grad():
            keep_in = (self.input_gate.eval().gates() > 0).float()
            keep_hidden = (self.hidden_gate.eval().gates() > 0).float()
        kept = keep_in.sum() * keep_hidden.sum() + keep_hidden.sum() * self.fc2.out_features
        total = self.fc1.weight.numel() + self.fc2.weight.numel()
        return float(kept / total)


def train_and_evaluate(lam: float, data: Dataset, config: L0Config, seed: int) -> dict[str, float]:
    """Train with penalty weight ``lam``; test accuracy, gate and weight sparsity, ms/step."""
    torch.manual_seed(seed)
    classes = int(data.y_train.max()) + 1
    model = GatedMLP(data.features, config.hidden, classes)
    gate_params = [model.input_gate.log_alpha, model.hidden_gate.log_alpha]
    others = [p for n, p in model.named_parameters() if not n.endswith("log_alpha")]
    groups: list[dict[str, Any]] = [
        {"params": others},
        {"params": gate_params, "lr": config.gate_lr},
    ]
    opt = torch.optim.Adam(groups, lr=config.lr)
    g = torch.Generator().manual_seed(seed + 1)
    n = len(data.x_train)
    t0 = time.perf_counter()
    model.train()
    for _ in range(config.steps):
        idx = torch.randint(n, (config.batch_size,), generator=g)
        loss = F.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
        loss = loss + lam * model.expected_density()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    ms = 1000 * (time.perf_counter() - t0) / config.steps
    model.eval()
    with torch.no_grad():
        accuracy = float((model(data.x_test).argmax(-1) == data.y_test).float().mean())
    gates_total = model.input_gate.features + model.hidden_gate.features
    zero = (
        model.input_gate.sparsity() * model.input_gate.features
        + model.hidden_gate.sparsity() * model.hidden_gate.features
    ) / gates_total
    return {
        "accuracy": accuracy,
        "gate_sparsity": zero,
        "input_sparsity": model.input_gate.sparsity(),
        "hidden_sparsity": model.hidden_gate.sparsity(),
        "weight_sparsity": 1.0 - model.weight_density(),
        "ms_per_step": ms,
    }


KEYS = (
    "accuracy",
    "gate_sparsity",
    "input_sparsity",
    "hidden_sparsity",
    "weight_sparsity",
    "ms_per_step",
)


@task(
    "l0",
    "L0 pruning of an MLP on digits with Hard Concrete gates: sparsity vs accuracy",
    default_config,
)
def run(settings: BenchSettings, config: L0Config, progress: Progress) -> TaskResult:
    """Train for every penalty weight from ``config.seeds`` seeds; report the trade-off."""
    check_runs(config.seeds, config.steps)
    data = load_dataset(settings.data, settings.seed)
    progress.start("l0", len(config.lambdas) * config.seeds)
    rows = train_over_seeds(
        config.lambdas,
        lambda lam, seed: train_and_evaluate(lam, data, config, seed),
        seeds=config.seeds,
        base_seed=settings.seed,
        keys=KEYS,
        label="lambda",
        progress=progress,
        threads=config.threads,
        describe=lambda lam: f"lambda {lam}",
    )
    progress.finish()
    table = Table(
        title=f"L0 pruning on {data.name} (test set, {config.seeds} seed(s), {config.steps} steps)",
        columns=[
            "lambda",
            "accuracy (%)",
            "gates off (%)",
            "inputs off (%)",
            "hidden off (%)",
            "weights removed (%)",
            "ms / step",
        ],
    )
    for r in rows:
        table.rows.append(
            [
                f"{r['lambda']:g}",
                f"{100 * r['accuracy']['mean']:.1f} ± {100 * r['accuracy']['std']:.1f}",
                f"{100 * r['gate_sparsity']['mean']:.1f}",
                f"{100 * r['input_sparsity']['mean']:.1f}",
                f"{100 * r['hidden_sparsity']['mean']:.1f}",
                f"{100 * r['weight_sparsity']['mean']:.1f}",
                f"{r['ms_per_step']['mean']:.2f}",
            ]
        )
    notes = [
        f"MLP {data.features}-{config.hidden}-10 with Hard Concrete gates on inputs and hidden "
        f"units (beta 2/3, gamma -0.1, zeta 1.1, init keep 0.9); loss = cross-entropy + lambda "
        f"x expected share of open gates; Adam lr {config.lr} (gates {config.gate_lr}), batch "
        f"{config.batch_size}. Test-time gates are deterministic."
    ]
    if len(rows) >= 2:
        first, last = rows[0], rows[-1]
        monotone = all(
            a["weight_sparsity"]["mean"] <= b["weight_sparsity"]["mean"] + 1e-9
            for a, b in itertools.pairwise(rows)
        )
        notes.append(
            f"From lambda {first['lambda']:g} to {last['lambda']:g}: weights removed "
            f"{100 * first['weight_sparsity']['mean']:.1f} % -> "
            f"{100 * last['weight_sparsity']['mean']:.1f} %, accuracy "
            f"{100 * first['accuracy']['mean']:.1f} % -> {100 * last['accuracy']['mean']:.1f} %; "
            f"sparsity {'grows' if monotone else 'does not grow'} monotonically with lambda."
        )
    figures: list[str] = []
    if settings.out is not None and config.plot:
        name = _plot(rows, settings.out)
        if name is not None:
            figures.append(name)
    result = TaskResult(
        name="l0",
        summary=f"L0 pruning on {data.name}: {len(config.lambdas)} penalty weights",
        settings=dataclasses.asdict(config),
        data={"dataset": data.name, "rows": rows},
    )
    result.tables = [table]
    result.notes = notes
    result.figures = figures
    return result


def _plot(rows: list[dict[str, Any]], out: Path) -> str | None:
    plt = pyplot()
    if plt is None:  # the bench extra is missing
        return None
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(4.5, 3.4))
    xs = [100 * r["weight_sparsity"]["mean"] for r in rows]
    ys = [100 * r["accuracy"]["mean"] for r in rows]
    errs = [100 * r["accuracy"]["std"] for r in rows]
    ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3)
    for r, x, y in zip(rows, xs, ys, strict=True):
        ax.annotate(
            f"λ={r['lambda']:g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8
        )
    ax.set_xlabel("weights removed (%)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("L0 pruning with Hard Concrete gates", fontsize=9)
    fig.tight_layout()
    name = "l0.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name
