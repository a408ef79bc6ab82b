r"""The isotonic step of the soft sorts as one ``autograd.Function`` (private): the eager
fast path of :func:`isotonic_output`.

Forward, for the decreasing problems of :mod:`hardgrad.sorting._isotonic` (``"l2"``,
``"kl"``), with :math:`\bar s_B, \bar w_B` each entry's block statistic (means or
log-sum-exps over its block :math:`B`):

* ``"primal"``: :math:`s - v = (s - \bar s_B) + \bar w_B`;
* ``"dual"``: :math:`v = \bar s_B - \bar w_B`.

Backward, the blocks held fixed: with :math:`G_B = \sum_{i \in B} g_i` and the weight
:math:`p_j` of entry :math:`j` in its block's statistic (:math:`1/|B|` for ``"l2"``,
:math:`e^{x_j - \bar x_B}`, the block's softmax, for ``"kl"``):
``"primal"``: :math:`\partial s_j = g_j - p^s_j G_B`, :math:`\partial w_j = p^w_j G_B`;
``"dual"``: :math:`\partial s_j = p^s_j G_B`, :math:`\partial w_j = -p^w_j G_B`.

On the CPU with the compiled kernel (:mod:`hardgrad.sorting._native_pav`) the blocks, the
output and the plain backward are each one C scan in double precision; otherwise the
blocks come from the batched tensor PAV (:mod:`hardgrad.sorting._pav`) and the rest from
scatter/gather operations. A backward that builds a graph (``create_graph=True``)
computes the same formula in differentiable tensor operations of the saved inputs, so
second derivatives are exact (``"kl"``'s softmax weights depend on :math:`s` and
:math:`w`; ``"l2"``'s are constant).

It is the same function as the composition of differentiable operations
:func:`~hardgrad.sorting._isotonic.block_statistics` uses under ``torch.compile``,
``torch.func`` transforms and forward-mode AD, where a Function running a C kernel
cannot go; it saves that composition's ~40 autograd nodes in eager mode.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor

from . import _native_pav
from ._common import _plain
from ._isotonic import (
    _pav_blocks,
    _segment_gap,
    _segment_log_sum_exp,
    _segment_mean,
    block_primal,
    block_statistics,
)

__all__ = [
    "FUNCTION_MIN_LENGTH_WITHOUT_KERNEL",
    "IsotonicOutput",
    "Solved",
    "eager",
    "isotonic_output",
    "solve",
    "solved_backward",
]


#: Without the compiled kernel, rows shorter than this take the composition (its min-max
#: formula beats the Functions' tensor PAV there: soft_rank 64 x 8 fwd+bwd 0.52 vs 0.72
#: ms, kl 0.70 vs 1.23; even at 16).
FUNCTION_MIN_LENGTH_WITHOUT_KERNEL = 16


def eager() -> bool:
    """Whether the eager Function may run: not under ``torch.compile``, a ``torch.func``
    transform or forward-mode AD."""
    return _plain()


def _statistics(x: Tensor, start: Tensor, kl: bool) -> Tensor:
    return _segment_log_sum_exp(x, start) if kl else _segment_mean(x, start)


def _gap(s: Tensor, start: Tensor, kl: bool) -> Tensor:
    """``s`` minus its block statistic, with no cancellation for kl (as the kernel):
    ``(s - max_B s) - log sum_B e^(s - max_B s)``, so that equal entries of 1e16 keep
    their ``-log|B|``; a block of one gives 0 exactly."""
    if not kl:
        return s - _segment_mean(s, start)
    return _segment_gap(s, start)


def _block_sum(g: Tensor, start: Tensor) -> Tensor:
    """Each entry's block sum of ``g`` (differentiable in ``g``)."""
    return torch.zeros_like(g).scatter_add(-1, start, g).gather(-1, start)


def _weights(x: Tensor, start: Tensor, kl: bool) -> Tensor:
    """Each entry's weight in its block's statistic (differentiable in ``x`` for kl)."""
    if kl:  # the block's softmax, shifted by its maximum (no cancellation against the lse)
        with torch.no_grad():
            top = torch.full_like(x, -torch.inf).scatter_reduce(-1, start, x, "amax")
        e = torch.exp(x - top.gather(-1, start))
        return e / _block_sum(e, start)
    counts = torch.zeros_like(x).scatter_add(-1, start, torch.ones_like(x)).gather(-1, start)
    return counts.reciprocal()


def _tensor_backward(
    kl: bool, mode: str, start: Tensor, s: Tensor, w: Tensor, g: Tensor, need: tuple[bool, bool]
) -> tuple[Tensor | None, Tensor | None]:
    total = _block_sum(g, start)
    grad_s = grad_w = None
    if need[0]:
        part = _weights(s, start, kl) * total
        grad_s = g - part if mode == "primal" else part
    if need[1]:
        part = _weights(w, start, kl) * total
        grad_w = part if mode == "primal" else -part
    return grad_s, grad_w


class Solved(NamedTuple):
    """What the backward of an isotonic step needs (see :func:`solve`)."""

    kl: bool
    mode: str
    native: bool
    #: s, w, start, perm, out (for "exp"), and kl's weights from the kernel (or None each)
    tensors: tuple[Tensor | None, ...]


