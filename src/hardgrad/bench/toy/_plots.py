"""The ``toy`` benchmark's figures: the Adam curves and the variance per estimator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._pyplot import (
    bars,
    category_labels,
    error_bars_allowed,
    legend_outside,
    pyplot,
    quick_title,
    save_figure,
    spread_caption,
)
from ._config import ToyConfig
from ._report import Row, lookup


def plot_curves(
    curves: dict[str, Any], config: ToyConfig, out: Path, *, quick: bool = False
) -> str | None:
    """``toy_curves.png``: p per estimator along Adam, unbiased (top) and biased (bottom);
    a band spans the seeds' range when there are two or more."""
    plt = pyplot()
    if plt is None:
        return None
    steps = curves["steps"]
    entries: dict[str, Any] = curves["estimators"]
    band = error_bars_allowed(config.seeds)
    fig, axes = plt.subplots(2, 1, figsize=(9, 7.5), sharex=True, layout="constrained")
    cmap = plt.get_cmap("tab10")
    for ax, unbiased in zip(axes, (True, False), strict=True):
        names = [n for n, c in entries.items() if c["unbiased"] == unbiased and n != "exact"]
        for i, name in enumerate(names):
            c = entries[name]
            color = cmap(i % 10)
            style = "-" if i < 10 else "--"
            ax.plot(steps, c["mean"], style, color=color, label=name, linewidth=1.3)
            if band:
                ax.fill_between(steps, c["min"], c["max"], color=color, alpha=0.12, linewidth=0)
        if "exact" in entries:
            ax.plot(steps, entries["exact"]["mean"], color="black", linewidth=1.5, label="exact")
        ax.axhline(config.curve_target, color="grey", linestyle="--", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_ylabel("p = sigmoid(phi)")
        ax.set_title(("unbiased" if unbiased else "biased") + " estimators", fontsize=10)
        ax.grid(alpha=0.3)
        legend_outside(ax, fontsize=7, ncol=2 if len(names) > 12 else 1)
    axes[-1].set_xlabel("Adam step")
    spread = spread_caption(config.seeds, "min to max", kind="bands")
    fig.suptitle(
        quick_title(
            f"Bernoulli toy E[(b - {config.curve_target})^2], Adam(lr={config.lr}): "
            "optimum p = 0, dashed: p = t",
            quick,
            config,
        )
        + f"\nmean over {config.seeds} seeds; {spread}",
        fontsize=10,
    )
    return save_figure(
        fig,
        out,
        "toy_curves.png",
        caption=f"p = sigmoid(phi) along Adam per estimator, mean over {config.seeds} seeds "
        f"({spread}); unbiased estimators on top, biased below.",
        table="Optimisation at t =",
    )


def plot_variance(
    rows: list[Row], config: ToyConfig, out: Path, *, quick: bool = False
) -> str | None:
    """``toy_variance.png``: measured variance per estimator, one bar per t, one panel per
    phi (log scale; a variance of 0 is drawn at the floor and marked "0"; an estimator not
    run at a setting is marked "n/a")."""
    plt = pyplot()
    if plt is None:
        return None
    names = list(dict.fromkeys(r["estimator"] for r in rows))
    positive = [r["var"] for r in rows if not r["var_is_zero"]]
    floor = min(positive) / 10 if positive else 1e-12
    fig, axes = plt.subplots(
        len(config.phis), 1, figsize=(13, 3.6 * len(config.phis)), squeeze=False,
        layout="constrained",
    )  # fmt: skip
    width = 0.8 / max(len(config.targets), 1)
    for ax, phi in zip(axes[:, 0], config.phis, strict=True):
        for j, t in enumerate(config.targets):
            found = [lookup(rows, name, t, phi) for name in names]
            xs = [i + (j - (len(config.targets) - 1) / 2) * width for i in range(len(names))]
            heights = [
                None if r is None else (floor if r["var_is_zero"] else r["var"]) for r in found
            ]
            bars(
                ax, heights, positions=xs, width=width, label=f"t = {t}",
                missing=f"not run at t = {t}", color=f"C{j}",
            )  # fmt: skip
            for x, r in zip(xs, found, strict=True):
                if r is not None and r["var_is_zero"]:
                    ax.text(x, floor, "0", ha="center", va="bottom", fontsize=7)
        ax.set_yscale("log")
        category_labels(ax, names, fontsize=8)
        ax.set_ylabel("variance of the gradient")
        ax.set_title(
            f"phi = {phi}: variance per estimator at its default number of evaluations",
            fontsize=10,
        )
        legend_outside(ax, fontsize=8)
    fig.suptitle(
        quick_title(
            f"Bernoulli toy: gradient variance per estimator, from {config.replicas} "
            "independent estimates per bar",
            quick,
            f"{config.replicas} estimates, not {ToyConfig().replicas}",
        ),
        fontsize=10,
    )
    return save_figure(
        fig,
        out,
        "toy_variance.png",
        caption="variance of each estimator's gradient per t (bars) and phi (panels), log "
        "scale; '0': zero variance, drawn at the floor.",
        table=", phi = ",
    )
