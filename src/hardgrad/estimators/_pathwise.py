r"""Pathwise estimators: a sample (or relaxation) whose backward carries the estimate.

Notation, along the category dimension: logits :math:`\ell`, probabilities
:math:`\pi = \operatorname{softmax}(\ell)`, Gumbel noise :math:`g`, the exact sample
:math:`D = \operatorname{onehot}(\arg\max_i \ell_i + g_i)` (Gumbel-max), the incoming
gradient :math:`\bar y = \partial L / \partial y`, and for a probability vector :math:`p`
the softmax Jacobian product :math:`J(p)^\top \bar y = p \odot (\bar y - \langle \bar y, p\rangle)`.

With ``probs=`` (:func:`hardgrad.bernoulli`, :func:`hardgrad.categorical`) each estimator's
backward, defined in logit space, is taken to the probabilities by the chain rule through
:math:`\ell = \log q`, computed so that it stays finite at probabilities of 0 and 1, where
it is the formula's limit (:mod:`hardgrad.estimators._probs`); each class says its limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor
from torch.nn.functional import softplus

from .._core.kernels import (
    argmax,
    cast,
    constant,
    eager_plain,
    finite,
    one_hot,
    opmath,
    softmax_vjp,
    without_grad,
)
from .._core.validation import check_int, check_normal, check_positive
from ..ops._autograd import (
    apply_function,
    cached_signature,
    mark_non_differentiable,
    native_value,
    records_natively,
)
from . import _gumbel_rao as rao
from ._base import ESTIMATORS, Estimator, accepts_logistic_difference, logistic_pair, uniform
from ._gumbel_rao import Replay
from ._shift import finite_shifted, shift_to_zero


def _perturbed(logits: Tensor, gumbel: Tensor, dim: int, check: bool = True) -> Tensor:
    r""":math:`s + g` for the logits shifted to a largest entry of 0,
    :math:`s = \ell - \max_j \ell_j` (:mod:`hardgrad.estimators._shift`: the sample then
    depends on logit differences only, and infinities are exact), in the noise's dtype.
    ``check``: refuse rows of -inf only (while value checks apply)."""
    shifted = shift_to_zero(cast(logits, gumbel.dtype), dim, check="logits" if check else None)
    return shifted.add_(gumbel) if eager_plain(shifted) else shifted + gumbel


def _gumbel_max(logits: Tensor, gumbel: Tensor, dim: int) -> Tensor:
    """The exact one-hot sample ``onehot(argmax(logits - max(logits) + gumbel))`` in
    ``logits``' dtype (:func:`_perturbed`)."""
    index = argmax(_perturbed(logits, gumbel, dim), dim)
    return one_hot(logits, dim, index)


def _softmax_jacobian_product(grad: Tensor, p: Tensor, dim: int) -> Tensor:
    """:math:`J(p)^\top g = p \\odot (g - \\langle g, p\rangle)` in one fused pass."""
    return torch._softmax_backward_data(grad, p, dim, p.dtype)


def _check_tau(tau: Any) -> float:
    """A positive finite number, normal in float64 (a subnormal ``tau`` has ``1 / tau = inf``
    in every dtype); the samplers check it again against the dtype they compute in."""
    return check_normal(check_positive(tau, "tau"), "tau", torch.float64)


def _perturbed_log_odds(logits: Tensor, gumbel: Tensor) -> Tensor:
    r""":math:`d = \ell + g_1 - g_0` in the noise's (compute) dtype, for the two-class noise
    pair ``gumbel`` (shape ``(*logits.shape, 2)``) or the difference :math:`g_1 - g_0`
    alone (``logits``' shape, see :func:`~hardgrad.estimators._base.accepts_logistic_difference`)."""
    if gumbel.dim() == logits.dim():
        return cast(logits, gumbel.dtype) + gumbel
    g0, g1 = gumbel.unbind(-1)
    difference = cast(logits, gumbel.dtype) + g1
    return difference.sub_(g0) if eager_plain(difference) else difference - g0


