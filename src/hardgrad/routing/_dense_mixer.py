r"""DenseMixer (Yao et al. 2025): the unselected experts' share of the router gradient,
as zero gates (:func:`unselected_gates`) or around a layer's output (:func:`dense_mixer`)
(private; re-exported by :mod:`hardgrad.routing`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .._core.validation import check_all_finite, check_floating, check_int
from ..ops._autograd import apply_function, cached_signature
from ._settings import _check_indices, _check_normalize

UnselectedFn = Callable[[Tensor, Tensor], Tensor]


def unselected_experts(indices: Tensor, num_experts: int) -> Tensor:
    """The experts not in ``indices`` (last dim), in increasing order: shape
    ``(..., num_experts - k)``.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.routing.unselected_experts(torch.tensor([[3, 0], [1, 2]]), 4)
        tensor([[1, 2],
                [0, 3]])
    """
    _check_indices(indices)
    check_int(num_experts, "num_experts", low=indices.shape[-1])
    return _unselected_experts(indices, num_experts)


def _unselected_experts(indices: Tensor, num_experts: int) -> Tensor:
    """:func:`unselected_experts` after its checks (also inside backward, where
    ``torch.compile`` traces in a strict mode that refuses reading ``layout``)."""
    k = indices.shape[-1]
    chosen = torch.zeros(*indices.shape[:-1], num_experts, dtype=torch.int8, device=indices.device)
    chosen = chosen.scatter(-1, indices, 1)
    return torch.argsort(chosen, dim=-1, stable=True)[..., : num_experts - k]


def _unselected_share(
    logits: Tensor, indices: Tensor, rest: Tensor, c_rest: Tensor, normalize: str
) -> Tensor:
    r"""DenseMixer's unselected share of the router gradient:
    :math:`J_w^\top c_U = p \odot (c_U - \langle c_U, p\rangle) / s` (all along the last dim),
    :math:`s = \sum_{i \in S} p_i` for the renormalised forms, 1 for ``"none"``."""
    compute = torch.float64 if logits.dtype == torch.float64 else torch.float32
    theta = logits.detach().to(compute)
    p = torch.softmax(theta, -1)
    c = torch.zeros_like(p).scatter(-1, rest, c_rest.to(compute))
    share = p * (c - (c * p).sum(-1, keepdim=True))
    if normalize != "none":
        share = share / p.gather(-1, indices).sum(-1, keepdim=True)
    return share.to(logits.dtype)


@cached_signature
class _UnselectedGates(torch.autograd.Function):
    """Forward: exact zeros (the unselected experts' gates); backward: DenseMixer's
    unselected share of the router gradient."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, indices: Tensor, rest: Tensor, normalize: str) -> Tensor:
        return logits.new_zeros(rest.shape)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        logits, indices, rest, ctx.normalize = inputs
        ctx.save_for_backward(logits, indices, rest)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        logits, indices, rest = ctx.saved_tensors
        return _unselected_share(logits, indices, rest, grad, ctx.normalize), None, None, None


def unselected_gates(
    logits: Tensor, indices: Tensor, *, normalize: str = "renormalize"
) -> tuple[Tensor, Tensor]:
    r"""Zero gates for the unselected experts whose backward is DenseMixer's.

    For logits ``(..., E)`` (last dim) and the selected ``indices`` ``(..., k)``, returns
    ``(gates, rest)``, both ``(..., E - k)``: ``rest`` the unselected experts
    (:func:`unselected_experts`) and ``gates`` exact zeros. Appended to the selected gates,
    a layer that evaluates every slot computes the same output (each extra term is
    :math:`0 \cdot E_j(x)`) and the router gets DenseMixer's full gradient: the incoming
    gradient of slot :math:`j` is :math:`c_j`, and backward returns

    .. math::

        \frac{\partial L}{\partial \theta} \mathrel{+}= \frac{1}{s}\, p \odot
        \big(c_U - \langle c_U, p\rangle\big), \qquad c_U = \sum_{j \notin S} c_j e_j,

    the derivative of :math:`\sum_{j \notin S} w_j(\theta) E_j(x)` with
    :math:`w_j = p_j / \operatorname{sg}[s]`, :math:`s = \sum_{i\in S} p_i` (DenseMixer's
    "partscale" weights for renormalised gates; :math:`s = 1` for ``normalize="none"``,
    where :math:`w = p` is the full softmax). This form evaluates the unselected experts
    in the forward pass (with weight 0): use it where the objective is a function of the
    gates (:func:`expectation`); a layer should use :func:`dense_mixer`, which evaluates
    them in backward only.

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.tensor([[2.0, 1.0, 0.0]], requires_grad=True)
        >>> gates, rest = hg.routing.unselected_gates(logits, torch.tensor([[0]]), normalize="none")
        >>> gates, rest
        (tensor([[0., 0.]], grad_fn=<_UnselectedGatesBackward>), tensor([[1, 2]]))
        >>> (gates * torch.tensor([[1.0, 0.0]])).sum().backward()   # c_1 = 1
        >>> logits.grad   # p_1 (e_1 - p)
        tensor([[-0.1628,  0.1848, -0.0220]])
    """
    check_floating(logits, "logits")
    if logits.dim() == 0:
        raise ValueError("Expected `logits` of shape (*batch, E), but found a 0-dim tensor")
    _check_indices(indices, logits.shape[:-1])
    normalize = _check_normalize(normalize)
    check_all_finite(logits, "logits")
    return _unselected_gates(logits, indices, normalize)


def _unselected_gates(logits: Tensor, indices: Tensor, normalize: str) -> tuple[Tensor, Tensor]:
    """:func:`unselected_gates` after its checks (for callers whose logits were checked
    by :func:`topk_route`)."""
    rest = _unselected_experts(indices, logits.shape[-1])
    gates: Tensor = apply_function(_UnselectedGates, logits, indices, rest, normalize)
    return gates, rest


@cached_signature
class _DenseMixer(torch.autograd.Function):
    """Forward: ``y`` (a view); backward: ``grad`` to ``y`` and DenseMixer's unselected
    share to the logits, computing the unselected experts' outputs with ``fn``."""

    @staticmethod
    def forward(
        y: Tensor, logits: Tensor, indices: Tensor, fn: UnselectedFn, normalize: str
    ) -> Tensor:
        return y.view_as(y)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _, logits, indices, ctx.fn, ctx.normalize = inputs
        ctx.save_for_backward(logits, indices)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        logits, indices = ctx.saved_tensors
        if not ctx.needs_input_grad[1]:
            return grad, None, None, None, None
        experts = logits.shape[-1]
        rows = logits.reshape(-1, experts)
        chosen = indices.reshape(rows.shape[0], indices.shape[-1])  # (-1 fails at 0 rows)
        rest = _unselected_experts(chosen, experts)
        tokens = torch.arange(rows.shape[0], device=rows.device).repeat_interleave(rest.shape[1])
        if tokens.numel() == 0:  # k = E, or no tokens: nothing unselected
            return grad, torch.zeros_like(logits), None, None, None
        with torch.no_grad():
            outputs = ctx.fn(tokens, rest.reshape(-1))
        g = grad.reshape(rows.shape[0], -1)
        c_rest = (outputs.reshape(tokens.shape[0], -1) * g[tokens]).sum(-1)
        share = _unselected_share(rows, chosen, rest, c_rest.reshape(rest.shape), ctx.normalize)
        return grad, share.reshape(logits.shape), None, None, None


def dense_mixer(
    y: Tensor,
    logits: Tensor,
    indices: Tensor,
    unselected: UnselectedFn,
    *,
    normalize: str = "renormalize",
) -> Tensor:
    r"""DenseMixer's router gradient for a sparse MoE output ``y`` (Yao et al. 2025).

    Forward: ``y`` unchanged (a view), so the layer's forward stays sparse. Backward: the
    gradient passes to ``y`` unchanged, and the router logits get DenseMixer's share from
    the *unselected* experts,

    .. math::

        \frac{\partial L}{\partial \theta} \mathrel{+}= \frac{1}{s}\, p \odot
        \big(c_U - \langle c_U, p\rangle\big), \qquad
        (c_U)_j = \Big\langle \frac{\partial L}{\partial y}, E_j(x)\Big\rangle \ (j \notin S),

    with :math:`s = \sum_{i \in S} p_i` for renormalised gates (DenseMixer's "partscale"
    weights :math:`p_j/\operatorname{sg}[s]`) and :math:`s = 1` for ``normalize="none"``.
    With the selected share that :func:`topk_route` gives, the router's gradient is that
    of the dense output :math:`\sum_j w_j(\theta) E_j(x)` (for ``"none"``: the full softmax
    :math:`w = p`), while the forward value is the sparse one.

    The extra compute is explicit: ``unselected(tokens, experts)`` is called once per
    backward, under ``torch.no_grad()``, with two int64 tensors of length
    :math:`N (E - k)` (every token/unselected-expert pair; tokens are rows of the logits
    flattened to ``(N, E)``), and must return the experts' outputs for those pairs, shape
    ``(N (E - k), *y.shape[batch:])``. The unselected experts' parameters get no
    gradient (as in DenseMixer). Eager mode only (the callable runs in backward). The
    callable may return approximations of the outputs instead: Default MoE (Panda et al.
    2025, https://arxiv.org/abs/2504.12463) returns a moving average of each expert's past
    outputs, at no extra expert compute (``hg.nn.MoE(estimator="default")``).

    Args:
        y: the layer's output, shape ``(*batch, ...)`` with ``batch`` the logits' batch shape.
        logits: router logits ``(*batch, E)`` (experts on the last dim).
        indices: the selected experts ``(*batch, k)`` from :func:`topk_route`.
        unselected: the callable giving the unselected experts' outputs.
        normalize: the gates' normalisation (as given to :func:`topk_route`).

    Example:
        >>> import torch, hardgrad as hg
        >>> outputs = torch.tensor([[1.0], [2.0], [4.0]])          # E_j(x) for one token
        >>> logits = torch.tensor([[0.5, 0.0, -0.5]], requires_grad=True)
        >>> gates, indices = hg.topk_route(logits, 1, estimator="dense", normalize="none")
        >>> y = gates[:, :1] * outputs[indices[:, 0]]
        >>> y = hg.routing.dense_mixer(y, logits, indices, lambda t, e: outputs[e],
        ...                            normalize="none")
        >>> y.sum().backward()
        >>> logits.grad   # the gradient of sum_j softmax(logits)_j E_j(x)
        tensor([[-0.4387,  0.0411,  0.3976]])
    """
    check_floating(y, "y")
    check_floating(logits, "logits")
    normalize = _check_normalize(normalize)
    if not callable(unselected):
        raise TypeError(
            f"Expected `unselected` to be callable, but found {type(unselected).__name__}"
        )
    if logits.dim() == 0:
        raise ValueError("Expected `logits` of shape (*batch, E), but found a 0-dim tensor")
    batch = logits.shape[:-1]
    _check_indices(indices)
    if indices.shape[:-1] != batch or y.shape[: len(batch)] != batch:
        raise ValueError(
            f"Expected `y` and `indices` with the batch shape of `logits` {tuple(batch)}, "
            f"but found y {tuple(y.shape)} and indices {tuple(indices.shape)}"
        )
    check_all_finite(logits, "logits")
    check_all_finite(y, "y")
    return _dense_mixer(y, logits, indices, unselected, normalize)


def _dense_mixer(
    y: Tensor, logits: Tensor, indices: Tensor, unselected: UnselectedFn, normalize: str
) -> Tensor:
    """:func:`dense_mixer` after its checks (:class:`hardgrad.nn.MoE`, whose tensors are
    its own and its logits checked by :func:`topk_route`)."""
    out: Tensor = _DenseMixer.apply(y, logits, indices, unselected, normalize)
    return out
