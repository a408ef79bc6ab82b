r"""Gradient estimates of :math:`\nabla_\theta \sum_j E[f_j(b)]`: exact, and one per draw.

Draws are vectorised: ``num_draws`` copies of the logits are stacked along a new leading
batch dimension, so one :func:`hardgrad.expectation` call gives many independent
estimates (the prefix entries of :func:`hardgrad.expectation` are independent problems).
``f`` then sees ``num_samples * draws`` samples at once; it must treat them independently
(no batch statistics across samples).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._core.validation import check_dim, check_int
from ..estimators import Estimator
from ..estimators._problem import Objective
from ..routing import TopK
from ..stochastic._checks import _one_of
from ..stochastic._expectation import expectation
from ._routing import routing_exact_gradient

#: Elements (draws x logits) handed to one hg.expectation call at most.
CHUNK_ELEMENTS = 2**21


def exact_gradient(
    f: Objective,
    logits: Tensor | None = None,
    *,
    probs: Tensor | None = None,
    dist: str | TopK = "bernoulli",
    dim: int = -1,
) -> Tensor:
    r"""The exact :math:`\nabla_\theta \sum_j E_{b \sim p_\theta}[f_j(b)]`, by enumeration.

    Every configuration of the variables of one prefix entry is enumerated
    (``estimator="exact"`` of :func:`hardgrad.expectation`), so this is exact up to rounding;
    it raises ``ValueError`` past 2**16 configurations per prefix entry. With ``probs``,
    the gradient with respect to the probabilities (exact at 0 and 1 too).

    Args:
        f: the objective, ``(n, *logits.shape) -> (n, *prefix)``.
        logits: floating tensor (log-odds, or log-probabilities along ``dim``).
        probs: floating tensor of probabilities (keyword only), instead of ``logits``.
        dist: ``"bernoulli"`` or ``"categorical"``; or :class:`hardgrad.routing.TopK`:
            router logits (experts on the last dim) and ``f(gates, indices)``, the
            gradient of :func:`hardgrad.routing.expectation` by enumerating the subsets.
        dim: the category dimension (categorical only).

    Returns:
        A tensor shaped like ``logits`` (or ``probs``).

    Example:
        >>> import torch, hardgrad as hg
        >>> phi = torch.zeros(2)
        >>> hg.diagnostics.exact_gradient(lambda b: (b - 0.45).square().sum(-1), phi)
        tensor([0.0250, 0.0250])
        >>> hg.diagnostics.exact_gradient(lambda b: (b - 0.45).square().sum(-1),
        ...                               probs=torch.tensor([0.0, 1.0]))   # 1 - 2t
        tensor([0.1000, 0.1000])
    """
    tensor, is_probs = _one_of(logits, probs)
    if isinstance(dist, TopK):
        if is_probs:
            raise ValueError("Expected `logits` (router logits) for dist=TopK, but found `probs`")
        return routing_exact_gradient(f, tensor, dist)
    leaf = tensor.detach().requires_grad_()
    with torch.enable_grad():
        value = expectation(
            f,
            None if is_probs else leaf,
            probs=leaf if is_probs else None,
            dist=dist,
            estimator="exact",
            dim=dim,
        )
        (gradient,) = torch.autograd.grad(value.sum(), leaf, allow_unused=True)
    return torch.zeros_like(leaf) if gradient is None else gradient


def gradient_samples(
    f: Objective,
    logits: Tensor | None = None,
    *,
    probs: Tensor | None = None,
    estimator: str | Estimator,
    dist: str = "bernoulli",
    num_draws: int = 1000,
    num_samples: int | None = None,
    dim: int = -1,
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""``num_draws`` independent estimates of :math:`\nabla_\theta \sum_j E[f_j(b)]`.

    Each draw is the logits-gradient (with ``probs``, the probabilities-gradient) of one
    :func:`hardgrad.expectation` call with ``estimator`` and ``num_samples``; the draws are
    computed in vectorised chunks.
    Stateful estimators are used as they are (an ``"ema"`` baseline is updated once per
    chunk); their parameters' ``.grad`` is left untouched.

    Args:
        f: the objective, ``(n, *logits.shape) -> (n, *prefix)``; it must treat samples
            independently.
        logits: floating tensor.
        probs: floating tensor of probabilities (keyword only), instead of ``logits``.
        estimator: a name or instance from :mod:`hardgrad.estimators`.
        dist: ``"bernoulli"`` or ``"categorical"``.
        num_draws: how many estimates, >= 1.
        num_samples: passed to :func:`hardgrad.expectation` (``None``: the estimator's default).
        dim: the category dimension (categorical only).
        generator: the source of randomness.

    Returns:
        A tensor of shape ``(num_draws, *logits.shape)``.

    Example:
        >>> import torch, hardgrad as hg
        >>> draws = hg.diagnostics.gradient_samples(
        ...     lambda b: (b - 0.45).square().sum(-1), torch.zeros(1), estimator="disarm",
        ...     num_draws=5, generator=torch.Generator().manual_seed(0))
        >>> draws.squeeze(1)   # DisARM has zero variance on the one-bit toy at phi = 0
        tensor([0.0250, 0.0250, 0.0250, 0.0250, 0.0250])
    """
    tensor, is_probs = _one_of(logits, probs)
    draws = check_int(num_draws, "num_draws", low=1)
    d = check_dim(tensor, dim) if dist == "categorical" else 0
    per_chunk = max(1, CHUNK_ELEMENTS // max(1, tensor.numel()))
    chunks = []
    for start in range(0, draws, per_chunk):
        count = min(per_chunk, draws - start)
        chunks.append(
            _draw_chunk(f, tensor, is_probs, count, estimator, dist, num_samples, d, generator)
        )
    return torch.cat(chunks)


def _draw_chunk(
    f: Objective,
    logits: Tensor,
    is_probs: bool,
    count: int,
    estimator: str | Estimator,
    dist: str,
    num_samples: int | None,
    dim: int,
    generator: torch.Generator | None,
) -> Tensor:
    """``count`` draws in one call: the logits (or probabilities) stacked ``count`` times
    along a new dim 0."""
    shape = tuple(logits.shape)

    def replicated(samples: Tensor) -> Tensor:
        n = samples.shape[0]
        values = f(samples.reshape(n * count, *shape))
        if not isinstance(values, Tensor) or values.dim() == 0 or values.shape[0] != n * count:
            return values  # hg.expectation reports the bad shape
        return values.reshape(n, count, *values.shape[1:])

    stacked = logits.detach().unsqueeze(0).expand(count, *shape).clone().requires_grad_()
    with torch.enable_grad():
        value = expectation(
            replicated,
            None if is_probs else stacked,
            probs=stacked if is_probs else None,
            dist=dist,
            estimator=estimator,
            num_samples=num_samples,
            dim=dim + 1,
            generator=generator,
        )
        (gradient,) = torch.autograd.grad(value.sum(), stacked, allow_unused=True)
    return torch.zeros_like(stacked) if gradient is None else gradient
