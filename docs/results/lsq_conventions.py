"""How much the two "in range" conventions of LSQ differ on a trained layer.

An MLP on scikit-learn's 8x8 digits (64-128-10) with LSQ fake quantization of its
hidden activations (unsigned 3 bits, one learned scale, ``hg.nn.Quantize``) and weights
(signed 3 bits per output channel) is trained for a few hundred Adam steps with the
default ``in_range="rounded"`` (PyTorch's convention). Then, at the trained parameters and
on the same batches, the activation quantizer's scale gradient and the gradient reaching
the hidden pre-activations are computed under both conventions, ``"rounded"`` and
``"unrounded"`` (the LSQ paper's: decided on x/s before rounding).

Run: ``python docs/results/lsq_conventions.py`` (about 20 s on 2 CPU cores); it prints a
Markdown table, committed as ``lsq_conventions.md``.
"""

from __future__ import annotations

import torch
from torch import nn

import hardgrad as hg
from hardgrad.bench.data import load_digits

BITS = 3
STEPS = 400


class QuantMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(64, 128)
        self.out = nn.Linear(128, 10)
        self.weight_q = hg.nn.Quantize(bits=BITS, per_channel_dim=0)
        self.act_q = hg.nn.Quantize(bits=BITS, signed=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(nn.functional.linear(x, self.weight_q(self.hidden.weight), self.hidden.bias))
        return self.out(self.act_q(h))


def scale_and_input_gradients(model: QuantMLP, x: torch.Tensor, y: torch.Tensor, in_range: str):
    model.act_q.in_range = in_range
    model.zero_grad()
    h = torch.relu(
        nn.functional.linear(x, model.weight_q(model.hidden.weight), model.hidden.bias)
    ).detach()
    h.requires_grad_()
    loss = nn.functional.cross_entropy(model.out(model.act_q(h)), y)
    loss.backward()
    assert model.act_q.scale.grad is not None and h.grad is not None
    return model.act_q.scale.grad.clone(), h.grad.clone()


def main() -> None:
    torch.manual_seed(0)
    data = load_digits(seed=0)
    model = QuantMLP()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(STEPS):
        idx = torch.randint(0, data.x_train.shape[0], (64,), generator=gen)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(data.x_train[idx]), data.y_train[idx])
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        accuracy = (model(data.x_test).argmax(-1) == data.y_test).float().mean().item()
    scale = model.act_q.step_size(torch.float32).item()

    print(f"Trained {STEPS} Adam steps, test accuracy {accuracy:.3f}, activation step {scale:.4f}")
    print()
    print(
        "| batch | scale grad, rounded | scale grad, unrounded | ratio | "
        "elements in the bands | input-grad entries that differ |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    rows = [(str(b), torch.arange(b * 64, (b + 1) * 64)) for b in range(5)]
    rows.append(("all train", torch.arange(data.x_train.shape[0])))
    for batch, idx in rows:
        x, y = data.x_train[idx], data.y_train[idx]
        s_round, g_round = scale_and_input_gradients(model, x, y, "rounded")
        s_unround, g_unround = scale_and_input_gradients(model, x, y, "unrounded")
        with torch.no_grad():
            h = torch.relu(
                nn.functional.linear(x, model.weight_q(model.hidden.weight), model.hidden.bias)
            )
            v = h / scale
            qmax = model.act_q.quant_max
            in_band = ((v > qmax) & (v < qmax + 0.5)).sum().item()
        differ = (g_round != g_unround).sum().item()
        ratio = (s_unround / s_round).item()
        print(
            f"| {batch} | {s_round.item():.4g} | {s_unround.item():.4g} | {ratio:.3g} | "
            f"{in_band} of {h.numel()} | {differ} |"
        )


if __name__ == "__main__":
    main()
