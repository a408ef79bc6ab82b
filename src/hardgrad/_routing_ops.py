r"""The top-k routing op and its router-gradient estimators (private; documented and
re-exported by :mod:`hardgrad.routing`, whose docstring has the papers and notation)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from . import estimators as _estimators
from ._core.validation import (
    check_all_finite,
    check_dim,
    check_floating,
    check_int,
    check_real,
)
from .estimators._base import gumbel_noise, uniform
from .ops._autograd import apply_function, cached_signature
from .stochastic import _check_generator

#: The router-gradient estimators of :func:`topk_route` by name; besides these, any
#: discrete pathwise estimator of :mod:`hardgrad.estimators` selects stochastic routing.
ROUTING_ESTIMATORS = ("sparse", "dense", "sparsemixer", "sparsemixer_v1")
#: How the gates of the selected experts are normalised (see :func:`topk_route`).
NORMALIZATIONS = ("renormalize", "selected", "none")
#: Estimators of :func:`hardgrad.routing.expectation` that need the objective.
SCORE_FUNCTION = ("reinforce", "rloo", "exact")

UnselectedFn = Callable[[Tensor, Tensor], Tensor]


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class SparseMixer:
    r"""SparseMixer's settings (Liu et al. 2023, https://arxiv.org/abs/2310.00811).

    ``version=2`` (the default) is the form of GRIN / PhiMoE (Liu et al. 2024,
    https://arxiv.org/abs/2409.12136; ``sparsemixer`` in HF transformers'
    ``modeling_phimoe.py``), defined for top-1 and top-2; ``version=1`` is the original
    top-1 estimator of the 2023 paper's code (``sparsemixer/sparsemixer.py``).

    Args:
        jitter_eps: the sparsity threshold :math:`\epsilon`: an expert whose logit is more
            than :math:`2\epsilon` (relative) below the largest is never drawn. ``None``:
            0.01 for version 2 (PhiMoE's ``router_jitter_noise``), 0.1 for version 1.
        version: 1 or 2.

    Example:
        >>> import hardgrad as hg
        >>> hg.routing.SparseMixer()
        SparseMixer(jitter_eps=0.01, version=2)
    """

    jitter_eps: float | None = None
    version: int = 2

    def __post_init__(self) -> None:
        version = check_int(self.version, "version", low=1, high=2)
        eps = self.jitter_eps
        if eps is None:
            eps = 0.01 if version == 2 else 0.1
        eps = check_real(eps, "jitter_eps")
        if not 0 <= eps < math.inf:
            raise ValueError(f"Expected `jitter_eps` >= 0 and finite, but found jitter_eps={eps!r}")
        object.__setattr__(self, "jitter_eps", eps)
        object.__setattr__(self, "version", version)


@dataclass(frozen=True)
class TopK:
    """Stochastic top-k routing as a distribution for :mod:`hardgrad.diagnostics`.

    ``hg.diagnostics.compare(f, logits, estimators=[...], dist=hg.routing.TopK(2))``
    compares router-gradient estimators on ``f(gates, indices)`` against the exact gradient
    of :func:`expectation` (see there for ``f``).

    Args:
        k: experts per token.
        normalize: the gates' normalisation (see :func:`topk_route`).

    Example:
        >>> import hardgrad as hg
        >>> hg.routing.TopK(2)
        TopK(k=2, normalize='renormalize')
    """

    k: int
    normalize: str = "renormalize"

    def __post_init__(self) -> None:
        check_int(self.k, "k", low=1)
        _check_normalize(self.normalize)


def _check_normalize(normalize: Any) -> str:
    if not isinstance(normalize, str) or normalize not in NORMALIZATIONS:
        raise ValueError(
            f"Expected `normalize` to be one of {', '.join(map(repr, NORMALIZATIONS))}, "
            f"but found {normalize!r}"
        )
    return normalize


def _check_indices(indices: Any, batch: torch.Size | None = None, name: str = "indices") -> Tensor:
    """``indices`` must be a dense int64 tensor (the dtype :func:`topk_route` returns and
    ``scatter``/``gather`` take), with the batch shape ``batch`` where given."""
    if not isinstance(indices, Tensor):
        raise TypeError(
            f"Expected `{name}` to be a torch.Tensor, but found {type(indices).__name__}"
        )
    if indices.dtype != torch.int64:
        raise TypeError(f"Expected `{name}` to be an int64 tensor, but found dtype={indices.dtype}")
    if indices.layout != torch.strided:
        raise TypeError(
            f"Expected `{name}` to be a dense (strided) tensor, but found layout={indices.layout}"
        )
    if indices.dim() == 0 or (batch is not None and indices.shape[:-1] != batch):
        raise ValueError(
            f"Expected `{name}` of shape (*batch, k) with the logits' batch shape "
            f"{tuple(batch or ())}, but found shape {tuple(indices.shape)}"
        )
    return indices


def _check_logits(logits: Any, k: Any, dim: Any) -> tuple[int, int]:
    check_floating(logits, "logits")
    d = check_dim(logits, dim)
    experts = logits.shape[d]
    k = check_int(k, "k", low=1)
    if k > experts:
        raise ValueError(
            f"Expected `k` <= the number of experts logits.shape[{dim}] = {experts}, "
            f"but found k={k}"
        )
    return k, d


# --------------------------------------------------------------------------- gates


def _weights(logits: Tensor, indices: Tensor, normalize: str) -> Tensor:
    """The gates of the experts ``indices`` (last dim) for logits (..., E), autograd-able."""
    if normalize == "none":
        return torch.softmax(logits, -1).gather(-1, indices)
    if normalize == "selected":
        return torch.softmax(logits.gather(-1, indices), -1)
    top = torch.softmax(logits, -1).gather(-1, indices)
    return top / top.sum(-1, keepdim=True)


def _deterministic(logits: Tensor, k: int, normalize: str) -> tuple[Tensor, Tensor]:
    """Standard top-k softmax routing along the last dim, written as the models write it."""
    if normalize == "selected":
        top, indices = torch.topk(logits, k, -1)
        return torch.softmax(top, -1), indices
    probs = torch.softmax(logits, -1)
    top, indices = torch.topk(probs, k, -1)
    if normalize == "none":
        return top, indices
    return top / top.sum(-1, keepdim=True), indices


# --------------------------------------------------------------------------- DenseMixer


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


# --------------------------------------------------------------------------- SparseMixer


@cached_signature
class _SparseMixerGate(torch.autograd.Function):
    r"""Forward :math:`\omega \pi_D`; backward :math:`\lambda \bar g \pi_D (e_D - \pi)` to the
    scores (:math:`\lambda` = 1 for version 2, 2 for version 1)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        scores: Tensor, pi: Tensor, selected: Tensor, omega: Tensor, scale: float
    ) -> Tensor:
        return pi.gather(-1, selected) * omega

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _, pi, selected, _, ctx.scale = inputs
        ctx.save_for_backward(pi, selected)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        pi, selected = ctx.saved_tensors
        weighted = grad.to(pi.dtype) * pi.gather(-1, selected) * ctx.scale
        out = (-pi * weighted).scatter_add(-1, selected, weighted)
        return out, None, None, None, None


