"""Tables, notes and the plot of the ``shortest-path`` benchmark, computed from its runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._pyplot import bars, category_labels, pyplot, quick_title, save_figure, spread_caption
from .._task import Table
from ._config import ShortestPathConfig


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


def _plot(
    rows: list[dict[str, Any]], out: Path, config: Any = None, *, quick: bool = False
) -> str | None:
    """``shortest_path.png``: test regret per method; error bars (± one standard deviation)
    from two seeds on; a method with no finite regret is marked n/a."""
    plt = pyplot()
    if plt is None:  # the bench extra is missing
        return None
    seeds = getattr(config, "seeds", 1)
    fig, ax = plt.subplots(figsize=(6, 3.6), layout="constrained")
    names = [r["method"] for r in rows]
    bars(
        ax,
        [100 * r["regret"]["mean"] for r in rows],
        errors=[100 * r["regret"]["std"] for r in rows],
        n_seeds=seeds,
        missing="no finite regret",
        color="C0",
    )
    category_labels(ax, names, fontsize=8)
    ax.set_ylabel("test regret (%)")
    spread = spread_caption(seeds)
    ax.set_title(
        quick_title("Shortest path: regret per gradient", quick, config) + f"\n{spread}",
        fontsize=9,
    )
    return save_figure(
        fig,
        out,
        "shortest_path.png",
        caption=f"test regret per gradient method (lower is better); {spread}.",
        table="Shortest path on",
    )
