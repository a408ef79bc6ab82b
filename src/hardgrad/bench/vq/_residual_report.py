"""The table, notes and figure of the ``vq`` task's residual rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._pyplot import (
    error_bars_allowed,
    legend_outside,
    pyplot,
    quick_title,
    save_figure,
    spread_caption,
)
from .._task import Table
from ._config import VQConfig
from ._verdict import residual_claims

TITLE = "Residual VQ on the same VQ-VAE"


def _cell(stat: dict[str, float], scale: float, fmt: str, seeds: int) -> str:
    text = format(scale * stat["mean"], fmt)
    return text if seeds < 2 else f"{text} ± {format(scale * stat['std'], fmt)}"


def _stages(stats: list[dict[str, float]], scale: float, fmt: str) -> str:
    return " → ".join(format(scale * s["mean"], fmt) for s in stats)


def residual_table(rows: list[dict[str, Any]], config: VQConfig) -> Table:
    """One row per residual setting: the final error, then per stage (means over seeds)."""
    seeds = rows[0]["seeds"] if rows else 1
    table = Table(
        f"{TITLE}: hg.nn.ResidualVQ, {config.num_codes} codes of D = {config.code_dim} per "
        f"stage, EMA codebooks, {config.steps} Adam steps, mean ± std over {seeds} seed(s); "
        "test set, after each stage (means)",
        ["bottleneck", "gradient", "dropout", "recon MSE ×1e3", "MSE ×1e3 after stage 1 → n",
         "‖z − Σc‖² after stage 1 → n", "codes used % per stage", "perplexity per stage",
         "ms/step"],
    )  # fmt: skip
    for r in rows:
        table.rows.append(
            [
                f"RVQ {r['stages']}",
                r["gradient"],
                "on" if r["dropout"] else "off",
                _cell(r["recon_mse"], 1000, ".2f", seeds),
                _stages(r["stage_mse"], 1000, ".2f"),
                _stages(r["stage_residual"], 1, ".4f"),
                _stages(r["stage_usage"], 100, ".0f"),
                _stages(r["stage_perplexity"], 1, ".1f"),
                f"{r['ms_per_step']['mean']:.2f}",
            ]
        )
    return table


def residual_notes(rows: list[dict[str, Any]], config: VQConfig) -> list[str]:
    """The set-up of the residual rows and what they show (the verdict's claims)."""
    if not rows:
        return []
    compare = config.residual_compare
    notes = [
        f"Residual rows: the same encoder and decoder with hg.nn.ResidualVQ (straight-through "
        f"per stage, EMA codebooks, k-means init on each stage's residual, commitment 0.25 per "
        f"stage), {', '.join(str(n) for n in config.residual_stages)} stages with "
        f"gradient='total'; at {compare} stages also gradient='per_stage' and quantizer "
        f"dropout (stages kept drawn uniformly from 1..{compare} once per step). 'after "
        f"stage k': the decoder fed the sum of the first k codes of each token (the model "
        f"trained with all n), and the mean squared norm of the latent residual per token. "
        f"With straight-through everywhere, gradient='per_stage' passes n × dL/dz_q to the "
        f"encoder (the sum of the n stages' identities) against 'total''s 1 ×, while each "
        f"stage's commitment gradient is the same: a larger weight of the reconstruction "
        f"against the commitment terms."
    ]
    for text, status, detail in residual_claims({"residual": rows}, {}):
        notes.append(
            f"Residual VQ, {text}: {status.upper() if status == 'not held' else status} ({detail})."
        )
    return notes


def residual_plot(
    rows: list[dict[str, Any]], out: Path, config: VQConfig, *, quick: bool = False
) -> str | None:
    """``vq_residual.png``: test reconstruction MSE and latent residual against the number of
    stages used, one line per trained model."""
    plt = pyplot()
    if plt is None or not rows:
        return None
    seeds = rows[0]["seeds"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
    bars = error_bars_allowed(seeds)
    for i, r in enumerate(rows):
        ks = list(range(1, r["stages"] + 1))
        style = {"marker": "o", "markersize": 4, "color": f"C{i}", "label": r["label"]}
        if r["gradient"] == "per_stage" or r["dropout"]:
            style["linestyle"] = "--"
        for ax, key, scale in ((axes[0], "stage_mse", 1000), (axes[1], "stage_residual", 1)):
            means = [scale * s["mean"] for s in r[key]]
            errors = [scale * s["std"] for s in r[key]] if bars else None
            ax.errorbar(ks, means, yerr=errors, capsize=3 if bars else 0, **style)
    axes[0].set_ylabel("test recon MSE ×1e3")
    axes[1].set_ylabel("latent residual ‖z − Σ c‖² per token")
    axes[1].set_yscale("log")
    for ax in axes:
        ax.set_xlabel("stages used (k)")
        ax.set_xticks(range(1, max(r["stages"] for r in rows) + 1))
        ax.grid(alpha=0.3)
    legend_outside(axes[1])
    spread = spread_caption(seeds)
    fig.suptitle(
        quick_title(
            "Residual VQ: error after each stage",
            quick,
            f"{config.steps} steps, {seeds} seed{'s' if seeds != 1 else ''}",
        )
        + f"\n{spread}",
        fontsize=10,
    )
    return save_figure(
        fig,
        out,
        "vq_residual.png",
        caption="test reconstruction MSE and latent residual after each stage of "
        f"hg.nn.ResidualVQ, one line per trained model (dashed: per-stage gradient or "
        f"quantizer dropout); {spread}.",
        table=TITLE,
    )