def _binary_sample(logits: Tensor, gumbel: Tensor) -> tuple[Tensor, Tensor]:
    """Class 1 of the Gumbel-max sample of ``[0, logits]`` and the perturbed log-odds.

    ``argmax(g0, logits + g1)`` picks class 1 unless ``logits + g1 <= g0`` (ties go to the
    first class, NaN counts as the largest), which is ``d <= 0`` for the perturbed log-odds
    ``d = logits + g1 - g0``: the sign of a difference of floats is exact, and the noise is
    finite. Both come from ``d``, so that the noise is read once (under ``torch.compile``
    a second reader makes inductor write the noise pair out).
    """
    difference = _perturbed_log_odds(logits, gumbel)
    if not eager_plain(difference):
        return 1 - torch.le(difference, 0).to(logits.dtype), difference
    # Written straight into the sample's dtype, with 0-d constants: 2 kernels, not 3 (and
    # no wrapped Python numbers), which is most of the cost on small tensors.
    sample = torch.le(difference, constant(0.0, difference), out=torch.empty_like(logits))
    return torch.sub(constant(1.0, sample), sample, out=sample), difference


def _binary_relaxation(logits: Tensor, gumbel: Tensor, tau: float) -> tuple[Tensor, Tensor]:
    r"""Class 1 of the two-class Gumbel-softmax, :math:`\sigma(d/\tau)` in ``logits``'
    dtype, and the perturbed log-odds :math:`d = \ell + g_1 - g_0` (compute dtype)."""
    difference = _perturbed_log_odds(logits, gumbel)
    scaled = finite(difference if tau == 1 else difference / tau)
    relaxed = scaled.sigmoid_() if eager_plain(scaled) else scaled.sigmoid()
    return cast(relaxed, logits.dtype), difference


_sigmoid_backward = torch.ops.aten.sigmoid_backward.default


def _times_sigmoid_slope(grad: Tensor, x: Tensor, tau: float) -> Tensor:
    r""":math:`g\,\sigma'(x/\tau)/\tau` in ``grad``'s dtype, for ``x`` in the compute
    dtype, NaN read as 0 (the slope 1/4) and :math:`\pm\infty` giving 0.
    :math:`\sigma'` is even, so it is :math:`s(1 - s)` at :math:`s = \sigma(-|x|/\tau)
    \le 1/2`, where :math:`1 - s` has no cancellation (as accurate in the tails as
    :math:`\sigma(x)\sigma(-x)`), times :math:`g` in one fused kernel (what
    ``torch.sigmoid``'s own backward runs): 4 passes instead of 8."""
    magnitude = x.abs()
    if eager_plain(magnitude):
        magnitude = magnitude.nan_to_num_(0.0, posinf=math.inf)
    else:  # what inductor fuses best
        magnitude = torch.where(magnitude != magnitude, 0.0, magnitude)
    scaled = magnitude if tau == 1 else magnitude.div_(tau)
    s = torch.sigmoid(scaled.neg_())
    out = _sigmoid_backward(opmath(grad), s)
    return cast(out if tau == 1 else out.div_(tau), grad.dtype)


def _sigmoid_slope(x: Tensor, tau: float) -> Tensor:
    r""":math:`\sigma'(x/\tau)/\tau` in ``x``'s dtype, as :func:`_times_sigmoid_slope`
    reads ``x`` (NaN as 0, :math:`\pm\infty` giving 0): :math:`s - s^2` at
    :math:`s = \sigma(-|x|/\tau) \le 1/2`, where :math:`s^2 \le s/2` (no cancellation)."""
    magnitude = x.abs().nan_to_num_(0.0, posinf=math.inf)
    scaled = magnitude if tau == 1 else magnitude.div_(tau)
    s = scaled.neg_().sigmoid_()
    slope = torch.addcmul(s, s, s, value=-1)
    return slope if tau == 1 else slope.div_(tau)


def _sample_and_slope(logits: Tensor, noise: Tensor, tau: float) -> tuple[Tensor, Tensor]:
    return _binary_sample(logits, noise)[0], _sigmoid_slope(logits, tau)


def _native_straight_through(logits: Tensor, noise: Tensor, tau: float) -> Tensor | None:
    r"""The ST Bernoulli sample recorded with autograd's own product by its slope
    :math:`\sigma'(\ell/\tau)/\tau` (:func:`~hardgrad.ops._autograd.native_value`), on
    small CPU float32/float64 log-odds (:func:`~hardgrad.ops._autograd.records_natively`);
    ``None`` elsewhere. No Python runs in backward: forward and backward of 32 log-odds,
    121 -> 110 µs, of 1,024, 114 -> 107 µs (one interleaved run; ``torch.bernoulli`` with
    the detach trick: 52 and 67 µs, a floor of fewer kernels this path keeps). The slope is
    made in forward, so the product rounds as :math:`\bar y\,(s - s^2)` where the
    Function's backward rounds :math:`(\bar y\,(1 - s))\,s`: the same gradient to the
    last bit's rounding."""
    if logits.dtype not in (torch.float32, torch.float64) or not records_natively(logits):
        return None
    sample, slope = without_grad(_sample_and_slope, logits, noise, tau)
    return native_value(logits, sample, slope)


