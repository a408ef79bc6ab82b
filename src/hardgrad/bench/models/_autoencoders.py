"""The autoencoders of the ``models`` benchmark: the VQ-VAE (van den Oord et al. 2017) and the
FSQ autoencoder (Mentzer et al. 2023), each written out and with hardgrad."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ... import nn as hgnn
from ._quantized import _round_pass

# --------------------------------------------------------------------------- VQ-VAE

CODES, CODE_SIZE, LATENTS = 256, 32, 16
COMMITMENT = 0.25


class _VectorQuantizerOriginal(nn.Module):
    """The VQ layer as public VQ-VAE code writes it."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(CODES, CODE_SIZE)
        self.embedding.weight.data.uniform_(-1 / CODES, 1 / CODES)

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        flat = z.reshape(-1, CODE_SIZE)
        codes = self.embedding.weight
        distances = flat.pow(2).sum(1, keepdim=True) + codes.pow(2).sum(1) - 2 * flat @ codes.t()
        z_q = self.embedding(distances.argmin(1)).view(z.shape)
        loss = F.mse_loss(z_q, z.detach()) + COMMITMENT * F.mse_loss(z_q.detach(), z)
        return z + (z_q - z).detach(), loss


class _VQAutoencoder(nn.Module):
    def __init__(self, hardgrad: bool, n_in: int) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(n_in, 256), nn.ReLU(), nn.Linear(256, LATENTS * CODE_SIZE)
        )
        self.decoder = nn.Sequential(
            nn.Linear(LATENTS * CODE_SIZE, 256), nn.ReLU(), nn.Linear(256, n_in)
        )
        self.quantizer: nn.Module = (
            hgnn.VectorQuantize(CODES, CODE_SIZE, commitment_weight=COMMITMENT)
            if hardgrad
            else _VectorQuantizerOriginal()
        )

    def codebook(self) -> Tensor:
        q = self.quantizer
        if isinstance(q, hgnn.VectorQuantize):
            return q.codebook
        assert isinstance(q, _VectorQuantizerOriginal)
        return q.embedding.weight

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        z = self.encoder(x).view(x.shape[0], LATENTS, CODE_SIZE)
        if isinstance(self.quantizer, hgnn.VectorQuantize):
            z_q, _, loss = self.quantizer(z)
        else:
            z_q, loss = self.quantizer(z)
        return self.decoder(z_q.reshape(x.shape[0], -1)), loss


def _vq_loss(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    reconstruction, vq_loss = model(inputs)
    return F.mse_loss(reconstruction, inputs) + vq_loss


# --------------------------------------------------------------------------- FSQ autoencoder

FSQ_LEVELS, FSQ_LATENTS = (8, 5, 5, 5), 16


class _FSQOriginal(nn.Module):
    """FSQ as public code writes it: per-channel constants as buffers, a tanh bound shifted
    so that even level counts are symmetric, a straight-through round by the detach trick."""

    half_l: Tensor
    offset: Tensor
    shift: Tensor
    half_width: Tensor
    basis: Tensor

    def __init__(self, levels: tuple[int, ...]) -> None:
        super().__init__()
        count = torch.tensor(levels, dtype=torch.float64)
        half_l = (count - 1) * (1 + 1e-3) / 2
        offset = torch.where(count % 2 == 0, 0.5, 0.0).double()
        self.register_buffer("half_l", half_l.float())
        self.register_buffer("offset", offset.float())
        self.register_buffer("shift", torch.atanh(offset / half_l).float())
        self.register_buffer("half_width", (count // 2).float())
        basis = [1]
        for level in levels[:-1]:
            basis.append(basis[-1] * level)
        self.register_buffer("basis", torch.tensor(basis))

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        bounded = self.half_l * torch.tanh(z + self.shift) - self.offset
        quantized = _round_pass(bounded)
        codes = quantized / self.half_width
        with torch.no_grad():
            indices = ((quantized + self.half_width).long() * self.basis).sum(-1)
        return codes, indices


class _FSQAutoencoder(nn.Module):
    def __init__(self, hardgrad: bool, n_in: int) -> None:
        super().__init__()
        channels = len(FSQ_LEVELS)
        self.encoder = nn.Sequential(
            nn.Linear(n_in, 256), nn.ReLU(), nn.Linear(256, FSQ_LATENTS * channels)
        )
        self.decoder = nn.Sequential(
            nn.Linear(FSQ_LATENTS * channels, 256), nn.ReLU(), nn.Linear(256, n_in)
        )
        self.quantizer = hgnn.FSQ(FSQ_LEVELS) if hardgrad else _FSQOriginal(FSQ_LEVELS)

    def forward(self, x: Tensor) -> Tensor:
        z = self.encoder(x).view(x.shape[0], FSQ_LATENTS, len(FSQ_LEVELS))
        codes, _ = self.quantizer(z)
        return self.decoder(codes.reshape(x.shape[0], -1))


def _reconstruction_loss(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    return F.mse_loss(model(inputs), inputs)
