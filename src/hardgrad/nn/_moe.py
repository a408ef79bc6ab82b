r"""A small, correct mixture-of-experts layer over :func:`hardgrad.topk_route`.

Papers: Shazeer et al. (2017), https://arxiv.org/abs/1701.06538 (sparsely-gated MoE);
Fedus et al. (2021), https://arxiv.org/abs/2101.03961 (Switch Transformer, its
load-balancing loss); the router-gradient estimators in :mod:`hardgrad.routing`. Each
token's k experts are evaluated (``O(N k)`` expert evaluations, no capacity limit, no
dropped tokens): in eager mode expert by expert on its tokens; under ``torch.compile``,
whose shapes cannot depend on the routing, every expert on every token (see
:meth:`MoE.experts_at`). Not a fused production kernel.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from .. import routing
from .._core.checkpoint import SettingsInState
from .._core.kernels import eager_plain
from .._core.validation import check_all_finite, check_floating, check_int, check_real
from ..estimators import Estimator
from ..routing._dense_mixer import _dense_mixer, _unselected_gates
from ..routing._settings import _check_normalize, _resolve

#: Under ``torch.compile`` (or a ``torch.func`` transform) :meth:`MoE.experts_at` runs
#: every expert on every token while E is at most this many times the experts per token.
DENSE_MAX_EXPERTS_PER_SLOT = 32


class MoE(SettingsInState, nn.Module):
    r"""Mixture of experts: a linear router, ``num_experts`` two-layer MLPs, top-k dispatch.

    For each token :math:`x` (the last dim of the input):

    .. math::

        \theta = W_r x, \qquad (g, S) = \operatorname{topk\_route}(\theta, k), \qquad
        y = \sum_{r=1}^{k} g_r\, E_{S_r}(x), \qquad
        E_j(x) = W_{2,j}\, \operatorname{GELU}(W_{1,j} x + b_{1,j}) + b_{2,j},

    computed sparsely (only the k selected experts of each token are evaluated). The
    router's gradient is :func:`hardgrad.topk_route`'s ``estimator``:

    * ``"sparse"`` (default), ``"sparsemixer"``, ``"sparsemixer_v1"`` or a discrete
      pathwise estimator (stochastic routing, training mode only; eval routes
      deterministically with ``"sparse"``; SparseMixer evaluates in its own eval mode);
    * ``"dense"``: DenseMixer. The forward stays sparse; in backward the unselected
      experts are evaluated once, without gradient to their parameters, for the router's
      gradient (:func:`hardgrad.routing.dense_mixer`): :math:`N(E - k)` extra expert
      evaluations per step, forward-only;
    * ``"default"``: Default MoE (Panda et al. 2025, https://arxiv.org/abs/2504.12463):
      DenseMixer's gradient with each unselected expert's output replaced by its *default
      output* :math:`\hat E_j`, an exponential moving average (``default_decay``) of that
      expert's mean output over the tokens routed to it, updated in each training forward
      before it is used (so this batch's outputs are in it; buffers ``default_outputs``
      and ``default_seen``; an expert never reached yet has default 0). No extra expert
      evaluations. Here the defaults enter the router's backward only (as zero-gated
      slots, :func:`hardgrad.routing.unselected_gates`), so the forward value stays the
      sparse one.

    ``forward(x)`` returns ``(y, indices, loss)``: ``y`` of shape ``(*batch,
    out_features)``, the selected experts ``(*batch, k)`` and the scalar load-balancing
    loss of the Switch Transformer, :math:`E\sum_j f_j P_j`
    (:func:`hardgrad.routing.load_balancing_loss`; add it to the training loss with a
    small weight, e.g. 0.01). An input of another floating dtype than the parameters is
    computed in the parameters' dtype and ``y`` cast back to the input's.

    Args:
        in_features: size of each input token.
        out_features: size of each output token (default ``in_features``).
        num_experts: E >= 1.
        k: experts per token, ``1 <= k <= E``.
        hidden_features: the experts' hidden width (default ``2 * in_features``).
        estimator: the router gradient (see :func:`hardgrad.topk_route`).
        normalize: the gates' normalisation (``None``: ``"renormalize"``, or
            ``"none"`` for ``k=1``; must be ``None`` for SparseMixer).
        generator: randomness of the sampling estimators.
        default_decay: the EMA decay of ``"default"``, in [0, 1).

    Example:
        >>> import torch, hardgrad as hg
        >>> _ = torch.manual_seed(0)
        >>> moe = hg.nn.MoE(4, num_experts=4, k=2, estimator="dense")
        >>> moe
        MoE(
          in_features=4, out_features=4, num_experts=4, k=2, hidden_features=8, estimator='dense', normalize='renormalize'
          (router): Linear(in_features=4, out_features=4, bias=False)
        )
        >>> y, indices, loss = moe(torch.randn(3, 4))
        >>> y.shape, indices.tolist()
        (torch.Size([3, 4]), [[1, 3], [2, 0], [1, 3]])
        >>> (y.square().mean() + 0.01 * loss).backward()
        >>> bool(moe.router.weight.grad.abs().sum() > 0)
        True
    """

    default_outputs: Tensor
    default_seen: Tensor

    def __init__(
        self,
        in_features: int,
        out_features: int | None = None,
        *,
        num_experts: int = 8,
        k: int = 2,
        hidden_features: int | None = None,
        estimator: str | Estimator | routing.SparseMixer = "sparse",
        normalize: str | None = None,
        generator: torch.Generator | None = None,
        default_decay: float = 0.99,
    ) -> None:
        super().__init__()
        self.in_features = check_int(in_features, "in_features", low=1)
        self.out_features = check_int(
            in_features if out_features is None else out_features, "out_features", low=1
        )
        self.num_experts = check_int(num_experts, "num_experts", low=1)
        self.k = check_int(k, "k", low=1, high=self.num_experts)
        hidden = 2 * self.in_features if hidden_features is None else hidden_features
        self.hidden_features = check_int(hidden, "hidden_features", low=1)
        self.default_decay = check_real(default_decay, "default_decay")
        if not 0 <= self.default_decay < 1:
            raise ValueError(
                f"Expected `default_decay` in [0, 1), but found default_decay={default_decay!r}"
            )
        resolved = _resolve("dense" if estimator == "default" else estimator)
        if estimator == "default":
            resolved = "default"
        if isinstance(resolved, routing.SparseMixer):
            if normalize is not None:
                raise ValueError(
                    f"Expected `normalize`=None for SparseMixer, but found normalize={normalize!r}"
                )
            limit = 2 if resolved.version == 2 else 1
            if self.k > limit:
                raise ValueError(f"Expected `k` <= {limit} for {resolved!r}, but found k={self.k}")
        elif normalize is None:
            normalize = "none" if self.k == 1 else "renormalize"
        self.normalize = None if normalize is None else _check_normalize(normalize)
        self.estimator = estimator
        self._resolved = resolved
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(
                f"Expected `generator` to be a torch.Generator or None, but found {type(generator).__name__}"
            )
        self.generator = generator
        e, d, h, o = self.num_experts, self.in_features, self.hidden_features, self.out_features
        self.router = nn.Linear(d, e, bias=False)
        self.w1 = nn.Parameter(torch.empty(e, d, h))
        self.b1 = nn.Parameter(torch.empty(e, h))
        self.w2 = nn.Parameter(torch.empty(e, h, o))
        self.b2 = nn.Parameter(torch.empty(e, o))
        self.reset_parameters()
        if resolved == "default":
            self.register_buffer("default_outputs", torch.zeros(e, o))
            self.register_buffer("default_seen", torch.zeros(e, dtype=torch.bool))

    def reset_parameters(self) -> None:
        """Each expert's layers initialised as :class:`torch.nn.Linear` initialises its own."""
        for weight, bias, fan_in in (
            (self.w1, self.b1, self.in_features),
            (self.w2, self.b2, self.hidden_features),
        ):
            bound = 1 / math.sqrt(fan_in)
            nn.init.uniform_(weight, -bound, bound)
            nn.init.uniform_(bias, -bound, bound)
        self.router.reset_parameters()

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"num_experts={self.num_experts}, k={self.k}, hidden_features={self.hidden_features}, "
            f"estimator={self.estimator!r}, normalize={self.normalize!r}"
        )

    def _checkpoint_settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "in_features": self.in_features,
            "out_features": self.out_features,
            "num_experts": self.num_experts,
            "hidden_features": self.hidden_features,
        }
        if self._resolved == "default":
            settings["default_decay"] = self.default_decay
        return settings

    @torch.no_grad()
    def _update_defaults(self, outputs: Tensor, indices: Tensor) -> None:
        """EMA of each expert's mean output over the tokens routed to it in this batch
        (the first batch that reaches an expert sets its default)."""
        flat_out = outputs.detach().reshape(-1, self.out_features).to(self.default_outputs.dtype)
        flat_idx = indices.reshape(-1)
        sums = torch.zeros_like(self.default_outputs).index_add(0, flat_idx, flat_out)
        counts = torch.zeros_like(self.default_seen, dtype=sums.dtype).index_add(
            0, flat_idx, torch.ones_like(flat_idx, dtype=sums.dtype)
        )
        mean = sums / counts.clamp_min(1).unsqueeze(-1)
        hit = counts > 0
        decay = torch.where(self.default_seen, self.default_decay, 0.0).to(sums.dtype)
        updated = decay.unsqueeze(-1) * self.default_outputs + (1 - decay.unsqueeze(-1)) * mean
        self.default_outputs.copy_(torch.where(hit.unsqueeze(-1), updated, self.default_outputs))
        self.default_seen.logical_or_(hit)

    def expert_pairs(self, x: Tensor, experts: Tensor) -> Tensor:
        r"""The outputs :math:`E_{j_n}(x_n)` for pairs of tokens ``x`` ``(n, in_features)`` and
        experts ``experts`` ``(n,)``: shape ``(n, out_features)``, differentiable.

        In eager mode the pairs are grouped by expert (a stable sort and one read-back of
        the counts) and each expert runs once, on its tokens, as two matrix products, as
        hand-written MoE layers loop over their experts. Under ``torch.compile`` or a
        ``torch.func`` transform, where the group sizes cannot be data-dependent, each
        pair's expert weights are gathered instead: the same values, at the cost of
        copying :math:`d \cdot h` weights per pair (a 64-token top-2 step with 8 experts of
        64 x 128 took 13 ms that way in eager mode against 1.7 ms for the loop; the
        forward's :meth:`experts_at` avoids it under compile, DenseMixer's extra pairs
        take it).
        """
        if eager_plain(x) and x.shape[0] > 0:
            return self._grouped_pairs(x, experts)
        h = torch.bmm(x.unsqueeze(1), self.w1[experts]).squeeze(1) + self.b1[experts]
        h = torch.nn.functional.gelu(h)
        return torch.bmm(h.unsqueeze(1), self.w2[experts]).squeeze(1) + self.b2[experts]

    def _grouped_pairs(self, x: Tensor, experts: Tensor) -> Tensor:
        """:meth:`expert_pairs` by expert groups: one ``addmm`` per expert and layer."""
        order = torch.argsort(experts, stable=True)
        counts = torch.bincount(experts, minlength=self.num_experts).tolist()
        grouped = x.index_select(0, order)
        # unbind: one backward node for each parameter, not one full-size zero gradient
        # per expert, as indexing w1[e] in the loop would give
        weights = (self.w1, self.b1, self.w2, self.b2)
        layers = zip(*(weight.unbind(0) for weight in weights), strict=True)
        parts = []
        for (w1, b1, w2, b2), part in zip(layers, grouped.split(counts), strict=True):
            if part.shape[0]:
                h = torch.nn.functional.gelu(torch.addmm(b1, part, w1))
                parts.append(torch.addmm(b2, h, w2))
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.shape[0], device=order.device)
        return torch.cat(parts).index_select(0, inverse)

    def experts_at(self, x: Tensor, indices: Tensor) -> Tensor:
        """The outputs of the experts ``indices`` ``(*batch, m)`` for the tokens ``x``
        ``(*batch, in_features)`` (a leading sample dim on ``indices`` broadcasts):
        shape ``(*indices.shape, out_features)``. Eager: :meth:`expert_pairs`, expert by
        expert. Under ``torch.compile`` or a ``torch.func`` transform, with E at most
        :data:`DENSE_MAX_EXPERTS_PER_SLOT` times m: :meth:`_dense_at`."""
        rows = x.expand(*indices.shape[:-1], x.shape[-1])
        m = indices.shape[-1]
        if not eager_plain(x) and self.num_experts <= DENSE_MAX_EXPERTS_PER_SLOT * m:
            return self._dense_at(rows.reshape(-1, x.shape[-1]), indices.reshape(-1, m)).reshape(
                *indices.shape, self.out_features
            )
        flat = rows.unsqueeze(-2).expand(*indices.shape, x.shape[-1]).reshape(-1, x.shape[-1])
        out = self.expert_pairs(flat, indices.reshape(-1))
        return out.reshape(*indices.shape[:-1], m, self.out_features)

    def _dense_at(self, rows: Tensor, indices: Tensor) -> Tensor:
        """:meth:`experts_at` for ``rows`` ``(N, d)`` and ``indices`` ``(N, m)`` with static
        shapes: every expert on every row, as two batched matrix products, then each
        row's m outputs picked. E/m times the FLOPs of the sparse evaluation, but dense and
        without the gather of each pair's weights, which moves about as many floats per
        pair as E/m of about 60 experts' products take multiply-adds on CPU (our estimate;
        :data:`DENSE_MAX_EXPERTS_PER_SLOT` keeps a margin). A compiled 1,024-token top-2
        step with 8 experts of 64 x 128: 7.6 ms, against 139 ms gathering."""
        batched = rows.unsqueeze(0).expand(self.num_experts, *rows.shape)
        h = torch.nn.functional.gelu(torch.baddbmm(self.b1.unsqueeze(1), batched, self.w1))
        out = torch.baddbmm(self.b2.unsqueeze(1), h, self.w2)  # (E, N, out)
        token = torch.arange(rows.shape[0], device=rows.device).unsqueeze(-1)
        return out[indices, token]  # (N, m, out)

    def route(self, logits: Tensor) -> tuple[Tensor, Tensor]:
        """Gates and indices for router logits ``(N, E)``, in this module's mode."""
        resolved = "dense" if self._resolved == "default" else self._resolved
        if isinstance(resolved, routing.SparseMixer):
            return routing.topk_route(
                logits, self.k, estimator=resolved, generator=self.generator, training=self.training
            )
        estimator: Any = "dense" if self._resolved == "default" else self.estimator
        if not self.training and not isinstance(resolved, str):
            estimator = "sparse"  # stochastic routing trains; evaluation routes by the top-k
        return routing.topk_route(
            logits, self.k, estimator=estimator, normalize=self.normalize, generator=self.generator
        )

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        check_floating(x, "x")
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"Expected `x` with last dim in_features={self.in_features}, but found shape "
                f"{tuple(x.shape)}"
            )
        check_all_finite(x, "x")  # (the router's logits are checked by topk_route)
        batch = x.shape[:-1]
        rows = x.reshape(-1, self.in_features).to(self.w1.dtype)
        logits = self.router(rows)
        gates, indices = self.route(logits)
        outputs = self.experts_at(rows, indices)
        y = (gates.unsqueeze(-1) * outputs).sum(-2)
        dense = self._resolved in ("dense", "default") and self.training
        if dense and self.k < self.num_experts and torch.is_grad_enabled():
            normalize = self.normalize or "renormalize"
            if self._resolved == "default":
                # The defaults enter as zero-gated slots: y is unchanged (each term is
                # 0 * E_j), and the zero gates' backward is DenseMixer's unselected share
                # with c_j = <dL/dy, default_j>. No expert is evaluated. The EMA is
                # updated first: under torch.compile a copy taken before an in-place
                # buffer update may be recomputed in backward from the updated buffer.
                self._update_defaults(outputs, indices)
                defaults = self.default_outputs.detach().clone().to(y.dtype)
                zeros, rest = _unselected_gates(logits, indices, normalize)
                y = y + (zeros.unsqueeze(-1) * defaults[rest]).sum(-2)
            else:
                frozen = rows.detach()

                def unselected(tokens: Tensor, experts: Tensor) -> Tensor:
                    return self.expert_pairs(frozen[tokens], experts)

                y = _dense_mixer(y, logits, indices, unselected, normalize)
        loss = routing.load_balancing_loss(logits, indices, num_experts=self.num_experts)
        return (
            y.reshape(*batch, self.out_features).to(x.dtype),
            indices.reshape(*batch, self.k),
            loss,
        )
