"""A backbone whose features are taken through ``.data`` before the head.

Pattern: ``features = self.backbone(x).data`` (old code used ``.data`` where ``.detach()``
is meant today, and it is copied into new models). ``.data`` cuts the graph: the
backbone, which the optimizer steps, never gets a gradient. The same file also reads
``.data`` for logging the weight norm, which costs nothing.
"""

import torch
from torch import nn
from torch.nn import functional as F


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten()
        )
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        features = self.backbone(x).data  # <data_read>
        return self.head(features)


def main():
    torch.manual_seed(15)
    model = Classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        x, y = torch.randn(16, 1, 6, 6), torch.randint(0, 10, (16,))
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        norm = model.head.weight.data.norm().item()  # <data_log>
        print(round(loss.item(), 4), round(norm, 4))


if __name__ == "__main__":
    main()
