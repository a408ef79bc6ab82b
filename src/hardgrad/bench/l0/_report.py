"""The plot of the ``l0`` benchmark, computed from its runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._pyplot import error_bars_allowed, pyplot, quick_title, save_figure, spread_caption


def _plot(
    rows: list[dict[str, Any]], out: Path, config: Any = None, *, quick: bool = False
) -> str | None:
    """``l0.png``: test accuracy against weights removed, one point per lambda; error bars
    (± one standard deviation of the accuracy) from two seeds on."""
    plt = pyplot()
    if plt is None:  # the bench extra is missing
        return None
    seeds = getattr(config, "seeds", 1)
    fig, ax = plt.subplots(figsize=(5.0, 3.6), layout="constrained")
    xs = [100 * r["weight_sparsity"]["mean"] for r in rows]
    ys = [100 * r["accuracy"]["mean"] for r in rows]
    if error_bars_allowed(seeds):
        errs = [100 * r["accuracy"]["std"] for r in rows]
        ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3)
    else:
        ax.plot(xs, ys, marker="o")
    for r, x, y in zip(rows, xs, ys, strict=True):
        ax.annotate(
            f"λ={r['lambda']:g}", (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8
        )
    ax.set_xlabel("weights removed (%)")
    ax.set_ylabel("test accuracy (%)")
    ax.grid(alpha=0.3)
    spread = spread_caption(seeds)
    ax.set_title(
        quick_title("L0 pruning with Hard Concrete gates", quick, config) + f"\n{spread}",
        fontsize=9,
    )
    return save_figure(
        fig,
        out,
        "l0.png",
        caption=f"test accuracy against weights removed, one point per lambda; {spread}.",
        table="L0 pruning on",
    )
