"""Learned step size quantization (LSQ, Esser et al. 2020) from two detach tricks.

Pattern: ``grad_scale(s, g) = (s - s*g).detach() + s*g`` scales the step size's gradient;
``round_pass(x) = (x.round() - x).detach() + x`` rounds with an identity gradient; weights
and activations are fake-quantized as ``round_pass(clamp(x / s, Qn, Qp)) * s``; the step
size is initialised from the first batch through ``.data``.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F


def grad_scale(x, scale):
    y = x
    y_grad = x * scale
    return (y - y_grad).detach() + y_grad  # <grad_scale>


def round_pass(x):
    y = x.round()  # <round>
    y_grad = x
    return (y - y_grad).detach() + y_grad  # <round_pass>


class LsqQuantizer(nn.Module):
    def __init__(self, bits=4, signed=True):
        super().__init__()
        self.qn = -(2 ** (bits - 1)) if signed else 0
        self.qp = 2 ** (bits - 1) - 1 if signed else 2**bits - 1
        self.step = nn.Parameter(torch.tensor(1.0))
        self.initialised = False

    def forward(self, x):
        if not self.initialised:
            first = 2 * x.detach().abs().mean() / math.sqrt(self.qp)
            self.step.data = first.reshape(self.step.shape)  # <init>
            self.initialised = True
        g = 1.0 / math.sqrt(x.numel() * self.qp)
        s = grad_scale(self.step, g)
        return round_pass(torch.clamp(x / s, self.qn, self.qp)) * s


class QuantLinear(nn.Linear):
    def __init__(self, cin, cout, bits=4):
        super().__init__(cin, cout)
        self.quant_w = LsqQuantizer(bits, signed=True)
        self.quant_a = LsqQuantizer(bits, signed=False)

    def forward(self, x):
        return F.linear(self.quant_a(x), self.quant_w(self.weight), self.bias)


def main():
    torch.manual_seed(9)
    x, y = torch.rand(64, 20), torch.randint(0, 4, (64,))
    model = nn.Sequential(QuantLinear(20, 32), nn.ReLU(), QuantLinear(32, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(4):
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
