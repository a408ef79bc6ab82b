"""The argument checks the samplers and :func:`hardgrad.expectation` share: exactly one of
``logits`` and ``probs``, the generator, the pathwise estimator and its temperature, and the
value checks of ``probs``."""

from __future__ import annotations

import torch
from torch import Tensor

from .. import estimators as _estimators
from .._core.validation import check_floating, check_normal, value_checks_apply
from ..estimators._noise import noise_dtype

EstimatorLike = str | _estimators.Estimator


def _check_generator(generator: object) -> None:
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"Expected `generator` to be a torch.Generator or None, but found {type(generator).__name__}"
        )


def _resolve(estimator: EstimatorLike, logits: Tensor, where: str) -> _estimators.Estimator:
    """The pathwise estimator, with its temperature checked against the logits' dtype: it
    must be a normal number of the dtype the backward computes in (float32 for half
    types), or logits / tau and the division by tau would give inf and NaN."""
    chosen = _estimators.resolve(estimator, pathwise=True, where=where)
    tau = getattr(chosen, "tau", None)
    if isinstance(tau, float):
        check_normal(tau, "tau", noise_dtype(logits))
    return chosen


def _one_of(logits: Tensor | None, probs: Tensor | None) -> tuple[Tensor, bool]:
    """The tensor given (exactly one of ``logits`` and ``probs``) and whether it is ``probs``."""
    if probs is None:
        if logits is None:
            raise ValueError(
                "Expected exactly one of `logits` and `probs`, but found neither (both None)"
            )
        return check_floating(logits, "logits"), False
    if logits is not None:
        raise ValueError("Expected exactly one of `logits` and `probs`, but found both")
    return check_floating(probs, "probs"), True


def _index(mask: Tensor) -> tuple[int, ...]:
    """The index of the first set entry of ``mask`` (for error messages)."""
    return tuple(int(i) for i in torch.nonzero(mask)[0].tolist())


def _simplex_tolerance(dtype: torch.dtype) -> float:
    """How far from 1 a sum of category probabilities may be: ``torch.distributions``'
    simplex check's 1e-6, or 8 ulps of 1 for the half types (whose own rounding of each
    probability is up to half an ulp)."""
    return max(1e-6, 8 * torch.finfo(dtype).eps)


def check_probs(
    probs: Tensor,
    *,
    categorical: bool,
    dim: int,
    estimator: _estimators.Estimator | None,
) -> None:
    """The value checks of ``probs`` (only while :func:`hardgrad._core.validation.value_checks_apply`):
    no NaN, in [0, 1] (Bernoulli) or non-negative and summing to 1 along ``dim`` within
    :func:`_simplex_tolerance` (categorical); and, when ``probs`` will be differentiated
    with an ``estimator`` whose gradient is infinite at probabilities of exactly 0 (or 1),
    none there. One device synchronisation for all of them."""
    if not value_checks_apply(probs) or probs.numel() == 0:
        return
    q = probs.detach()
    # The extremes decide the range (a NaN makes both NaN, which fails both comparisons)
    # and whether a probability is exactly 0 (or 1); the masks are built only for the
    # error message. One reduction and one synchronisation: 8 against 53 µs on 64 x 256.
    low, high = torch.aminmax(q)
    tolerance = _simplex_tolerance(probs.dtype)
    stats = [low, high]
    if categorical:
        deviation = (q.to(torch.float64).sum(dim) - 1).abs()
        stats.append(deviation.max())
    if q.is_cpu:  # no synchronisation to save: 0-d reads (8.7 -> 4.8 µs)
        values = [stat.item() for stat in stats]
    else:  # one synchronisation for all of them
        values = torch.stack([stat.to(torch.float64) for stat in stats]).tolist()
    in_range = values[0] >= 0 and (categorical or values[1] <= 1)
    if not in_range:
        bad = ~((q >= 0) & (q <= 1)) if not categorical else ~(q >= 0)  # NaN included
        index = _index(bad)
        value = float(q[index])
        if value != value:
            raise ValueError(f"Expected `probs` without NaN, but found NaN at index {index}")
        expected = f"`probs` >= 0 along dim={dim}" if categorical else "`probs` in [0, 1]"
        raise ValueError(f"Expected {expected}, but found probs={value!r} at index {index}")
    if categorical and values[2] > tolerance:
        index = _index(deviation > tolerance)
        total = float(q.to(torch.float64).sum(dim)[index])
        raise ValueError(
            f"Expected `probs` to sum to 1 along dim={dim} (within {tolerance:.3g}), but "
            f"found a sum of {total!r} at batch index {index}"
        )
    at_edge = values[0] == 0 or (not categorical and values[1] == 1)
    wants_gradient = probs.requires_grad and torch.is_grad_enabled()
    infinite = estimator is not None and estimator.infinite_at_probs_endpoints()
    if at_edge and wants_gradient and infinite:
        edge = (q == 0) | (q == 1) if not categorical else q == 0
        index = _index(edge)
        where = "> 0" if categorical else "strictly between 0 and 1"
        ends = "0" if categorical else "0 and 1"
        eps = torch.finfo(probs.dtype).eps
        raise ValueError(
            f"Expected `probs` {where} for {estimator!r}, whose gradient with respect to "
            f"probs is infinite at probabilities of exactly {ends} when tau > 1 (it grows "
            f"like p**(1/tau - 1)), but found probs={float(q[index])!r} at index {index}; "
            "use tau <= 1, pass logits, or keep probs away from the end points (e.g. "
            f"probs.clamp({eps:.3g}, 1 - {eps:.3g})). With hg.set_validation(False) the "
            f"backward uses {eps:.3g} (the dtype's eps) in place of an exact 0."
        )
