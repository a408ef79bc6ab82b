r"""The ``models`` benchmark: a training step of small real-style models, hardgrad vs hand-written.

Public code around hard ops is written in a few recurring ways; this task writes eleven small
models each way and times one full training step (``zero_grad``, forward, loss, backward,
optimizer step) of the hand-written original against the same model with hardgrad,
interleaved in one run (:func:`hardgrad.bench._timing.time_interleaved`: each round times
every candidate once, in a shuffled order). The figure is the median over rounds; the
ratio is hardgrad's median over the original's, with the rounds in which hardgrad was the
faster of the pair.

* ``lsq-mlp``: a 64-256-256-10 MLP (the input width is the data's) with 3-bit LSQ weights (one scale per tensor) and 3-bit
  unsigned LSQ activations after each ReLU (Esser et al. 2020,
  https://arxiv.org/abs/1902.08153). The original is the paper's own recipe, as most
  repositories copy it: ``gradscale(s, g) = (s - s g).detach() + s g`` and
  ``roundpass(v) = (v.round() - v).detach() + v`` around ``clamp(v / s, Q_n, Q_p)``;
  hardgrad's is :class:`hardgrad.nn.Quantize` (``in_range="unrounded"``, the paper's
  clamp-then-round, with its :math:`1/\sqrt{N Q_p}` gradient scale).
* ``pact-mlp``: a 64-256-256-10 MLP whose two hidden activations are PACT's (Choi et
  al. 2018, https://arxiv.org/abs/1805.06085): a ReLU clipped at a learned level
  :math:`\alpha` and quantized to 4 bits (:math:`\alpha` starts at 0.1, which about a third of
  the first layer's outputs and 1-3 % of the second's exceed on the batch, so that both
  levels learn; the paper's 10 suits larger activations). The original is
  the custom ``autograd.Function`` public PACT code carries: forward
  ``round(clamp(x, 0, alpha.item()) * n / alpha) / (n / alpha)``, saving ``x`` and
  :math:`\alpha`; backward ``grad`` on :math:`0 \le x \le \alpha` and the sum of ``grad``
  over :math:`x \ge \alpha` for :math:`\alpha`. hardgrad's is :class:`hardgrad.nn.PACT`
  (the same gradients off :math:`x = \alpha` exactly, where the paper gives :math:`\alpha`
  alone the gradient).
* ``binarynet-mlp``: BinaryNet (Hubara et al. 2016, https://arxiv.org/abs/1602.02830):
  ``BinaryLinear -> BatchNorm -> sign`` twice, then ``BinaryLinear -> BatchNorm``, with
  binary weights everywhere, the first layer's input left real, and the latent weights
  clipped to [-1, 1] after each step. The original is the usual custom
  ``autograd.Function`` (forward ``where(x >= 0, 1, -1)``, saves ``x``, backward
  ``grad * (|x| <= 1)``); hardgrad's is :func:`hardgrad.binarize`.
* ``twn-mlp``: a 64-256-256-10 MLP with ternary weights in its two hidden layers
  (TWN, Li, Zhang & Liu 2016, https://arxiv.org/abs/1605.04711: threshold
  :math:`0.7\,\overline{|w|}`, one scale per tensor, straight-through). The original
  builds the {-1, 0, 1} pattern from two comparisons and applies the detach trick, as
  public TWN code does; hardgrad's is :func:`hardgrad.ternarize`.
* ``snn``: a spiking 64-128-10 network over 25 time steps of rate-coded input (Bernoulli
  spikes of the pixel intensities, drawn once), leaky integrate-and-fire neurons
  (:math:`m_t = \beta m_{t-1} + W x_t - \theta s_{t-1}`, reset by subtraction with the
  previous spike detached, :math:`\beta = 0.9`, :math:`\theta = 1`), the loss the
  cross-entropy of the output spike counts (Neftci et al. 2019,
  https://arxiv.org/abs/1901.09948). The original's spike is the SuperSpike custom
  ``autograd.Function`` (Zenke & Ganguli 2018: backward ``grad / (25 |v| + 1)^2``);
  hardgrad's is :func:`hardgrad.heaviside` with ``FastSigmoid(slope=25)``, the same
  derivative.
* ``snn-lif``: the same spiking network and original, with hardgrad's neurons as
  :class:`hardgrad.nn.LIF` modules (``FastSigmoid(slope=25)``), called once per step as
  snnTorch's ``Leaky`` is.
* ``stochastic-mlp``: a 64-256-256-10 MLP with stochastic binary hidden units and the
  sigmoid-adjusted straight-through gradient (Bengio et al. 2013,
  https://arxiv.org/abs/1308.3432). The original draws ``torch.bernoulli(p, generator=g)``
  and writes ``p + (b - p).detach()``; hardgrad's is :func:`hardgrad.bernoulli` with
  ``estimator="st"``.
* ``vq-vae``: an MLP autoencoder whose latent is 16 vectors of size 32, each replaced by
  the nearest of 256 learned codes (VQ-VAE, van den Oord et al. 2017,
  https://arxiv.org/abs/1711.00937), trained on the reconstruction error plus the
  codebook and commitment losses (:math:`\beta = 0.25`). The original is the layer most
  repositories copy: an ``nn.Embedding`` codebook, distances by the expansion
  :math:`\lVert z\rVert^2 + \lVert c\rVert^2 - 2 z\cdot c`, ``argmin``, and
  ``z + (z_q - z).detach()``; hardgrad's is :class:`hardgrad.nn.VectorQuantize` (which
  also keeps usage statistics).
* ``fsq-ae``: an MLP autoencoder whose latent is 16 vectors of 4 channels, each
  channel bounded and rounded to a few levels, (8, 5, 5, 5): 1,000 implicit codes per
  vector (finite scalar quantization, Mentzer et al. 2023,
  https://arxiv.org/abs/2309.15505), trained on the reconstruction error. The original
  is the layer as public FSQ code writes it: ``half_l * tanh(z + shift) - offset``,
  ``round_ste`` by the detach trick, the division by the half width, and the code
  indices from the digits; hardgrad's is :class:`hardgrad.nn.FSQ` (the same constants).
* ``moe``: a residual top-2 mixture of 8 GELU experts (64 -> 128 -> 64) between an input
  and an output layer, each of the batch's rows a token, trained on the cross-entropy plus
  0.01 times the Switch load-balancing loss (Shazeer et al. 2017,
  https://arxiv.org/abs/1701.06538; Fedus et al. 2021, https://arxiv.org/abs/2101.03961).
  The original is the usual hand-written layer: softmax router, ``topk``, renormalised
  gates, a loop over the experts on their tokens with ``index_add_``; hardgrad's is
  :class:`hardgrad.nn.MoE` (the same "sparse" router gradient).
* ``l0-mlp``: a 64-256-10 MLP whose hidden units are pruned by Hard Concrete gates with
  the L0 penalty (Louizos et al. 2018, https://arxiv.org/abs/1712.01312, weight 1e-3).
  The original writes the gate's sample and penalty out in torch ops; hardgrad's is
  :class:`hardgrad.nn.HardConcreteGate`.

Before timing, every pair is checked to compute the same thing: from the same initial
weights and batch, the deterministic models give the same loss and the same parameter
gradients (the VQ-VAE's codebook gradient, the experts' and the gates' parameters included; the
stochastic gates with the global seed set alike before each) (relative error at most 1e-4: ``x / s`` against ``x * (1/s)`` may put an
element that lies on a rounding tie on the other side); for the stochastic MLP, whose two
versions draw different noise, one stochastic layer's gradient given the same upstream
gradient is compared (straight-through through the sigmoid does not depend on the draw).
Batch 64, Adam (learning rate 1e-3), float32, on the bench's device and threads.

Every round starts both models again from the snapshot taken after their two warm-up
steps (weights, buffers and Adam state), so that both time the same stretch of early
training. Without it, a run trains each model for thousands of steps on its one batch, to a
loss near 0 with subnormal numbers in the optimizer state, and the faster model, taking
more steps per round, gets there first: the timed work drifted apart between the two.
"""

