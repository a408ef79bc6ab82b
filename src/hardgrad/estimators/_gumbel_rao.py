r"""Gumbel-Rao: ST-Gumbel Rao-Blackwellised over conditional Gumbel draws; the draws in
blocks are in :mod:`hardgrad.estimators._gumbel_rao_draws` (notation in
:mod:`hardgrad.estimators._pathwise`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor
from torch.nn.functional import softplus

from .._core.kernels import cast, eager_plain, finite, opmath
from .._core.validation import check_int
from ..ops._autograd import apply_function, cached_signature, mark_non_differentiable
from . import _gumbel_rao_draws as rao
from ._base import ESTIMATORS
from ._gumbel_rao_draws import Replay
from ._noise import logistic_pair, uniform
from ._pathwise import _binary_sample, _gumbel_max, _Tempered
from ._shift import finite_shifted


@cached_signature
class _GumbelRaoSample(torch.autograd.Function):
    """Forward the Gumbel-max sample; backward: ST-Gumbel averaged over conditional draws.

    ``draws``: the exponentials of the ``k`` conditional draws, ``(k, *logits.shape)``, or
    a :class:`~hardgrad.estimators._gumbel_rao_draws.Replay` of them (eager CPU); the backward
    reads them in blocks (:mod:`hardgrad.estimators._gumbel_rao_draws`).
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(
        logits: Tensor, gumbel: Tensor, draws: Tensor | Replay, dim: int, tau: float
    ) -> Tensor:
        return _gumbel_max(logits, gumbel, dim)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        logits, _, draws, ctx.dim, ctx.tau = inputs
        if isinstance(draws, Tensor):
            ctx.replay, ctx.k = None, draws.shape[0]
            ctx.save_for_backward(logits, output, draws)
        else:
            ctx.replay, ctx.k = draws, draws.k
            ctx.save_for_backward(logits, output)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None, None]:
        logits, sample, *explicit = ctx.saved_tensors
        dim, tau, k = ctx.dim, ctx.tau, ctx.k
        ell = finite_shifted(opmath(logits), dim)
        if torch.compiler.is_compiling():
            # One pass along dim itself: inside a graph inductor plans the temporaries,
            # and the reshapes below would tie symbolic sizes together.
            back = dim - logits.dim()  # the same dimension of the logits and the draws
            total = torch.logsumexp(ell, back, keepdim=True)
            chosen, g, log_e = sample.to(torch.bool), opmath(grad), explicit[0].log()
            summed = rao.categorical_slopes(ell, total, chosen, g, log_e, tau, back)
            return (summed / (k * tau)).to(logits.dtype), None, None, None, None
        lay = rao.layout(k, logits.shape, dim)
        at = rao.class_dim(lay)
        rows, g = rao.block_view(ell, lay), rao.block_view(opmath(grad), lay)
        total = torch.logsumexp(rows, at, keepdim=True)
        hot = rao.block_view(sample, lay)  # eager: the index, for in-place gather/scatter
        chosen = hot.argmax(at, keepdim=True) if eager_plain(rows) else hot.to(torch.bool)
        # log E, block by block: of the saved exponentials, or replayed
        source = (
            rao.tensor_source(explicit[0], lay, torch.log) if explicit else ctx.replay.source(lay)
        )

        def part(d0: int, d1: int, a0: int, a1: int) -> Tensor:
            log_e = source(d0, d1, a0, a1)
            rows_a, total_a, chosen_a, g_a = rows[a0:a1], total[a0:a1], chosen[a0:a1], g[a0:a1]
            return rao.categorical_slopes(rows_a, total_a, chosen_a, g_a, log_e, tau, at)

        mean = rao.summed_over_draws(lay, part) / (k * tau)
        return mean.reshape(logits.shape).to(logits.dtype), None, None, None, None