def _sparsity_mask(scores: Tensor, masked: Tensor, eps: float) -> Tensor:
    """SparseMixer's mask: experts more than 2 eps (relative) below the largest remaining."""
    top = masked.amax(-1, keepdim=True)
    factor = scores.abs().clamp(min=top)
    gap = top - scores
    return torch.where(factor > 0, gap / torch.where(factor > 0, factor, 1), 0) > 2 * eps


def _sparsemixer(
    scores: Tensor,
    k: int,
    settings: SparseMixer,
    training: bool,
    generator: torch.Generator | None,
) -> tuple[Tensor, Tensor]:
    """SparseMixer along the last dim; see :func:`topk_route`."""
    compute = torch.float64 if scores.dtype == torch.float64 else torch.float32
    theta = scores.to(compute)
    eps = float(settings.jitter_eps)  # type: ignore[arg-type]
    v1 = settings.version == 1
    remaining = theta.detach()
    gates, chosen = [], []
    for _ in range(k):
        drop = _sparsity_mask(theta.detach(), remaining, eps)
        masked = remaining.masked_fill(drop, -math.inf)
        if training:
            selected = (masked + gumbel_noise(masked, generator)).argmax(-1, keepdim=True)
        else:
            selected = masked.argmax(-1, keepdim=True)
        pi = torch.softmax(masked, -1)
        if training:
            best = selected == pi.argmax(-1, keepdim=True)
            u = uniform(selected.to(compute), generator)
            one = best | (u > (0.5 if v1 else 0.75))
            low = torch.full_like(u, 0.5 if v1 else 0.3333)  # PhiMoE: 0.3333 + 0.6667 * one
            omega = torch.where(one, torch.ones_like(u), low)
        else:
            omega = torch.ones_like(selected, dtype=compute)
        scale = 2.0 if v1 and training else 1.0
        gate = apply_function(_SparseMixerGate, theta, pi, selected, omega, scale)
        gates.append(gate)
        chosen.append(selected)
        remaining = remaining.scatter(-1, selected, -math.inf)
    return torch.cat(gates, -1).to(scores.dtype), torch.cat(chosen, -1)


