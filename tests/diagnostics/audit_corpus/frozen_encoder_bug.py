"""Two no_grad blocks in one training step: a distillation teacher (frozen on purpose) and
an encoder wrapped in ``torch.no_grad()`` by mistake.

Pattern: the teacher's soft targets are computed under ``torch.no_grad()`` and the
teacher is not in the optimizer; the student's encoder features are also computed under
``torch.no_grad()`` (copied from the teacher block), but the encoder's parameters are in
the optimizer: it never learns, and nothing raises.
"""

import torch
from torch import nn
from torch.nn import functional as F


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(12, 24), nn.GELU(), nn.Linear(24, 24))

    def forward(self, x):
        return self.net(x)


def main():
    torch.manual_seed(12)
    teacher = nn.Sequential(nn.Linear(12, 48), nn.ReLU(), nn.Linear(48, 5))
    encoder, head = Encoder(), nn.Linear(24, 5)
    optimizer = torch.optim.Adam([*encoder.parameters(), *head.parameters()], lr=1e-3)
    temperature = 2.0
    for _ in range(4):
        x, y = torch.randn(32, 12), torch.randint(0, 5, (32,))
        with torch.no_grad():
            soft_targets = F.softmax(teacher(x) / temperature, dim=-1)  # <teacher>
        with torch.no_grad():
            features = encoder(x)  # <encoder>
        logits = head(features)
        distill = F.kl_div(
            F.log_softmax(logits / temperature, dim=-1), soft_targets, reduction="batchmean"
        )
        loss = F.cross_entropy(logits, y) + temperature**2 * distill
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