def _binary_reinmax_backward(grad: Tensor, logits: Tensor, sample: Tensor, tau: float) -> Tensor:
    r"""ReinMax's two-class backward, :math:`\bar y\,(2r(1 - r) - \tfrac12\sigma'(\ell))`
    with :math:`r = \tfrac12(\sigma(\ell/\tau) + b)`, in a form without cancellation.

    With :math:`a = \sigma((1 - 2b)\,\ell/\tau)`, the probability at temperature
    :math:`\tau` of the value not drawn, :math:`2r(1 - r) = a(2 - a)/2` for both values of
    :math:`b` (:math:`1 - r = a/2` when :math:`b = 1`: no :math:`1 - r` rounds to 0 for
    large :math:`\ell`). At :math:`\tau = 1`, :math:`\sigma'(\ell) = a(1 - a)`, so the
    factor is exactly :math:`a/2`. NaN logits are read as 0, infinite ones as large.
    """
    ell = finite(opmath(logits))
    flip = 1 - 2 * cast(sample, ell.dtype)  # +1 where b = 0, -1 where b = 1
    signed = ell * flip
    a = torch.sigmoid(signed if tau == 1 else signed.div_(tau))
    g = opmath(grad)
    if tau == 1:
        return cast((g * a).mul_(0.5), grad.dtype)
    s = torch.sigmoid(ell.abs().neg_())  # sigma'(l) = s (1 - s) at s = sigma(-|l|)
    factor = (a * (2 - a)).sub_(s * (1 - s))
    return cast((g * factor).mul_(0.5), grad.dtype)


@cached_signature
class _BinarySample(torch.autograd.Function):
    r"""The Bernoulli unit's direct form: class 1 of the two-class sample, with the binary
    version of the straight-through backward of ``kind``: "st" (the log-odds saved),
    "identity" (nothing saved) or "reinmax" (the log-odds and the sample). One output: the
    perturbed log-odds of the draw are not needed after forward (the kinds that need them
    are :class:`_BinaryPerturbedSample`'s)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, gumbel: Tensor, kind: str, tau: float) -> Tensor:
        return _binary_sample(logits, gumbel)[0]

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        logits, _, ctx.kind, ctx.tau = inputs
        if ctx.kind == "st":
            ctx.save_for_backward(logits)
        elif ctx.kind == "reinmax":
            ctx.save_for_backward(logits, output)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        kind, tau = ctx.kind, ctx.tau
        if kind == "identity":
            return grad, None, None, None
        if kind == "reinmax":
            logits, sample = ctx.saved_tensors
            return _binary_reinmax_backward(grad, logits, sample, tau), None, None, None
        (logits,) = ctx.saved_tensors
        return _times_sigmoid_slope(grad, opmath(logits), tau), None, None, None


@cached_signature
class _BinaryPerturbedSample(torch.autograd.Function):
    r"""The Bernoulli unit's direct form whose backward reads the perturbed log-odds
    :math:`d = \ell + g_1 - g_0` of the draw (the one tensor saved): class 1 of the
    two-class sample with ST-Gumbel's backward (``kind`` "st_gumbel"), or class 1 of the
    two-class Gumbel-softmax (``kind`` "relaxed") with its exact backward; both are
    :math:`\bar y\,\sigma'(d/\tau)/\tau`."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, gumbel: Tensor, kind: str, tau: float) -> tuple[Tensor, Tensor]:
        if kind == "relaxed":
            return _binary_relaxation(logits, gumbel, tau)
        return _binary_sample(logits, gumbel)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        ctx.tau = inputs[3]
        difference = output[1]
        mark_non_differentiable(ctx, difference)
        ctx.save_for_backward(difference)

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _grad_difference: Any) -> tuple[Tensor | None, ...]:
        (difference,) = ctx.saved_tensors
        return _times_sigmoid_slope(grad, opmath(difference), ctx.tau), None, None, None


