"""The rotation trick with stochastically drawn codes (vector-quantize-pytorch issue #223),
rebuilt from hardgrad's pieces: the collapse docs/guides/vq.md describes, reproduced on a
small VQ-VAE of the digits (hot draws: the encoder's outputs shrink toward the origin, the
draws become uniform, the rotation's scale |q|/|z| and the encoder's gradient grow, the
loss stays at the mean image's), against the same draws with straight-through (it learns)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hardgrad as hg

K, D, L = 64, 8, 4


def _train(rotation: bool, temp: float, steps: int = 900, seed: int = 0):
    """Codes drawn from softmax(-|z - c| / temp) (the peer's distances), the rotation trick
    (or straight-through) to the drawn code, an EMA codebook (decay 0.8) on the drawn
    assignments with dead-code restarts, commitment 0.25; Adam 1e-3, batch 128."""
    digits = pytest.importorskip("sklearn.datasets").load_digits().data
    data = torch.tensor(digits, dtype=torch.float32) / 16
    torch.manual_seed(seed)
    enc = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, L * D))
    dec = nn.Sequential(nn.Linear(L * D, 128), nn.ReLU(), nn.Linear(128, 64))
    opt = torch.optim.Adam([*enc.parameters(), *dec.parameters()], lr=1e-3)
    g = torch.Generator().manual_seed(seed)
    codebook = cluster = embed = None
    history = []
    for _ in range(steps):
        x = data[torch.randint(len(data), (128,), generator=g)]
        z = enc(x).reshape(-1, D)
        if codebook is None:  # the first batch's rows
            codebook = z.detach()[torch.randperm(len(z), generator=g)[:K]].clone()
            cluster, embed = torch.ones(K), codebook.clone()
        dist = (z.detach()[:, None] - codebook[None]).square().sum(-1)
        noise = -torch.log(-torch.log(torch.rand(dist.shape, generator=g).clamp(1e-10, 1 - 1e-7)))
        k = (-dist.sqrt() / temp + noise).argmax(-1)
        q = codebook[k]
        z_q = hg.vq.rotation_gradient(z, q) if rotation else hg.straight_through(q)(z)
        loss = F.mse_loss(dec(z_q.reshape(-1, L * D)), x) + 0.25 * F.mse_loss(z, q)
        opt.zero_grad()
        loss.backward()
        grad = float(torch.cat([p.grad.reshape(-1) for p in enc.parameters()]).norm())
        opt.step()
        with torch.no_grad():
            onehot = F.one_hot(k, K).float()
            cluster.lerp_(onehot.sum(0), 0.2)
            embed.lerp_(onehot.T @ z.detach(), 0.2)
            total = cluster.sum()
            codebook = embed / ((cluster + 1e-5) / (total + K * 1e-5) * total)[:, None]
            dead = cluster < 2.0
            if dead.any():
                rows = z.detach()[torch.randint(len(z), (int(dead.sum()),), generator=g)]
                codebook[dead], embed[dead], cluster[dead] = rows, rows * 2.0, 2.0
        nearest = float((k == dist.argmin(-1)).float().mean())
        scale = float((q.norm(dim=-1) / z.detach().norm(dim=-1)).max())
        history.append(
            (float(loss.detach()), grad, float(z.detach().norm(dim=-1).mean()), nearest, scale)
        )
    return history


def _mean(history, column, last=200):
    return sum(row[column] for row in history[-last:]) / last


@pytest.mark.slow
def test_hot_draws_with_the_rotation_trick_collapse_and_straight_through_learns():
    rotated = _train(rotation=True, temp=1.0)
    straight = _train(rotation=False, temp=0.1)
    # (measured over the last 200 of 900 steps) rotation: |z| shrinks from 0.36 to 0.057,
    # 1.6 % of draws are the nearest code, the loss stays at the mean image's (0.0735),
    # |q|/|z| reaches 30, the encoder's gradient grows 30-fold (0.0008 -> 0.025)
    assert _mean(rotated, 2) < 0.1 and _mean(rotated, 3) < 0.05
    assert _mean(rotated, 0) > 0.065
    assert max(row[4] for row in rotated) > 10
    assert _mean(rotated, 1) > 10 * min(row[1] for row in rotated[100:400])
    # straight-through: |z| grows (1.87), the draw cools (58 % nearest), it learns (0.0265)
    assert _mean(straight, 2) > 1.0 and _mean(straight, 3) > 0.4
    assert _mean(straight, 0) < 0.035
    assert all(torch.isfinite(torch.tensor(row)).all() for row in rotated + straight)
