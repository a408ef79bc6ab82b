r"""The ``ranking`` benchmark: learning to rank with the sort and rank ops.

Each instance is a list of ``items`` items with features :math:`x_i \in R^p` (standard
normal); the true score of an item is a fixed random two-layer network of its features plus
Gaussian noise, and the target is the ranking of the list by true score. A small network
(``p``-``hidden``-1, shared across items) predicts a score per item; its ranks are trained
against the target ranks with the squared rank error :math:`\frac1n\sum_i (r_i - r^*_i)^2`
(which is :math:`\frac{n^2 - 1}{6}(1 - \rho)` for Spearman's :math:`\rho` when ``r`` are
exact ranks), where :math:`r` is, per method:

* ``soft_rank l2`` / ``soft_rank kl``: :func:`hardgrad.soft_rank` (Blondel et al. 2020,
  https://arxiv.org/abs/2002.08871), a relaxed forward;
* ``rank: soft``, ``rank: neuralsort``, ``rank: softsort``: :func:`hardgrad.rank` (exact
  ranks in forward) with the soft-rank, NeuralSort (Grover et al. 2019,
  https://arxiv.org/abs/1903.08850) or SoftSort (Prillo & Eisenschlos 2020,
  https://arxiv.org/abs/2006.16038) backward;
* ``rank: none``: exact ranks with PyTorch's own gradient (none: rank is an integer map), a
  check that the task cannot be learned without a relaxation;
* ``score MSE``: regression of the (privileged) true scores, a reference.

Reported on the test set: Spearman's :math:`\rho` between predicted and true ranks (mean
over lists), the share of lists ranked exactly right, and the time per step.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .. import sorting
from ._seeds import check_runs, train_over_seeds
from ._task import BenchSettings, Progress, Table, TaskResult, task

__all__ = ["METHODS", "RankingConfig", "default_config", "run", "train_and_evaluate"]

#: The methods, in table order.
METHODS = (
    "soft_rank l2",
    "soft_rank kl",
    "rank: soft",
    "rank: neuralsort",
    "rank: softsort",
    "rank: none",
    "score MSE",
)


@dataclass(frozen=True)
class RankingConfig:
    """Settings of the ``ranking`` benchmark.

    Attributes:
        methods: names from :data:`METHODS`.
        items: items per list.
        features: :math:`p`.
        noise: standard deviation of the noise on the true scores.
        train, test: lists.
        hidden: hidden width of the scoring network.
        steps, batch_size, lr: Adam training.
        strength: the relaxations' strength (:math:`\\varepsilon` or :math:`\\tau`).
        seeds: runs per method.
        threads: intra-op threads while training.
    """

    methods: tuple[str, ...] = METHODS
    items: int = 10
    features: int = 8
    noise: float = 0.1
    train: int = 2000
    test: int = 1000
    hidden: int = 32
    steps: int = 1500
    batch_size: int = 32
    lr: float = 3e-3
    strength: float = 0.5
    seeds: int = 3
    threads: int | None = 1


def default_config(quick: bool) -> RankingConfig:
    """The full setting (3 seeds, 1500 steps) or ``--quick`` (2 seeds, 400 steps)."""
    if quick:
        return RankingConfig(steps=400, seeds=2)
    return RankingConfig()


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


@task(
    "ranking",
    "learning to rank with soft_rank and rank (soft, NeuralSort, SoftSort backwards)",
    default_config,
)
def run(settings: BenchSettings, config: RankingConfig, progress: Progress) -> TaskResult:
    """Train every method from ``config.seeds`` seeds at equal steps; report the metrics."""
    check_runs(config.seeds, config.steps, config.methods, METHODS, "methods")
    data = make_data(config, settings.seed)
    progress.start("ranking", len(config.methods) * config.seeds)
    rows = train_over_seeds(
        config.methods,
        lambda method, seed: train_and_evaluate(method, data, config, seed),
        seeds=config.seeds,
        base_seed=settings.seed,
        keys=("spearman", "exact", "ms_per_step"),
        label="method",
        progress=progress,
        threads=config.threads,
    )
    progress.finish()
    table = Table(
        title=f"Learning to rank {config.items} items (test set, {config.seeds} seed(s), "
        f"{config.steps} steps)",
        columns=["method", "Spearman rho", "lists exactly ranked (%)", "ms / step"],
    )
    for r in rows:
        table.rows.append(
            [
                r["method"],
                f"{r['spearman']['mean']:.4f} ± {r['spearman']['std']:.4f}",
                f"{100 * r['exact']['mean']:.1f} ± {100 * r['exact']['std']:.1f}",
                f"{r['ms_per_step']['mean']:.2f}",
            ]
        )
    notes = [
        f"{config.train} train / {config.test} test lists of {config.items} items, "
        f"p = {config.features}, score noise {config.noise}; scorer {config.features}-"
        f"{config.hidden}-1, batch {config.batch_size}, Adam lr {config.lr}; relaxation "
        f"strength {config.strength}; loss: squared rank error (score MSE: squared score error)."
    ]
    result = TaskResult(
        name="ranking",
        summary=f"learning to rank: {len(config.methods)} methods, {config.steps} steps",
        settings=dataclasses.asdict(config),
        data={"rows": rows},
    )
    result.tables = [table]
    result.notes = notes
    return result