@cached_signature
class _StraightThroughSample(torch.autograd.Function):
    """Forward the Gumbel-max sample; backward :math:`J(\\operatorname{softmax}(\\ell/\\tau))^\\top \\bar y / \\tau`."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, gumbel: Tensor, dim: int, tau: float) -> Tensor:
        return _gumbel_max(logits, gumbel, dim)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        logits, _, ctx.dim, ctx.tau = inputs
        ctx.save_for_backward(logits)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        (logits,) = ctx.saved_tensors
        # shifted (softmax does not change): -inf then stays below every finite logit
        shifted = shift_to_zero(opmath(logits), ctx.dim)
        return softmax_vjp(shifted, grad, ctx.dim, ctx.tau), None, None, None


@cached_signature
class _IdentitySample(torch.autograd.Function):
    """Forward the Gumbel-max sample; backward copies the gradient onto the logits."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, gumbel: Tensor, dim: int) -> Tensor:
        return _gumbel_max(logits, gumbel, dim)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        pass

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        return grad, None, None


@cached_signature
class _GumbelStraightThroughSample(torch.autograd.Function):
    """Forward the Gumbel-max sample; backward through :math:`\\operatorname{softmax}((\\ell + g)/\\tau)`."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, gumbel: Tensor, dim: int, tau: float) -> tuple[Tensor, Tensor]:
        perturbed = _perturbed(logits, gumbel, dim)
        return one_hot(logits, dim, argmax(perturbed, dim)), perturbed

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        _, _, ctx.dim, ctx.tau = inputs
        perturbed = output[1]
        mark_non_differentiable(ctx, perturbed)
        ctx.save_for_backward(perturbed)  # the one tensor backward needs: 4 bytes/element

    @staticmethod
    def backward(ctx: Any, grad: Tensor, _grad_perturbed: Any) -> tuple[Tensor, None, None, None]:
        (perturbed,) = ctx.saved_tensors
        return softmax_vjp(perturbed, grad, ctx.dim, ctx.tau), None, None, None


def _relaxed_softmax(
    logits: Tensor, gumbel: Tensor, dim: int, tau: float, check: bool = True
) -> Tensor:
    r""":math:`\operatorname{softmax}((\ell + g)/\tau)` along ``dim`` in the compute dtype,
    from the shifted logits (:func:`_perturbed`), NaN read as 0."""
    perturbed = _perturbed(logits, gumbel, dim, check)
    if tau != 1:
        perturbed = perturbed.div_(tau) if eager_plain(perturbed) else perturbed / tau
    return torch.softmax(finite(perturbed), dim)


@cached_signature
class _Relaxation(torch.autograd.Function):
    r"""The Gumbel-softmax relaxation :math:`y = \operatorname{softmax}((\ell + g)/\tau)`
    with its exact backward :math:`\tfrac1\tau J(y)^\top \bar y`, from the saved output
    (nothing else) for float32/float64 logits; half-precision ones save their logits and
    noise, and the backward recomputes :math:`y` in float32."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, gumbel: Tensor, dim: int, tau: float) -> Tensor:
        return cast(_relaxed_softmax(logits, gumbel, dim, tau), logits.dtype)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        logits, gumbel, ctx.dim, ctx.tau = inputs
        ctx.from_output = output.dtype == gumbel.dtype
        ctx.save_for_backward(*((output,) if ctx.from_output else (logits, gumbel)))

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        if ctx.from_output:
            (relaxed,) = ctx.saved_tensors
        else:
            logits, gumbel = ctx.saved_tensors
            relaxed = _relaxed_softmax(logits, gumbel, ctx.dim, ctx.tau, check=False)
        vjp = _softmax_jacobian_product(opmath(grad), relaxed, ctx.dim)
        return cast(vjp if ctx.tau == 1 else vjp / ctx.tau, grad.dtype), None, None, None


