"""The data and one training run of the ``ranking`` benchmark."""

from __future__ import annotations

import time

import torch
from torch import Tensor, nn

from ... import sorting
from ._config import METHODS, RankingConfig


def make_data(config: RankingConfig, seed: int) -> dict[str, Tensor]:
    """Features, true scores and true (ascending, 1-based) ranks of train and test lists."""
    g = torch.Generator().manual_seed(seed)
    p = config.features
    w1 = torch.randn(p, 16, generator=g) / p**0.5
    w2 = torch.randn(16, generator=g) / 4
    out = {}
    for split, n in (("train", config.train), ("test", config.test)):
        x = torch.randn(n, config.items, p, generator=g)
        score = torch.tanh(x @ w1) @ w2 * 4 + config.noise * torch.randn(
            n, config.items, generator=g
        )
        out[f"x_{split}"], out[f"s_{split}"] = x, score
        out[f"r_{split}"] = sorting.rank(score)
    return out


def _spearman(pred: Tensor, target: Tensor) -> Tensor:
    n = pred.shape[-1]
    return 1 - 6 * ((pred - target) ** 2).sum(-1) / (n * (n * n - 1))


def _ranks(method: str, scores: Tensor, strength: float) -> Tensor:
    if method == "soft_rank l2":
        return sorting.soft_rank(scores, strength=strength)
    if method == "soft_rank kl":
        return sorting.soft_rank(scores, strength=strength, regularization="kl")
    if method == "rank: none":
        return torch.argsort(torch.argsort(scores)).to(scores.dtype) + 1
    backward = method.split(": ")[1]
    return sorting.rank(scores, backward=backward, strength=strength)


def train_and_evaluate(
    method: str, data: dict[str, Tensor], config: RankingConfig, seed: int
) -> dict[str, float]:
    """Train the scoring network with ``method``; test Spearman, exact share, ms/step."""
    if method not in METHODS:
        raise ValueError(f"Unknown method {method!r}; available: {', '.join(METHODS)}")
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(config.features, config.hidden), nn.ReLU(), nn.Linear(config.hidden, 1)
    )
    opt = torch.optim.Adam(model.parameters(), lr=config.lr)
    g = torch.Generator().manual_seed(seed + 1)
    n = data["x_train"].shape[0]
    t0 = time.perf_counter()
    for _ in range(config.steps):
        idx = torch.randint(n, (config.batch_size,), generator=g)
        scores = model(data["x_train"][idx]).squeeze(-1)
        if method == "score MSE":
            loss = ((scores - data["s_train"][idx]) ** 2).mean()
        else:
            r = _ranks(method, scores, config.strength)
            loss = ((r - data["r_train"][idx]) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        if loss.requires_grad:
            loss.backward()
            opt.step()
    ms = 1000 * (time.perf_counter() - t0) / config.steps
    with torch.no_grad():
        pred = sorting.rank(model(data["x_test"]).squeeze(-1))
    target = data["r_test"]
    return {
        "spearman": float(_spearman(pred, target).mean()),
        "exact": float((pred == target).all(-1).float().mean()),
        "ms_per_step": ms,
    }
