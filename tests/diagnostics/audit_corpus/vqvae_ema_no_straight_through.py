"""A VQ-VAE with an EMA codebook whose quantizer forgot the straight-through line.

Pattern: the quantizer of ``vqvae_ema.py`` (EMA codebook buffer, ``(-dist).max(1)``,
commitment loss on ``quantize.detach()``) returning the looked-up vectors themselves: the
decoder reads a tensor without graph, the encoder learns only from the commitment loss.
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
