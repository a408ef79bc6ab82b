"""The tensors :func:`hardgrad.diagnostics.audit` expects a gradient for, and how it tells
whether a backward gave them one (their ``.grad`` object and its version); the arguments of a
call that require grad."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import torch

GradState = tuple["weakref.ref[torch.Tensor]", int] | None


@dataclass(eq=False)
class Leaf:
    """A tensor that requires grad and should get a gradient from a backward."""

    tensor: torch.Tensor
    label: str
    location: str
    order: int
    origin: str  # "module", "tensor", "optimizer" or "seen"
    from_no_grad: bool = False
    state: GradState = None  # its .grad when last looked at
    exposed: bool = False  # a backward ran while it was tracked
    touched: bool = False  # a backward changed its .grad (to all zeros, since it is open)


def grad_state(t: torch.Tensor) -> GradState:
    """The ``.grad`` a tensor has now (a weak reference: ids are reused once a grad set to
    None is freed) and its version, to tell later whether a backward touched it."""
    grad = t.grad
    return None if grad is None else (weakref.ref(grad), grad._version)


def grad_changed(t: torch.Tensor, state: GradState) -> bool:
    grad = t.grad
    if grad is None:
        return False
    return state is None or state[0]() is not grad or grad._version != state[1]


def grad_tensors(args: Any, kwargs: Any, positions: tuple[int, ...]) -> list[torch.Tensor]:
    found = []
    for i in positions:
        value = args[i] if i < len(args) else None
        if isinstance(value, torch.Tensor) and value.requires_grad:
            found.append(value)
    for value in kwargs.values():
        if isinstance(value, torch.Tensor) and value.requires_grad:
            found.append(value)
    return found


def nested_grad_tensors(data: Any) -> list[torch.Tensor]:
    """Tensors that require grad in ``data`` or in a (nested) list or tuple of it."""
    if isinstance(data, torch.Tensor):
        return [data] if data.requires_grad else []
    if isinstance(data, (list, tuple)):
        return [t for item in data[:4096] for t in nested_grad_tensors(item)]
    return []
