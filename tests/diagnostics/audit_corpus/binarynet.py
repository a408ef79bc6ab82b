"""BinaryNet (Courbariaux, Hubara et al. 2016) as its widely copied PyTorch code does it.

Pattern: each binarized layer keeps the full-precision weights in ``weight.org`` and swaps
``weight.data`` with their sign before the forward; hidden activations are binarized the
same way through ``input.data``. After the backward the training loop copies the
full-precision weights back, steps the optimizer on them and clips them to [-1, 1]. The
gradient computed at the binary weights lands on the real ones: an identity
straight-through estimator that autograd never sees. It trains: nothing is a problem.
"""

import torch
from torch import nn
from torch.nn import functional as F


def binarize(t):
    return t.sign()


class BinarizeLinear(nn.Linear):
    def forward(self, input):
        if input.size(1) != 64:
            input.data = binarize(input.data)  # <input_swap>
        if not hasattr(self.weight, "org"):
            self.weight.org = self.weight.data.clone()  # <keep_copy>
        self.weight.data = binarize(self.weight.org)  # <weight_swap>
        out = F.linear(input, self.weight)
        if self.bias is not None:
            out = out + self.bias.view(1, -1).expand_as(out)
        return out


class BinaryMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(
            BinarizeLinear(64, 128), nn.BatchNorm1d(128), nn.Hardtanh(),
            BinarizeLinear(128, 128), nn.BatchNorm1d(128), nn.Hardtanh(),
            BinarizeLinear(128, 10), nn.BatchNorm1d(10),
        )  # fmt: skip

    def forward(self, x):
        return self.net(x)


def main():
    torch.manual_seed(2)
    x = torch.randn(128, 64)
    y = torch.randint(0, 10, (128,))
    model = BinaryMLP()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(3):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        for p in model.parameters():
            if hasattr(p, "org"):
                p.data.copy_(p.org)  # <restore>
        optimizer.step()
        for p in model.parameters():
            if hasattr(p, "org"):
                p.org.copy_(p.data.clamp_(-1, 1))  # <clip>
    model.eval()
    with torch.no_grad():
        correct = (model(x).argmax(1) == y).sum().item()  # <eval>
    print("train accuracy", correct / len(y))


if __name__ == "__main__":
    main()
