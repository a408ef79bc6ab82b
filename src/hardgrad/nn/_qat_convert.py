r"""``hg.nn.quantize_``: convert a trained model's ``Linear``/``Conv2d`` layers in place to
:class:`~hardgrad.nn.QuantLinear`/:class:`~hardgrad.nn.QuantConv2d` (LSQ, Esser et al. 2020,
https://arxiv.org/abs/1902.08153), and hand the new step sizes to the optimizer.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ._qat import QuantConv2d, QuantLinear, _check_bits, _check_flag


def _convert(old: nn.Linear | nn.Conv2d, **kwargs: Any) -> QuantLinear | QuantConv2d:
    """The quantized twin of ``old`` (a plain Linear or Conv2d), sharing its parameters."""
    weight: Tensor = old.weight
    new: QuantLinear | QuantConv2d
    if isinstance(old, nn.Linear):
        new = QuantLinear(old.in_features, old.out_features, old.bias is not None, **kwargs)
    else:
        new = QuantConv2d(
            old.in_channels,
            old.out_channels,
            old.kernel_size,
            old.stride,
            old.padding,
            old.dilation,
            old.groups,
            old.bias is not None,
            old.padding_mode,
            **kwargs,
        )
    new.to(device=weight.device)
    new.weight = old.weight  # the same Parameter objects: optimizers keep working
    new.bias = old.bias
    new.train(old.training)
    if new.weight_quantizer is not None:
        new.weight_quantizer.init_from(weight.detach())
    return new


class _NotGiven:
    """The default of ``quantize_(optimizer=...)``: not said (``None`` says "made later")."""

    def __repr__(self) -> str:
        return "<not given>"


_NOT_GIVEN: Any = _NotGiven()


def _check_optimizer(optimizer: Any, options: Any) -> None:
    given = optimizer is not _NOT_GIVEN and optimizer is not None
    if given and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(
            "Expected `optimizer` to be a torch.optim.Optimizer or None, but found "
            f"{type(optimizer).__name__}"
        )
    if options is None:
        return
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise ValueError(
            "Expected `optimizer_options` only with an `optimizer` to add the step sizes "
            f"to, but found optimizer={optimizer!r}"
        )
    if not isinstance(options, Mapping):
        raise TypeError(
            "Expected `optimizer_options` to be a mapping of hyper-parameters, but found "
            f"{type(options).__name__}"
        )
    if "params" in options:
        raise ValueError(
            "Expected `optimizer_options` without 'params' (the group's parameters are the "
            "new step sizes), but found the key 'params'"
        )


def _hand_over_step_sizes(
    layers: list[QuantLinear | QuantConv2d],
    optimizer: torch.optim.Optimizer | None,
    options: Mapping[str, Any] | None,
) -> None:
    """Add the trainable step sizes of the new ``layers`` to ``optimizer`` as one group
    (the first group's hyper-parameters, updated by ``options``), or warn that no
    optimizer holds them when ``optimizer`` was not given."""
    new = [
        p
        for layer in layers
        for quantizer in (layer.weight_quantizer, layer.act_quantizer)
        if quantizer is not None
        for p in quantizer.parameters()
        if p.requires_grad
    ]
    if not new or optimizer is None:
        return
    if optimizer is _NOT_GIVEN:
        warnings.warn(
            f"quantize_ added {len(new)} trainable parameters (the LSQ step sizes of "
            f"{len(layers)} layers) that no optimizer made before this call holds, so it "
            "would never train them: pass it as quantize_(..., optimizer=optimizer) to add "
            "them as a parameter group, or make the optimizer afterwards from "
            "model.parameters() and pass optimizer=None to say so",
            UserWarning,
            stacklevel=3,
        )
        return
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    fresh = [p for p in new if id(p) not in held]
    if fresh:
        if isinstance(optimizer, torch.optim.LBFGS):  # it would take the group and ignore it
            raise ValueError(
                "Expected an `optimizer` that trains every parameter group, but found LBFGS, "
                f"which trains its first group only: make it after quantize_ (pass "
                f"optimizer=None), from model.parameters(), which holds the {len(fresh)} new "
                "step sizes"
            )
        settings = {k: v for k, v in optimizer.param_groups[0].items() if k != "params"}
        settings.update(options or {})
        optimizer.add_param_group({**settings, "params": fresh})


def quantize_(
    model: nn.Module,
    *,
    weight_bits: int | None = 8,
    act_bits: int | None = 8,
    skip: Iterable[str] = (),
    act_signed: bool = True,
    learn_scale: bool = True,
    optimizer: torch.optim.Optimizer | None = _NOT_GIVEN,
    optimizer_options: Mapping[str, Any] | None = None,
) -> nn.Module:
    r"""Swap every ``nn.Linear`` and ``nn.Conv2d`` of ``model`` for :class:`QuantLinear` /
    :class:`QuantConv2d`, in place, keeping the trained weights.

    The new layers share the old ``weight`` and ``bias`` *parameter objects*; their weight
    scales are initialised from those weights, the activation scales from the first batch.

    **The optimizer.** With ``learn_scale=True`` the step sizes are *new* trainable
    parameters, which an optimizer made before this call does not hold: it would keep
    training the weights while the step sizes, gradients and all, never move. Either
    pass that optimizer, ``optimizer=opt``: the step sizes are added to it as one
    parameter group with the hyper-parameters of its first group, overridden by
    ``optimizer_options`` (e.g. ``{"weight_decay": 0.0}``); or make the optimizer after
    this call, from ``model.parameters()`` (which holds them), and say so with
    ``optimizer=None``. Without the argument, ``quantize_`` warns (``UserWarning``)
    whenever it adds trainable parameters. A learning-rate scheduler made before may not
    schedule the added group (those that scale ``base_lrs``, such as ``LambdaLR`` or
    ``OneCycleLR``, do not). ``LBFGS``, which trains one group only, is refused; any
    error is raised before ``model`` is changed.

    Only layers whose type is exactly ``nn.Linear`` or ``nn.Conv2d`` are swapped
    (subclasses, such as the projections inside ``nn.MultiheadAttention``, which do not
    call their own forward, are left alone), and hooks registered on a swapped layer are
    not carried over.

    Args:
        model: the model, changed in place (and returned).
        weight_bits: weight bit width (per output channel), or ``None``.
        act_bits: input bit width (per tensor), or ``None``.
        skip: qualified names (as in ``model.named_modules()``) of layers, or of containers
            whose layers, stay in floating point; ``"first"`` and ``"last"`` name the first
            and last swappable layer (in ``named_modules()`` order), the customary
            exclusion of the input and output layers.
        act_signed: signed input ranges (default) or unsigned ones (every swapped layer
            reads post-ReLU, non-negative inputs).
        learn_scale: learn the step sizes (LSQ).
        optimizer: the optimizer that trains ``model``, to add the new step sizes to, or
            ``None`` when it is made after this call (above).
        optimizer_options: hyper-parameters of the added group that differ from the
            optimizer's first group (``lr``, ``weight_decay``, ...); only with ``optimizer``.

    Example:
        >>> import torch, hardgrad as hg
        >>> model = torch.nn.Sequential(
        ...     torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.ReLU(),
        ...     torch.nn.Linear(16, 4))
        >>> optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        >>> hg.nn.quantize_(model, weight_bits=4, act_bits=8, skip=["first", "last"],
        ...                 optimizer=optimizer, optimizer_options={"lr": 0.01})
        Sequential(
          (0): Linear(in_features=8, out_features=16, bias=True)
          (1): ReLU()
          (2): QuantLinear(
            in_features=16, out_features=16, bias=True, weight_bits=4, act_bits=8
            (weight_quantizer): Quantize(bits=4, signed=True, per_channel_dim=0, learn_scale=True)
            (act_quantizer): Quantize(bits=8, signed=True, per_channel_dim=None, learn_scale=True)
          )
          (3): ReLU()
          (4): Linear(in_features=16, out_features=4, bias=True)
        )
        >>> [(len(group["params"]), group["lr"]) for group in optimizer.param_groups]
        [(6, 0.1), (2, 0.01)]
    """
    if not isinstance(model, nn.Module):
        raise TypeError(
            f"Expected `model` to be a torch.nn.Module, but found {type(model).__name__}"
        )
    if isinstance(skip, str):
        raise TypeError(
            f"Expected `skip` to be an iterable of names, but found the string {skip!r} "
            f"(write skip=[{skip!r}])"
        )
    names = list(skip)
    # Check the settings once, with the messages naming these arguments.
    _check_flag(act_signed, "act_signed")
    _check_flag(learn_scale, "learn_scale")
    _check_bits(weight_bits, "weight_bits", signed=True)
    _check_bits(act_bits, "act_bits", signed=act_signed)
    _check_optimizer(optimizer, optimizer_options)
    layers = [(name, m) for name, m in model.named_modules() if type(m) in (nn.Linear, nn.Conv2d)]
    module_names = {name for name, _ in model.named_modules()}
    skipped: set[str] = set()
    for entry in names:
        if not isinstance(entry, str):
            raise TypeError(f"Expected `skip` to hold names, but found {type(entry).__name__}")
        if entry in ("first", "last"):
            if layers:
                skipped.add(layers[0 if entry == "first" else -1][0])
        elif entry in module_names:
            skipped.add(entry)
        else:
            available = ", ".join(repr(n) for n, _ in layers[:12])
            raise ValueError(
                f"Expected every name in `skip` to be 'first', 'last' or a submodule of `model`, "
                f"but found {entry!r}; its Linear/Conv2d layers: {available}"
            )
    kwargs = {
        "weight_bits": weight_bits,
        "act_bits": act_bits,
        "act_signed": act_signed,
        "learn_scale": learn_scale,
    }
    swaps = []
    for name, layer in layers:
        if any(name == s or name.startswith(s + ".") or s == "" for s in skipped):
            continue
        new = _convert(layer, **kwargs)
        if name == "":
            raise ValueError(
                "Expected `model` to contain the layers to swap, but found a single "
                f"{type(layer).__name__}: build hg.nn.{type(new).__name__} directly"
            )
        swaps.append((name, new))
    # The optimizer first: if it refuses the new group, the model is left as it was.
    _hand_over_step_sizes([new for _, new in swaps], optimizer, optimizer_options)
    for name, new in swaps:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, new)
    return model
