"""The gated MLP of the ``l0`` benchmark (:class:`GatedMLP`) and one training run."""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ... import nn as hgnn
from ..data import Dataset
from ._config import L0Config


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
