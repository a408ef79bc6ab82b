"""A VQ-VAE without the straight-through line and without a commitment loss.

Pattern: the quantizer of ``vqvae.py`` with the decoder run on the looked-up ``z_q`` and
only the codebook loss ``|sg[z] - e|^2``. The encoder gets no gradient at all: its paths to
the loss are the argmin's index (the bug) and the codebook loss's deliberate ``sg[z]``.
Only the argmin is to blame; the stop-gradient is the VQ-VAE's own.
"""

import torch
from torch import nn
from torch.nn import functional as F


class VectorQuantizer(nn.Module):
    def __init__(self, codes=16, dim=8, beta=0.25):
        super().__init__()
        self.codebook = nn.Embedding(codes, dim)
        self.codebook.weight.data.uniform_(-1.0 / codes, 1.0 / codes)
        self.beta = beta

    def forward(self, z):
        flat = z.reshape(-1, z.shape[-1])
        distances = (
            flat.pow(2).sum(1, keepdim=True)
            + self.codebook.weight.pow(2).sum(1)
            - 2 * flat @ self.codebook.weight.t()
        )
        indices = distances.argmin(1)  # <argmin>
        z_q = self.codebook(indices).view_as(z)
        codebook_loss = F.mse_loss(z_q, z.detach())  # <sg_z>
        one_hot = F.one_hot(indices, self.codebook.num_embeddings).float()
        usage = one_hot.mean(0)
        perplexity = torch.exp(-(usage * torch.log(usage + 1e-10)).sum())
        return z_q, codebook_loss, perplexity


class VQVAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4 * 8))
        self.quantizer = VectorQuantizer()
        self.decoder = nn.Sequential(nn.Linear(4 * 8, 64), nn.ReLU(), nn.Linear(64, 32))

    def forward(self, x):
        z = self.encoder(x).view(-1, 4, 8)
        z_q, vq_loss, perplexity = self.quantizer(z)
        return self.decoder(z_q.view(-1, 32)), vq_loss, perplexity


def main():
    torch.manual_seed(8)
    data = torch.randn(256, 32)
    model = VQVAE()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    for step in range(5):
        batch = data[torch.randint(0, 256, (32,))]
        recon, vq_loss, perplexity = model(batch)
        loss = F.mse_loss(recon, batch) + vq_loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(step, f"{loss.item():.4f}", f"{perplexity.item():.2f}")  # <log>


if __name__ == "__main__":
    main()
