r"""The ``shortest-path`` benchmark: learning to predict costs for Dijkstra on a grid.

The set-up of PyEPO's shortest-path problem (Tang & Khalil 2022,
https://arxiv.org/abs/2206.14234), on vertex costs: each instance has a feature vector
:math:`x \in R^p` (standard normal) and true costs on a :math:`k\times k` grid,

.. math::

    c_j = \Big[\tfrac{1}{3.5^{\deg}}\big(\tfrac{(Bx)_j}{\sqrt p} + 3\big)^{\deg} + 1\Big]
    \cdot \varepsilon_j, \qquad B_{jl} \sim \operatorname{Bernoulli}(1/2), \quad
    \varepsilon_j \sim U[1 - \bar\varepsilon, 1 + \bar\varepsilon],

so the map from features to costs is a polynomial of degree ``deg`` that a linear model
cannot fit. A path goes from the top-left to the bottom-right cell moving right or down and
pays the cost of every cell it visits; :func:`grid_shortest_path` finds the cheapest one with
Dijkstra's algorithm (SciPy's ``csgraph.dijkstra`` on one graph holding the whole batch).

A small network (``p``-``hidden``-:math:`k^2`, ReLU) predicts the costs
:math:`\hat c = f(x)`; the path is :math:`y(\hat c)`, and every method trains on the
Hamming loss :math:`\langle y, 1 - y^*\rangle + \langle 1 - y, y^*\rangle` to the true
shortest path :math:`y^* = y(c)` (Vlastelica et al. 2020), except the Fenchel-Young row,
which uses its own loss with the same target, and the two-stage row, which fits
:math:`\hat c` to :math:`c` by mean squared error and never calls the solver in training.
The gradient through the solver: :func:`hardgrad.perturbed` (normal noise),
:func:`hardgrad.imle` (Sum-of-Gamma noise; all paths have :math:`2k-1` cells),
:func:`hardgrad.blackbox` and :func:`hardgrad.identity_solver` (negative identity, plain
and with the standardising projection of Sahoo et al. 2023). Hyperparameters (sigma,
lambda, tau) were picked from a small sweep on seeds 0-1 of the full setting: perturbed
sigma in {0.25, 0.5, 1, 2}; I-MLE lambda in {1, 5, 20}, tau in {0.3, 1, 3}; blackbox
lambda in {1, 5, 20}; the best of each is the default. Reported on the test set: the normalised regret
:math:`\sum_i c_i^\top (y(\hat c_i) - y^*_i) / \sum_i c_i^\top y^*_i`, the share of
instances whose predicted path is optimal, and the time per training step.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .. import solvers
from ._pyplot import pyplot
from ._seeds import check_runs, train_over_seeds
from ._task import BenchSettings, Progress, Table, TaskResult, task

__all__ = ["METHODS", "ShortestPathConfig", "default_config", "grid_shortest_path", "run"]

#: The training methods, in table order.
METHODS = (
    "two-stage",
    "perturbed",
    "perturbed FY",
    "I-MLE",
    "blackbox",
    "identity",
    "identity+proj",
)


@dataclass(frozen=True)
class ShortestPathConfig:
    """Settings of the ``shortest-path`` benchmark.

    Attributes:
        methods: which methods to train (names from :data:`METHODS`).
        grid: :math:`k`, the grid is :math:`k \\times k` cells.
        features: :math:`p`.
        deg: the polynomial degree of the true cost map.
        noise_width: :math:`\\bar\\varepsilon`, the multiplicative noise half-width.
        train, test: instances.
        hidden: hidden width of the cost network.
        steps, batch_size, lr: Adam training.
        sigma, num_samples: :func:`hardgrad.perturbed`'s noise scale and samples.
        imle_lam, imle_tau: :func:`hardgrad.imle`'s :math:`\\lambda` and noise temperature.
        blackbox_lam: :func:`hardgrad.blackbox`'s :math:`\\lambda`.
        seeds: independent runs per method.
        threads: intra-op threads while training.
        plot: write ``shortest_path.png`` (regret per method; needs matplotlib).
    """

    methods: tuple[str, ...] = METHODS
    grid: int = 5
    features: int = 5
    deg: int = 4
    noise_width: float = 0.5
    train: int = 1000
    test: int = 1000
    hidden: int = 32
    steps: int = 1500
    batch_size: int = 32
    lr: float = 5e-3
    sigma: float = 2.0
    num_samples: int = 8
    imle_lam: float = 20.0
    imle_tau: float = 3.0
    blackbox_lam: float = 20.0
    seeds: int = 3
    threads: int | None = 1
    plot: bool = True


def default_config(quick: bool) -> ShortestPathConfig:
    """The full setting (3 seeds, 1500 steps) or ``--quick`` (2 seeds, 300 steps)."""
    if quick:
        return ShortestPathConfig(steps=300, seeds=2, train=500, test=500)
    return ShortestPathConfig()


# --------------------------------------------------------------------------- the solver


def _grid_graph(n: int, k: int) -> tuple[Any, Any, Any]:
    """CSR structure of ``n`` disjoint k x k right/down grids plus a super-source (node 0)
    joined to every grid's top-left cell: (indptr, indices, target cell of each edge)."""
    import numpy as np

    cells = k * k
    r, c = np.divmod(np.arange(cells), k)
    src, dst = [], []
    right = c < k - 1
    down = r < k - 1
    src.append(np.arange(cells)[right])
    dst.append(np.arange(cells)[right] + 1)
    src.append(np.arange(cells)[down])
    dst.append(np.arange(cells)[down] + k)
    s_local, d_local = np.concatenate(src), np.concatenate(dst)
    offsets = (np.arange(n) * cells)[:, None]
    s_all = (s_local[None] + offsets).ravel() + 1
    d_all = (d_local[None] + offsets).ravel() + 1
    s_all = np.concatenate([np.zeros(n, dtype=np.int64), s_all])
    d_all = np.concatenate([np.arange(n) * cells + 1, d_all])
    order = np.argsort(s_all, kind="stable")
    s_all, d_all = s_all[order], d_all[order]
    indptr = np.searchsorted(s_all, np.arange(n * cells + 2))
    return indptr, d_all, d_all - 1


