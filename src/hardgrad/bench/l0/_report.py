"""The plot of the ``l0`` benchmark, computed from its runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._pyplot import pyplot


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
