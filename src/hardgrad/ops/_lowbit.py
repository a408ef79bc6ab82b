r"""Low-bit rounding ops: ternary weights (TWN) and stochastic rounding, straight-through.

Ternary weight networks: Li, Zhang & Liu (2016), https://arxiv.org/abs/1605.04711.
Stochastic rounding for low-precision training: Gupta et al. (2015),
https://arxiv.org/abs/1502.02551. Straight-through estimation: Bengio et al. (2013),
https://arxiv.org/abs/1308.3432.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from torch import Tensor

from .._core.kernels import cast, eager_plain, opmath_dtype, without_grad
from .._core.validation import check_floating, check_int, check_positive
from ._autograd import (
    apply_function,
    apply_identity,
    cached_signature,
    forward_mode,
    records_value_natively,
)
from ._quantize_args import as_number

#: float32 counts every integer up to 2**24 exactly; larger slices are counted in float64.
_EXACT_FLOAT32_COUNT = 2**24


def _ternary(w: Tensor, threshold: float, dims: tuple[int, ...] | None) -> Tensor:
    """TWN's ternary map of ``w`` (reduced over ``dims``; all dims when ``None``).

    The kept entries are selected by multiplying with a 0/1 mask in the compute dtype, not
    with ``torch.where``: CPU ``where`` branches per element, and TWN's mask is close to a
    coin flip (3.4 against 0.1 ns per element on 256 x 256; the whole map 406 -> 93 µs).
    The sign is multiplied by the mask, so ``+ 0.0`` turns the dropped negatives' -0 into 0.
    """
    compute = opmath_dtype(w.dtype)
    wide = cast(w, compute)
    a = wide.abs()
    reduce: dict[str, Any] = {} if dims is None else {"dim": dims, "keepdim": True}
    keep = torch.gt(a, a.mean(**reduce) * threshold).to(compute)
    slice_size = a.numel() if dims is None else math.prod([a.shape[d] for d in dims])
    if compute == torch.float32 and slice_size > _EXACT_FLOAT32_COUNT:
        count = keep.sum(**reduce, dtype=torch.float64).to(compute)
    else:
        count = keep.sum(**reduce)
    if not eager_plain(w):
        # Out of place under torch.compile: torch 2.11's Dynamo drops the backward of an
        # autograd.Function whose output came from an in-place kernel (the gradient
        # comes out as 0; torch 2.13 is fine). Inductor fuses either form alike.
        alpha = (a * keep).sum(**reduce) / count.clamp_min(1)
        return cast(torch.sign(wide) * keep * alpha + 0.0, w.dtype)
    alpha = a.mul_(keep).sum(**reduce) / count.clamp_min(1)
    out = torch.sign(wide).mul_(keep).mul_(alpha).add_(0.0)
    return cast(out, w.dtype)


def ternarize(w: Tensor, *, threshold: float = 0.7, per_channel_dim: int | None = None) -> Tensor:
    r"""Ternary weights of TWN: :math:`\{-\alpha, 0, +\alpha\}`, with a straight-through backward.

    Forward (Li, Zhang & Liu 2016, https://arxiv.org/abs/1605.04711), with
    :math:`t` = ``threshold`` (0.7, the paper's approximation of the optimal threshold):

    .. math::

        \Delta = t \cdot \overline{|w|}, \qquad
        \alpha = \frac{\sum_i |w_i|\,\mathbb 1[|w_i| > \Delta]}{\sum_i \mathbb 1[|w_i| > \Delta]},
        \qquad y_i = \alpha\, \operatorname{sign}(w_i)\, \mathbb 1[|w_i| > \Delta],

    over the whole tensor, or per channel along ``per_channel_dim`` (one
    :math:`\Delta` and :math:`\alpha` per slice, e.g. ``per_channel_dim=0`` for one per
    output channel of a weight). A slice of zeros gives zeros; a slice with a NaN or
    infinite entry gives NaN (a broken weight shows, rather than turning silently into
    zeros). Half inputs are reduced in float32 and the result cast back.

    Backward: straight-through, :math:`\partial L/\partial w = \partial L/\partial y`
    (Bengio et al. 2013, https://arxiv.org/abs/1308.3432, as TWN trains); :math:`\Delta`
    and :math:`\alpha` pass no gradient. Biased. Saves nothing for backward.

    Args:
        w: a floating-point tensor (typically a weight).
        threshold: :math:`t > 0`, the threshold as a multiple of the mean magnitude.
        per_channel_dim: the channel dimension for per-channel :math:`\Delta, \alpha`, or None.

    Example:
        >>> import torch, hardgrad as hg
        >>> w = torch.tensor([0.9, -0.05, 0.3, -0.6], requires_grad=True)
        >>> y = hg.ternarize(w)  # Delta = 0.7 * 0.4625 = 0.32375; alpha = (0.9 + 0.6) / 2
        >>> y.detach()
        tensor([ 0.7500,  0.0000,  0.0000, -0.7500])
        >>> y.sum().backward(); w.grad
        tensor([1., 1., 1., 1.])
    """
    check_floating(w, "w")  # (dense: sparse and nested tensors are a TypeError)
    t = check_positive(as_number(threshold), "threshold")
    dims: tuple[int, ...] | None = None
    if per_channel_dim is not None:
        dim = check_int(as_number(per_channel_dim), "per_channel_dim")
        if not -w.dim() <= dim < w.dim():
            raise ValueError(
                f"Expected `per_channel_dim` in [{-w.dim()}, {w.dim() - 1}] for a {w.dim()}-dim "
                f"`w`, but found per_channel_dim={per_channel_dim}"
            )
        dims = tuple(d for d in range(w.dim()) if d != dim % w.dim())
    if w.numel() == 0:
        return w.clone()
    hard = functools.partial(_ternary, threshold=t, dims=dims)
    return apply_identity(w, hard)


def _round_with(x: Tensor, noise: Tensor) -> Tensor:
    """:math:`\\lfloor x \\rfloor + \\mathbb 1[u < x - \\lfloor x \\rfloor]` in ``noise``'s dtype."""
    wide = x.to(noise.dtype)
    if eager_plain(x):
        return cast(_round_into(wide, noise, torch.empty_like(wide)), x.dtype)
    low = torch.floor(wide)
    up = (noise < wide - low).to(noise.dtype)
    return cast(low + up, x.dtype)  # (not a same-dtype .to: see _ternary)


def _round_into(wide: Tensor, noise: Tensor, out: Tensor) -> Tensor:
    """:func:`_round_with`'s value written into ``out`` (eager mode), which may be
    ``wide`` itself (a copy of ``x`` in ``noise``'s dtype): the fraction, then the
    comparison with the uniforms as 0/1, then the floor added, all in ``out``'s memory."""
    low = torch.floor(wide)
    torch.sub(wide, low, out=out)
    torch.lt(noise, out, out=out)
    return out.add_(low)


@cached_signature
class _StochasticRound(torch.autograd.Function):
    """Forward ``floor(x) + [u < frac(x)]`` for given uniforms ``u``; backward identity."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x: Tensor, noise: Tensor) -> Tensor:
        return _round_with(x, noise)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad, None


@forward_mode(_StochasticRound)
@cached_signature
class _StochasticRoundJVP(_StochasticRound):
    """:class:`_StochasticRound` with its forward-mode rule: the tangent unchanged."""

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, _noise: Any) -> Tensor:
        return tangent


def stochastic_round(x: Tensor, generator: torch.Generator | None = None) -> Tensor:
    r"""Round up or down at random, unbiased: :math:`\lfloor x + U \rfloor`, straight-through.

    Forward, with :math:`U \sim \mathcal U[0, 1)` drawn independently per element:

    .. math::

        y = \lfloor x + U \rfloor
          = \lfloor x \rfloor + \mathbb 1\big[U < x - \lfloor x \rfloor\big],
        \qquad \mathbb E[y] = x,

    computed in the second form, so that an integral :math:`x` is returned exactly (the
    first would round :math:`x + U` first at large magnitudes). :math:`y` is
    :math:`\lceil x \rceil` with probability :math:`x - \lfloor x \rfloor`, else
    :math:`\lfloor x \rfloor` (Gupta et al. 2015, https://arxiv.org/abs/1502.02551).
    float16 and bfloat16 inputs are rounded in float32 with float32 uniforms (a bfloat16
    uniform has only 8 bits, which would bias the rounding) and the integer cast back.

    Backward: straight-through, :math:`\partial L/\partial x = \partial L/\partial y`
    (Bengio et al. 2013, https://arxiv.org/abs/1308.3432); unbiased for any loss linear
    in :math:`y`. Saves nothing for backward.

    Args:
        x: a floating-point tensor.
        generator: the source of the uniforms (on ``x``'s device); the global RNG when
            ``None``.

    Example:
        >>> import torch, hardgrad as hg
        >>> g = torch.Generator().manual_seed(0)
        >>> x = torch.full((10000,), 2.3, requires_grad=True)
        >>> y = hg.stochastic_round(x, generator=g)
        >>> sorted(y.unique().tolist()), round(y.mean().item(), 2)
        ([2.0, 3.0], 2.3)
        >>> y.sum().backward(); x.grad[:3]
        tensor([1., 1., 1.])
    """
    check_floating(x, "x")  # (dense: sparse and nested tensors are a TypeError)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"Expected `generator` to be a torch.Generator or None, but found "
            f"{type(generator).__name__}"
        )
    dtype = opmath_dtype(x.dtype)
    if eager_plain(x):  # (rand_like: the same numbers as rand of the shape, 1.4 µs less)
        noise = torch.rand_like(
            x, dtype=dtype, memory_format=torch.contiguous_format, generator=generator
        )
    else:
        noise = torch.rand(x.shape, generator=generator, device=x.device, dtype=dtype)
    if x.dtype == noise.dtype and records_value_natively(x):
        # autograd's own copy records the identity backward (in C++), and the rounding is
        # written over the copy
        out = x.clone()
        without_grad(_round_into, out, noise, out)
        return out
    return apply_function(_StochasticRound, x, noise)