# --------------------------------------------------------------------------- stochastic


def _gumbel_topk(
    logits: Tensor, k: int, chosen: _estimators.Estimator, generator: torch.Generator | None
) -> tuple[Tensor, Tensor]:
    """k sequential draws without replacement (Plackett-Luce), each a one-hot of the
    estimator with the earlier experts masked out. Returns (one-hots (k, ..., E), indices)."""
    masked = logits
    taken = torch.zeros_like(logits, dtype=torch.bool)
    samples, indices = [], []
    for _ in range(k):
        sample = chosen.sample_categorical(masked, generator, masked.dim() - 1)
        index = sample.detach().argmax(-1, keepdim=True)
        samples.append(sample)
        indices.append(index)
        taken = taken.scatter(-1, index, True)
        masked = logits.masked_fill(taken, -math.inf)
    return torch.stack(samples), torch.cat(indices, -1)


def _stochastic(
    logits: Tensor,
    k: int,
    chosen: _estimators.Estimator,
    normalize: str,
    generator: torch.Generator | None,
) -> tuple[Tensor, Tensor]:
    samples, indices = _gumbel_topk(logits, k, chosen, generator)
    if normalize == "none":
        w = torch.softmax(logits, -1)  # the full softmax: a one-hot's relaxation sees every p_j
    else:  # defined on the drawn set only
        w = torch.zeros_like(logits).scatter(-1, indices, _weights(logits, indices, normalize))
    gates = (samples * w).sum(-1)  # (k, ...): exactly w at the drawn expert (the rest add +0)
    return gates.movedim(0, -1), indices


# --------------------------------------------------------------------------- the op


def _resolve(estimator: Any) -> str | SparseMixer | _estimators.Estimator:
    if isinstance(estimator, SparseMixer):
        return estimator
    if isinstance(estimator, str):
        if estimator in ROUTING_ESTIMATORS:
            if estimator == "sparsemixer":
                return SparseMixer()
            if estimator == "sparsemixer_v1":
                return SparseMixer(version=1)
            return estimator
        if estimator in SCORE_FUNCTION:
            raise ValueError(
                f"Expected a routing or pathwise `estimator`, but found {estimator!r}, which "
                "needs the objective: use hg.routing.expectation (or hg.diagnostics.compare)"
            )
    if isinstance(estimator, str) and estimator not in _estimators.ESTIMATORS:
        pathwise = [n for n, c in _estimators.ESTIMATORS.items() if c.pathwise and c.discrete]
        raise ValueError(
            f"Unknown `estimator` {estimator!r}; available: "
            f"{', '.join(map(repr, ROUTING_ESTIMATORS + tuple(pathwise)))}"
        )
    if not isinstance(estimator, (str, _estimators.Estimator)):
        raise TypeError(
            "Expected `estimator` to be a name, a hg.routing.SparseMixer or a "
            f"hardgrad.estimators.Estimator, but found {type(estimator).__name__}"
        )
    instance = _estimators.resolve(estimator, pathwise=True, where="hg.topk_route")
    if not instance.discrete:
        raise ValueError(
            f"Expected a discrete pathwise `estimator` (exact one-hot draws), but found "
            f"{instance!r}, whose samples are relaxed: the routing would not be sparse"
        )
    return instance


