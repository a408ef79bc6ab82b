"""The data, the model and one training run of the ``shortest-path`` benchmark."""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from torch import Tensor, nn

from ... import solvers
from ._config import METHODS, ShortestPathConfig
from ._solver import grid_shortest_path

# --------------------------------------------------------------------------- data, model


def make_data(config: ShortestPathConfig, seed: int) -> dict[str, Tensor]:
    """Features, true costs and true shortest paths for the train and test sets."""
    g = torch.Generator().manual_seed(seed)
    p, k = config.features, config.grid
    b = torch.bernoulli(torch.full((k * k, p), 0.5), generator=g)
    out = {}
    for split, n in (("train", config.train), ("test", config.test)):
        x = torch.randn(n, p, generator=g)
        base = ((x @ b.T) / math.sqrt(p) + 3) ** config.deg / 3.5**config.deg + 1
        eps = 1 + config.noise_width * (2 * torch.rand(n, k * k, generator=g) - 1)
        c = (base * eps).reshape(n, k, k)
        out[f"x_{split}"], out[f"c_{split}"] = x, c
        out[f"y_{split}"] = grid_shortest_path(c)
    return out


def _layer(method: str, config: ShortestPathConfig, generator: torch.Generator) -> Any:
    k = config.grid
    if method in ("perturbed", "perturbed FY"):
        return solvers.perturbed(
            grid_shortest_path,
            noise="normal",
            sigma=config.sigma,
            num_samples=config.num_samples,
            minimize=True,
            generator=generator,
        )
    if method == "I-MLE":
        return solvers.imle(
            grid_shortest_path,
            lam=config.imle_lam,
            k=2 * k - 1,
            tau=config.imle_tau,
            minimize=True,
            generator=generator,
        )
    if method == "blackbox":
        return solvers.blackbox(grid_shortest_path, lam=config.blackbox_lam, minimize=True)
    if method == "identity":
        return solvers.identity_solver(grid_shortest_path, minimize=True)
    if method == "identity+proj":
        return solvers.identity_solver(grid_shortest_path, project="standardize", minimize=True)
    return None


def _evaluate(model: nn.Module, data: dict[str, Tensor], k: int) -> tuple[float, float]:
    with torch.no_grad():
        pred = model(data["x_test"]).reshape(-1, k, k)
    y = grid_shortest_path(pred)
    c, y_star = data["c_test"].double(), data["y_test"].double()
    cost = (c * y.double()).sum((1, 2))
    best = (c * y_star).sum((1, 2))
    regret = float((cost - best).sum() / best.sum())
    optimal = float(((cost - best) <= 1e-9 * best).double().mean())
    return regret, optimal


def train_and_evaluate(
    method: str, data: dict[str, Tensor], config: ShortestPathConfig, seed: int
) -> dict[str, float]:
    """Train the cost network with ``method``; test regret, share optimal, ms per step."""
    if method not in METHODS:
        raise ValueError(f"Unknown method {method!r}; available: {', '.join(METHODS)}")
    torch.manual_seed(seed)
    k, p = config.grid, config.features
    model = nn.Sequential(nn.Linear(p, config.hidden), nn.ReLU(), nn.Linear(config.hidden, k * k))
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    g = torch.Generator().manual_seed(seed + 1)
    layer = _layer(method, config, torch.Generator().manual_seed(seed + 2))
    n = data["x_train"].shape[0]
    t0 = time.perf_counter()
    for _ in range(config.steps):
        idx = torch.randint(n, (config.batch_size,), generator=g)
        x, c, y_star = data["x_train"][idx], data["c_train"][idx], data["y_train"][idx]
        c_hat = model(x).reshape(-1, k, k)
        if method == "two-stage":
            loss = (c_hat - c).pow(2).mean()
        elif method == "perturbed FY":
            loss = layer.fenchel_young_loss(c_hat, y_star).mean()
        else:
            y = layer(c_hat)
            loss = (y * (1 - y_star) + (1 - y) * y_star).sum((1, 2)).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    ms = 1000 * (time.perf_counter() - t0) / config.steps
    regret, optimal = _evaluate(model, data, k)
    return {"regret": regret, "optimal": optimal, "ms_per_step": ms}
