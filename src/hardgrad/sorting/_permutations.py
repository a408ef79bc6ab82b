r"""Relaxed sorting matrices: NeuralSort (Grover et al. 2019,
https://arxiv.org/abs/1903.08850) and SoftSort (Prillo & Eisenschlos 2020,
https://arxiv.org/abs/2006.16038) (private; re-exported by :mod:`hardgrad.sorting`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._core.kernels import opmath
from .._core.validation import check_floating, check_positive
from ._common import _bounded, _check_bool, _check_input

# --------------------------------------------------------------------------- permutation relaxations


def _check_tau(tau: Any) -> float:
    return check_positive(tau, "tau")


def _straight_through(x: Tensor, p: Tensor, descending: bool) -> Tensor:
    """The permutation matrix of ``argsort(x, descending=descending, stable=True)`` in
    forward, exactly (``hard + (p - p)``: adding an exact 0), with ``p``'s gradient."""
    order = torch.argsort(x, dim=-1, descending=descending, stable=True)
    columns = torch.arange(x.shape[-1], device=x.device)
    hard = (order.unsqueeze(-1) == columns).to(p.dtype)
    return hard + (p - p.detach())


def neural_sort_permutation(
    x: Tensor, *, tau: float = 1.0, descending: bool = True, hard: bool = False
) -> Tensor:
    r"""NeuralSort's relaxed sorting matrix (Grover et al. 2019, https://arxiv.org/abs/1903.08850).

    For the last dimension of ``x`` (shape ``(..., n)``), the row-stochastic
    ``(..., n, n)`` matrix

    .. math::

        \hat P_{i,:} = \operatorname{softmax}\Big(\frac{(n + 1 - 2i)\,x - A_x \mathbf 1}{\tau}\Big),
        \qquad (A_x)_{jl} = |x_j - x_l|,

    whose row :math:`i` puts its mass on the :math:`i`-th largest entry: as
    :math:`\tau \to 0`, :math:`\hat P` is the permutation matrix that sorts :math:`x` in
    decreasing order (``descending=False``: rows reversed), and :math:`\hat P x` the sorted
    vector. Exact gradient. :math:`O(n^2)`.

    ``hard=True`` (straight-through, the reference code's ``hard`` option): the forward
    is the exact 0/1 permutation matrix :math:`P` with :math:`P_{i, \pi(i)} = 1` for
    :math:`\pi` = ``hg.sorting.argsort(x, descending=descending)`` (stable), in every
    dtype, and the gradient is the relaxed matrix's. For distinct entries :math:`P` is the
    row-wise argmax of :math:`\hat P` (the reference's hard matrix); with ties the
    reference's argmax can send tied rows to the same column (not a permutation), while
    here tied entries keep their index order. Reference code: ermongroup/neuralsort, ``pytorch/neuralsort.py``.

    Example:
        >>> import torch, hardgrad as hg
        >>> p = hg.sorting.neural_sort_permutation(torch.tensor([0.0, 3.0, 1.0]), tau=0.01)
        >>> p.round(decimals=3)
        tensor([[0., 1., 0.],
                [0., 0., 1.],
                [1., 0., 0.]])
        >>> x = torch.tensor([0.0, 3.0, 1.0], requires_grad=True)
        >>> p = hg.sorting.neural_sort_permutation(x, tau=1.0, hard=True); p
        tensor([[0., 1., 0.],
                [0., 0., 1.],
                [1., 0., 0.]], grad_fn=<AddBackward0>)
        >>> (p @ torch.tensor([1.0, 2.0, 3.0]))[0].backward(); x.grad  # the relaxed gradient
        tensor([-0.0197, -0.0986,  0.1183])
    """
    check_floating(x, "x")
    _check_input(x, -1)
    tau = _check_tau(tau)
    _check_bool(descending, "descending")
    _check_bool(hard, "hard")
    n = x.shape[-1]
    z = _bounded(opmath(x), n * n)  # (n + 1 - 2i) x and the pairwise sums stay finite
    pairwise = (z.unsqueeze(-1) - z.unsqueeze(-2)).abs().sum(-1)  # A_x 1
    scale = n + 1 - 2 * torch.arange(1, n + 1, dtype=z.dtype, device=z.device)
    logits = (scale.unsqueeze(-1) * z.unsqueeze(-2) - pairwise.unsqueeze(-2)) / tau
    logits = logits.clamp(-torch.finfo(z.dtype).max / 4, torch.finfo(z.dtype).max / 4)
    p = torch.softmax(logits, -1)
    if not descending:
        p = p.flip(-2)
    if hard:
        p = _straight_through(x, p, descending)
    return p.to(x.dtype)


def soft_sort_permutation(
    x: Tensor, *, tau: float = 1.0, descending: bool = True, hard: bool = False
) -> Tensor:
    r"""SoftSort's relaxed sorting matrix (Prillo & Eisenschlos 2020, https://arxiv.org/abs/2006.16038).

    .. math::

        \hat P_{i,:} = \operatorname{softmax}\big(-|x_{\downarrow,i} - x| / \tau\big),

    row :math:`i` centred on the :math:`i`-th largest value :math:`x_{\downarrow,i}`
    (``descending=False``: the :math:`i`-th smallest). As :math:`\tau \to 0`, the
    permutation matrix of the sort. Gradients flow through both :math:`x` and the sorted
    values. :math:`O(n^2)`.

    ``hard=True`` (straight-through, the reference code's ``hard`` option): the forward
    is the exact 0/1 permutation matrix :math:`P` with :math:`P_{i, \pi(i)} = 1` for
    :math:`\pi` = ``hg.sorting.argsort(x, descending=descending)`` (stable), in every
    dtype, and the gradient is the relaxed matrix's. For distinct entries :math:`P` is the
    row-wise argmax of :math:`\hat P` (the reference's hard matrix); with ties the
    reference's argmax can send tied rows to the same column (not a permutation), while
    here tied entries keep their index order.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.sorting.soft_sort_permutation(torch.tensor([0.0, 3.0, 1.0]), tau=0.01).round(decimals=3)
        tensor([[0., 1., 0.],
                [0., 0., 1.],
                [1., 0., 0.]])
        >>> x = torch.tensor([0.0, 3.0, 1.0], dtype=torch.bfloat16)
        >>> hg.sorting.soft_sort_permutation(x, tau=5.0, descending=False, hard=True)
        tensor([[1., 0., 0.],
                [0., 0., 1.],
                [0., 1., 0.]], dtype=torch.bfloat16)
    """
    check_floating(x, "x")
    _check_input(x, -1)
    tau = _check_tau(tau)
    _check_bool(descending, "descending")
    _check_bool(hard, "hard")
    z = _bounded(opmath(x), x.shape[-1])
    sorted_ = torch.sort(z, -1, descending=descending).values
    logits = -(sorted_.unsqueeze(-1) - z.unsqueeze(-2)).abs() / tau
    logits = logits.clamp_min(-torch.finfo(z.dtype).max / 4)  # a tiny tau: no -inf
    p = torch.softmax(logits, -1)
    if hard:
        p = _straight_through(x, p, descending)
    return p.to(x.dtype)
