"""A binary network written the way a first attempt often is: ``torch.sign`` on the
weights in the forward, no straight-through estimator.

Pattern: ``F.linear(x, torch.sign(self.weight))``. The sign's derivative is zero, so the
binarized layers' weights get an all-zero gradient and never move (their biases still
learn). The activations use a hand-written straight-through Function, which is fine.
"""

import torch
from torch import nn
from torch.nn import functional as F


class SignSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.sign(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x.abs() <= 1).to(grad.dtype)


class BinaryLinear(nn.Linear):
    def forward(self, x):
        return F.linear(x, torch.sign(self.weight), self.bias)  # <weight_sign>


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = BinaryLinear(32, 64)
        self.bn = nn.BatchNorm1d(64)
        self.fc2 = nn.Linear(64, 5)

    def forward(self, x):
        return self.fc2(SignSTE.apply(self.bn(self.fc1(x))))


def main():
    torch.manual_seed(3)
    x, y = torch.randn(64, 32), torch.randint(0, 5, (64,))
    net = Net()
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    for _ in range(3):
        optimizer.zero_grad()
        F.cross_entropy(net(x), y).backward()
        optimizer.step()


if __name__ == "__main__":
    main()
