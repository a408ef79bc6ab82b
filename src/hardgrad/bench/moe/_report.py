"""Tables, the verdict and the plot of the ``moe`` benchmark, computed from its runs."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any

from .._pyplot import bars, category_labels, pyplot, quick_title, save_figure, spread_caption
from .._task import Table
from ._config import OPTIONS, MoEConfig


def _fmt(stat: dict[str, float], digits: int = 3, scale: float = 1.0) -> str:
    mean, std = scale * stat["mean"], scale * stat["std"]
    if std > 0:
        return f"{mean:.{digits}f} ± {std:.{digits}f}"
    return f"{mean:.{digits}f}"


def _dropped(name: str, row: dict[str, Any]) -> str:
    """``train / test`` dropped percentages of a row, ``-`` without a capacity (nothing is
    dropped: its figures are 0)."""
    if OPTIONS.get(name, {}).get("capacity_factor") is None:
        return "-"
    return f"{_fmt(row['dropped_train'], 1, 100)} / {_fmt(row['dropped_test'], 1, 100)}"


def _paired(rows: dict[str, dict[str, Any]], name: str, key: str) -> tuple[float, float] | None:
    """Mean and standard error of the per-seed differences ``name - sparse`` in ``key``."""
    diffs = [
        float(a[key]) - float(b[key])
        for a, b in zip(rows[name]["runs"], rows["sparse"]["runs"], strict=True)
        if not (math.isnan(float(a[key])) or math.isnan(float(b[key])))
    ]
    if len(diffs) < 2:
        return None
    return statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs))


def _paired_table(rows: dict[str, dict[str, Any]], config: MoEConfig) -> Table:
    table = Table(
        f"Paired by seed against sparse ({config.seeds} seeds share data, initialisation and "
        "batches): mean per-seed difference ± its standard error; * where beyond 2 SE",
        ["estimator", "Δ test MSE", "Δ routing acc", "Δ grad cosine"],
    )
    for name in rows:
        if name == "sparse":
            continue
        cells = [name]
        for key, digits in (("test_mse", 4), ("accuracy", 3), ("cosine", 3)):
            pair = _paired(rows, name, key)
            if pair is None:
                cells.append("-")
            else:
                mean, se = pair
                star = " *" if abs(mean) > 2 * se else ""
                cells.append(f"{mean:+.{digits}f} ± {se:.{digits}f}{star}")
        table.rows.append(cells)
    return table


def _verdict(rows: dict[str, dict[str, Any]], config: MoEConfig, other: str = "dense") -> str:
    """``other`` against ``sparse``, paired by seed (both runs of a seed share its data,
    initialisation and batches): a difference counts where the mean of the per-seed
    differences exceeds twice their standard error."""
    label_of = {
        "dense": "DenseMixer (dense)",
        "default": "Default MoE (default)",
        "noisy_topk": "Noisy top-k gating (noisy_topk)",
        "sparse_c1.0": "Capacity factor 1.0 (sparse_c1.0)",
    }
    if other not in rows or "sparse" not in rows:
        return f"{label_of.get(other, other)} vs sparse: not both run."
    parts = []
    for key, label, better in (
        ("test_mse", "test MSE", -1),
        ("accuracy", "routing accuracy", 1),
        ("cosine", "router-gradient cosine", 1),
    ):
        pairs = [
            (float(a[key]), float(b[key]))
            for a, b in zip(rows[other]["runs"], rows["sparse"]["runs"], strict=True)
            if not (math.isnan(float(a[key])) or math.isnan(float(b[key])))
        ]
        if not pairs:
            continue
        diffs = [a - b for a, b in pairs]
        mean_a = statistics.fmean(a for a, _ in pairs)
        mean_b = statistics.fmean(b for _, b in pairs)
        head = f"{label} {mean_a:.3f} vs {mean_b:.3f}"
        if len(diffs) < 2:
            parts.append(f"{head} (one seed: unresolved)")
            continue
        mean = statistics.fmean(diffs)
        se = statistics.stdev(diffs) / math.sqrt(len(diffs))
        if abs(mean) <= 2 * se:
            parts.append(f"{head}: no resolved difference (paired, |mean diff| <= 2 SE)")
        else:
            word = "better" if mean * better > 0 else "worse"
            parts.append(f"{head}: {word} (paired diff {mean:+.3f} ± {se:.3f} SE)")
    return (
        f"{label_of.get(other, other)} vs sparse, {len(rows['sparse']['runs'])} seed(s): "
        + "; ".join(parts)
        + "."
    )


def _plot(
    rows: dict[str, dict[str, Any]], config: MoEConfig, out: Any, *, quick: bool = False
) -> str | None:
    """``moe.png``: router-gradient cosine, routing accuracy, test MSE per router gradient;
    error bars (± one standard deviation) from two seeds on; a value not defined (NaN) is
    marked n/a."""
    plt = pyplot()
    if plt is None:  # the bench extra is missing
        return None
    names = list(rows)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.9), layout="constrained")
    for ax, key, label in (
        (axes[0], "cosine", "router-gradient cosine to exact"),
        (axes[1], "accuracy", "routing accuracy"),
        (axes[2], "test_mse", "test MSE"),
    ):
        means = [rows[n][key]["mean"] for n in names]
        stds = [rows[n][key]["std"] for n in names]
        why = "zero gradient, cosine undefined" if key == "cosine" else "not defined"
        bars(ax, means, errors=stds, n_seeds=config.seeds, missing=why, color="C0")
        category_labels(ax, names, fontsize=7)
        ax.set_title(label, fontsize=9)
    spread = spread_caption(config.seeds)
    fig.suptitle(
        quick_title(f"toy MoE, {config.experts} experts, top-{config.k}", quick, config)
        + f"\n{spread}",
        fontsize=9,
    )
    return save_figure(
        fig,
        Path(out),
        "moe.png",
        caption=f"router-gradient cosine to the exact gradient, routing accuracy and test MSE "
        f"per router gradient; {spread}.",
        table="Toy MoE (",
    )