@cached_signature
class _BinaryGumbelRaoSample(torch.autograd.Function):
    r"""Gumbel-Rao's direct Bernoulli form: the two-class unit :math:`[0, \ell]` in closed form.

    ``draws``: the log-ratios :math:`r = \log(E_0/E_1)` of the exponentials of the ``k``
    conditional draws (``(k, *logits.shape)``), or a source that draws them block by block
    (:func:`~hardgrad.estimators._gumbel_rao_draws.drawn_source`, eager CPU). The conditional
    perturbed log-odds (:func:`~hardgrad.estimators._gumbel_rao_draws.conditional_gumbel` on the two
    classes) are
    :math:`d = \operatorname{softplus}(r + \operatorname{softplus}(\ell))` when
    :math:`b = 1` and :math:`d = -\operatorname{softplus}(\operatorname{softplus}(-\ell) - r)`
    when :math:`b = 0`, i.e. :math:`|d| = \operatorname{softplus}(u)` with
    :math:`u = s r + \operatorname{softplus}(s \ell)`, :math:`s = 2b - 1`. The backward is
    :math:`\bar y` times the slope :math:`\tfrac1{k\tau}\sum_j \sigma'(d_j/\tau)`, which
    does not depend on :math:`\bar y`: the forward computes it (in blocks of
    :data:`~hardgrad.estimators._gumbel_rao_draws.GUMBEL_RAO_CHUNK` elements) and saves only it,
    4 bytes per unit whatever ``k``. :math:`\sigma'` is even, so only :math:`|d|` is
    needed: :math:`\sigma'(x) = e^{-x}/(1 + e^{-x})^2` for :math:`x = |d|/\tau \ge 0`,
    stable. Same sample and, up to rounding, the same gradient as the categorical path on
    the same noise, at a fraction of its cost.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(
        logits: Tensor, gumbel: Tensor, draws: Tensor | rao.Source, k: int, tau: float
    ) -> tuple[Tensor, Tensor]:
        sample, _ = _binary_sample(logits, gumbel)
        lay = (k, logits.numel(), 1, 1)  # units as rows of one class: blocks (d, a, 1)
        ell = rao.block_view(finite(opmath(logits)), lay)
        sign = rao.block_view(sample, lay).to(ell.dtype).mul(2).sub(1)  # s = 2b - 1
        shift = softplus(sign * ell)
        source = rao.tensor_source(draws, lay) if isinstance(draws, Tensor) else draws

        def part(d0: int, d1: int, a0: int, a1: int) -> Tensor:
            ratio = cast(source(d0, d1, a0, a1), ell.dtype)
            return rao.binary_slopes(ratio, sign[a0:a1], shift[a0:a1], tau)

        slope = rao.summed_over_draws(lay, part) / (k * tau)
        return sample, slope.reshape(logits.shape)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        slope = output[1]
        mark_non_differentiable(ctx, slope)
        ctx.save_for_backward(slope)

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _grad_slope: Any) -> tuple[Tensor | None, ...]:
        (slope,) = ctx.saved_tensors
        return (opmath(grad) * slope).to(grad.dtype), None, None, None, None


@ESTIMATORS.register("gumbel_rao")
@dataclass(frozen=True)
class GumbelRao(_Tempered):
    r"""Gumbel-Rao: ST-Gumbel Rao-Blackwellised over the Gumbels that give the same sample.

    Forward: the exact sample :math:`D`. Backward: the average over :math:`k` draws of
    :math:`z^{(j)} \sim (\ell + g \mid \arg\max(\ell + g) = D)` of
    :math:`\tfrac1\tau J(\operatorname{softmax}(z^{(j)}/\tau))^\top \bar y`, a Monte-Carlo
    estimate of :math:`E[\text{ST-Gumbel} \mid D]`. The conditional draws are treated as
    noise (not differentiated), which is what keeps ST-Gumbel's mean exactly while
    lowering its variance. Biased (as ST-Gumbel is). Paulus, Maddison & Krause (2021),
    https://arxiv.org/abs/2010.04838.

    With ``probs``: the chain rule through :math:`\ell = \log q`, with the conditional
    draws written as perturbations of :math:`\log q` that stay finite at :math:`q_i = 0`;
    the limit there is 0 for :math:`\tau < 1`, infinite for :math:`\tau > 1`, and for
    :math:`\tau = 1` (Bernoulli at :math:`p = 0`) the mean over the draws of
    :math:`E_0/E_1`, their exponentials (:math:`E_1/E_0` at :math:`p = 1`).

    Memory and time grow with :math:`k` only through the arithmetic: the draws are visited
    in blocks of 1 MB (:mod:`hardgrad.estimators._gumbel_rao_draws`). On CPU in eager mode
    :func:`hardgrad.categorical` saves the logits and the sample, nothing per draw: it
    saves the generator's state, skips the generator past the draws, and the backward
    replays them; :func:`hardgrad.bernoulli` saves only the per-unit slope. Both give the
    numbers of :meth:`noise` / :meth:`bernoulli_noise` bit for bit and leave the generator
    where they leave it. Elsewhere (CUDA, ``torch.compile``, ``torch.func``, ``probs=``)
    the draws are drawn up front: held during the Bernoulli forward (its slope is still
    all it saves), saved for the categorical backward (:math:`4k` bytes per element in
    float32).

    Args:
        tau: temperature of the relaxation, > 0.
        k: conditional draws per sample, >= 1.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.estimators.GumbelRao(tau=0.5, k=10)
        GumbelRao(tau=0.5, k=10)
    """

    k: int = 10
    name: ClassVar[str] = "gumbel_rao"
    probs_kind: ClassVar[str | None] = "gumbel_rao"
    logistic_bernoulli_noise: ClassVar[bool] = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_int(self.k, "k", low=1)

    def noise(self, logits: Tensor, generator: torch.Generator | None) -> tuple[Tensor, Tensor]:
        """The Gumbels of the sample, then the ``k`` draws' exponentials ``(k, *shape)``."""
        gumbel = super().noise(logits, generator)
        exponentials = rao.exponentials_of(uniform(logits, generator, (self.k, *logits.shape)))
        return gumbel, exponentials

    def bernoulli_noise(
        self, logits: Tensor, generator: torch.Generator | None
    ) -> tuple[Tensor, Tensor]:
        r"""The pair :math:`(0, L)` of the sample (:attr:`logistic_bernoulli_noise`), then
        per draw the exponentials :math:`(e^R, 1)` with :math:`R` standard logistic, shaped
        ``(k, *logits.shape, 2)``: a two-class draw depends on its exponentials only
        through :math:`E_0/E_1`, distributed as :math:`e^R`; one uniform per draw."""
        pair = logistic_pair(logits, generator)
        odds = rao.odds_of(uniform(logits, generator, (self.k, *logits.shape)))
        return pair, torch.stack((odds, torch.ones_like(odds)), -1)

    def sample_categorical(
        self, logits: Tensor, generator: torch.Generator | None, dim: int
    ) -> Tensor:
        """:meth:`categorical` on :meth:`noise`; on CPU in eager mode the same numbers
        without holding the draws: the generator's state is saved and skipped past them,
        and the backward replays them in blocks."""
        if not rao.plain_cpu(logits):
            return super().sample_categorical(logits, generator, dim)
        gumbel = super().noise(logits, generator)
        replay = Replay.skip(logits, generator, self.k)
        if dim < 0:
            dim += logits.dim()
        return apply_function(_GumbelRaoSample, logits, gumbel, replay, dim, self.tau)

    def sample_bernoulli(self, logits: Tensor, generator: torch.Generator | None) -> Tensor:
        """:meth:`bernoulli` on :meth:`bernoulli_noise`; on CPU in eager mode the same
        numbers with the draws taken from the generator block by block in the forward."""
        if not rao.plain_cpu(logits):
            return super().sample_bernoulli(logits, generator)
        pair = logistic_pair(logits, generator)
        lay = (self.k, logits.numel(), 1, 1)
        draws = rao.drawn_source(logits, generator, lay, rao.logistic_of)
        return apply_function(_BinaryGumbelRaoSample, logits, pair, draws, self.k, self.tau)[0]

    def categorical(self, logits: Tensor, noise: tuple[Tensor, Tensor], dim: int) -> Tensor:
        gumbel, exponentials = noise
        if dim < 0:  # the backward works on (k, *logits.shape): it needs dim from the front
            dim += logits.dim()
        return apply_function(_GumbelRaoSample, logits, gumbel, exponentials, dim, self.tau)

    def bernoulli(self, logits: Tensor, noise: tuple[Tensor, Tensor]) -> Tensor:
        gumbel, exponentials = noise
        ratio = exponentials[..., 0] / exponentials[..., 1]
        log_ratio = ratio.log_() if eager_plain(ratio) else ratio.log()  # log(E0 / E1)
        k = exponentials.shape[0]
        return apply_function(_BinaryGumbelRaoSample, logits, gumbel, log_ratio, k, self.tau)[0]
