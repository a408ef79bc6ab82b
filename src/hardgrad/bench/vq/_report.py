"""Tables, notes and the plot of the ``vq`` benchmark, computed from its runs."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from .._pyplot import bars, category_labels, pyplot, quick_title, save_figure, spread_caption
from .._task import Table
from ..data import Dataset
from ._config import VQConfig

# --------------------------------------------------------------------------- report


def _stat(values: list[float]) -> dict[str, float]:
    return {
        "mean": statistics.fmean(values),
        "std": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


def _cell(stat: dict[str, float], fmt: str, seeds: int) -> str:
    text = format(stat["mean"], fmt)
    return text if seeds < 2 else f"{text} ± {format(stat['std'], fmt)}"


def _tables(rows: list[dict[str, Any]], config: VQConfig) -> list[Table]:
    table = Table(
        f"VQ-VAE on digits, {config.tokens} tokens, 64 codes, {config.steps} Adam steps, "
        f"mean ± std over {config.seeds} seed(s); test set",
        ["quantizer", "recon MSE ×1e3", "codes used %", "perplexity", "dead codes",
         "commitment", "ms/step"],
    )  # fmt: skip
    s = config.seeds
    for r in rows:
        scaled = {k: 1000 * v for k, v in r["recon_mse"].items()}
        usage = {k: 100 * v for k, v in r["usage"].items()}
        commit = "—" if r["variant"] == "FSQ" else _cell(r["commit"], ".4f", s)
        table.rows.append(
            [
                r["variant"],
                _cell(scaled, ".2f", s),
                _cell(usage, ".1f", s),
                _cell(r["perplexity"], ".1f", s),
                _cell(r["dead"], ".1f", s),
                commit,
                f"{r['ms_per_step']['mean']:.2f}",
            ]
        )
    return [table]


def _compare(a: dict[str, Any], b: dict[str, Any], key: str, seeds: int) -> tuple[float, bool]:
    diff = a[key]["mean"] - b[key]["mean"]
    noise = max(a[key]["std"], b[key]["std"])
    return diff, seeds >= 2 and abs(diff) > 2 * noise


def _notes(rows: list[dict[str, Any]], config: VQConfig, data: Dataset) -> list[str]:
    by = {r["variant"]: r for r in rows}
    notes = [
        f"Data: {data.name}, {len(data.x_train)} train / {len(data.x_test)} test images; MLP "
        f"VQ-VAE {data.features}-{config.hidden}-({config.tokens}×D), batch "
        f"{config.batch_size}, Adam lr {config.lr}, {config.steps} steps, {config.seeds} seed(s). "
        f"VQ variants: K = 64, D = 8, commitment 0.25, k-means init {config.kmeans_init}; FSQ levels (4, 4, 4); LFQ 6 bits, "
        f"entropy weight {config.lfq_entropy_weight}, commitment "
        f"{config.lfq_commitment_weight}; Gumbel: ST-Gumbel, logits -d/"
        f"{config.gumbel_tau}."
    ]
    s = config.seeds
    if "STE" in by and "rotation" in by:
        d_rec, ok_rec = _compare(by["rotation"], by["STE"], "recon_mse", s)
        d_use, ok_use = _compare(by["rotation"], by["STE"], "usage", s)
        rec = "lower" if d_rec < 0 else "higher"
        use = "higher" if d_use > 0 else "lower"
        holds = d_rec < 0 and d_use > 0
        notes.append(
            f"Rotation trick vs STE (Fifty et al. 2024 claim: better reconstruction and "
            f"usage): reconstruction MSE {rec} by {abs(1000 * d_rec):.2f}e-3 "
            f"({'resolved' if ok_rec else 'not resolved'}), usage {use} by "
            f"{abs(100 * d_use):.1f} pp ({'resolved' if ok_use else 'not resolved'}): the "
            f"claim {'holds' if holds and ok_rec and ok_use else 'is not confirmed'} here."
        )
    if "FSQ" in by:
        usage = by["FSQ"]["usage"]["mean"]
        others = [by[v]["usage"]["mean"] for v in ("STE", "rotation") if v in by]
        notes.append(
            f"FSQ (Mentzer et al. 2023 claim: high codebook usage without auxiliary losses): "
            f"{100 * usage:.1f} % of its 64 codes used on the test set"
            + (
                f", vs {100 * max(others):.1f} % for the best VQ with a codebook loss"
                if others
                else ""
            )
            + f"; the claim {'holds' if usage >= 0.9 else 'is not confirmed'} here (>= 90 %)."
        )
    baseline = float(((data.x_test - data.x_train.mean(0)) ** 2).mean())
    failed = [r["variant"] for r in rows if r["recon_mse"]["mean"] > 0.95 * baseline]
    if failed:
        notes.append(
            f"Did not learn (test MSE within 5 % of predicting the mean image, "
            f"{1000 * baseline:.2f}e-3): {', '.join(failed)}. Reported, not tuned away."
        )
    return notes


def _plot(
    rows: list[dict[str, Any]], out: Path, config: Any = None, *, quick: bool = False
) -> str | None:
    """``vq.png``: test MSE, code usage and perplexity per variant; error bars (± one
    standard deviation) from two seeds on; a variant with no finite value is marked n/a."""
    plt = pyplot()
    if plt is None:  # the bench extra is missing
        return None
    seeds = getattr(config, "seeds", 1)
    names = [r["variant"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.8), layout="constrained")
    for ax, key, label, scale in (
        (axes[0], "recon_mse", "test recon MSE ×1e3", 1000),
        (axes[1], "usage", "codes used (%)", 100),
        (axes[2], "perplexity", "perplexity (of 64)", 1),
    ):
        means = [scale * r[key]["mean"] for r in rows]
        stds = [scale * r[key]["std"] for r in rows]
        bars(ax, means, errors=stds, n_seeds=seeds, missing="no finite value", color="C0")
        category_labels(ax, names, fontsize=8)
        ax.set_title(label, fontsize=9)
    spread = spread_caption(seeds)
    fig.suptitle(quick_title("VQ-VAE bottlenecks", quick, config) + f"\n{spread}", fontsize=10)
    return save_figure(
        fig,
        out,
        "vq.png",
        caption=f"test reconstruction MSE, codebook usage and perplexity per quantizer; {spread}.",
        table="VQ-VAE on",
    )
