"""The figures and number format the two VAE benchmarks share."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._pyplot import legend_outside, pyplot, quick_title, save_figure

# --------------------------------------------------------------------------- plots


def plot_curves(
    panels: dict[str, dict[str, dict[str, Any]]],
    out: Path,
    filename: str,
    title: str,
    *,
    quick: bool = False,
    config: Any = None,
    table: str | None = None,
) -> str | None:
    """Test -ELBO along training, one panel per configuration, one line per estimator (one
    run each: no error bands); ``table``: part of the title of the table it shows."""
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(
        1, len(panels), figsize=(5.5 * len(panels) + 2.5, 4.4), squeeze=False,
        layout="constrained",
    )  # fmt: skip
    cmap = plt.get_cmap("tab20")
    for ax, (label, runs) in zip(axes[0], panels.items(), strict=True):
        for i, (name, run) in enumerate(runs.items()):
            curve = run["curve"]
            style = "-" if run["unbiased"] else "--"
            ax.plot(curve["steps"], curve["test"], style, color=cmap(i % 20), label=name)
        finals = [r["test_neg_elbo"] for r in runs.values() if math.isfinite(r["test_neg_elbo"])]
        if finals:
            lo, hi = min(finals), max(finals)
            ax.set_ylim(lo - 0.1 * (hi - lo + 1), hi + 0.6 * (hi - lo + 1))
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("Adam step")
        ax.set_ylabel("test -ELBO (nats)")
        ax.grid(alpha=0.3)
    legend_outside(axes[0][-1], fontsize=7)
    fig.suptitle(
        quick_title(title + " (one run per estimator; dashed: biased estimators)", quick, config),
        fontsize=10,
    )
    return save_figure(
        fig,
        out,
        filename,
        caption="test -ELBO along training per estimator, one run each (no error bands), one "
        "panel per configuration; dashed: biased estimators.",
        table=table,
    )


def plot_checkpoints(
    panels: dict[str, dict[str, dict[str, Any]]],
    keys: Sequence[tuple[str, str, bool]],
    out: Path,
    filename: str,
    title: str,
    *,
    quick: bool = False,
    config: Any = None,
    table: str | None = None,
) -> str | None:
    """Diagnostics along training: one row per configuration, one column per ``(key,
    label, log scale)``, one line per estimator; ``table``: part of the title of the table
    it shows."""
    plt = pyplot()
    if plt is None:
        return None
    fig, axes = plt.subplots(
        len(panels), len(keys), figsize=(5.0 * len(keys) + 2.5, 3.8 * len(panels)),
        squeeze=False, layout="constrained",
    )  # fmt: skip
    cmap = plt.get_cmap("tab20")
    for row, (label, runs) in zip(axes, panels.items(), strict=True):
        for ax, (key, ylabel, log) in zip(row, keys, strict=True):
            for i, (name, run) in enumerate(runs.items()):
                points = [
                    (d["step"], d[key])
                    for d in run["diagnostics"]
                    if d[key] is not None and (not log or d[key] > 0)
                ]
                if points:
                    xs, ys = zip(*points, strict=True)
                    style = "-o" if run["unbiased"] else "--o"
                    ax.plot(xs, ys, style, color=cmap(i % 20), label=name, markersize=3)
            if log:
                ax.set_yscale("log")
            ax.set_xlabel("Adam step")
            ax.set_ylabel(ylabel)
            ax.set_title(label, fontsize=10)
            ax.grid(alpha=0.3)
    legend_outside(axes[0][-1], fontsize=7)
    fig.suptitle(quick_title(title + " (dashed: biased estimators)", quick, config), fontsize=10)
    measured = " and ".join(label for _, label, _ in keys)
    return save_figure(
        fig,
        out,
        filename,
        caption=f"{measured} at checkpoints along training per estimator; dashed: biased "
        "estimators.",
        table=table,
    )


def fmt(x: float | None, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}g}"
