r"""The soft sort and soft rank as one ``autograd.Function`` each (private): the eager fast
path of :func:`hardgrad.soft_sort` and :func:`hardgrad.soft_rank`.

Forward: the sort (descending and stable: the kernel's radix sort on the CPU where it beats
``torch.sort``, which it equals bit for bit), the isotonic step
(:func:`hardgrad.sorting._isotonic_function.solve`: one scan of the compiled kernel on the
CPU, tensor operations elsewhere) and, for the rank, the scatter back to the input's order;
no graph is recorded. Backward, the permutation and blocks held fixed: the gather of the
incoming gradient into sorted order, the isotonic step's block-constant Jacobian
(:func:`~hardgrad.sorting._isotonic_function.solved_backward`) and the scatter back.
Both are the same functions as the differentiable compositions in
:mod:`hardgrad.sorting._soft`, which run under ``torch.compile``, ``torch.func`` and
forward-mode AD; a backward that builds a graph (``create_graph=True``) runs that
composition on the saved input and differentiates it, so higher derivatives are exact.
The Functions save the ~10 autograd nodes of the composition (the sort's and the
scatter's backward, the expansion of :math:`\rho`, the isotonic step's own).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from . import _native_pav
from ._common import _bounded, _rho
from ._isotonic_function import FUNCTION_MIN_LENGTH_WITHOUT_KERNEL, eager, solve, solved_backward

__all__ = [
    "SoftRankAscending",
    "SoftSort",
    "sort_descending",
    "use_functions",
]

Composition = Callable[[Tensor], Tensor]


def use_functions(x: Tensor) -> bool:
    """Whether the soft sorts of ``x`` (rows along the last dimension) take the eager
    Functions: in eager mode (see :func:`~hardgrad.sorting._isotonic_function.eager`), with
    the kernel or rows of :data:`FUNCTION_MIN_LENGTH_WITHOUT_KERNEL` entries or more."""
    if not eager():
        return False
    return x.shape[-1] >= FUNCTION_MIN_LENGTH_WITHOUT_KERNEL or _native_pav.available(x)


def sort_descending(x: Tensor, kernel: bool | None = None) -> tuple[Tensor, Tensor]:
    """``torch.sort(x, stable=True, dim=-1, descending=True)`` (the compositions' sort), by
    the kernel's radix sort on the CPU where that is faster (``kernel``: whether it runs
    on ``x``, when the caller knows)."""
    if kernel is None:
        kernel = _native_pav.available(x)
    native = _native_pav.sort_descending(x) if kernel else None
    if native is not None:
        return native
    values, indices = torch.sort(x, stable=True, dim=-1, descending=True)
    return values, indices


def _recompute(composition: Composition, x: Tensor, grad: Tensor) -> Tensor:
    """The gradient of ``composition`` at the saved input ``x``, as a graph (for a backward
    run with ``create_graph=True``)."""
    with torch.enable_grad():
        out = composition(x)
    return torch.autograd.grad(out, x, grad.to(out.dtype), create_graph=True)[0]


def _work_dtype(x: Tensor) -> torch.dtype:
    r"""float64 on the CPU (the kernel and the tensor path then solve the problem with
    :math:`\rho`, :math:`\log\rho` and :math:`\rho/\varepsilon` exact to double, and the
    results are rounded once to ``x``'s dtype: in float32, :math:`\log\rho` alone moves
    the gaps between its entries by up to 2 % at 20,000 entries), else ``x``'s own."""
    return torch.float64 if x.device.type == "cpu" else x.dtype


class SoftSort(torch.autograd.Function):
    r"""``apply(x, strength, kl, descending, composition, out_dtype)``: the soft sort of ``x``
    (bounded, rows along the last dimension): descending :math:`\rho/\varepsilon - v`,
    ascending its mirror :math:`-s(-x)`; ``composition(x)`` computes the same as
    differentiable operations; the result in ``out_dtype`` (the caller's: float64 results
    rounded once, also for half types, whose ``x`` comes in float32)."""

    @staticmethod
    def forward(
        ctx: Any,
        x: Tensor,
        strength: float,
        kl: bool,
        descending: bool,
        composition: Composition,
        out_dtype: torch.dtype,
    ) -> Tensor:
        n, work = x.shape[-1], _work_dtype(x)
        kernel = _native_pav.available(x)
        w, perm = sort_descending(x if descending else -x, kernel)
        z = _rho(n, w.to(work)) / strength
        z = _bounded(z, n) if not n / strength <= torch.finfo(work).max / (8 * n) else z
        out, solved = solve(z.expand_as(w), w.to(work), kl, "primal", kernel=kernel)
        ctx.save_for_backward(x, perm, *solved.tensors)
        ctx.solved, ctx.composition, ctx.descending = (
            solved._replace(tensors=()),
            composition,
            descending,
        )
        out = out if descending else 0.0 - out  # 0 - (...): no -0.0
        return out.to(out_dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        x, perm, *tensors = ctx.saved_tensors
        if torch.is_grad_enabled():
            return _recompute(ctx.composition, x, grad), None, None, None, None, None
        work = _work_dtype(x)
        _, grad_w = solved_backward(ctx.solved, tuple(tensors), grad.to(work), (False, True))
        assert grad_w is not None
        # descending: d out / d sorted(x) = grad_w; ascending: out = -s(-x), the two signs cancel
        grad_x = torch.empty_like(grad_w).scatter_(-1, perm, grad_w)
        return grad_x.to(x.dtype), None, None, None, None, None


class SoftRankAscending(torch.autograd.Function):
    r"""``apply(z, kl, composition, out_dtype)``: the ascending soft ranks of ``z`` :math:`= x /
    \varepsilon` (bounded, rows along the last dimension); ``composition(z)`` computes the
    same as differentiable operations."""

    @staticmethod
    def forward(
        ctx: Any, z: Tensor, kl: bool, composition: Composition, out_dtype: torch.dtype
    ) -> Tensor:
        work = _work_dtype(z)
        kernel = _native_pav.available(z)
        s, perm = sort_descending(z, kernel)  # in z's dtype: the order is the same
        s = s.to(work)
        rho = _rho(z.shape[-1], s)
        w = (torch.log(rho) if kl else rho).expand_as(s)
        ranks, solved = solve(s, w, kl, "exp" if kl else "primal", perm, kernel=kernel)
        ctx.save_for_backward(z, *solved.tensors)
        ctx.solved, ctx.composition = solved._replace(tensors=()), composition
        return ranks.to(out_dtype)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        z, *tensors = ctx.saved_tensors
        if torch.is_grad_enabled():
            return _recompute(ctx.composition, z, grad), None, None, None
        work = _work_dtype(z)
        grad_z, _ = solved_backward(ctx.solved, tuple(tensors), grad.to(work), (True, False))
        assert grad_z is not None
        return grad_z.to(z.dtype), None, None, None
