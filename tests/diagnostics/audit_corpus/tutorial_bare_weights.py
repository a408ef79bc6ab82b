"""A from-scratch network in the style of the introductory tutorials: bare weight tensors.

Pattern: ``w1 = torch.randn(..., requires_grad=True)`` and friends (no ``nn.Module``),
a hand-written forward, an optimizer over the list of tensors. The output bias ``b2`` is
created and handed to the optimizer but the forward forgets to add it: it never gets a
gradient, and the optimizer silently skips it.
"""

import math

import torch
from torch.nn import functional as F


def main():
    torch.manual_seed(13)
    x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
    w1 = torch.randn(8, 16) / math.sqrt(8)
    w1.requires_grad_()
    b1 = torch.zeros(16, requires_grad=True)
    w2 = (torch.randn(16, 3) / 4).requires_grad_()
    b2 = torch.zeros(3, requires_grad=True)  # <b2>
    optimizer = torch.optim.SGD([w1, b1, w2, b2], lr=0.1)
    for epoch in range(5):
        hidden = torch.relu(x @ w1 + b1)
        logits = hidden @ w2
        loss = F.cross_entropy(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            accuracy = (logits.argmax(1) == y).float().mean()
        print(epoch, loss.item(), accuracy.item())  # <log>


if __name__ == "__main__":
    main()
