"""The table, notes and plot of the ``policy`` benchmark, computed from its rows."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from .._pyplot import (
    bars,
    category_labels,
    legend_outside,
    pyplot,
    quick_title,
    save_figure,
    spread_caption,
)
from .._task import Table
from ._config import PolicyConfig

#: A direction bias is "measured" when 1 - cosine exceeds this many standard errors.
Z = 4.0

TITLE = "Policy gradients over sequences against the exact gradient"


def _row(rows: list[dict[str, Any]], name: str, n: int) -> dict[str, Any] | None:
    return next((r for r in rows if r["estimator"] == name and r["group_size"] == n), None)


def tilt(row: dict[str, Any] | None) -> tuple[float, float] | None:
    """``(1 - cosine - cosine_noise, its z)`` of a row: the direction's bias beyond what
    noise alone gives; None without a cosine."""
    if row is None or row["cosine"] is None or not row["cosine_se"]:
        return None
    gap = 1 - row["cosine"] - row["cosine_noise"]
    return gap, gap / row["cosine_se"]


def table_of(rows: list[dict[str, Any]], config: PolicyConfig, data: dict[str, Any]) -> Table:
    """One row per estimator and group size: the gradient against the exact one."""
    table = Table(
        title=f"{TITLE} (V = {config.vocab_size}, L <= {config.length}, {data['sequences']} "
        f"sequences)",
        columns=["estimator", "n", "bias / |g*|", "noise / |g*|", "1 - cos - noise (± se)", "scale",
                 "variance / |g*|²"],
    )  # fmt: skip
    for r in rows:
        gap = tilt(r)
        table.rows.append(
            [
                r["estimator"],
                str(r["group_size"]),
                f"{r['relative_bias']:.3f}",
                f"{r['relative_noise']:.3f}",
                "-" if gap is None else f"{gap[0]:.4f} ± {r['cosine_se']:.4f}",
                "-" if r["scale"] is None else f"{r['scale']:.3f}",
                f"{r['relative_variance']:.3g}",
            ]
        )
    return table


def _ms(stat: dict[str, float], digits: int, seeds: int) -> str:
    return f"{stat['mean']:.{digits}f}" + (f" ± {stat['std']:.{digits}f}" if seeds > 1 else "")


def steps_cell(run: dict[str, Any], config: PolicyConfig) -> str:
    """Steps to the target: mean ± sd over the seeds that reached it, with how many did."""
    if not run["reached"]:
        return f"> {config.steps}"
    cell = _ms(run["steps_to_target"], 1 if run["reached"] > 1 else 0, run["reached"])
    if run["reached"] < run["runs"]:
        cell += f" ({run['reached']}/{run['runs']}; others > {config.steps})"
    return cell


def _paired_line(rows: list[dict[str, Any]], n: int, opt: str, config: PolicyConfig) -> str:
    """E[R] at the fixed step against RLOO's at group size ``n``, paired by seed (the runs of
    a seed share their sampling seed and start): the estimators beyond 2 SE and 0.005; with
    one seed, the range."""
    at = {
        r["estimator"]: r["training"][opt]["reward_at_runs"] for r in rows if r["group_size"] == n
    }
    k = config.eval_step
    if "rloo" not in at or config.seeds < 2:
        means = {name: statistics.fmean(v) for name, v in at.items()}
        lo, hi = min(means, key=means.__getitem__), max(means, key=means.__getitem__)
        return f"E[R] @ {k} from {means[lo]:.2f} ({lo}) to {means[hi]:.2f} ({hi})."
    parts = []
    for name, runs in at.items():
        if name == "rloo":
            continue
        diffs = [a - b for a, b in zip(runs, at["rloo"], strict=True)]
        mean, se = statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs))
        if abs(mean) > 2 * se and abs(mean) >= 0.005:  # (not Adam's eps on a scaled copy)
            parts.append(f"{name} {mean:+.2f} ± {se:.2f}")
    return (
        f"E[R] @ {k} minus RLOO's, paired by seed, beyond 2 SE (and 0.005): "
        + (", ".join(parts) if parts else "none")
        + "."
    )


def training_table(rows: list[dict[str, Any]], config: PolicyConfig, data: dict[str, Any]) -> Table:
    """One row per estimator and group size: E[R] at the fixed step and the steps to the
    target, per optimizer."""
    seeds = f"{config.seeds} seed" + ("s" if config.seeds > 1 else "")
    lrs = {"adam": f"Adam lr {config.lr:g}", "sgd": f"SGD lr {config.sgd_lr:g}"}
    columns = ["estimator", "n"]
    for opt in config.optimizers:
        columns += [f"E[R] @ {config.eval_step} {lrs[opt]}", f"steps to {100 * config.target:.0f} % {lrs[opt]}"]  # fmt: skip
    table = Table(
        title=f"Training from one start (E[R] {data['initial_reward']:.3f}; best sequence "
        f"{data['max_reward']:.2f}): exact E[R] after {config.eval_step} steps of "
        f"{config.batch} sequences, and steps until E[R] >= {data['target_reward']:.3f} "
        f"({100 * config.target:.0f} % of the way); mean ± sd over {seeds}",
        columns=columns,
    )
    for r in rows:
        cells = [r["estimator"], str(r["group_size"])]
        for opt in config.optimizers:
            run = r["training"][opt]
            cells += [_ms(run["reward_at"], 2, config.seeds), steps_cell(run, config)]
        table.rows.append(cells)
    table.notes.append(
        "Adam divides each coordinate by its running RMS, so a constant scale of the gradient "
        "changes nothing (rloo and dr-grpo, (n-1)/n apart, train alike; so do rloo-sequence-"
        "mean and grpo-no-std): what differs is direction and noise. SGD's steps are "
        "proportional to the gradient, so a scaled-down estimator (the scale column above) "
        f"trains that much slower at the same rate. Steps to {100 * config.target:.0f} %: "
        "the mean over the seeds that got there within the run."
    )
    for opt in config.optimizers:
        for n in config.group_sizes:
            table.notes.append(f"{lrs[opt]}, n = {n}: " + _paired_line(rows, n, opt, config))
    return table


def findings(rows: list[dict[str, Any]], group_sizes: Any) -> list[str]:
    """Per group size: GRPO's tilt from its std scaling alone (``grpo-token-sum``), its length
    normalisation alone (``grpo-no-std``), both (``grpo``), and Dr. GRPO's and RLOO's."""
    lines = []
    for n in group_sizes:
        parts = []
        for name, what in (("grpo-token-sum", "std"), ("grpo-no-std", "length"),
                           ("grpo", "std+length"), ("dr-grpo", "Dr. GRPO"), ("rloo", "RLOO")):  # fmt: skip
            gap = tilt(_row(rows, name, n))
            if gap is not None:
                flag = "measured" if gap[1] > Z else "not measurable"
                parts.append(f"{what} {gap[0]:.4f} ({gap[1]:.1f} se, {flag})")
        if parts:
            lines.append(f"n = {n}: 1 - cosine - noise: " + ", ".join(parts) + ".")
    return lines


def notes_of(rows: list[dict[str, Any]], config: PolicyConfig, data: dict[str, Any]) -> list[str]:
    return [
        f"MLP policy ({data['parameters']} parameters, float64) over V = {config.vocab_size} "
        f"tokens, token {config.eos_token} ends a sequence (lengths 1 to {config.length}); reward "
        "of the whole sequence and its length; E[R] at the start "
        f"{data['initial_reward']:.3f}, best sequence {data['max_reward']:.2f}.",
        f"Gradient statistics from {config.sequences} sequences per group size drawn from the "
        "exact distribution (one group per draw, the same draws for every estimator); bias = "
        "|mean - g*| (noise: what an unbiased estimator shows by chance), scale = <mean, g*> / "
        "|g*|² (RLOO 1, Dr. GRPO (n-1)/n), 1 - cosine - noise the direction's bias beyond what "
        f"noise alone gives, with its standard error (measured when above {Z:g} se). "
        "token-sum divides by N.",
        *findings(rows, config.group_sizes),
    ]


def _plot(rows: list[dict[str, Any]], out: Path, config: PolicyConfig, *, quick: bool = False) -> str | None:  # fmt: skip
    """``policy.png``: 1 - cosine against the group size, and E[R] at the fixed step per
    estimator, group size and optimizer."""
    plt = pyplot()
    if plt is None:
        return None
    panels = 1 + len(config.optimizers)
    fig, axes = plt.subplots(1, panels, figsize=(4.5 * panels, 3.6), layout="constrained")
    ax1 = axes[0]
    sizes = list(config.group_sizes)
    for name in config.estimators:
        gaps = [tilt(_row(rows, name, n)) for n in sizes]
        ax1.plot(
            sizes, [max(g[0], 1e-5) if g else float("nan") for g in gaps], marker="o", label=name
        )
    ax1.set_xscale("log", base=2)
    ax1.set_yscale("log")
    ax1.set_xticks(sizes, [str(n) for n in sizes])
    ax1.set_xlabel("group size n")
    ax1.set_ylabel("1 - cosine - noise (floor 1e-5)")
    ax1.grid(alpha=0.3)
    legend_outside(ax1, fontsize="x-small")
    width = 0.8 / len(sizes)
    lrs = {"adam": f"Adam, lr {config.lr:g}", "sgd": f"SGD, lr {config.sgd_lr:g}"}
    for ax, opt in zip(axes[1:], config.optimizers, strict=True):
        for k, n in enumerate(sizes):
            stats = [(_row(rows, name, n) or {}).get("training", {}).get(opt, {}).get("reward_at")
                     for name in config.estimators]  # fmt: skip
            offset = (k - (len(sizes) - 1) / 2) * width
            bars(ax, [s["mean"] if s else None for s in stats],
                 errors=[s["std"] if s else 0.0 for s in stats], n_seeds=config.seeds,
                 positions=[i + offset for i in range(len(stats))], width=width,
                 label=f"n = {n}", color=f"C{k}")  # fmt: skip
        category_labels(ax, list(config.estimators), fontsize="x-small")
        ax.set_ylabel(f"E[R] after {config.eval_step} steps")
        ax.set_title(lrs[opt], fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    legend_outside(axes[-1], fontsize="x-small")
    fig.suptitle(
        quick_title(TITLE, quick, config) + f"\n{spread_caption(config.seeds)}", fontsize=9
    )
    return save_figure(
        fig,
        out,
        "policy.png",
        caption="left: the direction's bias 1 - cosine of each estimator's mean gradient "
        "(log scale; noise-level values are not a bias, see the table's standard errors); "
        f"right: the exact expected reward after {config.eval_step} training steps, per "
        f"estimator and group size, for each optimizer ({spread_caption(config.seeds)}).",
        table=TITLE,
    )