def grid_shortest_path(costs: Tensor) -> Tensor:
    r"""The cheapest top-left to bottom-right path on each grid of vertex costs, by Dijkstra.

    ``costs`` has shape ``(N, k, k)`` (any sign); the result is the 0/1 indicator of the
    cells on the path (moves right or down; a path pays every cell it visits), the
    minimiser of :math:`\langle c, y\rangle`. Every path has :math:`2k - 1` cells, so
    adding a constant to an instance's costs does not change its solution: each instance
    is shifted to positive costs (Dijkstra needs non-negative weights) before SciPy's
    ``csgraph.dijkstra`` runs once on a graph holding all ``N`` grids and a super-source.

    Example:
        >>> import torch
        >>> from hardgrad.bench.shortest_path import grid_shortest_path
        >>> c = torch.tensor([[[1.0, 9.0, 9.0], [1.0, 1.0, 9.0], [9.0, 1.0, 1.0]]])
        >>> grid_shortest_path(c)[0]
        tensor([[1., 0., 0.],
                [1., 1., 0.],
                [0., 1., 1.]])
    """
    import numpy as np
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import dijkstra

    n, k = costs.shape[0], costs.shape[-1]
    cells = k * k
    c = costs.detach().reshape(n, cells).to(torch.float64).cpu()
    c = c - c.amin(1, keepdim=True) + 1.0  # positive; same argmin (fixed path length)
    indptr, indices, target_cell = _grid_graph(n, k)
    weights = c.numpy().ravel()[target_cell]
    graph = csr_matrix((weights, indices, indptr), shape=(n * cells + 1, n * cells + 1))
    _, pred = dijkstra(graph, directed=True, indices=0, return_predecessors=True)
    path = np.zeros(n * cells + 1, dtype=np.float64)
    node = np.arange(n) * cells + cells  # each grid's bottom-right cell (1-based)
    for _ in range(2 * k - 1):
        path[node] = 1.0
        node = pred[node]
    y = torch.from_numpy(path[1:].reshape(n, k, k))
    return y.to(device=costs.device, dtype=costs.dtype)


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


