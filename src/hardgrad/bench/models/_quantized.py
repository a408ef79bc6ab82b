"""The quantized MLPs of the ``models`` benchmark: LSQ (Esser et al. 2020), PACT (Choi et al.
2018), BinaryNet (Courbariaux et al. 2016) and TWN (Li et al. 2016), each written out and with
hardgrad."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ... import nn as hgnn
from ... import ops

# --------------------------------------------------------------------------- LSQ MLP

BITS = 3


def _grad_scale(s: Tensor, g: float) -> Tensor:
    return (s - s * g).detach() + s * g


def _round_pass(v: Tensor) -> Tensor:
    return (v.round() - v).detach() + v


def _lsq(v: Tensor, s: Tensor, qn: int, qp: int) -> Tensor:
    """LSQ as the paper's pseudo-code writes it."""
    s = _grad_scale(s, 1.0 / math.sqrt(v.numel() * qp))
    return _round_pass((v / s).clamp(qn, qp)) * s


class _LSQLinearOriginal(nn.Linear):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__(n_in, n_out)
        self.weight_scale = nn.Parameter(torch.tensor(0.0))

    def forward(self, x: Tensor) -> Tensor:
        qp = 2 ** (BITS - 1) - 1
        w = _lsq(self.weight, self.weight_scale, -(2 ** (BITS - 1)), qp)
        return F.linear(x, w, self.bias)


class _LSQActivationOriginal(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(0.0))

    def forward(self, x: Tensor) -> Tensor:
        return _lsq(x, self.scale, 0, 2**BITS - 1)


class _LSQLinearHardgrad(nn.Linear):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__(n_in, n_out)
        self.quantize = hgnn.Quantize(BITS, signed=True, in_range="unrounded", init_scale=1.0)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.quantize(self.weight), self.bias)


def _lsq_mlp(hardgrad: bool, n_in: int) -> nn.Module:
    linear = _LSQLinearHardgrad if hardgrad else _LSQLinearOriginal

    def act() -> nn.Module:
        if hardgrad:
            return hgnn.Quantize(BITS, signed=False, in_range="unrounded", init_scale=1.0)
        return _LSQActivationOriginal()

    return nn.Sequential(
        linear(n_in, 256), nn.ReLU(), act(), linear(256, 256), nn.ReLU(), act(), linear(256, 10)
    )


def _init_lsq_scales(model: nn.Module, x: Tensor) -> None:
    """LSQ's initial scales :math:`2\\overline{|v|}/\\sqrt{Q_p}`, from the weights and a batch,
    written into either version's parameters (the same values for both)."""
    with torch.no_grad():
        h = x
        for layer in model.children():
            if isinstance(layer, nn.Linear):
                value = 2 * layer.weight.abs().mean() / math.sqrt(2 ** (BITS - 1) - 1)
                if isinstance(layer, _LSQLinearHardgrad):
                    layer.quantize.scale.copy_(value)
                elif isinstance(layer, _LSQLinearOriginal):
                    layer.weight_scale.copy_(value)
                h = F.linear(h, layer.weight, layer.bias)
            elif isinstance(layer, nn.ReLU):
                h = layer(h)
            elif isinstance(layer, (hgnn.Quantize, _LSQActivationOriginal)):
                layer.scale.copy_(2 * h.abs().mean() / math.sqrt(2**BITS - 1))


# --------------------------------------------------------------------------- PACT MLP

PACT_BITS = 4
PACT_ALPHA = 0.1


class _PACTFunction(torch.autograd.Function):
    """PACT as public code writes it: clamp at ``alpha.item()``, round with ``n / alpha``,
    divide back; backward from the saved input and level."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, alpha: Tensor, levels: int) -> Tensor:
        ctx.save_for_backward(x, alpha)
        scale = levels / alpha
        return torch.round(torch.clamp(x, 0.0, alpha.item()) * scale) / scale

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor, None]:
        x, alpha = ctx.saved_tensors
        inside = ~((x < 0) | (x > alpha))
        grad_alpha = torch.sum(grad * (x >= alpha).float()).view(alpha.shape)
        return grad * inside.float(), grad_alpha, None


class _PACTOriginal(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(PACT_ALPHA))

    def forward(self, x: Tensor) -> Tensor:
        return _PACTFunction.apply(x, self.alpha, 2**PACT_BITS - 1)


def _pact_mlp(hardgrad: bool, n_in: int) -> nn.Module:
    def act() -> nn.Module:
        return hgnn.PACT(PACT_BITS, PACT_ALPHA) if hardgrad else _PACTOriginal()

    return nn.Sequential(
        nn.Linear(n_in, 256), act(), nn.Linear(256, 256), act(), nn.Linear(256, 10)
    )


# --------------------------------------------------------------------------- BinaryNet


class _SignSTE(torch.autograd.Function):
    """BinaryNet's sign as public code writes it: +-1 forward, clipped identity backward."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        return torch.where(x >= 0, 1.0, -1.0).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return grad * (x.abs() <= 1).to(grad.dtype)


class _BinaryLinear(nn.Linear):
    def __init__(self, n_in: int, n_out: int, hardgrad: bool) -> None:
        super().__init__(n_in, n_out)
        self.hardgrad = hardgrad

    def forward(self, x: Tensor) -> Tensor:
        w = ops.binarize(self.weight) if self.hardgrad else _SignSTE.apply(self.weight)
        return F.linear(x, w, self.bias)


class _Sign(nn.Module):
    def __init__(self, hardgrad: bool) -> None:
        super().__init__()
        self.hardgrad = hardgrad

    def forward(self, x: Tensor) -> Tensor:
        return ops.binarize(x) if self.hardgrad else _SignSTE.apply(x)


def _binarynet_mlp(hardgrad: bool, n_in: int) -> nn.Module:
    return nn.Sequential(
        _BinaryLinear(n_in, 256, hardgrad),
        nn.BatchNorm1d(256),
        _Sign(hardgrad),
        _BinaryLinear(256, 256, hardgrad),
        nn.BatchNorm1d(256),
        _Sign(hardgrad),
        _BinaryLinear(256, 10, hardgrad),
        nn.BatchNorm1d(10),
    )


# --------------------------------------------------------------------------- TWN


def _ternary_original(w: Tensor) -> Tensor:
    """TWN's ternary weights as public code writes them: a {-1, 0, 1} pattern from the
    threshold 0.7 mean|w|, the mean kept magnitude as the scale, and the detach trick."""
    delta = 0.7 * w.abs().mean()
    pattern = (w > delta).float() - (w < -delta).float()
    alpha = (w.abs() * pattern.abs()).sum() / pattern.abs().sum().clamp_min(1)
    return w + (alpha * pattern - w).detach()


class _TernaryLinear(nn.Linear):
    def __init__(self, n_in: int, n_out: int, hardgrad: bool) -> None:
        super().__init__(n_in, n_out)
        self.hardgrad = hardgrad

    def forward(self, x: Tensor) -> Tensor:
        w = ops.ternarize(self.weight) if self.hardgrad else _ternary_original(self.weight)
        return F.linear(x, w, self.bias)


def _twn_mlp(hardgrad: bool, n_in: int) -> nn.Module:
    return nn.Sequential(
        _TernaryLinear(n_in, 256, hardgrad),
        nn.ReLU(),
        _TernaryLinear(256, 256, hardgrad),
        nn.ReLU(),
        nn.Linear(256, 10),
    )


def _clip_latent_weights(model: nn.Module) -> None:
    with torch.no_grad():
        for layer in model.modules():
            if isinstance(layer, _BinaryLinear):
                layer.weight.clamp_(-1, 1)
