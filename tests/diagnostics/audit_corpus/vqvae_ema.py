"""A VQ-VAE with an EMA codebook (VQ-VAE-2 style quantizer).

Pattern: the codebook is a buffer ``embed`` of shape (dim, codes) updated by exponential
moving averages under ``torch.no_grad()``; the nearest code by ``(-dist).max(1)``; the
looked-up vectors by ``F.embedding`` on the transposed buffer; the commitment loss
``(quantize.detach() - input)^2``; the straight-through copy
``input + (quantize - input).detach()`` into the decoder. All of it is deliberate.
"""

import torch
from torch import nn
from torch.nn import functional as F


class Quantize(nn.Module):
    def __init__(self, dim=8, codes=16, decay=0.99, eps=1e-5):
        super().__init__()
        self.decay, self.eps = decay, eps
        embed = torch.randn(dim, codes)
        self.register_buffer("embed", embed)
        self.register_buffer("cluster_size", torch.zeros(codes))
        self.register_buffer("embed_avg", embed.clone())

    def forward(self, input):
        flatten = input.reshape(-1, input.shape[-1])
        dist = (
            flatten.pow(2).sum(1, keepdim=True)
            - 2 * flatten @ self.embed
            + self.embed.pow(2).sum(0, keepdim=True)
        )
        _, embed_ind = (-dist).max(1)  # <max>
        embed_onehot = F.one_hot(embed_ind, self.embed.shape[1]).type(flatten.dtype)
        quantize = F.embedding(embed_ind, self.embed.transpose(0, 1)).view_as(input)
        if self.training:
            with torch.no_grad():
                self.cluster_size.mul_(self.decay).add_(embed_onehot.sum(0), alpha=1 - self.decay)
                embed_sum = flatten.transpose(0, 1) @ embed_onehot  # <ema_sum>
                self.embed_avg.mul_(self.decay).add_(embed_sum, alpha=1 - self.decay)
                n = self.cluster_size.sum()
                size = (self.cluster_size + self.eps) / (n + 16 * self.eps) * n
                self.embed.copy_(self.embed_avg / size.unsqueeze(0))
        diff = (quantize.detach() - input).pow(2).mean()  # <commit>
        quantize = input + (quantize - input).detach()  # <straight_through>
        return quantize, diff


def main():
    torch.manual_seed(11)
    encoder = nn.Sequential(nn.Linear(24, 32), nn.ReLU(), nn.Linear(32, 8))
    decoder = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 24))
    quantize = Quantize()
    optimizer = torch.optim.Adam([*encoder.parameters(), *decoder.parameters()], lr=1e-3)
    data = torch.randn(128, 24)
    for _ in range(5):
        x = data[torch.randint(0, 128, (32,))]
        z_q, diff = quantize(encoder(x))
        loss = F.mse_loss(decoder(z_q), x) + 0.25 * diff
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
