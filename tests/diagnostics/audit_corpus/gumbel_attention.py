"""Hard attention over a set of items with straight-through Gumbel-softmax.

Pattern: a query scores each item, ``F.gumbel_softmax(scores, tau, hard=True)`` picks one
(one-hot forward, soft backward), the pick is read out with a matrix product; the chosen
index is logged with ``argmax`` and accuracy is measured under ``torch.no_grad()``.
"""

import torch
from torch import nn
from torch.nn import functional as F


class HardAttention(nn.Module):
    def __init__(self, dim=16, classes=3):
        super().__init__()
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, items, tau=0.5):
        q = self.query(items.mean(1))
        scores = torch.einsum("bd,bnd->bn", q, self.key(items)) / items.shape[-1] ** 0.5
        pick = F.gumbel_softmax(scores, tau=tau, hard=True)
        chosen = torch.einsum("bn,bnd->bd", pick, items)
        return self.head(chosen), scores


def main():
    torch.manual_seed(5)
    items = torch.randn(32, 6, 16)
    labels = torch.randint(0, 3, (32,))
    model = HardAttention()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(4):
        logits, scores = model(items)
        loss = F.cross_entropy(logits, labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        picked = scores.argmax(-1)  # <log_pick>
        print(step, loss.item(), picked[:4].tolist())  # <log>
    with torch.no_grad():
        logits, _ = model(items)
        print("accuracy", (logits.argmax(-1) == labels).float().mean().item())  # <eval>


if __name__ == "__main__":
    main()