def _tables(rows: list[dict[str, Any]], config: ShortestPathConfig) -> list[Table]:
    table = Table(
        title=f"Shortest path on a {config.grid}×{config.grid} grid (test set, "
        f"{config.seeds} seed(s), {config.steps} steps)",
        columns=["method", "regret (%)", "optimal paths (%)", "ms / step"],
    )
    for r in rows:
        table.rows.append(
            [
                r["method"],
                f"{100 * r['regret']['mean']:.2f} ± {100 * r['regret']['std']:.2f}",
                f"{100 * r['optimal']['mean']:.1f} ± {100 * r['optimal']['std']:.1f}",
                f"{r['ms_per_step']['mean']:.2f}",
            ]
        )
    return [table]


def _notes(rows: list[dict[str, Any]], config: ShortestPathConfig) -> list[str]:
    by = {r["method"]: r for r in rows}
    notes = [
        f"Data: {config.train} train / {config.test} test instances, p = {config.features} "
        f"features, degree {config.deg}, noise half-width {config.noise_width}; net "
        f"{config.features}-{config.hidden}-{config.grid**2}, batch {config.batch_size}, "
        f"Adam lr {config.lr}. Hamming loss to the true path (two-stage: MSE on costs; "
        f"perturbed FY: Fenchel-Young loss). perturbed: normal noise, sigma {config.sigma}, "
        f"{config.num_samples} samples; I-MLE: Sum-of-Gamma, k = {2 * config.grid - 1}, "
        f"lambda {config.imle_lam}, tau {config.imle_tau}; blackbox: lambda "
        f"{config.blackbox_lam}; identity: negative identity (+proj: standardised costs)."
    ]
    for base in ("identity", "identity+proj"):
        if base not in by:
            continue
        ident = by[base]["regret"]
        for name in ("perturbed", "perturbed FY", "I-MLE"):
            if name in by:
                r = by[name]["regret"]
                diff = r["mean"] - ident["mean"]
                resolved = config.seeds >= 2 and abs(diff) > 2 * max(r["std"], ident["std"])
                verdict = "lower" if diff < 0 else "not lower"
                notes.append(
                    f"{name} vs {base}: regret {verdict} by {abs(100 * diff):.2f} pp "
                    f"({'resolved' if resolved else 'not resolved'} at twice the seed spread)."
                )
    return notes


@task(
    "shortest-path",
    "predict grid costs for Dijkstra: perturbed, I-MLE, blackbox, identity; regret",
    default_config,
)
def run(settings: BenchSettings, config: ShortestPathConfig, progress: Progress) -> TaskResult:
    """Train every method from ``config.seeds`` seeds at equal steps; report the metrics."""
    check_runs(config.seeds, config.steps, config.methods, METHODS, "methods")
    data = make_data(config, settings.seed)
    progress.start("shortest-path", len(config.methods) * config.seeds)
    rows = train_over_seeds(
        config.methods,
        lambda method, seed: train_and_evaluate(method, data, config, seed),
        seeds=config.seeds,
        base_seed=settings.seed,
        keys=("regret", "optimal", "ms_per_step"),
        label="method",
        progress=progress,
        threads=config.threads,
        on_row=lambda row: progress.log(
            f"{row['method']}: regret {100 * row['regret']['mean']:.2f} %"
        ),
    )
    progress.finish()
    figures: list[str] = []
    if settings.out is not None and config.plot:
        name = _plot(rows, settings.out)
        if name is not None:
            figures.append(name)
    result = TaskResult(
        name="shortest-path",
        summary=f"shortest path on a {config.grid}x{config.grid} grid: "
        f"{len(config.methods)} methods, {config.steps} steps, {config.seeds} seed(s)",
        settings=dataclasses.asdict(config),
        data={"rows": rows},
    )
    result.tables = _tables(rows, config)
    result.notes = _notes(rows, config)
    result.figures = figures
    return result


def _plot(rows: list[dict[str, Any]], out: Path) -> str | None:
    plt = pyplot()
    if plt is None:  # the bench extra is missing
        return None
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.2))
    names = [r["method"] for r in rows]
    ax.bar(
        names,
        [100 * r["regret"]["mean"] for r in rows],
        yerr=[100 * r["regret"]["std"] for r in rows],
        capsize=3,
        color="C0",
    )
    ax.set_ylabel("test regret (%)")
    ax.set_title("Shortest path: regret per gradient", fontsize=9)
    ax.tick_params(axis="x", labelsize=8, rotation=30)
    fig.tight_layout()
    name = "shortest_path.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name
