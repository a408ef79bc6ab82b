r"""The ``vq`` benchmark: a small VQ-VAE on the digits with each quantizer, at equal steps.

An MLP autoencoder (``64-128-(T·D)`` encoder, ``(T·D)-128-64`` decoder with a sigmoid
output, ``T = 4`` tokens per image) is trained to reconstruct scikit-learn's 8x8 digits
(``x/16``) with mean squared error, with one of these bottlenecks, each with a codebook of
``K = 64`` codes shared by the tokens:

* ``STE``: :class:`hardgrad.nn.VectorQuantize` (D = 8), straight-through gradient, codebook
  loss (van den Oord et al. 2017, https://arxiv.org/abs/1711.00937);
* ``rotation``: the same with the rotation trick (Fifty et al. 2024,
  https://arxiv.org/abs/2410.06424);
* ``Gumbel``: the same with codes drawn by straight-through Gumbel over :math:`-d/\tau`;
* ``EMA``: straight-through with the exponential-moving-average codebook;
* ``FSQ``: finite scalar quantization with levels (4, 4, 4) (D = 3, 64 codes; no
  auxiliary loss), Mentzer et al. 2023, https://arxiv.org/abs/2309.15505;
* ``LFQ``: lookup-free quantization with 6 bits (64 codes) and its entropy loss, Yu et al.
  2023, https://arxiv.org/abs/2310.05737.

Every configuration trains for the same number of Adam steps (batch 64) from the same
seeds. The table reports, on the test set in eval mode: reconstruction MSE per pixel, the
percentage of codes used and the perplexity of the code distribution over all test tokens,
the codes never used on the whole training set ("dead"), the commitment error
:math:`\overline{\lVert z - \operatorname{sg}[z_q]\rVert^2}` (not for FSQ, whose input is
unbounded and bounded inside), and the time per training step. It then checks the papers'
qualitative claims: the rotation trick gives lower reconstruction error and higher codebook
usage than the straight-through estimator, and FSQ uses (nearly) all codes without
auxiliary losses; a claim counts as resolved only with at least two seeds and a difference
beyond twice the larger seed spread.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import estimators as _estimators
from .. import nn as hgnn
from .. import vq as _vq
from ._pyplot import pyplot
from ._seeds import check_runs
from ._task import BenchSettings, Progress, Table, TaskResult, task
from .data import Dataset, load_dataset

__all__ = ["VARIANTS", "VQVAE", "VQConfig", "default_config", "run", "train_and_evaluate"]

#: The bottlenecks, in table order.
VARIANTS = ("STE", "rotation", "Gumbel", "EMA", "FSQ", "LFQ")


@dataclass(frozen=True)
class VQConfig:
    """Settings of the ``vq`` benchmark.

    Attributes:
        variants: which bottlenecks to train (names from :data:`VARIANTS`).
        tokens: tokens per image.
        code_dim: D of the learned codebooks.
        num_codes: K (FSQ and LFQ use 64 codes: levels (4, 4, 4) and 6 bits).
        hidden: hidden width of encoder and decoder.
        steps: Adam steps per run.
        batch_size: images per step.
        lr: Adam's learning rate.
        gumbel_tau: the temperature of the code logits :math:`-d/\tau` of ``Gumbel`` (the
            squared distances of this model are about 1e-2).
        lfq_entropy_weight: LFQ's entropy-loss weight.
        kmeans_init: initialise every learned codebook from the first batch (k-means++ and
            a few Lloyd steps). Without it the codebook starts near the origin, where
            ST-Gumbel's logits -d/tau carry no signal: it did not learn (test MSE of the
            mean image), and the codebook gets no gradient through z_q to leave it.
        lfq_commitment_weight: LFQ's commitment weight. With the module's default 0.25 the
            commitment term outweighs this small model's reconstruction error (about 0.07
            at the start), pulls every z to ±1 on its initial sign pattern within 100
            steps, and every image gets the same code (recon error of the mean image);
            0.01 with entropy weight 0.1 trains (tried: 0.0/0.01, 0.01/0.1, 0.05/0.5).
        seeds: independent runs per configuration.
        plot: write ``vq.png`` (needs matplotlib).
        threads: intra-op threads while training.
    """

    variants: tuple[str, ...] = VARIANTS
    tokens: int = 4
    code_dim: int = 8
    num_codes: int = 64
    hidden: int = 128
    steps: int = 3000
    batch_size: int = 64
    lr: float = 1e-3
    gumbel_tau: float = 0.01
    lfq_entropy_weight: float = 0.1
    kmeans_init: bool = True
    lfq_commitment_weight: float = 0.01
    seeds: int = 3
    plot: bool = True
    threads: int | None = 1


def default_config(quick: bool) -> VQConfig:
    """The full setting (3 seeds, 3000 steps) or ``--quick`` (2 seeds, 600 steps)."""
    if quick:
        return VQConfig(steps=600, seeds=2, lr=2e-3)
    return VQConfig()


class VQVAE(nn.Module):
    """The MLP autoencoder with the bottleneck ``variant`` (see the module docstring)."""

    def __init__(self, variant: str, features: int, config: VQConfig) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"Unknown variant {variant!r}; available: {', '.join(VARIANTS)}")
        self.variant = variant
        self.tokens = config.tokens
        self.quantizer: nn.Module
        if variant == "FSQ":
            self.width = 3
            self.quantizer = hgnn.FSQ([4, 4, 4])
        elif variant == "LFQ":
            self.width = 6
            self.quantizer = hgnn.LFQ(
                6,
                entropy_weight=config.lfq_entropy_weight,
                commitment_weight=config.lfq_commitment_weight,
            )
        else:
            self.width = config.code_dim
            estimator: Any = {
                "STE": "st",
                "rotation": "rotation",
                "Gumbel": _estimators.STGumbel(tau=1.0),
                "EMA": "st",
            }[variant]
            self.quantizer = hgnn.VectorQuantize(
                config.num_codes,
                self.width,
                estimator=estimator,
                codebook_update="ema" if variant == "EMA" else "loss",
                tau=config.gumbel_tau,
                kmeans_init=config.kmeans_init,
            )
        latent = self.tokens * self.width
        self.encoder = nn.Sequential(
            nn.Linear(features, config.hidden), nn.ReLU(), nn.Linear(config.hidden, latent)
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent, config.hidden), nn.ReLU(), nn.Linear(config.hidden, features)
        )

    def forward(self, x: Tensor) -> dict[str, Tensor]:
        z = self.encoder(x).reshape(len(x), self.tokens, self.width)
        out = self.quantizer(z)
        z_q, indices = out[0], out[1]
        aux = out[2] if len(out) == 3 else z.new_zeros(())
        recon = torch.sigmoid(self.decoder(z_q.reshape(len(x), -1)))
        commit = (z - z_q.detach()).square().mean()
        return {"recon": recon, "indices": indices, "aux": aux, "commit": commit}


def _num_codes(model: VQVAE) -> int:
    q = model.quantizer
    if isinstance(q, hgnn.VectorQuantize):
        return q.num_codes
    return int(q.codebook_size)  # type: ignore[arg-type]


def train_and_evaluate(variant: str, data: Dataset, config: VQConfig, seed: int) -> dict[str, Any]:
    """Train one configuration from ``seed``; its test metrics and seconds per step."""
    torch.manual_seed(seed)
    model = VQVAE(variant, data.features, config)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    generator = torch.Generator().manual_seed(seed)
    x_train = data.x_train
    t0 = time.perf_counter()
    for _ in range(config.steps):
        index = torch.randint(len(x_train), (config.batch_size,), generator=generator)
        x = x_train[index]
        out = model(x)
        loss = F.mse_loss(out["recon"], x) + out["aux"]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    seconds = (time.perf_counter() - t0) / config.steps
    model.eval()
    k = _num_codes(model)
    with torch.no_grad():
        test = model(data.x_test)
        train = model(x_train)
    usage, perplexity = _vq.codebook_usage(test["indices"], k)
    used_in_train = torch.zeros(k).index_add_(
        0, train["indices"].reshape(-1), torch.ones(train["indices"].numel())
    )
    return {
        "recon_mse": float(F.mse_loss(test["recon"], data.x_test)),
        "usage": float(usage),
        "perplexity": float(perplexity),
        "dead": int((used_in_train == 0).sum()),
        "commit": float(test["commit"]),
        "ms_per_step": 1000 * seconds,
        "num_codes": k,
    }


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


def _plot(rows: list[dict[str, Any]], out: Path) -> str | None:
    plt = pyplot()
    if plt is None:  # the bench extra is missing
        return None
    out.mkdir(parents=True, exist_ok=True)
    names = [r["variant"] for r in rows]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.4))
    for ax, key, label, scale in (
        (axes[0], "recon_mse", "test recon MSE ×1e3", 1000),
        (axes[1], "usage", "codes used (%)", 100),
        (axes[2], "perplexity", "perplexity (of 64)", 1),
    ):
        means = [scale * r[key]["mean"] for r in rows]
        stds = [scale * r[key]["std"] for r in rows]
        ax.bar(names, means, yerr=stds, capsize=3, color="C0")
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="x", labelsize=8, rotation=30)
    fig.tight_layout()
    name = "vq.png"
    fig.savefig(out / name, dpi=110)
    plt.close(fig)
    return name


@task(
    "vq",
    "VQ-VAE on digits: STE, rotation trick, Gumbel, EMA codebook, FSQ, LFQ; recon and usage",
    default_config,
)
def run(settings: BenchSettings, config: VQConfig, progress: Progress) -> TaskResult:
    """Train every bottleneck from ``config.seeds`` seeds at equal steps; report the metrics."""
    t_start = time.perf_counter()
    check_runs(config.seeds, config.steps, config.variants, VARIANTS, "variants")
    data = load_dataset(settings.data, settings.seed)
    progress.start("vq", len(config.variants) * config.seeds)
    threads = torch.get_num_threads()
    if config.threads is not None:
        torch.set_num_threads(max(1, config.threads))
    rows = []
    try:
        for variant in config.variants:
            runs = []
            for s in range(config.seeds):
                progress.advance(f"{variant}, seed {s + 1}/{config.seeds}", steps=0)
                runs.append(train_and_evaluate(variant, data, config, settings.seed * 1000 + s))
                progress.advance()
            row: dict[str, Any] = {"variant": variant, "runs": runs}
            for key in ("recon_mse", "usage", "perplexity", "dead", "commit", "ms_per_step"):
                row[key] = _stat([float(r[key]) for r in runs])
            rows.append(row)
            progress.log(
                f"{variant}: recon MSE {1000 * row['recon_mse']['mean']:.2f}e-3, "
                f"usage {100 * row['usage']['mean']:.1f} %"
            )
    finally:
        torch.set_num_threads(threads)
    progress.finish()
    figures: list[str] = []
    if settings.out is not None and config.plot:
        name = _plot(rows, settings.out)
        if name is not None:
            figures.append(name)
    result = TaskResult(
        name="vq",
        summary=f"VQ-VAE on {data.name}: six quantizers at {config.steps} steps, "
        f"{config.seeds} seed(s)",
        settings=dataclasses.asdict(config),
        data={"dataset": data.name, "rows": rows, "figures": figures},
        wall_s=time.perf_counter() - t_start,
    )
    result.tables = _tables(rows, config)
    result.notes = _notes(rows, config, data)
    result.figures = figures
    return result
