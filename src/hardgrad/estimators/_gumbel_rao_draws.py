r"""Gumbel-Rao's conditional draws, visited in blocks (Paulus, Maddison & Krause 2021,
https://arxiv.org/abs/2010.04838).

Gumbel-Rao's backward averages ST-Gumbel's over :math:`k` draws of the perturbed logits
conditioned on the sample :math:`D` (:func:`conditional_gumbel`). Its samplers
(:class:`hardgrad.estimators._gumbel_rao._GumbelRaoSample` and the Bernoulli form) never hold
all :math:`k` draws at once: for logits of shape ``(A, C, B)`` (``C`` the categories,
``A`` and ``B`` the dimensions before and after) the draws are laid out ``(k, A, C, B)``,
as ``torch.rand((k, *shape))`` fills them, and visited in blocks of at most
:data:`GUMBEL_RAO_CHUNK` elements in that order (draw by draw, then along ``A``):

* the temporaries stay small whatever :math:`k` and the batch: ``(k, ...)`` temporaries
  of a large batch are fresh memory, page-faulted in on every call (a storm of faults that
  cost about as much as the arithmetic);
* on CPU a block can be drawn when it is needed (:func:`drawn_source`) and still be the
  very numbers of one ``torch.rand`` of the whole: the CPU generator (a Mersenne twister)
  fills a tensor element by element, one 32-bit word per float32 and two per float64,
  so consecutive draws continue one stream. The Bernoulli form draws its blocks in the
  forward and keeps only the per-unit slope (4 bytes per element, whatever :math:`k`); the
  categorical backward needs the incoming gradient, so the forward saves the generator's
  state, skips it past the draws (:func:`skip_uniforms`) and the backward replays them
  (:class:`Replay`).

Explicit draws (``GumbelRao.noise()``, ``torch.compile``, ``torch.func``, CUDA) are read
block by block from the tensor (:func:`tensor_source`), with the same arithmetic, so both
give the same gradient bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import Tensor
from torch.nn.functional import softplus

from .._core.kernels import eager_plain
from ._noise import noise_dtype, uniform

#: Elements per block of draws (1 MB of float32): the temporaries stay this small whatever
#: ``k`` and the batch, so the allocator reuses them instead of faulting in fresh pages.
GUMBEL_RAO_CHUNK = 2**18

#: ``(k, A, C, B)``: draws, the dimensions before the categories, categories, after.
Layout = tuple[int, int, int, int]

#: A block of draws ``(d0, d1, a0, a1)``: draws ``d0:d1`` of rows ``a0:a1`` of ``A``.
Block = tuple[int, int, int, int]

#: Gives the draws of a block, shaped ``(d1 - d0, a1 - a0, C, B)``; called in
#: :func:`blocks` order.
Source = Callable[[int, int, int, int], Tensor]


def conditional_gumbel(ell: Tensor, chosen: Tensor, log_e: Tensor, dim: int) -> Tensor:
    r"""Perturbed logits :math:`z = \ell + g` drawn from the Gumbels *given* ``argmax z = D``.

    With :math:`E \sim \operatorname{Exp}(1)` and :math:`\Lambda = \operatorname{logsumexp}(\ell)`:
    the maximum is :math:`z_D = \Lambda - \log E_D` and every other coordinate is a Gumbel
    truncated below it, :math:`z_i = -\log(E_D e^{-\Lambda} + E_i e^{-\ell_i})` (Maddison et
    al. 2014, https://arxiv.org/abs/1411.0030), computed in log space so that no term
    overflows. ``ell`` (finite), the bool ``chosen`` (:math:`D`) and ``log_e``
    (:math:`\log E`) broadcast together; differentiable in ``ell``.
    """
    total = torch.logsumexp(ell, dim, keepdim=True)
    log_e_max = torch.where(chosen, log_e, 0).sum(dim, keepdim=True)
    top = total - log_e_max
    rest = -torch.logaddexp(log_e_max - total, log_e - ell)
    return torch.where(chosen, top, rest)


def layout(k: int, shape: tuple[int, ...] | torch.Size, dim: int) -> Layout:
    """The ``(k, A, C, B)`` layout of ``k`` draws for logits of ``shape`` along ``dim``."""
    outer = 1
    for size in shape[:dim]:
        outer *= size
    inner = 1
    for size in shape[dim + 1 :]:
        inner *= size
    return k, outer, shape[dim], inner


def blocks(lay: Layout) -> Iterator[Block]:
    """The blocks of the draws in the order ``torch.rand`` fills them, each at most
    :data:`GUMBEL_RAO_CHUNK` elements, or one row of ``A`` of one draw where a row is
    larger: all draws at once if they fit, else whole draws, else rows of one draw."""
    k, outer, classes, inner = lay
    per_row = classes * inner
    per_draw = outer * per_row
    chunk = GUMBEL_RAO_CHUNK
    if per_draw * k <= chunk or per_draw == 0:
        yield 0, k, 0, outer
    elif per_draw <= chunk:
        step = chunk // per_draw
        for d0 in range(0, k, step):
            yield d0, min(k, d0 + step), 0, outer
    else:
        step = max(1, chunk // per_row)
        for d in range(k):
            for a0 in range(0, outer, step):
                yield d, d + 1, a0, min(outer, a0 + step)


def _row_shape(lay: Layout) -> tuple[int, ...]:
    """One row of ``A``: ``(C,)`` when ``B == 1`` (categories last, where the softmax
    kernels are fastest), else ``(C, B)``."""
    return (lay[2],) if lay[3] == 1 else (lay[2], lay[3])


def block_view(x: Tensor, lay: Layout) -> Tensor:
    """``x`` (logits-shaped) as rows of ``A``: ``(A, C)`` or ``(A, C, B)``, categories at
    :func:`class_dim`."""
    return x.reshape(lay[1], *_row_shape(lay))


def class_dim(lay: Layout) -> int:
    """The categories' dimension in :func:`block_view` and in the blocks (from the back)."""
    return -1 if lay[3] == 1 else -2


def tensor_source(
    draws: Tensor, lay: Layout, transform: Callable[[Tensor], Tensor] | None = None
) -> Source:
    """Blocks of explicit draws ``(k, *shape)``: slices (views: never written to), or
    ``transform`` of them."""
    view = draws.reshape(lay[0], lay[1], *_row_shape(lay))
    if transform is None:
        return lambda d0, d1, a0, a1: view[d0:d1, a0:a1]
    return lambda d0, d1, a0, a1: transform(view[d0:d1, a0:a1])


def drawn_source(
    like: Tensor,
    generator: torch.Generator | None,
    lay: Layout,
    transform: Callable[[Tensor], Tensor],
) -> Source:
    """Blocks drawn from ``generator`` when asked for (uniforms of :func:`uniform`, then
    ``transform``): on CPU, asked in :func:`blocks` order, the numbers of one draw of
    the whole ``(k, *shape)``."""
    row = _row_shape(lay)

    def draw(d0: int, d1: int, a0: int, a1: int) -> Tensor:
        return transform(uniform(like, generator, (d1 - d0, a1 - a0, *row)))

    return draw


def exponentials_of(u: Tensor) -> Tensor:
    """:math:`E = -\\log u`, standard exponentials (what ``GumbelRao.noise`` draws)."""
    return u.log_().neg_() if eager_plain(u) else -u.log()


def log_exponentials_of(u: Tensor) -> Tensor:
    """:math:`\\log E = \\log(-\\log u)` in place: what the categorical slopes read."""
    return u.log_().neg_().log_()


def odds_of(u: Tensor) -> Tensor:
    r""":math:`e^R = u / (1 - u)` (in place in eager mode), :math:`R` standard logistic: the
    law of :math:`\log(E_0/E_1)` for two standard exponentials, all a two-class
    conditional draw depends on."""
    return u.div_(torch.sub(1, u)) if eager_plain(u) else u / (1 - u)


def logistic_of(u: Tensor) -> Tensor:
    """:math:`R = \\log(u / (1 - u))`, standard logistic (see :func:`odds_of`)."""
    odds = odds_of(u)
    return odds.log_() if eager_plain(odds) else odds.log()


def summed_over_draws(lay: Layout, part: Callable[[int, int, int, int], Tensor]) -> Tensor:
    """The sum over all draws of ``part(block)`` (the block's own draws already summed,
    rows ``a0:a1``), added block by block in :func:`blocks` order; rows of ``A`` first."""
    sums: dict[int, Tensor] = {}
    for d0, d1, a0, a1 in blocks(lay):
        value = part(d0, d1, a0, a1)
        previous = sums.get(a0)
        sums[a0] = value if previous is None else previous + value
    parts = list(sums.values())  # (the first draw visits the rows in order)
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def categorical_slopes(
    ell: Tensor,
    total: Tensor,
    chosen: Tensor,
    grad: Tensor,
    log_e: Tensor,
    tau: float,
    dim: int,
) -> Tensor:
    r"""The sum over a block's draws (``log_e``, the logarithms of their exponentials, with a
    leading dimension of draws) of :math:`J(p)^\top \bar y` at the softmax :math:`p` of the
    conditional perturbed logits over :math:`\tau` (ST-Gumbel's VJP times :math:`\tau`),
    for the block's rows of logits ``ell`` (finite), their logsumexp ``total``, the sample
    (``chosen``: the bool one-hot in eager mode, where ``log_e`` is a fresh temporary that
    is overwritten, else the index of the sample, keepdim) and the incoming gradient.

    With :math:`a = \log E_D - \Lambda` and :math:`b_i = \log E_i - \ell_i`,
    :func:`conditional_gumbel` is :math:`z_D = -a` and :math:`z_i = -\operatorname{logaddexp}
    (a, b_i)`, so :math:`z_D - z_i = \operatorname{softplus}(b_i - a) \ge 0` and
    :math:`p \propto w` with :math:`w_D = 1`, :math:`w_i = e^{-(z_D - z_i)/\tau} \in [0, 1]`:
    no overflow at any temperature, one exponential fewer than the softmax of :math:`z`."""
    if chosen.dtype == torch.bool:
        a = torch.where(chosen, log_e, 0).sum(dim, keepdim=True) - total
        w = torch.exp(softplus(log_e - ell - a) * (-1.0 / tau))
        w = torch.where(chosen, 1.0, w)
        p = w / w.sum(dim, keepdim=True)
    else:  # eager: in place, and the sampled entries by index (a row's one element)
        index = chosen.expand(log_e.shape[0], *chosen.shape)
        a = log_e.gather(dim, index).sub_(total)
        w = softplus(log_e.sub_(ell).sub_(a)).mul_(-1.0 / tau).exp_().scatter_(dim, index, 1.0)
        p = w.div_(w.sum(dim, keepdim=True))
    return torch._softmax_backward_data(grad.expand_as(p), p, dim, p.dtype).sum(0)


def binary_slopes(log_ratio: Tensor, sign: Tensor, shift: Tensor, tau: float) -> Tensor:
    r"""The sum over a block's draws (``log_ratio``, leading dimension) of
    :math:`\sigma'(\operatorname{softplus}(s r + \operatorname{softplus}(s\ell))/\tau)`
    (see :class:`hardgrad.estimators._gumbel_rao._BinaryGumbelRaoSample`), :math:`\sigma'(x)
    = e^{-x}/(1 + e^{-x})^2` at :math:`x \ge 0`, stable."""
    x = softplus(log_ratio * sign + shift)
    if eager_plain(x):  # in place on fresh temporaries
        e = x.mul_(-1.0 / tau).exp_()
        d = e + 1
        return e.div_(d).div_(d).sum(0)
    e = torch.exp(x * (-1.0 / tau))
    return (e / (e + 1) / (e + 1)).sum(0)


def skip_uniforms(like: Tensor, generator: torch.Generator, count: int) -> None:
    """Advance ``generator`` (CPU) past ``count`` uniforms of ``like``'s noise dtype, as
    drawing them would, through a :data:`GUMBEL_RAO_CHUNK` scratch buffer."""
    scratch = torch.empty(min(count, GUMBEL_RAO_CHUNK), dtype=noise_dtype(like))
    while count > 0:
        n = min(count, scratch.numel())
        scratch[:n].uniform_(generator=generator)
        count -= n


@dataclass(frozen=True, eq=False)
class Replay:
    """The categorical draws of one eager CPU call, replayed by its backward: the state of
    the generator before they were drawn (the forward skipped it past them)."""

    state: Tensor
    like: Tensor  # a 0-d tensor of the logits' dtype (the noise dtype) and device
    k: int

    @classmethod
    def skip(cls, logits: Tensor, generator: torch.Generator | None, k: int) -> Replay:
        """Save ``generator``'s state, then skip it past ``k`` draws shaped like ``logits``."""
        chosen = torch.default_generator if generator is None else generator
        state = chosen.get_state()
        skip_uniforms(logits, chosen, k * logits.numel())
        return cls(state, logits.new_empty(()), k)

    def source(self, lay: Layout) -> Source:
        """The logarithms of the exponentials, block by block, from a private generator at the saved state
        (so a second backward replays them again)."""
        private = torch.Generator(device=self.like.device)
        private.set_state(self.state)
        return drawn_source(self.like, private, lay, log_exponentials_of)


def plain_cpu(logits: Tensor) -> bool:
    """Whether the draws can come block by block from the generator: plain eager mode (no
    compile, ``torch.func`` or forward-AD level) on CPU, where blocks continue the stream."""
    return (
        logits.device.type == "cpu"
        and eager_plain(logits)
        and torch.autograd.forward_ad._current_level < 0
    )