def solve(
    s: Tensor,
    w: Tensor,
    kl: bool,
    mode: str,
    perm: Tensor | None = None,
    kernel: bool | None = None,
) -> tuple[Tensor, Solved]:
    """The ``mode`` output (``"primal"`` :math:`s - v`, ``"dual"`` :math:`v`, ``"exp"``
    :math:`e^{s - v}`) of the isotonic step on ``s`` and ``w`` (no graph), scattered
    through ``perm`` if given (``out[perm[i]]`` = entry ``i``'s), and what its backward
    needs: by the compiled kernel where it runs (``kernel``: whether it does, when the
    caller knows and ``s``, ``w`` are CPU float32 or float64 tensors), else by tensor
    operations."""
    if kernel is None or s.dtype != w.dtype:
        kernel = _native_pav.available(s, w)
    native = _native_pav.forward(s, w, kl, mode, perm) if kernel else None
    weight_s = weight_w = None
    if native is not None:
        start, weight_s, weight_w, out = native
        assert out is not None
    else:
        start = _pav_blocks(s, w, kl)
        stat_w = _statistics(w, start, kl)
        gap = _gap(s, start, kl) if mode != "dual" else None
        out = gap + stat_w if gap is not None else _statistics(s, start, kl) - stat_w
        if mode == "exp":
            out = torch.exp(out)
        if perm is not None:
            out = torch.empty_like(out).scatter_(-1, perm, out)
    kept = out if mode == "exp" else None
    tensors = (s, w, start, perm, kept, weight_s, weight_w)
    return out, Solved(kl, mode, native is not None, tensors)


def solved_backward(
    solved: Solved, tensors: tuple[Tensor | None, ...], grad: Tensor, need: tuple[bool, bool]
) -> tuple[Tensor | None, Tensor | None]:
    """The gradients to ``s`` and ``w`` (where ``need`` asks for them; in the output's order
    when :func:`solve` had a ``perm``) of its output given the incoming ``grad``;
    ``tensors``: ``solved.tensors`` as saved (differentiable when the backward builds a
    graph)."""
    s, w, start, perm, out, weight_s, weight_w = tensors
    assert s is not None and w is not None and start is not None
    # The kernel reads raw memory: not for a backward that builds a graph, nor one run under
    # a vmap (jacobian(..., vectorize=True) vmaps the backward: its grad is a batched
    # tensor with no storage of its own).
    if solved.native and not torch.is_grad_enabled() and _native_pav.in_memory(grad):
        return _native_pav.backward(
            solved.kl, solved.mode, start, weight_s, weight_w, grad.to(s.dtype), *need,
            perm=perm, out=out,
        )  # fmt: skip
    if solved.mode == "exp":
        assert out is not None
        grad = grad * out
    if perm is not None:
        grad = grad.gather(-1, perm)
    mode = "dual" if solved.mode == "dual" else "primal"
    grad_s, grad_w = _tensor_backward(solved.kl, mode, start, s, w, grad, need)
    if perm is not None:
        grad_s = None if grad_s is None else torch.empty_like(grad_s).scatter_(-1, perm, grad_s)
        grad_w = None if grad_w is None else torch.empty_like(grad_w).scatter_(-1, perm, grad_w)
    return grad_s, grad_w


class IsotonicOutput(torch.autograd.Function):
    """``IsotonicOutput.apply(s, w, kl, mode)``: see the module's text. ``s`` and ``w``:
    the same shape, dtype and device, rows along the last dimension."""

    @staticmethod
    def forward(ctx: Any, s: Tensor, w: Tensor, kl: bool, mode: str) -> Tensor:
        out, solved = solve(s, w, kl, mode)
        ctx.save_for_backward(*solved.tensors)
        ctx.solved = solved._replace(tensors=())
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        need = (bool(ctx.needs_input_grad[0]), bool(ctx.needs_input_grad[1]))
        grad_s, grad_w = solved_backward(ctx.solved, ctx.saved_tensors, grad, need)
        return grad_s, grad_w, None, None


def isotonic_output(s: Tensor, w: Tensor, regularization: str, mode: str) -> Tensor:
    r"""``"primal"``: :math:`s - v`; ``"dual"``: :math:`v` (the decreasing isotonic solution
    of ``s`` and ``w`` along the last dimension, see :mod:`hardgrad.sorting._isotonic`):
    by :class:`IsotonicOutput` in eager mode, by the differentiable composition of
    :func:`~hardgrad.sorting._isotonic.block_statistics` under ``torch.compile``,
    ``torch.func`` and forward-mode AD."""
    kl = regularization == "kl"
    if eager() and (
        s.shape[-1] >= FUNCTION_MIN_LENGTH_WITHOUT_KERNEL or _native_pav.available(s, w)
    ):
        s, w = torch.broadcast_tensors(s, w)
        return IsotonicOutput.apply(s, w, kl, mode)
    if mode == "primal":
        return block_primal(s, w, regularization)
    stat_s, stat_w = block_statistics(s, w, regularization)
    return stat_s - stat_w