def topk_route(
    logits: Tensor,
    k: int,
    *,
    dim: int = -1,
    estimator: str | SparseMixer | _estimators.Estimator = "sparse",
    normalize: str | None = None,
    generator: torch.Generator | None = None,
    training: bool = True,
) -> tuple[Tensor, Tensor]:
    r"""Top-k mixture-of-experts routing: gate weights and selected experts, with a chosen
    router gradient.

    Forward (``estimator="sparse"`` or ``"dense"``): exactly standard top-k softmax
    routing, computed as the models write it, for each ``normalize``:

    * ``"renormalize"`` (default): :math:`p = \operatorname{softmax}(\theta)`, the top-k of
      :math:`p`, divided by their sum: :math:`g_i = p_i / \sum_{j\in S} p_j` (HF
      transformers' Mixtral, Qwen2/3-MoE with ``norm_topk_prob=True``, DeepSeek-V3);
    * ``"selected"``: the top-k of :math:`\theta`, softmax over those k logits (Mistral's
      reference Mixtral code). Equal to ``"renormalize"`` in exact arithmetic
      (:math:`e^{\theta_i}/\sum_{j \in S} e^{\theta_j}`), different in rounding;
    * ``"none"``: the top-k of :math:`p` as they are, :math:`g_i = p_i` (Switch Transformer
      top-1, GShard-style gating without renormalisation, Qwen1.5/2-MoE and OLMoE with
      ``norm_topk_prob=False``, DeepSeek-V2). With ``k=1`` the renormalised forms give
      gate 1 and no router gradient at all; top-1 routers use ``"none"``.

    Ties go as :func:`torch.topk` breaks them. Backward, by ``estimator``:

    * ``"sparse"``: autograd through the selected gates only (the baseline every framework
      uses): :math:`\partial L/\partial\theta = \sum_{i\in S} c_i\, \partial g_i/\partial\theta`,
      e.g. :math:`p \odot (c_S - \langle c_S, p\rangle)` for ``"none"``; nothing for the
      choice of :math:`S`. This is the true gradient of the deterministic top-k loss
      wherever the selection does not change (almost everywhere).
    * ``"dense"``: DenseMixer (Yao et al. 2025): the gradient of the dense output
      :math:`\sum_j w_j(\theta) E_j(x)`, forward sparse. The gates returned here carry its
      selected share, which equals the sparse gradient (:math:`w_S = g`); the unselected
      share needs the layer's output: pass it through :func:`dense_mixer`.
    * ``"sparsemixer"`` (or ``SparseMixer(version=2)``; GRIN / PhiMoE, ``k`` in {1, 2}):
      slot by slot, experts whose logit is more than :math:`2\epsilon` (relative,
      ``(max - θ_j) / max(|θ_j|, max) > 2ε``) below the largest remaining one are masked;
      with :math:`\pi = \operatorname{softmax}` of the masked logits the expert is *drawn*,
      :math:`D \sim \pi` (Gumbel-max; the earlier slot's expert removed for slot 2), and
      the gate is :math:`\omega \pi_D`, :math:`\omega = 1` if :math:`D` is the argmax of
      :math:`\pi` or with probability 1/4, else :math:`\omega = 0.3333` (Heun's
      third-order method). Backward: :math:`\partial L/\partial \theta = \bar g\, \pi_D
      (e_D - \pi)` per slot (the derivative of :math:`\pi_D`, not of :math:`\omega\pi_D`).
      With ``training=False``: :math:`D` the argmax, :math:`\omega = 1`.
    * ``"sparsemixer_v1"`` (``SparseMixer(version=1)``, the 2023 paper's code, ``k=1``):
      the same with :math:`\epsilon = 0.1`, :math:`\omega = 1` for the argmax or with
      probability 1/2, else :math:`\omega = 1/2`, and backward
      :math:`2\bar g\,\pi_D (e_D - \pi)` (the midpoint method); with ``training=False``
      the argmax, :math:`\omega = 1` and the plain derivative :math:`\bar g\,\pi_D (e_D - \pi)`.
    * a discrete pathwise estimator of :mod:`hardgrad.estimators` (``"st"``,
      ``"st_gumbel"``, ``"reinmax"``, ``"gumbel_rao"``, ``"gst"``, ``"st_identity"`` or an
      instance): stochastic routing. The k experts are drawn without replacement from
      :math:`p` (Plackett-Luce: slot :math:`r` is a categorical draw over the experts not
      yet chosen, i.e. Gumbel top-k), each draw a one-hot :math:`D_r` whose backward is
      the estimator; the gate of slot :math:`r` is :math:`\langle D_r, w\rangle` with
      :math:`w` = :math:`p` (``"none"``) or the softmax over the drawn experts (the
      renormalised forms), so the router gets both the gates' gradient and the estimator's.

    SparseMixer ignores ``normalize`` (its gates are its own) and rejects a value for it.
    Score-function estimators and exact enumeration need the objective: see
    :func:`expectation`.

    Args:
        logits: router logits, floating, the experts along ``dim``; finite (checked while
            validation is on).
        k: experts per token, ``1 <= k <= E``.
        dim: the experts' dimension.
        estimator: a name from :data:`ROUTING_ESTIMATORS`, a :class:`SparseMixer`, or a
            discrete pathwise estimator (name or instance).
        normalize: ``"renormalize"``, ``"selected"`` or ``"none"``; ``None`` is
            ``"renormalize"``.
        generator: randomness of the sampling estimators.
        training: SparseMixer's training mode (sampling and :math:`\omega`); ignored by
            the others.

    Returns:
        ``(gates, indices)``: gates of the logits' dtype and int64 indices, both of the
        logits' shape with ``dim`` of size ``k`` (slot order: decreasing for the
        deterministic forms, drawing order for the sampled ones).

    Raises:
        TypeError: non-floating ``logits``; ``k`` not an int; bad ``estimator`` type.
        ValueError: ``k < 1`` or ``k > E``; unknown ``estimator`` or ``normalize``;
            SparseMixer with ``k > 2`` (``k > 1`` for version 1) or with ``normalize``;
            inf or NaN logits.

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.tensor([[1.0, 3.0, 0.0, 2.0]], requires_grad=True)
        >>> gates, indices = hg.topk_route(logits, 2)
        >>> gates, indices
        (tensor([[0.7311, 0.2689]], grad_fn=<DivBackward0>), tensor([[1, 3]]))
        >>> (gates * torch.tensor([[1.0, -1.0]])).sum().backward()
        >>> logits.grad.round(decimals=4) + 0.0   # the unselected experts get nothing
        tensor([[ 0.0000,  0.3932,  0.0000, -0.3932]])
        >>> g = torch.Generator().manual_seed(0)
        >>> hg.topk_route(logits, 2, estimator="st_gumbel", generator=g)[1]  # drawn
        tensor([[1, 3]])
    """
    k, d = _check_logits(logits, k, dim)
    chosen = _resolve(estimator)
    _check_generator(generator)
    if not isinstance(training, bool):
        raise TypeError(f"Expected `training` to be a bool, but found {type(training).__name__}")
    if isinstance(chosen, SparseMixer):
        if normalize is not None:
            raise ValueError(
                f"Expected `normalize`=None for SparseMixer (its gates are its own), but "
                f"found normalize={normalize!r}"
            )
        limit = 2 if chosen.version == 2 else 1
        if k > limit:
            raise ValueError(
                f"Expected `k` <= {limit} for {chosen!r} (published for top-{limit}), but "
                f"found k={k}"
            )
    norm = _check_normalize("renormalize" if normalize is None else normalize)
    check_all_finite(logits, "logits")
    last = d == logits.dim() - 1
    moved = logits if last else logits.movedim(d, -1)
    if isinstance(chosen, str):
        gates, indices = _deterministic(moved, k, norm)
    elif isinstance(chosen, SparseMixer):
        gates, indices = _sparsemixer(moved, k, chosen, training, generator)
    else:
        gates, indices = _stochastic(moved, k, chosen, norm, generator)
    if last:
        return gates, indices
    return gates.movedim(-1, d), indices.movedim(-1, d)