from __future__ import annotations

import copy
import functools
import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import nn as hgnn
from .. import ops, surrogates
from ..stochastic import bernoulli as hg_bernoulli
from ._task import BenchSettings, Progress, Table, TaskResult, task
from ._timing import (
    UNRESOLVED,
    median,
    ms,
    ratio_interval,
    ratio_verdict,
    round_ratios,
    time_interleaved,
)
from .data import load_dataset

__all__ = [
    "MODELS",
    "ModelCheckError",
    "ModelPair",
    "ModelsConfig",
    "build_pair",
    "check_pair",
    "default_config",
    "run",
]

#: The models, in table order.
MODELS = (
    "lsq-mlp",
    "pact-mlp",
    "binarynet-mlp",
    "twn-mlp",
    "snn",
    "snn-lif",
    "stochastic-mlp",
    "vq-vae",
    "fsq-ae",
    "moe",
    "l0-mlp",
)


@dataclass(frozen=True)
class ModelsConfig:
    """Settings of the ``models`` benchmark.

    Attributes:
        models: which of :data:`MODELS` to run.
        batch: rows per training step.
        time_steps: the spiking network's simulation length.
        rounds: interleaved timing rounds.
        min_run_time: seconds of calls per candidate and round (``blocked_autorange``).
        budget_s: wall seconds of timing rounds per model (at least 3 rounds; ``None``:
            always ``rounds``), so that a loaded machine does not stretch the task.
    """

    models: tuple[str, ...] = MODELS
    batch: int = 64
    time_steps: int = 25
    rounds: int = 15
    min_run_time: float = 0.2
    budget_s: float | None = None


