"""The table, notes and plot of the ``policy`` benchmark, computed from its rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._pyplot import category_labels, legend_outside, pyplot, quick_title, save_figure
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
    """One row per estimator and group size."""
    seeds = f"{config.seeds} seed" + ("s" if config.seeds > 1 else "")
    table = Table(
        title=f"{TITLE} (V = {config.vocab_size}, L <= {config.length}, {data['sequences']} "
        f"sequences; E[R] after {config.steps} Adam steps of {config.batch} sequences, {seeds})",
        columns=["estimator", "n", "bias / |g*|", "noise / |g*|", "1 - cos - noise (± se)", "scale",
                 "variance / |g*|²", "E[R] trained"],
    )  # fmt: skip
    for r in rows:
        gap = tilt(r)
        final = r["final_reward"]
        table.rows.append(
            [
                r["estimator"],
                str(r["group_size"]),
                f"{r['relative_bias']:.3f}",
                f"{r['relative_noise']:.3f}",
                "-" if gap is None else f"{gap[0]:.4f} ± {r['cosine_se']:.4f}",
                "-" if r["scale"] is None else f"{r['scale']:.3f}",
                f"{r['relative_variance']:.3g}",
                f"{final['mean']:.3f}" + (f" ± {final['std']:.3f}" if config.seeds > 1 else ""),
            ]
        )
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
    """``policy.png``: 1 - cosine against the group size, and E[R] after training, per
    estimator."""
    plt = pyplot()
    if plt is None:
        return None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.0, 3.6), layout="constrained")
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
    width = 0.8 / len(sizes)
    for k, n in enumerate(sizes):
        values = [
            (_row(rows, name, n) or {}).get("final_reward", {}).get("mean")
            for name in config.estimators
        ]
        ax2.bar([i + (k - (len(sizes) - 1) / 2) * width for i in range(len(values))],
                [v if v is not None else 0.0 for v in values], width, label=f"n = {n}")  # fmt: skip
    category_labels(ax2, list(config.estimators))
    ax2.set_ylabel(f"E[R] after {config.steps} steps")
    ax2.grid(alpha=0.3, axis="y")
    legend_outside(ax1, fontsize="x-small")
    legend_outside(ax2, fontsize="x-small")
    fig.suptitle(
        quick_title(TITLE, quick, config) + f"\n{config.seeds} seed(s): no error bars", fontsize=9
    )
    return save_figure(
        fig,
        out,
        "policy.png",
        caption="left: the direction's bias 1 - cosine of each estimator's mean gradient "
        "(log scale; noise-level values are not a bias, see the table's standard errors); "
        "right: the exact expected reward after training, per estimator and group size.",
        table=TITLE,
    )
