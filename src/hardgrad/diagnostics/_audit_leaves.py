"""The tensors :func:`hardgrad.diagnostics.audit` expects a gradient for, and how it tells
whether a backward gave them one (their ``.grad`` object and its version)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass

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
