r"""A small, correct mixture-of-experts layer over :func:`hardgrad.topk_route`.

Papers: Shazeer et al. (2017), https://arxiv.org/abs/1701.06538 (sparsely-gated MoE, noisy
top-k gating, the importance and load losses); Fedus et al. (2021),
https://arxiv.org/abs/2101.03961 (Switch Transformer: its load-balancing loss, the
capacity factor); Lepikhin et al. (2020), https://arxiv.org/abs/2006.16668 (GShard: the
capacity's slot-major priority); Zoph et al. (2022), https://arxiv.org/abs/2202.08906
(ST-MoE, the router z-loss); the router-gradient estimators in :mod:`hardgrad.routing`.
Each token's k experts are evaluated (``O(N k)`` expert evaluations): in eager mode expert
by expert on its tokens; under ``torch.compile``, whose shapes cannot depend on the
routing, every expert on every token (see :meth:`MoE.experts_at`). Not a fused
production kernel. How the experts are evaluated is in ``_moe_experts``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from .. import routing
from .._core.checkpoint import SettingsInState
from .._core.kernels import eager_plain
from .._core.validation import check_all_finite, check_floating, check_int, check_real
from ..estimators import Estimator
from ..routing._dense_mixer import _dense_mixer, _unselected_gates
from ..routing._noisy import _noisy_logits
from ..routing._settings import _check_normalize, _resolve
from ..routing._topk import _check_eps
from . import _moe_aux as _aux
from . import _moe_experts as _dispatch

#: Under ``torch.compile`` (or a ``torch.func`` transform) :meth:`MoE.experts_at` runs
#: every expert on every token while E is at most this many times the experts per token.
DENSE_MAX_EXPERTS_PER_SLOT = 32


class MoE(SettingsInState, nn.Module):
    r"""Mixture of experts: a linear router, ``num_experts`` experts, top-k dispatch.

    For each token :math:`x` (the last dim of the input):

    .. math::

        \theta = W_r x, \qquad (g, S) = \operatorname{topk\_route}(\theta, k), \qquad
        y = \sum_{r=1}^{k} g_r\, E_{S_r}(x),

    computed sparsely (only the k selected experts of each token are evaluated). The
    experts are two-layer MLPs, :math:`E_j(x) = W_{2,j}\, \operatorname{GELU}(W_{1,j} x +
    b_{1,j}) + b_{2,j}` (stacked weights ``w1``, ``b1``, ``w2``, ``b2``), or the modules
    of ``experts``. The router's gradient is :func:`hardgrad.topk_route`'s ``estimator``:

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

    **Noisy top-k gating** (``noisy_gating=True``, Shazeer et al. 2017): in training the
    router routes on :math:`H = W_r x + \varepsilon \odot (\operatorname{Softplus}(W_n x)
    + \epsilon_\sigma)`, :math:`\varepsilon \sim \mathcal N(0, I)` drawn from
    ``generator`` (:func:`hardgrad.routing.noisy_logits`; ``noise`` is the linear map
    :math:`W_n`, initialised to 0 as in the published code; :math:`\epsilon_\sigma` =
    ``noise_epsilon``); in eval on :math:`W_r x`. The gates are those of
    ``topk_route(H, k)`` (the paper's softmax over the k kept logits is
    ``normalize="selected"``, equal to the default ``"renormalize"`` up to rounding), so
    the noise scale learns through the gates and the load loss. Estimators:
    ``"sparse"``, ``"dense"``, ``"default"``.

    **Capacity** (``capacity_factor`` :math:`c`): each expert takes at most
    :math:`C = \lceil c\, N k / E \rceil` (token, expert) assignments of the ``N`` tokens
    of a call (computed with a tolerance of 1e-9, so that 1.1 · 10 gives 11). Priority
    as in GShard and Switch: the first choices of all tokens before any second choice
    (slot-major), within a slot in token order (the flattened batch order); the
    assignments past :math:`C` are *dropped*: that expert is not evaluated for that token
    and its term of :math:`y` is 0, the other gates unchanged (not renormalised). A token
    all of whose assignments are dropped gets :math:`y = 0`, so a residual connection
    ``x + moe(x)[0]`` passes it through unchanged (Switch's convention). A dropped gate
    gets no gradient; DenseMixer's unselected share still counts the dropped expert as
    selected. ``dropped`` (int64) and ``dropped_fraction`` (of the :math:`N k`
    assignments) hold the last forward's count; ``capacity`` its :math:`C`.

    ``forward(x)`` returns ``(y, indices, loss)``: ``y`` of shape ``(*batch,
    out_features)``, the selected experts ``(*batch, k)`` (before capacity) and the scalar
    load-balancing loss of the Switch Transformer, :math:`E\sum_j f_j P_j`
    (:func:`hardgrad.routing.load_balancing_loss`; add it to the training loss with a
    small weight, e.g. 0.01). An input of another floating dtype than the parameters is
    computed in the parameters' dtype and ``y`` cast back to the input's.

    After each forward, ``aux_losses`` (computed when first read) is a dict of scalar
    losses on the logits the router routed on (:math:`H` with noisy gating in training), each with its gradient; choose
    and weight the ones to train with:

    * ``"load_balancing"``: the returned ``loss`` (the same tensor);
    * ``"router_z"``: :func:`hardgrad.routing.router_z_loss` (ST-MoE, weight 0.001);
    * ``"importance"``: :math:`\operatorname{CV}^2` of each expert's summed gates
      (:func:`hardgrad.routing.cv_squared`; before capacity);
    * ``"load"``: :math:`\operatorname{CV}^2` of each expert's load: with noisy gating in
      training and :math:`k < E` the smooth estimator :math:`\sum_x P(x, i)`
      (:func:`hardgrad.routing.prob_in_top_k`, from the (k+1)-th noisy logit), else the
      number of tokens routed to it (no gradient), as published. The paper's loss is
      ``w * (aux_losses["importance"] + aux_losses["load"])``, w = 0.01 or 0.1.

    Args:
        in_features: size of each input token.
        out_features: size of each output token (default ``in_features``).
        num_experts: E >= 1 (default 8, or ``len(experts)``).
        k: experts per token, ``1 <= k <= E``.
        hidden_features: the built-in experts' hidden width (default ``2 * in_features``;
            must be ``None`` with ``experts``).
        estimator: the router gradient (see :func:`hardgrad.topk_route`).
        normalize: the gates' normalisation (``None``: ``"renormalize"``, or
            ``"none"`` for ``k=1``; must be ``None`` for SparseMixer).
        generator: randomness of the sampling estimators and of the gating noise.
        default_decay: the EMA decay of ``"default"``, in [0, 1).
        experts: a sequence of ``nn.Module`` s, each mapping ``(tokens, in_features)`` to
            ``(tokens, out_features)`` (checked at each call), in place of the MLPs.
            Eager: each is called once per forward on its tokens (not at all without
            any); under ``torch.compile``/``torch.func`` and for an empty batch every
            expert runs on every token (static shapes), so they must accept any number of
            rows, 0 included.
        noisy_gating: noisy top-k gating (above).
        noise_epsilon: :math:`\epsilon_\sigma`, the noise's least std (default 0.01).
        capacity_factor: :math:`c > 0`, or ``None`` (no capacity, nothing dropped).
        eps: added to the renormalisation's sum (:func:`hardgrad.topk_route`'s ``eps``;
            default 0; e.g. 1e-6 as much MoE code does).

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
        >>> sorted(moe.aux_losses)
        ['importance', 'load', 'load_balancing', 'router_z']
    """

    default_outputs: Tensor
    default_seen: Tensor

    def __init__(
        self,
        in_features: int,
        out_features: int | None = None,
        *,
        num_experts: int | None = None,
        k: int = 2,
        hidden_features: int | None = None,
        estimator: str | Estimator | routing.SparseMixer = "sparse",
        normalize: str | None = None,
        generator: torch.Generator | None = None,
        default_decay: float = 0.99,
        experts: Sequence[nn.Module] | None = None,
        noisy_gating: bool = False,
        noise_epsilon: float = 1e-2,
        capacity_factor: float | None = None,
        eps: float = 0.0,
    ) -> None:
        super().__init__()
        self.in_features = check_int(in_features, "in_features", low=1)
        self.out_features = check_int(
            in_features if out_features is None else out_features, "out_features", low=1
        )
        modules, self.num_experts = _aux.check_experts(experts, num_experts, hidden_features)
        self.k = check_int(k, "k", low=1, high=self.num_experts)
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
        if isinstance(resolved, routing.SparseMixer) and eps:
            raise ValueError(f"Expected `eps`=0 for SparseMixer, but found eps={eps!r}")
        self.eps = _check_eps(eps, self.normalize or "renormalize")
        self.estimator = estimator
        self._resolved = resolved
        if generator is not None and not isinstance(generator, torch.Generator):
            raise TypeError(
                f"Expected `generator` to be a torch.Generator or None, but found {type(generator).__name__}"
            )
        self.generator = generator
        self.noisy_gating, self.noise_epsilon, self.capacity_factor = _aux.check_options(
            resolved, estimator, noisy_gating, noise_epsilon, capacity_factor
        )
        e, d, o = self.num_experts, self.in_features, self.out_features
        self.router = nn.Linear(d, e, bias=False)
        if noisy_gating:
            self.noise = nn.Linear(d, e, bias=False)
        self.experts = modules
        self.hidden_features: int | None = None
        if modules is None:
            hidden = 2 * self.in_features if hidden_features is None else hidden_features
            self.hidden_features = check_int(hidden, "hidden_features", low=1)
            h = self.hidden_features
            self.w1 = nn.Parameter(torch.empty(e, d, h))
            self.b1 = nn.Parameter(torch.empty(e, h))
            self.w2 = nn.Parameter(torch.empty(e, h, o))
            self.b2 = nn.Parameter(torch.empty(e, o))
        self.reset_parameters()
        if resolved == "default":
            self.register_buffer("default_outputs", torch.zeros(e, o))
            self.register_buffer("default_seen", torch.zeros(e, dtype=torch.bool))
        self._aux_inputs: tuple[Any, ...] | None = None
        self._aux_losses: dict[str, Tensor] | None = None
        self.capacity: int | None = None
        self.dropped = torch.zeros((), dtype=torch.int64)
        self.dropped_fraction = torch.zeros(())

    @property
    def aux_losses(self) -> dict[str, Tensor]:
        """The last forward's auxiliary losses (see above), computed on first access
        (a forward that nobody asks them of pays nothing); ``{}`` before any forward."""
        if self._aux_losses is None:
            if self._aux_inputs is None:
                return {}
            self._aux_losses = _aux.aux_losses(*self._aux_inputs)
        return self._aux_losses

    def reset_parameters(self) -> None:
        """Each built-in expert's layers initialised as :class:`torch.nn.Linear` initialises
        its own; the router likewise, the noise map to 0. Modules of ``experts`` are left
        as they are."""
        if self.experts is None:
            for weight, bias, fan_in in (
                (self.w1, self.b1, self.in_features),
                (self.w2, self.b2, self.hidden_features),
            ):
                bound = 1 / math.sqrt(fan_in or 1)
                nn.init.uniform_(weight, -bound, bound)
                nn.init.uniform_(bias, -bound, bound)
        self.router.reset_parameters()
        if self.noisy_gating:
            nn.init.zeros_(self.noise.weight)

    def extra_repr(self) -> str:
        text = (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"num_experts={self.num_experts}, k={self.k}, "
        )
        if self.experts is None:
            text += f"hidden_features={self.hidden_features}, "
        text += f"estimator={self.estimator!r}, normalize={self.normalize!r}"
        if self.noisy_gating:
            text += ", noisy_gating=True"
        if self.capacity_factor is not None:
            text += f", capacity_factor={self.capacity_factor}"
        if self.eps:
            text += f", eps={self.eps}"
        return text

    def _checkpoint_settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {
            "in_features": self.in_features,
            "out_features": self.out_features,
            "num_experts": self.num_experts,
        }
        if self.experts is None:
            settings["hidden_features"] = self.hidden_features
        if self._resolved == "default":
            settings["default_decay"] = self.default_decay
        return settings

    def _weights(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        return self.w1, self.b1, self.w2, self.b2

    def expert_pairs(self, x: Tensor, experts: Tensor) -> Tensor:
        r"""The outputs :math:`E_{j_n}(x_n)` for pairs of tokens ``x`` ``(n, in_features)`` and
        experts ``experts`` ``(n,)``: shape ``(n, out_features)``, differentiable.

        In eager mode the pairs are grouped by expert (a stable sort and one read-back of
        the counts) and each expert runs once, on its tokens (built-in experts as two
        matrix products, as hand-written MoE layers loop over their experts; modules of
        ``experts`` called on their tokens). Under ``torch.compile`` or a ``torch.func``
        transform, where the group sizes cannot be data-dependent, each pair's built-in
        expert weights are gathered instead: the same values, at the cost of copying
        :math:`d \cdot h` weights per pair (a 64-token top-2 step with 8 experts of
        64 x 128 took 13 ms that way in eager mode against 1.7 ms for the loop; the
        forward's :meth:`experts_at` avoids it under compile, DenseMixer's extra pairs
        take it); modules of ``experts`` each run on every pair there.
        """
        grouped = eager_plain(x) and x.shape[0] > 0
        if self.experts is not None:
            if grouped:
                return _dispatch.grouped_modules(self.experts, x, experts, self.out_features)
            out = _dispatch.dense_modules(self.experts, x, experts.unsqueeze(-1), self.out_features)
            return out.squeeze(-2)
        if grouped:
            return self._grouped_pairs(x, experts)
        return _dispatch.gathered_mlps(self._weights(), x, experts)

    def _grouped_pairs(self, x: Tensor, experts: Tensor) -> Tensor:
        """:meth:`expert_pairs` by expert groups: one ``addmm`` per expert and layer."""
        return _dispatch.grouped_mlps(self._weights(), x, experts, self.num_experts)

    def experts_at(self, x: Tensor, indices: Tensor) -> Tensor:
        """The outputs of the experts ``indices`` ``(*batch, m)`` for the tokens ``x``
        ``(*batch, in_features)`` (a leading sample dim on ``indices`` broadcasts):
        shape ``(*indices.shape, out_features)``. Eager: :meth:`expert_pairs`, expert by
        expert. Under ``torch.compile`` or a ``torch.func`` transform: modules of
        ``experts`` each on every token; built-in experts, with E at most
        :data:`DENSE_MAX_EXPERTS_PER_SLOT` times m, :meth:`_dense_at`."""
        rows = x.expand(*indices.shape[:-1], x.shape[-1])
        m = indices.shape[-1]
        static = not eager_plain(x) or (self.experts is not None and rows.numel() == 0)
        if static and (
            self.experts is not None or self.num_experts <= DENSE_MAX_EXPERTS_PER_SLOT * m
        ):
            return self._dense_at(rows.reshape(-1, x.shape[-1]), indices.reshape(-1, m)).reshape(
                *indices.shape, self.out_features
            )
        flat = rows.unsqueeze(-2).expand(*indices.shape, x.shape[-1]).reshape(-1, x.shape[-1])
        out = self.expert_pairs(flat, indices.reshape(-1))
        return out.reshape(*indices.shape[:-1], m, self.out_features)

    def _dense_at(self, rows: Tensor, indices: Tensor) -> Tensor:
        """:meth:`experts_at` for ``rows`` ``(N, d)`` and ``indices`` ``(N, m)`` with static
        shapes: every expert on every row (built-in: two batched matrix products), then
        each row's m outputs picked. E/m times the FLOPs of the sparse evaluation, but
        dense and without the gather of each pair's weights, which moves about as many
        floats per pair as E/m of about 60 experts' products take multiply-adds on CPU
        (our estimate; :data:`DENSE_MAX_EXPERTS_PER_SLOT` keeps a margin). A compiled
        1,024-token top-2 step with 8 experts of 64 x 128: 7.6 ms, against 139 ms
        gathering."""
        if self.experts is not None:
            return _dispatch.dense_modules(self.experts, rows, indices, self.out_features)
        return _dispatch.dense_mlps(self._weights(), rows, indices)

    def _capacity_keep(self, indices: Tensor) -> Tensor:
        """Which (token, slot) assignments fit the capacity (see the class docstring)."""
        keep, self.capacity = _aux.capacity_keep(
            indices, self.capacity_factor or 1.0, self.num_experts
        )
        return keep

    def route(self, logits: Tensor) -> tuple[Tensor, Tensor]:
        """Gates and indices for router logits ``(N, E)``, in this module's mode."""
        gates, indices, _ = self._route(logits, threshold=False)
        return gates, indices

    def _route(self, logits: Tensor, threshold: bool) -> tuple[Tensor, Tensor, Tensor | None]:
        resolved = "dense" if self._resolved == "default" else self._resolved
        if isinstance(resolved, routing.SparseMixer):
            gates, indices = routing.topk_route(
                logits, self.k, estimator=resolved, generator=self.generator, training=self.training
            )
            return gates, indices, None
        estimator: Any = "dense" if self._resolved == "default" else self.estimator
        if not self.training and not isinstance(resolved, str):
            estimator = "sparse"  # stochastic routing trains; evaluation routes by the top-k
        return routing.topk_route(  # type: ignore[call-overload]
            logits,
            self.k,
            estimator=estimator,
            normalize=self.normalize,
            generator=self.generator,
            eps=self.eps,
            return_threshold=threshold,
        ) + (() if threshold else (None,))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        check_floating(x, "x")
        if x.dim() == 0 or x.shape[-1] != self.in_features:
            raise ValueError(
                f"Expected `x` with last dim in_features={self.in_features}, but found shape "
                f"{tuple(x.shape)}"
            )
        check_all_finite(x, "x")  # (the router's logits are checked by topk_route)
        batch = x.shape[:-1]
        rows = x.reshape(-1, self.in_features).to(self.router.weight.dtype)
        clean = logits = self.router(rows)
        noisy = self.noisy_gating and self.training
        smooth_load = noisy and self.k < self.num_experts
        if noisy:
            logits, std = _noisy_logits(clean, self.noise(rows), self.noise_epsilon, self.generator)
        gates, indices, threshold = self._route(logits, threshold=smooth_load)
        keep = None
        if self.capacity_factor is not None:
            keep = self._capacity_keep(indices)
            routed = gates
            gates = torch.where(keep, gates, torch.zeros_like(gates))
            outputs = _dispatch.kept_outputs(self, rows, indices, keep)
            self.dropped = (~keep).sum()
            self.dropped_fraction = self.dropped / max(keep.numel(), 1)
        else:
            routed = gates
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
                _aux.update_defaults(self, outputs, indices, keep)
                defaults = self.default_outputs.detach().clone().to(y.dtype)
                zeros, rest = _unselected_gates(logits, indices, normalize)
                y = y + (zeros.unsqueeze(-1) * defaults[rest]).sum(-2)
            else:
                frozen = rows.detach()

                def unselected(tokens: Tensor, experts: Tensor) -> Tensor:
                    return self.expert_pairs(frozen[tokens], experts)

                y = _dense_mixer(y, logits, indices, unselected, normalize)
        loss = routing.load_balancing_loss(logits, indices, num_experts=self.num_experts)
        self._aux_inputs = (
            loss,
            logits,
            routed,
            indices,
            (clean, std, threshold) if smooth_load else None,
        )
        self._aux_losses = None
        return (
            y.reshape(*batch, self.out_features).to(x.dtype),
            indices.reshape(*batch, self.k),
            loss,
        )
