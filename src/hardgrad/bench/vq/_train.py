"""The VQ-VAE of the ``vq`` benchmark (:class:`VQVAE`) and one training run of a variant."""

from __future__ import annotations

import time
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ... import estimators as _estimators
from ... import nn as hgnn
from ... import vq as _vq
from ..data import Dataset
from ._config import VARIANTS, VQConfig


class VQVAE(nn.Module):
    """The MLP autoencoder with the bottleneck ``variant`` (see the package docstring)."""

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
