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
    return torch.nan_to_num(x, nan=0.0).clamp(-big, big)
