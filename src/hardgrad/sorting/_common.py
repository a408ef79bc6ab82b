r"""The sorting ops' option names, the argument checks they share, and the bounding of
inputs that keeps every relaxation finite (private; the names are re-exported by
:mod:`hardgrad.sorting`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._core.validation import check_dim, check_floating

#: Regularisations of :func:`soft_sort` and :func:`soft_rank`.
REGULARIZATIONS = ("l2", "kl")
#: Backwards of :func:`sort` and :func:`rank`.
SORT_BACKWARDS = ("soft", "neuralsort", "softsort")


# --------------------------------------------------------------------------- checks


def _check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(
            f"Expected `{name}` to be one of {', '.join(map(repr, choices))}, but found {value!r}"
        )
    return value


def _check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"Expected `{name}` to be a bool, but found {type(value).__name__}")
    return value


def _check_input(x: Any, dim: Any, name: str = "x") -> int:
    check_floating(x, name)
    d = check_dim(x, dim)
    if x.shape[d] == 0:
        raise ValueError(
            f"Expected `{name}` to have at least one entry along dim={dim}, but found shape {tuple(x.shape)}"
        )
    return d


# --------------------------------------------------------------------------- bounded inputs


def _bounded(x: Tensor, n: int) -> Tensor:
    """``x`` with NaN -> 0 and magnitudes capped at ``max / (8 n)``: differences and means of
    such values stay finite, and a value that large already sits a gap beyond every
    regularisation (only entries that all hit the cap lose their order)."""
    big = torch.finfo(x.dtype).max / (8 * max(n, 1))
    if x.numel() and x.device.type == "cpu" and _plain():
        # Eager CPU tensors that need no change skip the two ops (and their backward
        # nodes); NaN fails both comparisons.
        low, high = torch.aminmax(x.detach())
        if -big <= float(low) and float(high) <= big:
            return x
    return torch.nan_to_num(x, nan=0.0).clamp(-big, big)


def _bounded_scaled(x: Tensor, n: int, strength: float) -> Tensor:
    """``_bounded(_bounded(x, n) / strength, n)``, with one check instead of two for eager
    CPU tensors whose entries and scaled entries are well inside the bound."""
    if x.numel() and x.device.type == "cpu" and _plain():
        big = torch.finfo(x.dtype).max / (8 * max(n, 1))
        low, high = (float(v) for v in torch.aminmax(x.detach()))
        # NaN fails the comparisons: the full bounding below.
        if -big <= low and high <= big and max(-low, high) / strength <= big * 0.5:
            return x / strength
    return _bounded(_bounded(x, n) / strength, n)


def _plain() -> bool:
    """Not under ``torch.compile``, a ``torch.func`` transform or forward-mode AD (where a
    value read back on the host, or an autograd.Function, cannot go)."""
    if torch.compiler.is_compiling() or torch._C._are_functorch_transforms_active():
        return False
    forward_ad = getattr(torch.autograd, "forward_ad", None)
    return getattr(forward_ad, "_current_level", -1) < 0


def _rho(n: int, like: Tensor) -> Tensor:
    """:math:`\\rho = (n, n-1, \\dots, 1)` in ``like``'s dtype and device."""
    return torch.arange(n, 0, -1, dtype=like.dtype, device=like.device)
