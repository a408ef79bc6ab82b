"""A loss rebuilt from a Python number, a mistake seen in beginners' training loops.

Pattern: a custom metric is computed, turned into a float with ``.item()`` and wrapped
again as ``torch.tensor(value, requires_grad=True)`` "so that backward works". The
backward runs, fills the new tensor's ``.grad``, and the model gets nothing.
"""

import torch
from torch import nn


def main():
    torch.manual_seed(17)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(64, 4), torch.randn(64, 1)
    for _ in range(3):
        error = (model(x) - y).abs().mean().item()  # <item>
        loss = torch.tensor(error, requires_grad=True)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(round(error, 4))


if __name__ == "__main__":
    main()
