"""XNOR-Net (Rastegari et al. 2016) with the binarization helper its popular PyTorch port
uses.

Pattern: before each forward a helper saves the real-valued conv weights and overwrites
``weight.data`` with ``alpha * sign(W)``, ``alpha = mean |W|`` per output channel; the
activations go through a sign Function with a clipped straight-through backward. After the
backward the helper restores the real weights and rewrites ``weight.grad`` with the
gradient of ``alpha * sign(W)`` (the clipped estimator plus alpha's own term) before the
optimizer steps. Everything trains.
"""

import torch
from torch import nn
from torch.nn import functional as F


class BinActive(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.sign()

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad_input[x.ge(1)] = 0
        grad_input[x.le(-1)] = 0
        return grad_input


class BinConv(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.bn = nn.BatchNorm2d(cin)
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)

    def forward(self, x):
        return F.relu(self.conv(BinActive.apply(self.bn(x))))


class WeightBinarizer:
    """Binarizes the weights of the given convolutions in place, and undoes it."""

    def __init__(self, convs):
        self.weights = [conv.weight for conv in convs]
        self.saved = [w.data.clone() for w in self.weights]

    def binarize(self):
        for w, saved in zip(self.weights, self.saved, strict=True):
            saved.copy_(w.data)
            alpha = w.data.abs().mean(dim=(1, 2, 3), keepdim=True)
            w.data = w.data.sign() * alpha  # <weight_swap>

    def restore_and_fix_gradients(self):
        for w, saved in zip(self.weights, self.saved, strict=True):
            w.data.copy_(saved)  # <restore>
            n = w.data[0].numel()
            alpha = w.data.abs().mean(dim=(1, 2, 3), keepdim=True)
            inside = (w.data.abs() <= 1).to(w.dtype)
            w.grad.data = w.grad.data * (1.0 / n + alpha * inside)  # <fix_grad>


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 8, 3, padding=1)
        self.block1, self.block2 = BinConv(8, 16), BinConv(16, 16)
        self.head = nn.Linear(16, 10)

    def forward(self, x):
        h = self.block2(self.block1(F.relu(self.stem(x))))
        return self.head(h.mean(dim=(2, 3)))


def main():
    torch.manual_seed(4)
    x, y = torch.randn(16, 1, 8, 8), torch.randint(0, 10, (16,))
    net = Net()
    binarizer = WeightBinarizer([net.block1.conv, net.block2.conv])
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    for _ in range(3):
        binarizer.binarize()
        loss = F.cross_entropy(net(x), y)
        optimizer.zero_grad()
        loss.backward()
        binarizer.restore_and_fix_gradients()
        optimizer.step()


if __name__ == "__main__":
    main()