def default_config(quick: bool) -> ModelsConfig:
    """The full setting, or the ``--quick`` one: fewer and shorter rounds."""
    if quick:
        return ModelsConfig(rounds=7, min_run_time=0.1, budget_s=2.5)
    return ModelsConfig()


class ModelCheckError(AssertionError):
    """The two versions of a model compute different things."""


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


# --------------------------------------------------------------------------- SNN

SLOPE = 25.0
BETA = 0.9
THRESHOLD = 1.0


class _SuperSpike(torch.autograd.Function):
    """The spike as public code writes it: step forward, fast-sigmoid derivative backward."""

    @staticmethod
    def forward(ctx: Any, v: Tensor) -> Tensor:
        ctx.save_for_backward(v)
        return (v > 0).to(v.dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        (v,) = ctx.saved_tensors
        return grad / (SLOPE * v.abs() + 1.0) ** 2


class _SpikingMLP(nn.Module):
    def __init__(self, hardgrad: bool, n_in: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(n_in, 128)
        self.fc2 = nn.Linear(128, 10)
        self.hardgrad = hardgrad
        self.surrogate = surrogates.FastSigmoid(slope=SLOPE)

    def spike(self, v: Tensor) -> Tensor:
        if self.hardgrad:
            return ops.heaviside(v, surrogate=self.surrogate)
        return _SuperSpike.apply(v)

    def forward(self, spikes_in: Tensor) -> Tensor:
        """``spikes_in``: ``(T, batch, n_in)``; returns the output spike counts."""
        batch = spikes_in.shape[1]
        mem1 = spikes_in.new_zeros(batch, 128)
        mem2 = spikes_in.new_zeros(batch, 10)
        spk1, spk2 = torch.zeros_like(mem1), torch.zeros_like(mem2)
        counts = torch.zeros_like(mem2)
        for x_t in spikes_in:
            mem1 = BETA * mem1 + self.fc1(x_t) - THRESHOLD * spk1.detach()
            spk1 = self.spike(mem1 - THRESHOLD)
            mem2 = BETA * mem2 + self.fc2(spk1) - THRESHOLD * spk2.detach()
            spk2 = self.spike(mem2 - THRESHOLD)
            counts = counts + spk2
        return counts


class _LIFSpikingMLP(nn.Module):
    """:class:`_SpikingMLP`'s network with :class:`hardgrad.nn.LIF` neurons: the same
    dynamics (its reset is recomputed from the previous membrane, which is the detached
    previous spike) and the same surrogate."""

    def __init__(self, n_in: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(n_in, 128)
        self.fc2 = nn.Linear(128, 10)
        surrogate = surrogates.FastSigmoid(slope=SLOPE)
        self.lif1 = hgnn.LIF(BETA, THRESHOLD, surrogate=surrogate)
        self.lif2 = hgnn.LIF(BETA, THRESHOLD, surrogate=surrogate)

    def forward(self, spikes_in: Tensor) -> Tensor:
        mem1 = mem2 = None
        counts: Tensor | float = 0.0
        for x_t in spikes_in:
            spk1, mem1 = self.lif1(self.fc1(x_t), mem1)
            spk2, mem2 = self.lif2(self.fc2(spk1), mem2)
            counts = counts + spk2
        assert isinstance(counts, Tensor)
        return counts


# --------------------------------------------------------------------------- stochastic MLP


class _StochasticBinary(nn.Module):
    def __init__(self, hardgrad: bool, generator: torch.Generator) -> None:
        super().__init__()
        self.hardgrad = hardgrad
        self.generator = generator

    def forward(self, logits: Tensor) -> Tensor:
        if self.hardgrad:
            return hg_bernoulli(logits, estimator="st", generator=self.generator)
        p = torch.sigmoid(logits)
        return p + (torch.bernoulli(p, generator=self.generator) - p).detach()


def _stochastic_mlp(hardgrad: bool, generator: torch.Generator, n_in: int) -> nn.Module:
    return nn.Sequential(
        nn.Linear(n_in, 256),
        _StochasticBinary(hardgrad, generator),
        nn.Linear(256, 256),
        _StochasticBinary(hardgrad, generator),
        nn.Linear(256, 10),
    )


# --------------------------------------------------------------------------- VQ-VAE

CODES, CODE_SIZE, LATENTS = 256, 32, 16
COMMITMENT = 0.25


class _VectorQuantizerOriginal(nn.Module):
    """The VQ layer as public VQ-VAE code writes it."""

    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(CODES, CODE_SIZE)
        self.embedding.weight.data.uniform_(-1 / CODES, 1 / CODES)

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        flat = z.reshape(-1, CODE_SIZE)
        codes = self.embedding.weight
        distances = flat.pow(2).sum(1, keepdim=True) + codes.pow(2).sum(1) - 2 * flat @ codes.t()
        z_q = self.embedding(distances.argmin(1)).view(z.shape)
        loss = F.mse_loss(z_q, z.detach()) + COMMITMENT * F.mse_loss(z_q.detach(), z)
        return z + (z_q - z).detach(), loss


class _VQAutoencoder(nn.Module):
    def __init__(self, hardgrad: bool, n_in: int) -> None:
        super().__init__()
        self.encoder = nn.Sequential(
            nn.Linear(n_in, 256), nn.ReLU(), nn.Linear(256, LATENTS * CODE_SIZE)
        )
        self.decoder = nn.Sequential(
            nn.Linear(LATENTS * CODE_SIZE, 256), nn.ReLU(), nn.Linear(256, n_in)
        )
        self.quantizer: nn.Module = (
            hgnn.VectorQuantize(CODES, CODE_SIZE, commitment_weight=COMMITMENT)
            if hardgrad
            else _VectorQuantizerOriginal()
        )

    def codebook(self) -> Tensor:
        q = self.quantizer
        if isinstance(q, hgnn.VectorQuantize):
            return q.codebook
        assert isinstance(q, _VectorQuantizerOriginal)
        return q.embedding.weight

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        z = self.encoder(x).view(x.shape[0], LATENTS, CODE_SIZE)
        if isinstance(self.quantizer, hgnn.VectorQuantize):
            z_q, _, loss = self.quantizer(z)
        else:
            z_q, loss = self.quantizer(z)
        return self.decoder(z_q.reshape(x.shape[0], -1)), loss


def _vq_loss(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    reconstruction, vq_loss = model(inputs)
    return F.mse_loss(reconstruction, inputs) + vq_loss


def _cross_entropy(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(model(inputs), targets)


# --------------------------------------------------------------------------- FSQ autoencoder

FSQ_LEVELS, FSQ_LATENTS = (8, 5, 5, 5), 16


class _FSQOriginal(nn.Module):
    """FSQ as public code writes it: per-channel constants as buffers, a tanh bound shifted
    so that even level counts are symmetric, a straight-through round by the detach trick."""

    half_l: Tensor
    offset: Tensor
    shift: Tensor
    half_width: Tensor
    basis: Tensor

    def __init__(self, levels: tuple[int, ...]) -> None:
        super().__init__()
        count = torch.tensor(levels, dtype=torch.float64)
        half_l = (count - 1) * (1 + 1e-3) / 2
        offset = torch.where(count % 2 == 0, 0.5, 0.0).double()
        self.register_buffer("half_l", half_l.float())
        self.register_buffer("offset", offset.float())
        self.register_buffer("shift", torch.atanh(offset / half_l).float())
        self.register_buffer("half_width", (count // 2).float())
        basis = [1]
        for level in levels[:-1]:
            basis.append(basis[-1] * level)
        self.register_buffer("basis", torch.tensor(basis))

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        bounded = self.half_l * torch.tanh(z + self.shift) - self.offset
        quantized = _round_pass(bounded)
        codes = quantized / self.half_width
        with torch.no_grad():
            indices = ((quantized + self.half_width).long() * self.basis).sum(-1)
        return codes, indices


class _FSQAutoencoder(nn.Module):
    def __init__(self, hardgrad: bool, n_in: int) -> None:
        super().__init__()
        channels = len(FSQ_LEVELS)
        self.encoder = nn.Sequential(
            nn.Linear(n_in, 256), nn.ReLU(), nn.Linear(256, FSQ_LATENTS * channels)
        )
        self.decoder = nn.Sequential(
            nn.Linear(FSQ_LATENTS * channels, 256), nn.ReLU(), nn.Linear(256, n_in)
        )
        self.quantizer = hgnn.FSQ(FSQ_LEVELS) if hardgrad else _FSQOriginal(FSQ_LEVELS)

    def forward(self, x: Tensor) -> Tensor:
        z = self.encoder(x).view(x.shape[0], FSQ_LATENTS, len(FSQ_LEVELS))
        codes, _ = self.quantizer(z)
        return self.decoder(codes.reshape(x.shape[0], -1))


def _reconstruction_loss(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    return F.mse_loss(model(inputs), inputs)


# --------------------------------------------------------------------------- MoE

EXPERTS, TOP_K, EXPERT_HIDDEN, BALANCE_WEIGHT = 8, 2, 128, 0.01
EXPERT_PARAMETERS = ("w1", "b1", "w2", "b2")


class _MoEOriginal(nn.Module):
    """The top-k MoE layer as hand-written code writes it (parameters named and laid out
    as :class:`hardgrad.nn.MoE`'s, so that both start alike)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.router = nn.Linear(width, EXPERTS, bias=False)
        self.w1 = nn.Parameter(torch.empty(EXPERTS, width, EXPERT_HIDDEN))
        self.b1 = nn.Parameter(torch.empty(EXPERTS, EXPERT_HIDDEN))
        self.w2 = nn.Parameter(torch.empty(EXPERTS, EXPERT_HIDDEN, width))
        self.b2 = nn.Parameter(torch.empty(EXPERTS, width))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        probs = F.softmax(self.router(x), -1)
        gates, chosen = probs.topk(TOP_K, -1)
        gates = gates / gates.sum(-1, keepdim=True)
        out = torch.zeros_like(x)
        for e in range(EXPERTS):
            token, slot = (chosen == e).nonzero(as_tuple=True)
            if token.numel() == 0:
                continue
            hidden = F.gelu(x[token] @ self.w1[e] + self.b1[e])
            expert = hidden @ self.w2[e] + self.b2[e]
            out.index_add_(0, token, expert * gates[token, slot].unsqueeze(-1))
        load = F.one_hot(chosen, EXPERTS).sum((0, 1)) / chosen.numel()
        balance = EXPERTS * (load * probs.mean(0)).sum()
        return out, balance


class _MoENet(nn.Module):
    def __init__(self, hardgrad: bool, n_in: int) -> None:
        super().__init__()
        self.inputs = nn.Linear(n_in, 64)
        self.moe: nn.Module = (
            hgnn.MoE(64, num_experts=EXPERTS, k=TOP_K, hidden_features=EXPERT_HIDDEN)
            if hardgrad
            else _MoEOriginal(64)
        )
        self.outputs = nn.Linear(64, 10)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = self.inputs(x)
        if isinstance(self.moe, hgnn.MoE):
            mixed, _, balance = self.moe(h)
        else:
            mixed, balance = self.moe(h)
        return self.outputs(h + mixed), balance


def _moe_loss(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    logits, balance = model(inputs)
    return F.cross_entropy(logits, targets) + BALANCE_WEIGHT * balance


# --------------------------------------------------------------------------- L0 gates

L0_WEIGHT, GATE_BETA, GATE_GAMMA, GATE_ZETA = 1e-3, 2 / 3, -0.1, 1.1


class _HardConcreteOriginal(nn.Module):
    """Hard Concrete gates on the hidden units, written out (Louizos et al. 2018)."""

    def __init__(self, features: int) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.full((features,), math.log(0.9 / 0.1)))

    def forward(self, h: Tensor) -> Tensor:
        tiny = torch.finfo(h.dtype).tiny
        u = torch.rand_like(self.log_alpha).clamp(tiny, 1 - torch.finfo(h.dtype).eps)
        s = torch.sigmoid((u.log() - (1 - u).log() + self.log_alpha) / GATE_BETA)
        z = (s * (GATE_ZETA - GATE_GAMMA) + GATE_GAMMA).clamp(0, 1)
        return h * z

    def l0(self) -> Tensor:
        shift = GATE_BETA * math.log(-GATE_GAMMA / GATE_ZETA)
        return torch.sigmoid(self.log_alpha - shift).sum()


class _L0MLP(nn.Module):
    def __init__(self, hardgrad: bool, n_in: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(n_in, 256)
        self.gate: hgnn.HardConcreteGate | _HardConcreteOriginal = (
            hgnn.HardConcreteGate(256, beta=GATE_BETA, gamma=GATE_GAMMA, zeta=GATE_ZETA)
            if hardgrad
            else _HardConcreteOriginal(256)
        )
        self.outputs = nn.Linear(256, 10)

    def forward(self, x: Tensor) -> Tensor:
        return self.outputs(self.gate(F.relu(self.hidden(x))))


def _l0_loss(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    assert isinstance(model, _L0MLP)
    return F.cross_entropy(model(inputs), targets) + L0_WEIGHT * model.gate.l0()


# --------------------------------------------------------------------------- pairs


@dataclass
class ModelPair:
    """One model written twice, with its optimizers and the batch it trains on."""

    name: str
    original: nn.Module
    hardgrad: nn.Module
    inputs: Tensor
    targets: Tensor
    after_step: Callable[[nn.Module], None] | None = None
    #: The training loss of a model on the batch.
    loss: Callable[[nn.Module, Tensor, Tensor], Tensor] = _cross_entropy

    def step_fn(self, which: str) -> Callable[[], None]:
        """One training step of ``which`` (``"original"`` or ``"hardgrad"``)."""
        return Training(self, which).step


def _restart_all(trainings: list[Training], _round: int) -> None:
    for training in trainings:
        training.restart()


class Training:
    """One model of a pair with its Adam optimizer: a training step, and a snapshot of the
    weights, buffers and optimizer state to start again from (:meth:`keep`,
    :meth:`restart`)."""

    def __init__(self, pair: ModelPair, which: str) -> None:
        self.model = pair.original if which == "original" else pair.hardgrad
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=1e-3)
        self._pair = pair
        self._kept: tuple[dict[str, Any], dict[str, Any]] | None = None

    def step(self) -> None:
        pair, model, optimizer = self._pair, self.model, self.optimizer
        optimizer.zero_grad(set_to_none=True)
        pair.loss(model, pair.inputs, pair.targets).backward()
        optimizer.step()
        if pair.after_step is not None:
            pair.after_step(model)

    def keep(self) -> None:
        """Take the snapshot that :meth:`restart` goes back to."""
        self._kept = (
            copy.deepcopy(self.model.state_dict()),
            copy.deepcopy(self.optimizer.state_dict()),
        )

    def restart(self) -> None:
        """Weights, buffers and optimizer state as :meth:`keep` saw them (in place: the
        optimizer keeps its parameters)."""
        if self._kept is None:
            raise RuntimeError("Training.restart() before keep()")
        self.model.load_state_dict(self._kept[0])
        self.optimizer.load_state_dict(self._kept[1])


def _batch(settings: BenchSettings, config: ModelsConfig) -> tuple[Tensor, Tensor]:
    data = load_dataset(settings.data, seed=settings.seed)
    x, y = data.x_train[: config.batch], data.y_train[: config.batch]
    return x.to(settings.device), y.to(settings.device)


def build_pair(name: str, settings: BenchSettings, config: ModelsConfig) -> ModelPair:
    """Both versions of model ``name`` with the same initial weights, on the device."""
    x, y = _batch(settings, config)
    n_in = x.shape[1]
    torch.manual_seed(settings.seed)
    after: Callable[[nn.Module], None] | None = None
    if name == "lsq-mlp":
        original, hardgrad = _lsq_mlp(False, n_in), _lsq_mlp(True, n_in)
    elif name == "pact-mlp":
        original, hardgrad = _pact_mlp(False, n_in), _pact_mlp(True, n_in)
    elif name == "binarynet-mlp":
        original, hardgrad = _binarynet_mlp(False, n_in), _binarynet_mlp(True, n_in)
        after = _clip_latent_weights
    elif name == "twn-mlp":
        original, hardgrad = _twn_mlp(False, n_in), _twn_mlp(True, n_in)
    elif name in ("snn", "snn-lif"):
        original = _SpikingMLP(False, n_in)
        hardgrad = _SpikingMLP(True, n_in) if name == "snn" else _LIFSpikingMLP(n_in)
        rates = (x / x.max()).clamp(0, 1).cpu()
        noise = torch.Generator().manual_seed(settings.seed)
        x = torch.bernoulli(rates.expand(config.time_steps, *rates.shape), generator=noise)
        x = x.to(settings.device)
    elif name == "stochastic-mlp":
        device = torch.device(settings.device)
        original = _stochastic_mlp(False, torch.Generator(device).manual_seed(settings.seed), n_in)
        hardgrad = _stochastic_mlp(True, torch.Generator(device).manual_seed(settings.seed), n_in)
    elif name == "vq-vae":
        original, hardgrad = _VQAutoencoder(False, n_in), _VQAutoencoder(True, n_in)
        with torch.no_grad():
            hardgrad.codebook().copy_(original.codebook())
    elif name == "fsq-ae":
        original, hardgrad = _FSQAutoencoder(False, n_in), _FSQAutoencoder(True, n_in)
    elif name == "moe":
        original, hardgrad = _MoENet(False, n_in), _MoENet(True, n_in)
        with torch.no_grad():
            for attribute in EXPERT_PARAMETERS:
                getattr(original.moe, attribute).copy_(getattr(hardgrad.moe, attribute))
    elif name == "l0-mlp":
        original, hardgrad = _L0MLP(False, n_in), _L0MLP(True, n_in)
    else:
        raise ValueError(f"Unknown model {name!r}; available: {', '.join(MODELS)}")
    _copy_weights(original, hardgrad)
    original.to(settings.device)
    hardgrad.to(settings.device)
    if name == "lsq-mlp":
        _init_lsq_scales(original, x)
        _init_lsq_scales(hardgrad, x)
    losses = {
        "vq-vae": _vq_loss,
        "fsq-ae": _reconstruction_loss,
        "moe": _moe_loss,
        "l0-mlp": _l0_loss,
    }
    loss = losses.get(name, _cross_entropy)
    return ModelPair(name, original, hardgrad, x, y, after, loss)


def _copy_weights(source: nn.Module, target: nn.Module) -> None:
    """The weights of every ``nn.Linear`` of ``source`` into ``target``'s, in order."""
    linears = [m for m in source.modules() if isinstance(m, nn.Linear)]
    others = [m for m in target.modules() if isinstance(m, nn.Linear)]
    with torch.no_grad():
        for a, b in zip(linears, others, strict=True):
            b.weight.copy_(a.weight)
            if a.bias is not None and b.bias is not None:
                b.bias.copy_(a.bias)


# --------------------------------------------------------------------------- checks


def _relative_error(a: Tensor, b: Tensor) -> float:
    scale = max(float(b.norm()), 1e-12)
    return float((a - b).norm()) / scale


def _checked_parameters(model: nn.Module) -> list[Tensor]:
    """The parameters whose gradients must agree: every linear layer's weight and the
    hard layers' own (codebook, experts, gates)."""
    weights = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
    if isinstance(model, _VQAutoencoder):
        weights.append(model.codebook())
    if isinstance(model, _MoENet):
        weights += [getattr(model.moe, attribute) for attribute in EXPERT_PARAMETERS]
    if isinstance(model, _L0MLP):
        weights.append(model.gate.log_alpha)
    weights += [m.alpha for m in model.modules() if isinstance(m, (_PACTOriginal, hgnn.PACT))]
    return weights


def check_pair(pair: ModelPair, tolerance: float = 1e-4) -> dict[str, float]:
    """``ModelCheckError`` unless both versions compute the same loss and gradients.

    Returns the largest relative errors seen (loss, parameter gradients)."""
    if pair.name == "stochastic-mlp":
        return _check_stochastic_layer(pair)
    losses, grads = [], []
    for model in (pair.original, pair.hardgrad):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(0)  # the L0 gates' noise: both versions draw it alike
        loss = pair.loss(model, pair.inputs, pair.targets)
        loss.backward()
        losses.append(loss.detach())
        grads.append([w.grad for w in _checked_parameters(model)])
        model.zero_grad(set_to_none=True)
    loss_error = _relative_error(losses[1], losses[0])
    grad_error = max(_relative_error(b, a) for a, b in zip(*grads, strict=True))
    if not (loss_error <= tolerance and grad_error <= tolerance):
        raise ModelCheckError(
            f"models/{pair.name}: hardgrad's version differs from the original: relative "
            f"loss error {loss_error:.3g}, largest relative weight-gradient error "
            f"{grad_error:.3g} (tolerance {tolerance:g})"
        )
    return {"loss": loss_error, "gradient": grad_error}


def _check_stochastic_layer(pair: ModelPair) -> dict[str, float]:
    """The straight-through gradient of one stochastic layer does not depend on the draw:
    both versions must give the same gradient for the same logits and upstream gradient."""
    layers = [
        next(m for m in model.modules() if isinstance(m, _StochasticBinary))
        for model in (pair.original, pair.hardgrad)
    ]
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(pair.inputs.shape[0], 256, generator=generator).to(pair.inputs.device)
    upstream = torch.randn(logits.shape, generator=generator).to(logits.device)
    grads = []
    for layer in layers:
        leaf = logits.clone().requires_grad_()
        sample = layer(leaf)
        if not bool(((sample == 0) | (sample == 1)).all()):
            raise ModelCheckError(f"models/{pair.name}: a sample is not in {{0, 1}}")
        (grad,) = torch.autograd.grad(sample, leaf, upstream)
        grads.append(grad)
    error = _relative_error(grads[1], grads[0])
    if not error <= 1e-6:
        raise ModelCheckError(
            f"models/{pair.name}: the straight-through gradients differ (relative error "
            f"{error:.3g})"
        )
    return {"loss": float("nan"), "gradient": error}


# --------------------------------------------------------------------------- running


@task(
    "models",
    "one training step of small models written the way public code writes them (LSQ MLP, "
    "PACT MLP, BinaryNet MLP, TWN MLP, spiking MLP over 25 steps (spike op, LIF module), "
    "stochastic-neuron MLP, VQ-VAE, FSQ autoencoder, top-2 MoE, L0-gated MLP): "
    "hand-written vs hardgrad, interleaved; ms per step and ratios",
    default_config,
)
def run(settings: BenchSettings, config: ModelsConfig, progress: Progress) -> TaskResult:
    unknown = [m for m in config.models if m not in MODELS]
    if unknown:
        raise ValueError(f"Unknown model(s) {unknown} for `models`; available: {', '.join(MODELS)}")
    progress.start("models", len(config.models))
    rng = random.Random(settings.seed)
    results: dict[str, Any] = {}
    for name in config.models:
        pair = build_pair(name, settings, config)
        errors = check_pair(pair)
        trainings = {which: Training(pair, which) for which in ("original", "hardgrad")}
        for training in trainings.values():  # warm-up: allocator, Adam state, lazy init
            training.step()
            training.step()
            training.keep()

        times = time_interleaved(
            {which: training.step for which, training in trainings.items()},
            rounds=config.rounds,
            min_run_time=config.min_run_time,
            threads=settings.threads,
            rng=rng,
            after_round=functools.partial(_restart_all, list(trainings.values())),
            budget_s=config.budget_s,
        )
        paired = round_ratios(times, "hardgrad", "original")
        results[name] = {
            "original_ms": ms(median(times["original"])),
            "hardgrad_ms": ms(median(times["hardgrad"])),
            "ratio": median(times["hardgrad"]) / median(times["original"]),
            "round_ratios": paired,
            "rounds_faster": sum(r < 1.0 for r in paired),
            "ratio_ci": list(ratio_interval(paired)),
            "verdict": ratio_verdict(paired),
            "original_rounds_ms": [ms(t) for t in times["original"]],
            "hardgrad_rounds_ms": [ms(t) for t in times["hardgrad"]],
            "check": errors,
        }
        progress.advance(f"{name} done")
    progress.finish()
    table = Table(
        "One training step: hand-written original vs hardgrad (median over interleaved rounds)",
        ["model", "original ms", "hardgrad ms", "ratio", "hardgrad faster", "check"],
    )
    for name, entry in results.items():
        check = entry["check"]
        checked = (
            f"grad rel. err {check['gradient']:.1e}"
            if math.isnan(check["loss"])
            else f"loss {check['loss']:.1e}, grads {check['gradient']:.1e}"
        )
        table.rows.append(
            [
                name,
                f"{entry['original_ms']:.3f}",
                f"{entry['hardgrad_ms']:.3f}",
                f"{entry['ratio']:.2f}"
                + (" unresolved (noise)" if entry["verdict"] == UNRESOLVED else ""),
                f"{entry['rounds_faster']}/{len(entry['round_ratios'])}",
                checked,
            ]
        )
    table.notes.append(
        f"batch {config.batch}, Adam, float32, {settings.threads} thread(s), device "
        f"{settings.device}; up to {config.rounds} rounds of at least "
        f"{config.min_run_time:g} s per candidate"
        + (f" (fewer once a model's rounds pass {config.budget_s:g} s)" if config.budget_s else "")
        + "; ratio = hardgrad / original (below 1: hardgrad faster); unresolved (noise): the "
        "confidence interval of the median per-round ratio contains 1."
    )
    return TaskResult(
        name="models",
        summary="training-step time of hand-written models against the same with hardgrad",
        settings={
            "models": list(config.models),
            "batch": config.batch,
            "time_steps": config.time_steps,
            "rounds": config.rounds,
            "min_run_time": config.min_run_time,
            "budget_s": config.budget_s,
        },
        data={"models": results},
        tables=[table],
    )