@cached_signature
class _GappedSample(torch.autograd.Function):
    """Forward the Gumbel-max sample; backward through the softmax of the gapped logits."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        logits: Tensor, gumbel: Tensor, dim: int, tau: float, gap: float
    ) -> tuple[Tensor, Tensor]:
        ell = shift_to_zero(cast(logits, gumbel.dtype), dim, check="logits")
        sample = one_hot(logits, dim, argmax(ell + gumbel, dim))
        ell = finite(ell)
        top = ell.amax(dim, keepdim=True)
        # The sampled logit is lifted to the maximum, every other one kept at least `gap`
        # below: D top + (1 - D) min(l, top - gap), exact (one product is 0, both factors
        # finite); a bool D would be what inductor's partitioner saves, and stores slowly.
        on = cast(sample, ell.dtype)
        return sample, top * on + torch.minimum(ell, top - gap) * (1 - on)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        _, _, ctx.dim, ctx.tau, _ = inputs
        gapped = output[1]
        mark_non_differentiable(ctx, gapped)
        ctx.save_for_backward(gapped)

    @staticmethod
    def backward(
        ctx: Any, grad: Tensor, _grad_gapped: Any
    ) -> tuple[Tensor, None, None, None, None]:
        (gapped,) = ctx.saved_tensors
        return softmax_vjp(gapped, grad, ctx.dim, ctx.tau), None, None, None, None


@cached_signature
class _BinaryGappedSample(_BinaryPerturbedSample):
    r"""GST's direct Bernoulli form: the two-class unit :math:`[0, \ell]` in closed form.

    With :math:`t = \max(0, \ell)` (the larger of the two logits), the gapped logits are
    :math:`(z_0, z_1) = (\min(0, t - \kappa), t)` when :math:`b = 1` and
    :math:`(t, \min(\ell, t - \kappa))` when :math:`b = 0`; the backward of class 1 with
    respect to :math:`\ell` is :math:`\bar y\, \sigma'(d/\tau)/\tau` with
    :math:`d = z_1 - z_0`, what the two-class softmax Jacobian gives. As :math:`\kappa > 0`,
    that difference is :math:`d = \max(\ell, \kappa)` when :math:`b = 1` and
    :math:`\min(\ell, -\kappa)` when :math:`b = 0`, computed so, without rounding. Same
    sample and, up to rounding, the same gradient as :class:`_GappedSample` on
    ``[0, logits]``. Saves ``d`` and differentiates as :class:`_BinaryPerturbedSample`
    (whose third argument, the kind, is here the gap).
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(  # type: ignore[override]
        logits: Tensor, gumbel: Tensor, gap: float, tau: float
    ) -> tuple[Tensor, Tensor]:
        sample, _ = _binary_sample(logits, gumbel)
        ell = finite(cast(logits, gumbel.dtype))
        # b max(l, gap) + (1 - b) min(l, -gap): exact, as one product is 0 (l is finite),
        # and no bool tensor, which inductor's partitioner would save (and CPU code stores
        # slowly) in place of the difference
        on = cast(sample, ell.dtype)
        return sample, ell.clamp_min(gap) * on + ell.clamp_max(-gap) * (1 - on)


