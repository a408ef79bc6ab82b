"""The noise every sampler draws: clamped uniforms, Gumbel and logistic noise (each draw
from a ``torch.Generator`` goes through :func:`uniform`)."""

from __future__ import annotations

import torch
from torch import Tensor

from .._core.kernels import eager_plain, opmath_dtype, random_tensor


def noise_dtype(logits: Tensor) -> torch.dtype:
    """float32 for half-precision logits, their own dtype otherwise."""
    return opmath_dtype(logits.dtype)


def uniform(
    like: Tensor, generator: torch.Generator | None, shape: tuple[int, ...] | None = None
) -> Tensor:
    """Uniform noise in ``[tiny, 1 - eps]``, so that ``log(u)`` and ``log(1 - u)`` are finite."""
    dtype = noise_dtype(like)
    info = torch.finfo(dtype)
    plain = eager_plain(like)
    if plain and shape is None:
        # rand_like into a contiguous tensor is torch.rand(like.shape, ...) number for number
        # (an empty tensor filled by uniform_), without parsing a torch.Size and a device:
        # 1.9 against 3.3 µs a call. (Not under compile or a torch.func transform, where
        # rand_like of a batched tensor would draw batched noise.)
        u = torch.rand_like(
            like, dtype=dtype, memory_format=torch.contiguous_format, generator=generator
        )
    else:
        size = like.shape if shape is None else shape
        u = random_tensor(torch.rand, size, generator, dtype=dtype, device=like.device)
    if plain:
        return u.clamp_(info.tiny, 1 - info.eps)  # one pass
    return u.clamp_min_(info.tiny).clamp_max_(1 - info.eps)  # (vmap has no rule for clamp_)


def logistic_pair(like: Tensor, generator: torch.Generator | None) -> Tensor:
    """Two-class noise ``(0, L)`` shaped ``(*like.shape, 2)``, ``L = log(u / (1 - u))``
    standard logistic (the law of :math:`g_1 - g_0` for two Gumbels); always finite.

    One logarithm of the ratio rather than ``log u - log1p(-u)``: the same largest absolute
    error over the 2**24 values ``torch.rand`` draws in float32 (3.1e-6 against float64),
    and half the time once the uniforms are drawn (compiled, 0.75 against 1.6 ms for 4M).
    """
    u = uniform(like, generator)
    if not eager_plain(u):
        logistic = (u / (1 - u)).log()
        # a zero padded in front, not a stack: inductor lowers the pad as an elementwise
        # expression that fuses into the sampler, a stack as a copy into a strided buffer
        return torch.nn.functional.pad(logistic.unsqueeze(-1), (1, 0))
    # Written in place into a pair laid out class by class (shape (..., 2), strides
    # (..., 1, n)): each class is contiguous, and a kernel writing a strided half costs 6x
    # (a log into every other float of 4,096: 17.9 vs 2.9 µs).
    pair = u.new_empty(2, *u.shape).movedim(0, -1)
    pair[..., 0].zero_()
    _logistic_of(u, out=pair[..., 1])
    return pair


def _logistic_of(u: Tensor, out: Tensor) -> Tensor:
    """``log(u / (1 - u))`` of uniforms ``u``, written into ``out`` (eager mode).

    ``torch.logit`` without ``eps`` is that expression in one pass (its CPU kernel divides,
    then takes the same vectorized logarithm as ``torch.log``): the same bits as the three
    kernels ``1 - u``, ``/``, ``log`` (checked on all 2**24 float32 values ``torch.rand``
    draws, and in float64), at 42 against 50 µs for 4,096 draws with the uniforms, 29
    against 44 ms for 4M."""
    return torch.logit(u, out=out)


def logistic_noise(like: Tensor, generator: torch.Generator | None) -> Tensor:
    """The logistic half ``L`` of :func:`logistic_pair`, shaped like ``like``, from the same
    draws of ``generator`` and with the same bits (eager mode): the noise of a Bernoulli
    sample whose estimator takes the difference :math:`g_1 - g_0` alone
    (:func:`~hardgrad.estimators._base.accepts_logistic_difference`)."""
    u = uniform(like, generator)
    return _logistic_of(u, out=u)


def gumbel_noise(like: Tensor, generator: torch.Generator | None) -> Tensor:
    """Standard Gumbel noise ``-log(-log u)`` shaped like ``like``; always finite."""
    return uniform(like, generator).log_().neg_().log_().neg_()
