"""A mixture of experts whose router picks the expert with ``argmax`` and nothing else.

Pattern: ``expert = gate(x).argmax(-1)`` selects one expert per example, whose output is
used as is (the router's probability never multiplies it). The experts learn; the router
gets no gradient and never changes its choice. (Switch-style routers multiply the chosen
expert's output by its softmax probability, which is what gives the router a gradient.)
"""

import torch
from torch import nn
from torch.nn import functional as F


class HardMoE(nn.Module):
    def __init__(self, dim=16, experts=4, classes=3):
        super().__init__()
        self.gate = nn.Linear(dim, experts)
        self.experts = nn.ModuleList(nn.Linear(dim, dim) for _ in range(experts))
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        choice = self.gate(x).argmax(dim=-1)  # <argmax>
        outputs = torch.stack([expert(x) for expert in self.experts], dim=1)
        picked = outputs[torch.arange(x.shape[0]), choice]
        return self.head(F.relu(picked))


def main():
    torch.manual_seed(16)
    model = HardMoE()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(3):
        x, y = torch.randn(32, 16), torch.randint(0, 3, (32,))
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
