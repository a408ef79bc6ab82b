"""The residual rows of the ``vq`` benchmark: the same VQ-VAE with a
:class:`hardgrad.nn.ResidualVQ` bottleneck, trained per stage count, gradient convention and
quantizer dropout, and measured stage by stage."""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ... import nn as hgnn
from ... import vq as _vq
from .._seeds import mean_std
from .._task import Progress
from ..data import Dataset
from ._config import VQConfig

#: The per-run figures summed up over seeds (one number per run).
KEYS = ("recon_mse", "ms_per_step")
#: The per-run figures with one number per stage (after stage 1, 2, ...).
STAGE_KEYS = ("stage_mse", "stage_residual", "stage_usage", "stage_perplexity")


def residual_settings(config: VQConfig) -> list[dict[str, Any]]:
    """The residual rows of ``config``: each stage count with ``gradient="total"``, then at
    ``residual_compare`` stages ``gradient="per_stage"`` and quantizer dropout."""
    stages = [int(n) for n in config.residual_stages]
    if any(n < 1 for n in stages) or len(set(stages)) != len(stages):
        raise ValueError(f"Expected `residual_stages` to be distinct ints >= 1, but found {stages}")
    rows = [{"stages": n, "gradient": "total", "dropout": False} for n in stages]
    compare = int(config.residual_compare)
    if stages and compare >= 1:
        if compare not in stages:
            rows.append({"stages": compare, "gradient": "total", "dropout": False})
        rows.append({"stages": compare, "gradient": "per_stage", "dropout": False})
        if compare >= 2:
            rows.append({"stages": compare, "gradient": "total", "dropout": True})
    return rows


def label(setting: dict[str, Any]) -> str:
    """``"RVQ 4"``, ``"RVQ 4, per-stage grad"``, ``"RVQ 4, dropout"``."""
    text = f"RVQ {setting['stages']}"
    if setting["gradient"] == "per_stage":
        text += ", per-stage grad"
    if setting["dropout"]:
        text += ", dropout"
    return text


class ResidualVQVAE(nn.Module):
    """The task's MLP autoencoder (:class:`~hardgrad.bench.vq.VQVAE`) with a
    :class:`~hardgrad.nn.ResidualVQ` of ``stages`` stages as its bottleneck."""

    def __init__(self, setting: dict[str, Any], features: int, config: VQConfig, seed: int):
        super().__init__()
        self.tokens, self.width = config.tokens, config.code_dim
        self.quantizer = hgnn.ResidualVQ(
            setting["stages"],
            config.num_codes,
            self.width,
            gradient=setting["gradient"],
            quantize_dropout=setting["dropout"],
            codebook_update="ema",
            kmeans_init=config.kmeans_init,
            seed=seed,
        )
        latent = self.tokens * self.width
        self.encoder = nn.Sequential(
            nn.Linear(features, config.hidden), nn.ReLU(), nn.Linear(config.hidden, latent)
        )
        self.decoder = nn.Sequential(
            nn.Linear(latent, config.hidden), nn.ReLU(), nn.Linear(config.hidden, features)
        )

    def encode(self, x: Tensor) -> Tensor:
        return self.encoder(x).reshape(len(x), self.tokens, self.width)

    def decode(self, z_q: Tensor) -> Tensor:
        return torch.sigmoid(self.decoder(z_q.reshape(len(z_q), -1)))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        z_q, _, aux = self.quantizer(self.encode(x))
        return self.decode(z_q), aux


def train_residual(
    setting: dict[str, Any], data: Dataset, config: VQConfig, seed: int
) -> dict[str, Any]:
    """Train one residual row from ``seed`` as the other rows train (same steps, batch, Adam);
    on the test set in eval mode, after each stage ``k``: the reconstruction MSE of the
    decoder fed the first ``k`` stages' codes, the mean squared norm of the latent residual
    :math:`\\lVert z - \\sum_{j<k} c^{(j)}\\rVert^2` per token, and stage ``k``'s codebook
    usage and perplexity."""
    torch.manual_seed(seed)
    model = ResidualVQVAE(setting, data.features, config, seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    generator = torch.Generator().manual_seed(seed)
    x_train = data.x_train
    t0 = time.perf_counter()
    for _ in range(config.steps):
        index = torch.randint(len(x_train), (config.batch_size,), generator=generator)
        x = x_train[index]
        recon, aux = model(x)
        loss = F.mse_loss(recon, x) + aux
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    seconds = (time.perf_counter() - t0) / config.steps
    model.eval()
    out: dict[str, Any] = {key: [] for key in STAGE_KEYS}
    with torch.no_grad():
        z = model.encode(data.x_test)
        _, indices, _ = model.quantizer(z)
        for k in range(1, setting["stages"] + 1):
            partial = model.quantizer.decode(indices[..., :k])
            out["stage_mse"].append(float(F.mse_loss(model.decode(partial), data.x_test)))
            out["stage_residual"].append(float((z - partial).square().sum(-1).mean()))
            usage, perplexity = _vq.codebook_usage(indices[..., k - 1], config.num_codes)
            out["stage_usage"].append(float(usage))
            out["stage_perplexity"].append(float(perplexity))
        out["latent_norm"] = float(z.square().sum(-1).mean())
    out["recon_mse"] = out["stage_mse"][-1]
    out["ms_per_step"] = 1000 * seconds
    return out


def residual_rows(
    data: Dataset, config: VQConfig, base_seed: int, progress: Progress
) -> list[dict[str, Any]]:
    """Every residual row of ``config`` over its seeds: the setting, the runs, and per key
    the mean and standard deviation (per stage for the stage keys)."""
    seeds = config.residual_seeds or config.seeds
    rows = []
    for setting in residual_settings(config):
        name = label(setting)
        runs = []
        for s in range(seeds):
            progress.advance(f"{name}, seed {s + 1}/{seeds}", steps=0)
            runs.append(train_residual(setting, data, config, base_seed * 1000 + s))
            progress.advance()
        row: dict[str, Any] = {"label": name, **setting, "seeds": seeds, "runs": runs}
        for key in KEYS:
            row[key] = mean_std([r[key] for r in runs])
        for key in STAGE_KEYS:
            row[key] = [mean_std([r[key][k] for r in runs]) for k in range(setting["stages"])]
        rows.append(row)
        mse = " → ".join(f"{1000 * s['mean']:.2f}" for s in row["stage_mse"])
        progress.log(f"{name}: recon MSE ×1e3 per stage {mse}")
    return rows


def residual_runs(config: VQConfig) -> int:
    """How many training runs the residual rows take (for the progress bar)."""
    return len(residual_settings(config)) * (config.residual_seeds or config.seeds)
