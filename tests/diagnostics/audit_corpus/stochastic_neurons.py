"""Stochastic binary neurons sampled with ``torch.bernoulli``, as in many sigmoid-belief-
network and stochastic-neuron repositories, with no gradient estimator.

Pattern: ``h = torch.bernoulli(torch.sigmoid(fc(x)))``; the second layer samples in place
with ``Tensor.bernoulli_``. A draw's derivative is zero, so both stochastic layers get an
all-zero gradient; only the readout learns.
"""

import torch
from torch import nn
from torch.nn import functional as F


class StochasticNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 40)
        self.fc2 = nn.Linear(40, 40)
        self.out = nn.Linear(40, 2)

    def forward(self, x):
        h1 = torch.bernoulli(torch.sigmoid(self.fc1(x)))  # <bernoulli>
        p2 = torch.sigmoid(self.fc2(h1))
        h2 = torch.empty_like(p2).bernoulli_(p2)  # <bernoulli_>
        return self.out(h2)


def main():
    torch.manual_seed(14)
    x, y = torch.randn(64, 20), torch.randint(0, 2, (64,))
    net = StochasticNet()
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(3):
        optimizer.zero_grad()
        F.cross_entropy(net(x), y).backward()
        optimizer.step()


if __name__ == "__main__":
    main()
