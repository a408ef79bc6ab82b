r"""How :class:`hardgrad.nn.MoE` evaluates its experts on (token, expert) pairs: the
built-in MLPs from their stacked weights, or a list of any modules, each grouped by
expert in eager mode and dense (every expert on every token) where shapes must be static."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from .._core.kernels import eager_plain


def inverse_permutation(order: Tensor) -> Tensor:
    """The permutation that undoes ``order``."""
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(order.shape[0], device=order.device)
    return inverse


def grouped_mlps(weights: Sequence[Tensor], x: Tensor, experts: Tensor, num_experts: int) -> Tensor:
    """The built-in experts ``(w1, b1, w2, b2)`` on pairs, grouped by expert: one stable
    sort, one read-back of the counts, one ``addmm`` per expert and layer."""
    order = torch.argsort(experts, stable=True)
    counts = torch.bincount(experts, minlength=num_experts).tolist()
    grouped = x.index_select(0, order)
    # unbind: one backward node for each parameter, not one full-size zero gradient
    # per expert, as indexing w1[e] in the loop would give
    layers = zip(*(weight.unbind(0) for weight in weights), strict=True)
    parts = []
    for (w1, b1, w2, b2), part in zip(layers, grouped.split(counts), strict=True):
        if part.shape[0]:
            h = torch.nn.functional.gelu(torch.addmm(b1, part, w1))
            parts.append(torch.addmm(b2, h, w2))
    return torch.cat(parts).index_select(0, inverse_permutation(order))


def gathered_mlps(weights: Sequence[Tensor], x: Tensor, experts: Tensor) -> Tensor:
    """The built-in experts on pairs, each pair's weights gathered (static shapes)."""
    w1, b1, w2, b2 = weights
    h = torch.bmm(x.unsqueeze(1), w1[experts]).squeeze(1) + b1[experts]
    h = torch.nn.functional.gelu(h)
    return torch.bmm(h.unsqueeze(1), w2[experts]).squeeze(1) + b2[experts]


def dense_mlps(weights: Sequence[Tensor], rows: Tensor, indices: Tensor) -> Tensor:
    """Every built-in expert on every row ``(N, d)`` as two batched products, then each
    row's experts ``indices`` ``(N, m)`` picked: ``(N, m, out)``."""
    w1, b1, w2, b2 = weights
    batched = rows.unsqueeze(0).expand(w1.shape[0], *rows.shape)
    h = torch.nn.functional.gelu(torch.baddbmm(b1.unsqueeze(1), batched, w1))
    out = torch.baddbmm(b2.unsqueeze(1), h, w2)  # (E, N, out)
    token = torch.arange(rows.shape[0], device=rows.device).unsqueeze(-1)
    return out[indices, token]


def _checked(out: object, expert: int, rows: int, out_features: int) -> Tensor:
    """An expert module's output must be a ``(rows, out_features)`` tensor."""
    if not isinstance(out, Tensor) or out.shape != (rows, out_features):
        found = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
        raise ValueError(
            f"Expected `experts[{expert}]` to map ({rows}, in_features) tokens to shape "
            f"({rows}, {out_features}) (out_features={out_features}), but found {found}"
        )
    return out


def grouped_modules(
    modules: nn.ModuleList, x: Tensor, experts: Tensor, out_features: int
) -> Tensor:
    """Any expert modules on pairs: the pairs sorted by expert, each module called once on
    its tokens (an expert with no token is not called), the outputs put back in order."""
    order = torch.argsort(experts, stable=True)
    counts = torch.bincount(experts, minlength=len(modules)).tolist()
    grouped = x.index_select(0, order)
    parts = [
        _checked(module(part), j, part.shape[0], out_features)
        for j, (module, part) in enumerate(zip(modules, grouped.split(counts), strict=True))
        if part.shape[0]
    ]
    return torch.cat(parts).index_select(0, inverse_permutation(order))


def dense_modules(
    modules: nn.ModuleList, rows: Tensor, indices: Tensor, out_features: int
) -> Tensor:
    """Every expert module on every row ``(N, d)``, then each row's experts ``indices``
    ``(N, m)`` picked: ``(N, m, out)`` (static shapes: compiled graphs, empty batches)."""
    out = torch.stack(
        [_checked(m(rows), j, rows.shape[0], out_features) for j, m in enumerate(modules)]
    )
    token = torch.arange(rows.shape[0], device=rows.device).unsqueeze(-1)
    return out[indices, token]


def kept_outputs(moe: Any, rows: Tensor, indices: Tensor, keep: Tensor) -> Tensor:
    """``moe.experts_at(rows, indices)`` with the pairs that ``keep`` drops not evaluated
    in eager mode (zeros there); under compile every pair is evaluated (the gates mask
    them)."""
    if not eager_plain(rows) or rows.shape[0] == 0:
        return moe.experts_at(rows, indices)
    flat_keep = keep.reshape(-1)
    kept = flat_keep.nonzero().squeeze(-1)
    token = kept.div(indices.shape[-1], rounding_mode="floor")
    out = rows.new_zeros(flat_keep.shape[0], moe.out_features)
    if kept.numel():
        out = out.index_copy(0, kept, moe.expert_pairs(rows[token], indices.reshape(-1)[kept]))
    return out.reshape(*indices.shape, moe.out_features)
