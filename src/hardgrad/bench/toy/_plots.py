"""The ``toy`` benchmark's figures: the Adam curves and the variance per estimator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._pyplot import pyplot
from ._config import ToyConfig
from ._report import Row, lookup


def plot_curves(curves: dict[str, Any], config: ToyConfig, out: Path) -> str | None:
    """``toy_curves.png``: p per estimator along Adam, unbiased and biased side by side."""
    plt = pyplot()
    if plt is None:
        return None
    out.mkdir(parents=True, exist_ok=True)
    steps = curves["steps"]
    entries: dict[str, Any] = curves["estimators"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    cmap = plt.get_cmap("tab10")
    for ax, unbiased in zip(axes, (True, False), strict=True):
        names = [n for n, c in entries.items() if c["unbiased"] == unbiased and n != "exact"]
        for i, name in enumerate(names):
            c = entries[name]
            color = cmap(i % 10)
            style = "-" if i < 10 else "--"
            ax.plot(steps, c["mean"], style, color=color, label=name, linewidth=1.3)
            ax.fill_between(steps, c["min"], c["max"], color=color, alpha=0.12, linewidth=0)
        if "exact" in entries:
            ax.plot(steps, entries["exact"]["mean"], color="black", linewidth=1.5, label="exact")
        ax.axhline(config.curve_target, color="grey", linestyle="--", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_xlabel("Adam step")
        ax.set_title(("unbiased" if unbiased else "biased") + " estimators")
        ax.legend(fontsize=7, ncol=2)
    axes[0].set_ylabel(f"p = sigmoid(phi): mean, range over {config.seeds} seeds")
    fig.suptitle(
        f"Bernoulli toy E[(b - {config.curve_target})^2], Adam(lr={config.lr}): optimum p = 0; "
        "dashed: p = t"
    )
    fig.tight_layout()
    name = "toy_curves.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


def plot_variance(rows: list[Row], config: ToyConfig, out: Path) -> str | None:
    """``toy_variance.png``: measured variance per estimator, one bar per t, one panel per
    phi (log scale; a variance of 0 is drawn at the floor and marked "0")."""
    plt = pyplot()
    if plt is None:
        return None
    out.mkdir(parents=True, exist_ok=True)
    names = list(dict.fromkeys(r["estimator"] for r in rows))
    positive = [r["var"] for r in rows if not r["var_is_zero"]]
    floor = min(positive) / 10 if positive else 1e-12
    fig, axes = plt.subplots(
        len(config.phis), 1, figsize=(13, 3.4 * len(config.phis)), squeeze=False
    )
    width = 0.8 / max(len(config.targets), 1)
    for ax, phi in zip(axes[:, 0], config.phis, strict=True):
        for j, t in enumerate(config.targets):
            xs, heights, zeros = [], [], []
            for i, name in enumerate(names):
                r = lookup(rows, name, t, phi)
                if r is None:
                    continue
                x = i + (j - (len(config.targets) - 1) / 2) * width
                xs.append(x)
                heights.append(floor if r["var_is_zero"] else r["var"])
                if r["var_is_zero"]:
                    zeros.append(x)
            ax.bar(xs, heights, width, label=f"t = {t}")
            for x in zeros:
                ax.text(x, floor, "0", ha="center", va="bottom", fontsize=7)
        ax.set_yscale("log")
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("variance of the gradient")
        ax.set_title(f"phi = {phi}: variance per estimator at its default number of evaluations")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    name = "toy_variance.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name
