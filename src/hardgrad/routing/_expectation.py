r"""Expected losses under stochastic top-k routing: the Plackett-Luce enumeration and the
estimators that need the objective (private; documented and re-exported by
:mod:`hardgrad.routing`)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from .._core.validation import check_all_finite, check_floating, check_int
from ..estimators import RLOO, Exact, Reinforce
from ..estimators._noise import gumbel_noise
from ..stochastic._checks import _check_generator
from ._dense_mixer import _unselected_gates
from ._settings import SparseMixer, _check_logits, _check_normalize, _resolve
from ._topk import _weights, topk_route

Objective = Callable[[Tensor, Tensor], Tensor]


# --------------------------------------------------------------------------- expectations


def _subsets(experts: int, k: int, device: torch.device) -> Tensor:
    return torch.tensor(list(itertools.combinations(range(experts), k)), device=device).reshape(
        -1, k
    )


def enumerate_routes(logits: Tensor, k: int) -> tuple[Tensor, Tensor]:
    r"""Every k-subset of the experts and its probability under Gumbel top-k sampling.

    For logits ``(..., E)`` (last dim) returns ``(subsets, log_probs)``: ``subsets`` of
    shape ``(M, k)`` (increasing expert indices, :math:`M = \binom{E}{k}`) and
    ``log_probs`` of shape ``(M, ...)``, differentiable, with

    .. math::

        P(S) = \sum_{\sigma \in \operatorname{perm}(S)} \prod_{r=1}^{k}
        \frac{e^{\theta_{\sigma_r}}}{\sum_j e^{\theta_j} - \sum_{s<r} e^{\theta_{\sigma_s}}},

    the probability that k draws without replacement from :math:`p` (Plackett-Luce; equal
    to the top-k of :math:`\theta + G` with i.i.d. Gumbel :math:`G`) give the set
    :math:`S` in any order. Computed in log space (each denominator a ``logsumexp`` over
    the experts not yet drawn), in float32 (float64 for float64 logits) and rounded once
    to the logits' dtype; the probabilities sum to 1.

    Example:
        >>> import torch, hardgrad as hg
        >>> subsets, log_probs = hg.routing.enumerate_routes(torch.log(torch.tensor([0.5, 0.3, 0.2])), 2)
        >>> subsets.tolist(), log_probs.exp()   # P({0,1}) = .5*.3/.5 + .3*.5/.7
        ([[0, 1], [0, 2], [1, 2]], tensor([0.5143, 0.3250, 0.1607]))
    """
    check_floating(logits, "logits")
    if logits.dim() == 0:
        raise ValueError("Expected `logits` of shape (*batch, E), but found a 0-dim tensor")
    experts = logits.shape[-1]
    k = check_int(k, "k", low=1, high=experts)
    check_all_finite(logits, "logits")
    subsets, log_probs = _enumerate_routes(logits, k)
    return subsets, log_probs.to(logits.dtype)


def _enumerate_routes(logits: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """:func:`enumerate_routes` after its checks, the log-probabilities in float32
    (float64 for float64 logits), not rounded to a half type."""
    experts = logits.shape[-1]
    logits = logits.to(torch.float64 if logits.dtype == torch.float64 else torch.float32)
    subsets = _subsets(experts, k, logits.device)
    perms = torch.tensor(list(itertools.permutations(range(k))), device=logits.device)
    ordered = subsets[:, perms].reshape(-1, k)  # (M k!, k): every order of every subset
    batch = logits.shape[:-1]
    theta = logits.reshape(-1, experts)  # (N, E)
    taken = torch.zeros(ordered.shape[0], 1, experts, dtype=torch.bool, device=logits.device)
    total = logits.new_zeros(ordered.shape[0], theta.shape[0])
    for r in range(k):
        index = ordered[:, r]
        remaining = torch.logsumexp(theta.masked_fill(taken, -math.inf), -1)  # (M k!, N)
        total = total + theta[:, index].T - remaining
        taken = taken.scatter(2, index[:, None, None], True)
    log_probs = torch.logsumexp(total.reshape(subsets.shape[0], perms.shape[0], -1), 1)
    return subsets, log_probs.reshape(subsets.shape[0], *batch)


def _log_plackett_luce(logits: Tensor, indices: Tensor) -> Tensor:
    """log P of drawing ``indices`` (..., k) in that order from softmax(logits) (..., E)."""
    taken = torch.zeros_like(logits, dtype=torch.bool)
    total = logits.new_zeros(indices.shape[:-1])
    for r in range(indices.shape[-1]):
        index = indices[..., r : r + 1]
        total = total + logits.gather(-1, index).squeeze(-1)
        total = total - torch.logsumexp(logits.masked_fill(taken, -math.inf), -1)
        taken = taken.scatter(-1, index, True)
    return total


def _check_values(values: Any, n: int, batch: torch.Size) -> Tensor:
    if not isinstance(values, Tensor) or not values.is_floating_point():
        raise TypeError(
            f"Expected `f` to return a floating tensor, but found {type(values).__name__}"
        )
    if values.shape != (n, *batch):
        raise ValueError(
            f"Expected `f` to return shape {(n, *batch)} (one value per sample and token), "
            f"but found {tuple(values.shape)}"
        )
    return values


def expectation(
    f: Objective,
    logits: Tensor,
    k: int,
    *,
    estimator: Any = "rloo",
    normalize: str = "renormalize",
    num_samples: int | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""The expected loss under stochastic top-k routing, with any router-gradient estimator.

    The objective is :math:`\mathcal{L}(\theta) = E_{S \sim \mathrm{PL}_k(p)}
    [f(g(\theta, S), S)]`, :math:`S` the experts drawn without replacement from
    :math:`p = \operatorname{softmax}(\theta)` (Gumbel top-k, see :func:`enumerate_routes`)
    and :math:`g` their gates (``normalize``). ``f(gates, indices)`` receives gates and
    indices of shape ``(n, *batch, m)`` (``n`` samples, ``batch`` the logits' batch shape,
    ``m`` slots, usually ``k``) and returns per-token values ``(n, *batch)``; it must treat
    samples independently and be a sum over the slots' outputs (so that ``m`` may vary:
    ``"dense"`` passes all ``E`` experts, the unselected ones with gate 0).

    Forward: the mean of ``f`` over the estimator's samples (for ``"exact"``,
    :math:`\sum_S P(S) f(g(\theta,S), S)` over every subset). The gradient with respect to
    ``logits`` is the estimator:

    * ``"exact"``: autograd of the enumeration, the exact :math:`\nabla\mathcal{L}`;
    * ``"reinforce"`` / ``"rloo"``: :math:`\frac1n\sum_s \big[\nabla_\theta f(g(\theta,
      S_s), S_s) + (f_s - b_s) \nabla_\theta \log P(\sigma_s)\big]` with the ordered draws
      :math:`\sigma_s` (Plackett-Luce log-probability), :math:`b = 0` or the mean of the
      other samples (RLOO, ``n >= 2``); unbiased;
    * a discrete pathwise estimator: :func:`topk_route` with it, ``n`` samples (biased);
    * ``"sparse"``, ``"dense"``, ``"sparsemixer"``, ``"sparsemixer_v1"``: :func:`topk_route`
      with it (deterministic, or SparseMixer's own draws); these change the objective
      (the deterministic top-k, SparseMixer's multipliers), so against
      :math:`\nabla\mathcal{L}` they are biased by construction; that bias is what
      :func:`hardgrad.diagnostics.compare` measures.

    Args:
        f: the objective ``(gates, indices) -> values``.
        logits: router logits ``(*batch, E)`` (experts on the last dim).
        k: experts per token.
        estimator: a name or instance (see above).
        normalize: the gates' normalisation.
        num_samples: samples (``None``: 2 for ``"rloo"``, 1 otherwise; must be ``None`` for
            ``"exact"``).
        generator: the source of randomness.

    Returns:
        A tensor of shape ``batch``.

    Example:
        >>> import torch, hardgrad as hg
        >>> outputs = torch.tensor([1.0, 0.0, 0.5])                 # expert j outputs E_j
        >>> f = lambda gates, idx: ((gates * outputs[idx]).sum(-1) - 1.0).square()
        >>> logits = torch.zeros(1, 3, requires_grad=True)
        >>> hg.routing.expectation(f, logits, 1, estimator="exact", normalize="none")
        tensor([0.7130], grad_fn=<SumBackward1>)
    """
    if not callable(f):
        raise TypeError(f"Expected `f` to be callable, but found {type(f).__name__}")
    k, _ = _check_logits(logits, k, -1)
    normalize = _check_normalize(normalize)
    _check_generator(generator)
    check_all_finite(logits, "logits")
    batch = logits.shape[:-1]
    name = estimator if isinstance(estimator, str) else None
    if name == "exact" or isinstance(estimator, Exact):
        if num_samples is not None:
            raise ValueError(
                "Expected `num_samples`=None for the exact estimator, which evaluates f on "
                f"every subset, but found num_samples={num_samples!r}"
            )
        subsets, log_probs = _enumerate_routes(logits, k)  # (float32 for half logits)
        count = subsets.shape[0]
        limit = estimator.max_configurations if isinstance(estimator, Exact) else 2**16
        if count > limit:
            raise ValueError(
                f"Expected at most {limit} subsets for the exact estimator, but C(E, k) = {count}"
            )
        indices = subsets.reshape(count, *([1] * len(batch)), k).expand(count, *batch, k)
        gates = _weights(logits.expand(count, *logits.shape), indices, normalize)
        values = _check_values(f(gates, indices), count, batch)
        out = (log_probs.exp() * values.to(log_probs.dtype)).sum(0)
        return out.to(torch.promote_types(logits.dtype, values.dtype))  # (rounded once)
    score = name in ("reinforce", "rloo") or isinstance(estimator, (Reinforce, RLOO))
    loo = name == "rloo" or isinstance(estimator, RLOO)
    if isinstance(estimator, Reinforce) and estimator.baseline is not None:
        raise ValueError(
            "Expected Reinforce(baseline=None) for routing (use 'rloo' for a baseline), "
            f"but found {estimator!r}"
        )
    default = 2 if loo else 1
    n = default if num_samples is None else check_int(num_samples, "num_samples", low=1)
    if loo and n < 2:
        raise ValueError(f"Expected `num_samples` >= 2 for 'rloo', but found num_samples={n}")
    stacked = logits.expand(n, *logits.shape)
    if score:
        with torch.no_grad():
            noise = gumbel_noise(stacked, generator)
            indices = torch.topk(stacked.detach() + noise, k, -1).indices
        gates = _weights(stacked, indices, normalize)
        values = _check_values(f(gates, indices), n, batch)
        log_p = _log_plackett_luce(stacked, indices)
        fixed = values.detach()
        baseline = (fixed.sum(0, keepdim=True) - fixed) / (n - 1) if loo else 0.0
        weight = fixed - baseline
        return (values + weight * (log_p - log_p.detach())).mean(0)
    chosen = _resolve(estimator)
    sparsemixer = isinstance(chosen, SparseMixer)
    gates, indices = topk_route(
        stacked,
        k,
        estimator=estimator,
        normalize=None if sparsemixer else normalize,
        generator=generator,
    )
    if chosen == "dense" and k < logits.shape[-1]:
        extra, rest = _unselected_gates(stacked, indices, normalize)
        gates, indices = torch.cat([gates, extra], -1), torch.cat([indices, rest], -1)
    values = _check_values(f(gates, indices), n, batch)
    return values.mean(0)
