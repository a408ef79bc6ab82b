"""The spiking MLP of the ``snn`` benchmark (:class:`SpikingMLP`), its input encoding and one
training run."""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ... import nn as hgnn
from ..data import Dataset
from ._config import SnnConfig


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
