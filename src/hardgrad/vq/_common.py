"""What every vq module shares: the argument checks, the compute dtype, and the helpers
that move the code dimension last and back."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._core.validation import check_floating, value_checks_apply


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(
            f"Expected `{name}` to be one of {', '.join(map(repr, choices))}, but found {value!r}"
        )
    return value


def _check_codebook(z: Tensor, codebook: Any, d: int) -> Tensor:
    check_floating(codebook, "codebook")
    if codebook.dim() != 2:
        raise ValueError(
            f"Expected `codebook` of shape (K, D), but found shape {tuple(codebook.shape)}"
        )
    num, width = codebook.shape
    if num == 0:
        raise ValueError("Expected a non-empty `codebook` (K >= 2 codes), but found K=0")
    if num == 1:
        raise ValueError(
            "Expected `codebook` with K >= 2 codes (one code carries no information: every "
            "z maps to it), but found K=1"
        )
    if width != z.shape[d]:
        raise ValueError(
            f"Expected `codebook` rows of size D = z.shape[{d}] = {z.shape[d]}, but found "
            f"codebook of shape {tuple(codebook.shape)} (D={width})"
        )
    if codebook.dtype != z.dtype:
        raise TypeError(
            f"Expected `codebook` with the dtype of `z` ({z.dtype}), but found {codebook.dtype}"
        )
    if codebook.device != z.device:
        raise ValueError(
            f"Expected `codebook` on the device of `z` ({z.device}), but found {codebook.device}"
        )
    return codebook


def _check_indices(indices: Any, size: int) -> None:
    """``indices``: a dense integer tensor (not bool) with values in ``[0, size)`` (the
    values read while validation is on)."""
    if (
        not isinstance(indices, Tensor)
        or indices.is_floating_point()
        or indices.is_complex()
        or indices.dtype == torch.bool
    ):
        found = indices.dtype if isinstance(indices, Tensor) else type(indices).__name__
        raise TypeError(f"Expected `indices` to be an integer tensor, but found {found}")
    if indices.layout != torch.strided:
        raise TypeError(
            f"Expected `indices` to be a dense (strided) tensor, but found layout={indices.layout}"
        )
    if value_checks_apply(indices) and indices.numel():
        low, high = int(indices.min()), int(indices.max())
        if low < 0 or high >= size:
            raise ValueError(
                f"Expected `indices` in [0, {size - 1}], but found values in [{low}, {high}]"
            )


def code_last(z: Tensor, d: int) -> Tensor:
    """``z.movedim(d, -1)``, or ``z`` itself when ``d`` is already last (a no-op
    ``movedim`` still costs a permute and a view: 1.6 µs, ten of them per VQ-VAE step)."""
    return z if d == z.dim() - 1 else z.movedim(d, -1)


def code_back(z: Tensor, d: int) -> Tensor:
    """The inverse of :func:`code_last`: the last dimension back to ``d``."""
    return z if d == z.dim() - 1 else z.movedim(-1, d)


def code_last_shape(z: Tensor, d: int) -> torch.Size:
    """The shape of ``code_last(z, d)``, without making it."""
    return torch.Size((*z.shape[:d], *z.shape[d + 1 :], z.shape[d]))


def _flatten(z: Tensor, d: int) -> Tensor:
    """``z`` with the code dimension last, as (N, D)."""
    return code_last(z, d).reshape(-1, z.shape[d])
