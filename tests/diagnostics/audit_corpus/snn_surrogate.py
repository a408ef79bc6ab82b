"""A spiking network trained through a hand-written surrogate spike (snnTorch style).

Pattern: an ``autograd.Function`` whose forward is the step ``(x > 0).float()`` and whose
backward is the fast-sigmoid surrogate ``grad / (1 + k|x|)^2``; leaky integrate-and-fire
layers with a subtractive reset that is detached on purpose; a rate-coded loss on the
output spike counts; accuracy measured under ``torch.no_grad()``.
"""

import torch
from torch import nn
from torch.nn import functional as F


class FastSigmoidSpike(torch.autograd.Function):
    @staticmethod
    def forward(ctx, membrane, slope=25.0):
        ctx.save_for_backward(membrane)
        ctx.slope = slope
        return (membrane > 0).float()  # <spike_forward>

    @staticmethod
    def backward(ctx, grad_spikes):
        (membrane,) = ctx.saved_tensors
        surrogate = 1.0 / (1.0 + ctx.slope * membrane.abs()) ** 2  # <spike_backward>
        return grad_spikes * surrogate, None


spike = FastSigmoidSpike.apply


class Leaky(nn.Module):
    def __init__(self, beta=0.9, threshold=1.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, current, membrane):
        membrane = self.beta * membrane + current
        spikes = spike(membrane - self.threshold)
        reset = spikes.detach() * self.threshold  # <reset>
        return spikes, membrane - reset


class SpikingMLP(nn.Module):
    def __init__(self, inputs=20, hidden=32, classes=4, steps=12):
        super().__init__()
        self.steps = steps
        self.fc1, self.lif1 = nn.Linear(inputs, hidden), Leaky()
        self.fc2, self.lif2 = nn.Linear(hidden, classes), Leaky()

    def forward(self, x):
        mem1 = torch.zeros(x.shape[0], self.fc1.out_features)
        mem2 = torch.zeros(x.shape[0], self.fc2.out_features)
        counts = []
        for _ in range(self.steps):
            spk1, mem1 = self.lif1(self.fc1(x), mem1)
            spk2, mem2 = self.lif2(self.fc2(spk1), mem2)
            counts.append(spk2)
        return torch.stack(counts).sum(0)


def main():
    torch.manual_seed(0)
    x = torch.rand(64, 20) * 2
    y = (x[:, :4].sum(1) * 2).long() % 4
    model = SpikingMLP()
    optimizer = torch.optim.Adam(model.parameters(), lr=5e-3)
    for _ in range(5):
        counts = model(x)
        loss = F.cross_entropy(counts, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"loss {loss.item():.3f}")  # <item>
    with torch.no_grad():
        counts = model(x)  # <eval>
        accuracy = (counts.argmax(1) == y).float().mean().item()  # <accuracy>
    print(f"accuracy {accuracy:.2f}")


if __name__ == "__main__":
    main()
