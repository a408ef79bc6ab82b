"""Multi-task training whose per-task losses are combined through ``torch.tensor``.

Pattern: ``total = torch.tensor([loss_a, loss_b, loss_c]).sum()`` to weight or log several
losses, plus a regulariser that keeps the total differentiable. ``torch.tensor`` copies the
values and drops the graph: the task heads never learn (``torch.stack`` keeps it). The
shared trunk still learns through the regulariser.
"""

import torch
from torch import nn
from torch.nn import functional as F


class MultiTask(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(10, 32), nn.ReLU())
        self.heads = nn.ModuleDict(
            {"age": nn.Linear(32, 1), "gender": nn.Linear(32, 2), "mood": nn.Linear(32, 4)}
        )

    def forward(self, x):
        h = self.trunk(x)
        return h, {name: head(h) for name, head in self.heads.items()}


def main():
    torch.manual_seed(18)
    model = MultiTask()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    weights = torch.tensor([1.0, 0.5, 0.5])
    for _ in range(3):
        x = torch.randn(32, 10)
        h, out = model(x)
        losses = [
            F.mse_loss(out["age"].squeeze(-1), torch.randn(32)),
            F.cross_entropy(out["gender"], torch.randint(0, 2, (32,))),
            F.cross_entropy(out["mood"], torch.randint(0, 4, (32,))),
        ]
        total = (weights * torch.tensor(losses)).sum()  # <copy>
        loss = total + 1e-3 * h.pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print([round(v.item(), 3) for v in losses])  # <log>


if __name__ == "__main__":
    main()
