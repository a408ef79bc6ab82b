r"""What :class:`hardgrad.nn.Quantize`'s data-driven initialisation and its gradient scale
need beyond plain eager tensors: the physical batch under ``torch.vmap``, scales for
channels without information, and :math:`g = 1/\sqrt{N q_+}` for a symbolic :math:`N`
(``torch.export`` with a dynamic dimension).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, TypeVar

import torch
from torch import Tensor
from torch._C import _functorch


def channel_rows(x: Tensor, dim: int | None) -> Tensor:
    """``x`` detached as rows to average: ``(1, numel)`` for one scale, else
    ``(channels, rest)`` with the channels along ``dim`` (``x``'s own dimension, >= 0).

    Under ``torch.func`` transforms (``vmap``, ``grad``, ``functional_call`` inside them)
    ``x`` is a wrapper around a larger tensor; the rows are read from that tensor, so a
    first batch under ``vmap`` sets the scale from all of its examples together, as the
    same batch would in eager mode, instead of branching on a batched value (which
    ``vmap`` refuses). The result is an ordinary tensor."""
    while _functorch.is_functorch_wrapped_tensor(x):
        if _functorch.is_batchedtensor(x):
            batch_dim = _functorch.maybe_get_bdim(x)
            if dim is not None and batch_dim <= dim:
                dim += 1  # the unwrapped tensor has the vmapped dimension before `dim`
        try:
            x = _functorch.get_unwrapped(x)
        except RuntimeError as error:  # a wrapper functorch cannot open (functionalize)
            raise RuntimeError(
                "Expected Quantize's first batch to be an ordinary tensor or one under "
                "torch.vmap/torch.func.grad, but found a torch.func wrapper it cannot read: "
                "initialise the scale first (init_scale=, init_from(), or one eager batch)"
            ) from error
    x = x.detach()
    if dim is None:
        return x.reshape(1, -1)
    return x.transpose(0, dim).reshape(x.shape[dim], -1)


F = TypeVar("F", bound=Callable[..., Any])


def outside_transforms(fn: F) -> F:
    """``fn`` run with ``torch.func``'s transforms switched off when any is active: the
    initialisation reads ``x`` through :func:`channel_rows` and computes with ordinary
    tensors only, and under ``torch.func.grad`` every result would otherwise be wrapped
    for that transform (and escape it, stored in the scale)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not torch._C._are_functorch_transforms_active():
            return fn(*args, **kwargs)
        with torch._C._DisableFuncTorch():
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def fill_uninformative(scale: Tensor) -> Tensor | None:
    r"""``scale`` (:math:`2\,\overline{|x|}/\sqrt{q_+}` per channel) with the channels whose
    data were all zero given the mean scale of the others; ``None`` when every channel's
    were (the batch carries no information about the step size)."""
    informative = scale > 0
    if not bool(informative.any()):
        return None
    if bool(informative.all()):
        return scale
    return torch.where(informative, scale, scale[informative].mean())


def gradient_scale(elements: int | torch.SymInt, quant_max: int) -> float | torch.SymFloat:
    r""":math:`g = 1/\sqrt{\max(N, 1)\, q_+}`; for a symbolic :math:`N` (a dynamic shape
    under ``torch.export``/``torch.compile``) a symbolic float, without specialising
    :math:`N` to the example's value."""
    if isinstance(elements, int):
        return 1.0 / math.sqrt(max(elements, 1) * quant_max)
    return 1.0 / torch.sym_sqrt(torch.sym_float(torch.sym_max(elements, 1) * quant_max))
