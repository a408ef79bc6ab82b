"""Small tensor helpers shared by the ops and the estimators (private)."""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
from torch import Tensor

from .validation import _is_transformed

T = TypeVar("T")


def without_grad(fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` with autograd recording off, as under ``torch.no_grad()``, whose
    context manager costs 1.0 µs a use against 0.2 µs for switching the grad mode
    directly (under ``torch.compile`` it is ``torch.no_grad()`` itself)."""
    if torch.compiler.is_compiling():
        with torch.no_grad():
            return fn(*args)
    previous = torch.is_grad_enabled()
    torch._C._set_grad_enabled(False)
    try:
        return fn(*args)
    finally:
        torch._C._set_grad_enabled(previous)


def eager_plain(x: Tensor) -> bool:
    """True outside ``torch.compile`` and ``torch.func`` transforms, where ``out=`` and
    in-place kernels on fresh temporaries are safe (and, on CPU, several times faster than
    their functional forms for bool/float mixes)."""
    return not torch.compiler.is_compiling() and not _is_transformed(x)


#: Read-only tensors made once per key (:func:`constant`, :func:`cached_tensor`); cleared
#: when full.
_CACHED: dict[tuple[Any, ...], Tensor] = {}
_MAX_CACHED = 256


K = TypeVar("K")


def remember(cache: dict[K, T], key: K, value: T, limit: int) -> T:
    """Store ``value`` under ``key`` in ``cache`` and return it; a cache holding ``limit``
    entries is emptied first (the per-call caches of checked settings and constants: a
    handful of keys in a training loop, never an unbounded growth)."""
    if len(cache) >= limit:
        cache.clear()
    cache[key] = value
    return value


def cached_tensor(key: tuple[Any, ...], make: Callable[[], Tensor]) -> Tensor:
    """``make()``, made once per ``key`` and kept (never modify the result). Made outside
    inference mode, so that later calls that record autograd can use it."""
    found = _CACHED.get(key)
    if found is None:
        with torch.inference_mode(False):
            found = remember(_CACHED, key, make(), _MAX_CACHED)
    return found


def constant(value: float, like: Tensor) -> Tensor:
    """``value`` as a cached 0-d tensor of ``like``'s dtype and device, for eager kernels
    on small tensors: a Python number costs every kernel a wrapped-scalar conversion
    (``torch.le`` on 4,096 floats into a float tensor: 2.1 µs with ``1.0``, 0.9 µs with a
    0-d tensor). A 0-d operand does not take part in type promotion, so the result is
    the one the number gives. ``0.0`` and ``-0.0`` are distinct entries. Never modify the
    result."""
    key = (value, math.copysign(1.0, value) < 0, like.dtype, like.device)
    found = _CACHED.get(key)  # (the hit inline: this runs on every small kernel)
    if found is None:
        found = cached_tensor(
            key, lambda: torch.tensor(value, dtype=like.dtype, device=like.device)
        )
    return found


def storable_mask(mask: Tensor) -> Tensor:
    """A bool ``mask`` in the form best saved for backward: itself in eager mode, 0/1 uint8
    under ``torch.compile``, converted through float32.

    Inductor's CPU code (torch 2.13) moves bools between vector registers and memory
    through slow paths. Measured on 4M float32 elements, 2 cores: ``x.abs() <= 1`` takes
    16 ms compiled with a bool result, 6 ms converted straight to uint8, 0.2 ms converted
    to uint8 through float32 (eager bool: 1.2 ms); ``grad * mask`` reads a bool mask in
    4.9 ms, a uint8 one in 0.6 ms. Read it back with :func:`mask_condition` (or multiply).
    """
    if torch.compiler.is_compiling():
        return mask.to(torch.float32).to(torch.uint8)
    return mask


def mask_condition(mask: Tensor) -> Tensor:
    """A :func:`storable_mask` as a bool condition for ``torch.where``: itself when it is
    bool; under ``torch.compile``, ``mask.float() != 0`` (0.6 ms on 4M elements, where
    inductor takes 7-10 ms for ``mask.bool()`` or ``mask != 0``)."""
    return mask if mask.dtype == torch.bool else mask.to(torch.float32) != 0


#: ``finfo(dtype).max / 4`` of the floating dtypes (:func:`finite`'s stand-in for infinity),
#: read without a ``finfo`` call.
_QUARTER_MAX = {
    dtype: torch.finfo(dtype).max / 4
    for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16)
}


#: The dtypes hardgrad computes in as they are (:func:`opmath_dtype`).
_FULL_TYPES = (torch.float32, torch.float64)


def finite(x: Tensor) -> Tensor:
    """``x`` with NaN -> 0 and +-inf -> +-(a large finite value), for smooth backwards."""
    big = _QUARTER_MAX.get(x.dtype) or torch.finfo(x.dtype).max / 4
    if torch.compiler.is_compiling():
        # Same values; inductor fuses this form well, where nan_to_num makes the fused
        # softmax kernel several times slower on CPU.
        return torch.where(x != x, 0.0, x.clamp(-big, big))
    return torch.nan_to_num(x, nan=0.0, posinf=big, neginf=-big)


def argmax(x: Tensor, dim: int) -> Tensor:
    """``x.argmax(dim, keepdim=True)``: the first index of the largest value, NaN counting
    as the largest. In eager mode on CPU it is ``torch.max(x, dim).indices``, the same
    index (documented so, and checked by the tests on ties, signed zeros, infinities and
    NaN) from a faster kernel: 3.5 vs 5.8 µs on (64, 64), 2.3 vs 2.7 ms on (65536, 64),
    3.5 vs 11.7 µs along dim 0."""
    if x.is_cpu and eager_plain(x):  # (is_cpu: no device object made, 0.2 µs less)
        return torch.max(x, dim, keepdim=True).indices
    if torch.compiler.is_compiling():
        return _first_max_index(x, dim)
    return x.argmax(dim, keepdim=True)


def _first_max_index(x: Tensor, dim: int) -> Tensor:
    """``x.argmax(dim, keepdim=True)`` as two vectorizable reductions, for inductor: the
    row's maximum (NaN if the row has one), then the smallest index that equals it or is
    NaN. Inductor's own argmax reduction runs scalar on CPU: 1.83 against 1.39 ms on
    (65536, 64) for the whole one-hot, compiled.

    The NaN test is spelled ``~(x == x)``, not ``x != x`` as in :func:`finite`: the
    partitioner would otherwise share that node with a backward's guard and save it as a
    bool mask, which inductor reloads slowly (4x the whole step). ``torch.isnan`` lowers
    to a scalar loop there."""
    dim = dim % x.dim()
    n = x.shape[dim]
    positions = torch.arange(n, device=x.device).view((n,) + (1,) * (x.dim() - 1 - dim))
    hit = (x == x.amax(dim, keepdim=True)) | ~(x == x)
    return torch.where(hit, positions, n).amin(dim, keepdim=True)


def one_hot(like: Tensor, dim: int, index: Tensor) -> Tensor:
    """Zeros like ``like`` with ones at ``index`` along ``dim``."""
    if eager_plain(like):
        return torch.zeros_like(like).scatter_(dim, index, 1.0)  # no second full copy
    return torch.zeros_like(like).scatter(dim, index, 1.0)  # vmap has no rule for scatter_


def opmath_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype hardgrad computes in for tensors of ``dtype``: float32 for the half types
    (whose own arithmetic rounds too early: ``x / scale`` before ``round``, a softmax's
    logits, a temperature below 6e-5), the dtype itself otherwise."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def rounded_to(value: float, dtype: torch.dtype) -> float:
    """``value`` rounded to nearest in ``dtype`` (float32 or float64), as a Python number:
    what a kernel of that dtype stores. A sum, product or quotient of two float32 numbers
    computed in float64 and then rounded is the float32 one (double rounding is innocuous
    for them), so a few scalar steps can be done on the host, bit for bit."""
    if dtype == torch.float32:
        return float(struct.unpack("f", struct.pack("f", value))[0])
    return float(value)


def cast(x: Tensor, dtype: torch.dtype) -> Tensor:
    """``x.to(dtype)``, skipping the call when ``x`` already has that dtype (``Tensor.to``
    costs 0.7 µs of argument parsing even when it returns ``x`` itself)."""
    return x if x.dtype == dtype else x.to(dtype)


def opmath(x: Tensor) -> Tensor:
    """Half types are relaxed in float32."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def softmax_vjp(logits: Tensor, grad: Tensor, dim: int, tau: float) -> Tensor:
    """VJP of ``softmax(logits / tau)``: ``p * (g - <g, p>) / tau``, the softmax taken at
    :func:`finite` logits."""
    dtype = logits.dtype
    if dtype in _FULL_TYPES and grad.dtype is dtype and not torch.compiler.is_compiling():
        # The common case in eager mode, with no helper calls: the same kernels (2 µs less
        # a (64, 64) call).
        big = _QUARTER_MAX[dtype]
        scaled = logits if tau == 1 else logits / tau
        p = torch.softmax(torch.nan_to_num(scaled, nan=0.0, posinf=big, neginf=-big), dim)
        vjp = torch._softmax_backward_data(grad, p, dim, dtype)
        return vjp if tau == 1 else vjp.div_(tau) if eager_plain(vjp) else vjp / tau
    scaled = opmath(logits) if tau == 1 else opmath(logits) / tau
    p = torch.softmax(finite(scaled), dim)
    # One fused pass for p * (g - <g, p>) (what softmax's own backward runs).
    vjp = torch._softmax_backward_data(opmath(grad), p, dim, p.dtype)
    return cast(vjp if tau == 1 else vjp / tau, grad.dtype)


def random_tensor(
    sampler: Callable[..., Tensor],
    shape: Sequence[int],
    generator: torch.Generator | None,
    *,
    dtype: torch.dtype,
    device: torch.device,
) -> Tensor:
    """``sampler(shape, generator=generator, dtype=dtype, device=device)`` (``torch.rand``,
    ``torch.randn``), leaving ``generator`` out when it is None.

    torch 2.13's ``generator=`` overloads take only concrete sizes, so passing
    ``generator=None`` failed a compiled call whose batch size had gone symbolic (the
    automatic dynamic-shape recompile on a smaller last batch, or ``dynamic=True``).
    """
    if generator is None:
        return sampler(shape, dtype=dtype, device=device)
    return sampler(shape, generator=generator, dtype=dtype, device=device)