@cached_signature
class _GumbelRaoSample(torch.autograd.Function):
    """Forward the Gumbel-max sample; backward: ST-Gumbel averaged over conditional draws.

    ``draws``: the exponentials of the ``k`` conditional draws, ``(k, *logits.shape)``, or
    a :class:`~hardgrad.estimators._gumbel_rao.Replay` of them (eager CPU); the backward
    reads them in blocks (:mod:`hardgrad.estimators._gumbel_rao`).
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
    (:func:`~hardgrad.estimators._gumbel_rao.drawn_source`, eager CPU). The conditional
    perturbed log-odds (:func:`~hardgrad.estimators._gumbel_rao.conditional_gumbel` on the two
    classes) are
    :math:`d = \operatorname{softplus}(r + \operatorname{softplus}(\ell))` when
    :math:`b = 1` and :math:`d = -\operatorname{softplus}(\operatorname{softplus}(-\ell) - r)`
    when :math:`b = 0`, i.e. :math:`|d| = \operatorname{softplus}(u)` with
    :math:`u = s r + \operatorname{softplus}(s \ell)`, :math:`s = 2b - 1`. The backward is
    :math:`\bar y` times the slope :math:`\tfrac1{k\tau}\sum_j \sigma'(d_j/\tau)`, which
    does not depend on :math:`\bar y`: the forward computes it (in blocks of
    :data:`~hardgrad.estimators._gumbel_rao.GUMBEL_RAO_CHUNK` elements) and saves only it,
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


@cached_signature
class _ReinMaxSample(torch.autograd.Function):
    """Forward the Gumbel-max sample; backward ReinMax (Heun's method)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, gumbel: Tensor, dim: int, tau: float) -> Tensor:
        return _gumbel_max(logits, gumbel, dim)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        logits, _, ctx.dim, ctx.tau = inputs
        ctx.save_for_backward(logits, output)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        logits, sample = ctx.saved_tensors
        dim, tau = ctx.dim, ctx.tau
        ell = finite_shifted(opmath(logits), dim)
        g = opmath(grad)
        pi0 = torch.softmax(ell, dim)
        pi1 = 0.5 * (torch.softmax(finite(ell / tau), dim) + sample.to(ell.dtype))
        result = 2 * _softmax_jacobian_product(g, pi1, dim) - 0.5 * _softmax_jacobian_product(
            g, pi0, dim
        )
        return result.to(logits.dtype), None, None, None


@dataclass(frozen=True)
class _Tempered(Estimator):
    """An estimator with a temperature ``tau`` > 0 (the softmax/sigmoid of its backward)."""

    tau: float = 1.0

    def __post_init__(self) -> None:
        _check_tau(self.tau)


@ESTIMATORS.register("st")
@dataclass(frozen=True)
class ST(_Tempered):
    r"""Straight-through with the softmax (sigmoid for Bernoulli) of the logits.

    Forward: the exact sample :math:`D`. Backward:
    :math:`\partial L/\partial \ell = \tfrac1\tau J(\operatorname{softmax}(\ell/\tau))^\top \bar y`;
    for a Bernoulli unit :math:`\sigma'(\ell/\tau)\,\bar y / \tau` (the sigmoid-adjusted
    straight-through). Biased: on the Bernoulli toy :math:`E[(b - t)^2]` its mean is
    :math:`2(p - t)p(1-p)` instead of :math:`p(1-p)(1 - 2t)`. Bengio et al. (2013),
    https://arxiv.org/abs/1308.3432.

    With ``probs``: :math:`\partial b/\partial p = \sigma'(\ell/\tau)/(\tau p(1-p))`, which
    is 1 at :math:`\tau = 1` (the straight-through of published stochastic-neuron code);
    at :math:`p \in \{0, 1\}` its limit, 0 for :math:`\tau < 1`, 1 for :math:`\tau = 1`,
    infinite for :math:`\tau > 1` (``ValueError`` while validated, see
    :func:`hardgrad.bernoulli`). Categorical at :math:`\tau = 1`:
    :math:`\bar y_i - \langle \bar y, q\rangle`.

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.tensor([0.0, 1.0, -1.0], requires_grad=True)
        >>> y = hg.categorical(logits, estimator=hg.estimators.ST(tau=2.0),
        ...                    generator=torch.Generator().manual_seed(0))
        >>> y
        tensor([0., 1., 0.], grad_fn=<_StraightThroughSampleBackward>)
    """

    logistic_bernoulli_noise: ClassVar[bool] = True
    name: ClassVar[str] = "st"
    probs_kind: ClassVar[str | None] = "st"

    def categorical(self, logits: Tensor, noise: Tensor, dim: int) -> Tensor:
        return apply_function(_StraightThroughSample, logits, noise, dim, self.tau)

    @accepts_logistic_difference
    def bernoulli(self, logits: Tensor, noise: Tensor) -> Tensor:
        native = _native_straight_through(logits, noise, self.tau)
        if native is not None:
            return native
        return apply_function(_BinarySample, logits, noise, "st", self.tau)


@ESTIMATORS.register("st_identity")
@dataclass(frozen=True)
class STIdentity(Estimator):
    r"""Straight-through that copies the gradient onto the logits unchanged.

    Forward: the exact sample :math:`D`. Backward:
    :math:`\partial L / \partial \ell = \bar y`. Biased. Bengio et al. (2013),
    https://arxiv.org/abs/1308.3432 (the plain, "identity" straight-through).

    The copy reaches every logit, an infinite one included (the one estimator whose
    gradient there is not 0).

    With ``probs`` the gradient is copied onto the probabilities unchanged,
    :math:`\partial L/\partial p = \bar y` (not the logits' chain rule), at 0 and 1 too.

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.zeros(4, requires_grad=True)
        >>> y = hg.bernoulli(logits, estimator="st_identity", generator=torch.Generator().manual_seed(1))
        >>> (y * torch.arange(4.0)).sum().backward(); logits.grad
        tensor([0., 1., 2., 3.])
    """

    logistic_bernoulli_noise: ClassVar[bool] = True
    name: ClassVar[str] = "st_identity"
    probs_kind: ClassVar[str | None] = "identity"

    def categorical(self, logits: Tensor, noise: Tensor, dim: int) -> Tensor:
        return apply_function(_IdentitySample, logits, noise, dim)

    @accepts_logistic_difference
    def bernoulli(self, logits: Tensor, noise: Tensor) -> Tensor:
        return apply_function(_BinarySample, logits, noise, "identity", 1.0)


@ESTIMATORS.register("gumbel_softmax")
@dataclass(frozen=True)
class GumbelSoftmax(_Tempered):
    r"""The Gumbel-softmax (Concrete) relaxation: a soft sample, not a discrete one.

    Forward: :math:`y = \operatorname{softmax}((\ell + g)/\tau)`, values in (0, 1) summing
    to 1 (for Bernoulli units :math:`\sigma((\ell + L)/\tau)` with logistic :math:`L`).
    Backward: its exact (pathwise) gradient. Biased for the discrete objective, unbiased for
    the relaxed one; :math:`\tau \to 0` approaches the discrete sample with growing
    variance. Jang et al. (2017), https://arxiv.org/abs/1611.01144; Maddison et al. (2017),
    https://arxiv.org/abs/1611.00712.

    With ``probs``: :math:`y = \operatorname{softmax}((\log q + g)/\tau)`, exactly 0 for a
    class of probability 0; its gradient with respect to :math:`q` is ST-Gumbel's (below).

    Example:
        >>> import torch, hardgrad as hg
        >>> y = hg.categorical(torch.zeros(3), estimator=hg.estimators.GumbelSoftmax(tau=0.5),
        ...                    generator=torch.Generator().manual_seed(0))
        >>> y.sum()
        tensor(1.)
    """

    logistic_bernoulli_noise: ClassVar[bool] = True
    name: ClassVar[str] = "gumbel_softmax"
    probs_kind: ClassVar[str | None] = "gumbel_softmax"
    discrete: ClassVar[bool] = False

    def categorical(self, logits: Tensor, noise: Tensor, dim: int) -> Tensor:
        return apply_function(_Relaxation, logits, noise, dim, self.tau)

    @accepts_logistic_difference
    def bernoulli(self, logits: Tensor, noise: Tensor) -> Tensor:
        r"""Class 1 of the two-class relaxation in its direct form,
        :math:`\sigma((\ell + g_1 - g_0)/\tau)` (:math:`g_1 - g_0` is logistic): the
        two-class softmax's value up to rounding, without the stacked logits."""
        return apply_function(_BinaryPerturbedSample, logits, noise, "relaxed", self.tau)[0]


@ESTIMATORS.register("st_gumbel")
@dataclass(frozen=True)
class STGumbel(_Tempered):
    r"""Straight-through Gumbel-softmax: the exact sample forward, the relaxation backward.

    Forward: :math:`D = \operatorname{onehot}(\arg\max(\ell + g))`. Backward:
    :math:`\tfrac1\tau J(\operatorname{softmax}((\ell + g)/\tau))^\top \bar y`, with the same
    :math:`g`: the backward of ``F.gumbel_softmax(hard=True)``, whose forward this matches
    except that it is exactly one-hot. Biased. Jang et al. (2017),
    https://arxiv.org/abs/1611.01144.

    With ``probs``: the chain rule through :math:`\ell = \log q`; at a probability of 0
    the limit is 0 for :math:`\tau < 1`, infinite for :math:`\tau > 1`, and for
    :math:`\tau = 1` finite on every draw (Bernoulli: :math:`e^{g_1 - g_0}` at
    :math:`p = 0`, :math:`e^{g_0 - g_1}` at 1), with a mean over draws that grows like
    :math:`\log(1/p)` as :math:`p \to 0`.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.categorical(torch.tensor([[2.0, 0.0, 0.0]]), estimator="st_gumbel",
        ...                generator=torch.Generator().manual_seed(0))
        tensor([[1., 0., 0.]])
    """

    logistic_bernoulli_noise: ClassVar[bool] = True
    name: ClassVar[str] = "st_gumbel"
    probs_kind: ClassVar[str | None] = "st_gumbel"

    def categorical(self, logits: Tensor, noise: Tensor, dim: int) -> Tensor:
        sample, _ = apply_function(_GumbelStraightThroughSample, logits, noise, dim, self.tau)
        return sample

    @accepts_logistic_difference
    def bernoulli(self, logits: Tensor, noise: Tensor) -> Tensor:
        return apply_function(_BinaryPerturbedSample, logits, noise, "st_gumbel", self.tau)[0]


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
    in blocks of 1 MB (:mod:`hardgrad.estimators._gumbel_rao`). On CPU in eager mode
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


@ESTIMATORS.register("reinmax")
@dataclass(frozen=True)
class ReinMax(_Tempered):
    r"""ReinMax: a second-order (Heun's method) straight-through estimator.

    Forward: the exact sample :math:`D`. Backward, with :math:`\pi_0 = \operatorname{softmax}(\ell)`
    and :math:`\pi_1 = \tfrac12(\operatorname{softmax}(\ell/\tau) + D)`:

    .. math::

        \frac{\partial L}{\partial \ell} = 2\,J(\pi_1)^\top \bar y - \tfrac12\,J(\pi_0)^\top \bar y.

    Biased in general, with second-order accuracy; the authors recommend
    :math:`\tau \ge 1`. Liu et al. (2023), https://arxiv.org/abs/2304.08612.

    With ``probs``: Bernoulli :math:`\partial b/\partial p = 2r(1-r)/(p(1-p)) - \tfrac12`,
    :math:`r = \tfrac12(\sigma(\ell/\tau) + b)`; at :math:`p \in \{0, 1\}` its limit,
    :math:`-\tfrac12` for :math:`\tau < 1`, :math:`\tfrac12` for :math:`\tau = 1`, infinite
    for :math:`\tau > 1` (``ValueError`` while validated: pass logits or keep probs inside
    (0, 1) with the recommended :math:`\tau > 1`).

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.estimators.ReinMax(tau=1.5)
        ReinMax(tau=1.5)
    """

    logistic_bernoulli_noise: ClassVar[bool] = True
    name: ClassVar[str] = "reinmax"
    probs_kind: ClassVar[str | None] = "reinmax"

    def categorical(self, logits: Tensor, noise: Tensor, dim: int) -> Tensor:
        return apply_function(_ReinMaxSample, logits, noise, dim, self.tau)

    @accepts_logistic_difference
    def bernoulli(self, logits: Tensor, noise: Tensor) -> Tensor:
        return apply_function(_BinarySample, logits, noise, "reinmax", self.tau)


@ESTIMATORS.register("gst")
@dataclass(frozen=True)
class GST(_Tempered):
    r"""Gapped straight-through: ST-Gumbel with a deterministic perturbation instead of noise.

    Forward: the exact sample :math:`D`. Backward: the softmax Jacobian at the *gapped*
    logits :math:`z = \ell + \operatorname{sg}(m_1 - m_2)`, where
    :math:`m_1 = (\max_j \ell_j - \ell) \odot D` lifts the sampled logit to the maximum
    and :math:`m_2 = \operatorname{relu}(\ell - \max_j \ell_j + \kappa) \odot (1 - D)`
    pushes every other logit at least the gap :math:`\kappa` below it:

    .. math::

        z_i = \begin{cases} \max_j \ell_j & D_i = 1 \\ \min(\ell_i, \max_j \ell_j - \kappa) & D_i = 0 \end{cases},
        \qquad \frac{\partial L}{\partial \ell} = \tfrac1\tau J(\operatorname{softmax}(z/\tau))^\top \bar y.

    The perturbation depends only on the sample, so the backward carries none of the Gumbel
    noise's variance beyond the sample itself. Biased. Fan et al. (2022), "Training
    Discrete Deep Generative Models via Gapped Straight-Through Estimator",
    https://arxiv.org/abs/2206.07235.

    With ``probs``: the chain rule through :math:`\ell = \log q`, the gapped logits
    written as a perturbation of :math:`\log q` (0 for a class of probability 0); at a
    probability of 0 the limit is 0 for :math:`\tau < 1`, infinite for :math:`\tau > 1`,
    and (Bernoulli) 1 for :math:`\tau = 1`.

    Args:
        tau: temperature of the backward's softmax, > 0.
        gap: the margin :math:`\kappa` kept between the sampled logit and the others, > 0.

    Example:
        >>> import torch, hardgrad as hg
        >>> hg.estimators.GST(tau=0.5, gap=1.0)
        GST(tau=0.5, gap=1.0)
    """

    gap: float = 1.0
    logistic_bernoulli_noise: ClassVar[bool] = True
    name: ClassVar[str] = "gst"
    probs_kind: ClassVar[str | None] = "gst"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive(self.gap, "gap")

    def categorical(self, logits: Tensor, noise: Tensor, dim: int) -> Tensor:
        sample, _ = apply_function(_GappedSample, logits, noise, dim, self.tau, self.gap)
        return sample

    @accepts_logistic_difference
    def bernoulli(self, logits: Tensor, noise: Tensor) -> Tensor:
        return apply_function(_BinaryGappedSample, logits, noise, self.gap, self.tau)[0]
