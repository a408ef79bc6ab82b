"""A spiking network whose hidden spikes come from a bare comparison (no surrogate).

Pattern: leaky integrate-and-fire neurons written inline, ``spikes = (mem > threshold)
.float()``, with the loss on the output layer's membrane potential (a common way to train
the readout). The hidden layer's weights only reach the loss through the comparison,
whose bool result has no gradient: they never learn. The output layer's own comparison
(used for its reset) costs nothing: its weights learn through the membrane.
"""

import torch
from torch import nn
from torch.nn import functional as F


class LIF(nn.Module):
    def __init__(self, beta=0.85, threshold=1.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, current, mem):
        mem = self.beta * mem + current
        spikes = (mem > self.threshold).float()  # <compare>
        return spikes, mem - spikes * self.threshold


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden, self.lif_hidden = nn.Linear(16, 24), LIF()
        self.readout, self.lif_out = nn.Linear(24, 3), LIF()

    def forward(self, x, steps=10):
        mem_h = torch.zeros(x.shape[0], 24)
        mem_o = torch.zeros(x.shape[0], 3)
        potentials = []
        for _ in range(steps):
            spk_h, mem_h = self.lif_hidden(self.hidden(x), mem_h)
            _, mem_o = self.lif_out(self.readout(spk_h), mem_o)
            potentials.append(mem_o)
        return torch.stack(potentials).mean(0)


def main():
    torch.manual_seed(1)
    x = torch.rand(48, 16) * 3
    y = torch.randint(0, 3, (48,))
    net = Net()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
    for _ in range(4):
        optimizer.zero_grad()
        loss = F.cross_entropy(net(x), y)  # <call>
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
