r"""Router-gradient diagnostics: :func:`hardgrad.diagnostics.compare` with
``dist=hg.routing.TopK(k)``.

The reference is the exact gradient of the expected loss under stochastic top-k routing,
:math:`\nabla_\theta E_{S \sim \mathrm{PL}_k(\operatorname{softmax}\theta)}[f(g(\theta, S), S)]`,
by enumerating the :math:`\binom{E}{k}` subsets (:func:`hardgrad.routing.enumerate_routes`);
each estimator's draws are gradients of one :func:`hardgrad.routing.expectation` call.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from .. import routing
from .._core.validation import check_floating, check_int

#: Elements (draws x logits) handed to one routing.expectation call at most.
CHUNK_ELEMENTS = 2**18


def routing_exact_gradient(f: Any, logits: Tensor, dist: routing.TopK) -> Tensor:
    """The exact gradient of :func:`hardgrad.routing.expectation` summed over the tokens."""
    leaf = logits.detach().requires_grad_()
    with torch.enable_grad():
        value = routing.expectation(f, leaf, dist.k, estimator="exact", normalize=dist.normalize)
        (gradient,) = torch.autograd.grad(value.sum(), leaf, allow_unused=True)
    return torch.zeros_like(leaf) if gradient is None else gradient


def routing_gradient_samples(
    f: Any,
    logits: Tensor,
    dist: routing.TopK,
    *,
    estimator: Any,
    num_draws: int,
    num_samples: int | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """``num_draws`` independent router-gradient estimates, ``(num_draws, *logits.shape)``;
    the draws are stacked along a new leading dim of the logits, so ``f`` sees
    ``n * draws`` samples at once (it must treat samples independently)."""
    draws = check_int(num_draws, "num_draws", low=1)
    shape = tuple(logits.shape)
    per_chunk = max(1, CHUNK_ELEMENTS // max(1, logits.numel()))
    chunks = []
    for start in range(0, draws, per_chunk):
        count = min(per_chunk, draws - start)

        def replicated(gates: Tensor, indices: Tensor, count: int = count) -> Tensor:
            n = gates.shape[0]
            tail = gates.shape[2:]
            values = f(gates.reshape(n * count, *tail), indices.reshape(n * count, *tail))
            if not isinstance(values, Tensor) or values.dim() == 0 or values.shape[0] != n * count:
                return values  # routing.expectation reports the bad shape
            return values.reshape(n, count, *values.shape[1:])

        stacked = logits.detach().unsqueeze(0).expand(count, *shape).clone().requires_grad_()
        with torch.enable_grad():
            value = routing.expectation(
                replicated,
                stacked,
                dist.k,
                estimator=estimator,
                normalize=dist.normalize,
                num_samples=num_samples,
                generator=generator,
            )
            (gradient,) = torch.autograd.grad(value.sum(), stacked, allow_unused=True)
        chunks.append(torch.zeros_like(stacked) if gradient is None else gradient)
    return torch.cat(chunks)


def compare_routing(
    f: Any,
    logits: Tensor,
    dist: routing.TopK,
    estimators: Sequence[Any],
    num_draws: int,
    exact: bool,
    generator: torch.Generator | None,
) -> tuple[list[tuple[str, Tensor, float]], Tensor | None]:
    """The draws of each estimator (name, draws, seconds) and the exact gradient."""
    check_floating(logits, "logits")
    if logits.dim() == 0:
        raise ValueError(
            "Expected `logits` with the experts on the last dim, but found a 0-dim tensor"
        )
    reference = routing_exact_gradient(f, logits, dist) if exact else None
    out = []
    for spec in estimators:
        start = time.perf_counter()
        try:
            draws = routing_gradient_samples(
                f, logits, dist, estimator=spec, num_draws=num_draws, generator=generator
            )
        except (TypeError, ValueError) as error:
            if "`estimator`" not in str(error):
                raise
            raise type(error)(f"Bad entry {spec!r} in `estimators`: {error}") from None
        seconds = time.perf_counter() - start
        out.append((spec if isinstance(spec, str) else repr(spec), draws, seconds))
    return out, reference
