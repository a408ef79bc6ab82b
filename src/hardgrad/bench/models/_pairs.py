"""The parity harness of the ``models`` benchmark: both versions of a model built alike
(:func:`build_pair`), one training step of each (:class:`Training`), and the check that
they compute the same loss and gradients (:func:`check_pair`)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ... import nn as hgnn
from .._task import BenchSettings
from ..data import load_dataset
from ._autoencoders import _FSQAutoencoder, _reconstruction_loss, _vq_loss, _VQAutoencoder
from ._config import MODELS, ModelCheckError, ModelsConfig
from ._l0 import _L0MLP, _l0_loss
from ._moe import EXPERT_PARAMETERS, _moe_loss, _MoENet
from ._quantized import (
    _binarynet_mlp,
    _clip_latent_weights,
    _init_lsq_scales,
    _lsq_mlp,
    _pact_mlp,
    _PACTOriginal,
    _twn_mlp,
)
from ._spiking import _LIFSpikingMLP, _SpikingMLP
from ._stochastic import _stochastic_mlp, _StochasticBinary

# --------------------------------------------------------------------------- pairs


def _cross_entropy(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(model(inputs), targets)


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
