r"""The pathwise estimators in probability space: ``hg.bernoulli(probs=...)`` and
``hg.categorical(probs=...)``.

Notation along the category dimension: probabilities :math:`q` (for Bernoulli units the two
classes :math:`(1 - p, p)`), their logits :math:`\ell = \log q` (:math:`-\infty` where
:math:`q_i = 0`), the incoming gradient :math:`\bar y`, and for an estimator whose logits
backward is :math:`\tfrac1\tau J(s)^\top \bar y` with :math:`s = \operatorname{softmax}((\ell +
\delta)/\tau)` (:math:`\delta` a perturbation the estimator does not differentiate: 0 for
ST, the Gumbels for ST-Gumbel, ...) the chain rule through :math:`\ell = \log q` gives

.. math::

    \frac{\partial L}{\partial q_i} = \frac1\tau\, r_i \big(\bar y_i - \langle \bar y, s\rangle\big),
    \qquad r_i = \frac{s_i}{q_i}
    = \exp\!\Big(\big(\tfrac1\tau - 1\big)\ell_i + \frac{\delta_i}\tau
      - \operatorname{logsumexp}_j \frac{\ell_j + \delta_j}\tau\Big).

The ratio :math:`r_i` is what is finite where :math:`s_i` and :math:`q_i` both vanish: at
:math:`q_i = 0` its limit is 0 for :math:`\tau < 1`,
:math:`\exp(\delta_i - \operatorname{logsumexp}(\ell + \delta))` for :math:`\tau = 1` and
:math:`+\infty` for :math:`\tau > 1`. That is how every estimator here gets a finite gradient
equal to its formula's limit at probabilities of exactly 0 and 1 (for :math:`\tau \le 1`;
:func:`hardgrad.bernoulli` documents the :math:`\tau > 1` case). A Bernoulli unit is the
two-class unit on :math:`(1 - p, p)`, so :math:`\partial L / \partial p = \partial L /
\partial q_1 - \partial L / \partial q_0 = \tfrac1\tau (r_1 s_0 + r_0 s_1)\,\bar y` (which is
:math:`\sigma'(\ell/\tau)/(\tau p (1 - p))\,\bar y` inside (0, 1)).

Unnormalised :math:`q` (possible only with the value checks off) is treated as
:math:`q / \sum_j q_j` throughout, gradient included (the logits gradients sum to 0, so the
chain rule through :math:`\log q` is the chain rule through the normalisation).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import torch
from torch import Tensor

from .._core.compat import fresh_output
from .._core.kernels import argmax, eager_plain, finite, one_hot, opmath
from ..ops._autograd import apply_function, cached_signature, forward_mode

#: A term of a probability-space backward: (coefficient, s, r, temperature); the VJP is
#: ``coefficient * r * (g - <g, s>) / temperature`` (its mean over draws for Gumbel-Rao).
Term = tuple[float, Tensor, Tensor, float]

#: Estimator kinds with a probability-space backward; "identity" copies the gradient.
KINDS = ("st", "identity", "gumbel_softmax", "st_gumbel", "gumbel_rao", "gst", "reinmax")


def log_probs(probs: Tensor, binary: bool) -> Tensor:
    """``log q`` in the dtype the backward computes in; for a Bernoulli unit the two-class
    ``(log(1 - p), log p)`` along a new last dimension."""
    q = opmath(probs)
    if binary:
        return torch.stack((torch.log1p(-q), torch.log(q)), -1)
    return torch.log(q)


def binary_log_odds(probs: Tensor) -> Tensor:
    r""":math:`\log p - \log(1 - p)`, :math:`\mp\infty` at 0 and 1, in the compute dtype."""
    q = opmath(probs)
    return torch.log(q) - torch.log1p(-q)


def _softmax_ratio(
    log_q: Tensor, delta: Tensor | None, tau: float, dim: int, floor: float
) -> tuple[Tensor, Tensor]:
    r""":math:`s = \operatorname{softmax}((\ell + \delta)/\tau)` and :math:`r = s / q` with its
    limits where :math:`q_i = 0` (``floor``, the log of a small probability, stands in for
    :math:`\ell_i = -\infty` when :math:`\tau > 1`, whose limit is infinite)."""
    perturbed = log_q if delta is None else log_q + delta
    scaled = perturbed if tau == 1 else finite(perturbed / tau)
    total = torch.logsumexp(scaled, dim, keepdim=True)
    log_s = scaled - total
    zero = log_q == -math.inf
    if tau == 1:
        # exp(delta - logsumexp(l + delta)): exact, and the same formula at q_i = 0.
        log_r = -total if delta is None else delta - total
    else:
        if tau < 1:
            at_zero: Tensor | float = -math.inf
        else:
            at_floor = torch.full_like(log_q, floor) if delta is None else floor + delta
            at_zero = finite(at_floor / tau) - total - floor
        log_r = torch.where(zero, at_zero, log_s - torch.where(zero, 0.0, log_q))
    return log_s.exp(), log_r.exp().expand_as(log_s)


def _conditional_delta(log_q: Tensor, chosen: Tensor, log_e: Tensor, dim: int) -> Tensor:
    r"""The conditional Gumbels of :func:`hardgrad.estimators._gumbel_rao_draws.conditional_gumbel`
    as perturbations :math:`\delta = z - \ell`, finite where :math:`\ell_i = -\infty`:
    :math:`\delta_D = \Lambda - \log E_D - \ell_D` and
    :math:`\delta_i = -\log(E_D e^{\ell_i - \Lambda} + E_i)` otherwise."""
    total = torch.logsumexp(log_q, dim, keepdim=True)
    log_e_max = torch.where(chosen, log_e, 0).sum(dim, keepdim=True)
    top = total - log_e - torch.where(chosen, log_q, 0)  # only read where chosen (q_D > 0)
    rest = -torch.logaddexp(log_e_max - total + log_q, log_e)
    return torch.where(chosen, top, rest)


def _gap_delta(log_q: Tensor, chosen: Tensor, dim: int, gap: float) -> Tensor:
    r"""GST's gapped logits as a perturbation :math:`\delta = z - \ell`: :math:`\max_j \ell_j
    - \ell_D` for the sampled class, :math:`\min(0, \max_j \ell_j - \kappa - \ell_i)` (0 where
    :math:`\ell_i = -\infty`) for the others."""
    top = log_q.amax(dim, keepdim=True)
    safe = torch.where(chosen, log_q, 0)  # q_D > 0: finite
    return torch.where(chosen, top - safe, torch.clamp_max(top - gap - log_q, 0))


def _terms(
    kind: str,
    log_q: Tensor,
    gumbel: Tensor | None,
    exponentials: Tensor | None,
    sample: Tensor | None,
    dim: int,
    tau: float,
    gap: float,
    floor: float,
) -> list[Term]:
    """The estimator's backward as softmax-Jacobian terms in probability space (see the
    module docstring). ``sample`` is one-hot along ``dim``; ``dim`` is negative."""
    if kind == "st":
        s, r = _softmax_ratio(log_q, None, tau, dim, floor)
        return [(1.0, s, r, tau)]
    if kind in ("st_gumbel", "gumbel_softmax"):
        assert gumbel is not None
        s, r = _softmax_ratio(log_q, gumbel.to(log_q.dtype), tau, dim, floor)
        return [(1.0, s, r, tau)]
    assert sample is not None
    chosen = sample.to(torch.bool)
    if kind == "gst":
        s, r = _softmax_ratio(log_q, _gap_delta(log_q, chosen, dim, gap), tau, dim, floor)
        return [(1.0, s, r, tau)]
    if kind == "gumbel_rao":
        assert exponentials is not None
        log_e = exponentials.log().to(log_q.dtype)
        delta = _conditional_delta(log_q.unsqueeze(0), chosen.unsqueeze(0), log_e, dim)
        s, r = _softmax_ratio(log_q.unsqueeze(0), delta, tau, dim, floor)
        return [(1.0, s, r, tau)]
    # ReinMax: 2 J(pi_1) - J(pi_0) / 2, pi_1 = (softmax(l / tau) + D) / 2, pi_0 = softmax(l).
    s, r = _softmax_ratio(log_q, None, tau, dim, floor)
    hot = sample.to(log_q.dtype)
    inverse = torch.where(chosen, (-log_q).exp(), 0)  # D / q: q_D > 0 where D = 1
    pi1, r1 = 0.5 * (s + hot), 0.5 * (r + inverse)
    pi0, r0 = _softmax_ratio(log_q, None, 1.0, dim, floor)
    return [(2.0, pi1, r1, 1.0), (-0.5, pi0, r0, 1.0)]


def _vjp(terms: list[Term], grad: Tensor, dim: int, binary: bool, averaged: bool) -> Tensor:
    """The gradient with respect to the probabilities (``p`` for a Bernoulli unit)."""
    total: Tensor | None = None
    for coefficient, s, r, tau in terms:
        if binary:  # d/dp = d/dq_1 - d/dq_0 with ybar = (0, g): (r_1 s_0 + r_0 s_1) g
            factor = r[..., 1] * s[..., 0] + r[..., 0] * s[..., 1]
            part = (factor.mean(0) if averaged else factor) * grad
        else:
            inner = (grad * s).sum(dim, keepdim=True)
            part = r * (grad - inner)
            part = part.mean(0) if averaged else part
        part = part * (coefficient / tau)
        total = part if total is None else total + part
    assert total is not None
    return total


def _jvp(terms: list[Term], tangent: Tensor, dim: int, binary: bool, averaged: bool) -> Tensor:
    """The sample's tangent: the transpose of :func:`_vjp`'s map applied to ``tangent``,
    :math:`\\tfrac1\\tau (r \\odot \\dot q - s \\langle r, \\dot q\\rangle)` per term."""
    total: Tensor | None = None
    for coefficient, s, r, tau in terms:
        if binary:  # diagonal: the same factor as the VJP
            factor = r[..., 1] * s[..., 0] + r[..., 0] * s[..., 1]
            part = (factor.mean(0) if averaged else factor) * tangent
        else:
            weighted = r * tangent
            part = weighted - s * weighted.sum(dim, keepdim=True)
            part = part.mean(0) if averaged else part
        part = part * (coefficient / tau)
        total = part if total is None else total + part
    assert total is not None
    return total


@cached_signature
class _ProbsSample(torch.autograd.Function):
    """Forward: the exact sample (Gumbel-max on ``log q``; for ``"gumbel_softmax"`` the
    relaxed sample) from probabilities; backward: the estimator ``kind`` in probability
    space, finite at probabilities of 0 and 1 (see the module docstring)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(
        probs: Tensor,
        gumbel: Tensor,
        exponentials: Tensor | None,
        dim: int,
        kind: str,
        tau: float,
        gap: float,
        floor: float,
        binary: bool,
    ) -> Tensor:
        if binary:
            # The logits path's comparison, on log p - log(1 - p): the same draw for the same
            # noise whenever the log-odds agree.
            g0, g1 = gumbel.unbind(-1)
            perturbed = binary_log_odds(probs).to(gumbel.dtype) + g1
            if kind == "gumbel_softmax":  # sigma((l + g1 - g0) / tau): 0 and 1 at p = 0, 1
                return fresh_output(torch.sigmoid(finite((perturbed - g0) / tau)).to(probs.dtype))
            return 1 - torch.le(perturbed, g0).to(probs.dtype)
        log_q = log_probs(probs, binary)
        if kind == "gumbel_softmax":
            scaled = (log_q + gumbel) if tau == 1 else (log_q + gumbel) / tau
            return fresh_output(torch.softmax(finite(scaled), dim).to(probs.dtype))  # 0 at q_i = 0
        index = argmax(log_q.to(gumbel.dtype) + gumbel, dim)
        return one_hot(probs, dim, index)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        probs, gumbel, exponentials, ctx.dim, ctx.kind, ctx.tau, ctx.gap, ctx.floor = inputs[:8]
        ctx.binary = inputs[8]
        if ctx.kind == "identity":
            return
        ctx.save_for_backward(probs, gumbel, exponentials, output)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        if ctx.kind == "identity":
            return grad, None, None, None, None, None, None, None, None
        result = _probs_map(ctx, grad, _vjp)
        return result.to(grad.dtype), None, None, None, None, None, None, None, None


#: Bernoulli kinds whose backward is one softmax term (see :func:`_binary_factor`).
_ONE_TERM_BINARY = ("st", "st_gumbel", "gumbel_softmax", "gst")

#: Bernoulli kinds whose backward :func:`_binary_factor` computes elementwise in closed form
#: (the rest, and the end points of these, from the two-class terms).
_DIRECT_BINARY = (*_ONE_TERM_BINARY, "reinmax", "gumbel_rao")


def _binary_perturbed_log_odds(
    kind: str, probs: Tensor, gumbel: Tensor, sample: Tensor, gap: float
) -> Tensor:
    r""":math:`d = (\ell_1 + \delta_1) - (\ell_0 + \delta_0)` of a one-term Bernoulli kind, in
    the compute dtype: the log-odds for ST, plus :math:`g_1 - g_0` for the Gumbel kinds;
    for GST the gapped logits give :math:`\max(d, \kappa)` where :math:`b = 1` and
    :math:`\min(d, -\kappa)` where :math:`b = 0` (written with the 0/1 sample, which
    multiplies: the entries where one side is infinite are the end points, which
    :func:`_binary_factor` takes from the terms)."""
    odds = binary_log_odds(probs)
    if kind in ("st_gumbel", "gumbel_softmax"):
        g0, g1 = gumbel.to(odds.dtype).unbind(-1)
        return odds + (g1 - g0)
    if kind == "gst":
        on = sample.to(odds.dtype)
        return on * odds.clamp_min(gap) + (1 - on) * odds.clamp_max(-gap)
    return odds


def _slope(d: Tensor, tau: float) -> Tensor:
    r""":math:`\sigma'(d/\tau) = a (1 - a)` with :math:`a = \sigma(-|d|/\tau)` (no
    cancellation)."""
    a = torch.sigmoid(d.abs().mul_(-1.0 / tau))
    return a * (1 - a)


def _other_class(q: Tensor, on: Tensor) -> Tensor:
    """The probability of the class not drawn: ``1 - p`` where ``b = 1``, ``p`` where ``b = 0``."""
    return q + on * (1 - 2 * q)


def _binary_numerator(
    ctx: Any, q: Tensor, probs: Tensor, gumbel: Tensor, exponentials: Tensor | None, sample: Tensor
) -> tuple[Tensor, float, float]:
    r"""``(numerator, over, offset)``: the factor is ``numerator / (over p (1 - p)) +
    offset``; an entry whose numerator is not a normal number goes to the terms.

    * one-term kinds: :math:`\sigma'(d/\tau)`, over :math:`\tau`
      (:func:`_binary_perturbed_log_odds`);
    * ReinMax, :math:`2 J(\pi_1) - \tfrac12 J(\pi_0)` with :math:`\pi_1 = (s + D)/2`,
      :math:`s = \operatorname{softmax}(\ell/\tau)`, :math:`\pi_0 = q`: the second term is
      :math:`-\tfrac12` (:math:`J(q)`'s factor :math:`q_0 q_1` cancels the chain rule's
      :math:`1/(p(1-p))`), the first :math:`t (2 - t) / 2` for :math:`t = s_{1-b}`, the temperature softmax of
      the class not drawn (:math:`q_{1-b}` itself at :math:`\tau = 1`);
    * Gumbel-Rao: the mean over the :math:`k` conditional draws of
      :math:`\sigma'(d_j/\tau)`, over :math:`\tau`, where given the drawn class :math:`D = b` and its
      exponentials :math:`E`, :math:`|d_j| = \log(1 + E_{\bar D} / (E_D\, q_{\bar D}))`
      (the conditional Gumbels of the two classes; :math:`\bar D` the other class).
    """
    tau = ctx.tau
    on = sample.to(q.dtype)
    if ctx.kind == "reinmax":
        if tau == 1:
            t = _other_class(q, on)
        else:
            t = torch.sigmoid(binary_log_odds(probs).mul_((1 - 2 * on) / tau))
        return t * (2 - t) / 2, 1.0, -0.5
    if ctx.kind == "gumbel_rao":
        assert exponentials is not None
        e = exponentials.to(q.dtype)
        # log(E_other / E_drawn) = -+log(E_1 / E_0): a sign, not a select (torch.where on a
        # random mask is a per-element branch on CPU, 2 ns an element)
        log_ratio = torch.log(e[..., 1] / e[..., 0]).mul_(1 - 2 * on)
        q_other = _other_class(q, on)
        # |d| = log(1 + exp(log_ratio - log q_other)); softplus's linear branch only where
        # exp(-40) is below the rounding of float64
        d = torch.nn.functional.softplus(log_ratio.sub_(torch.log(q_other)), threshold=40.0)
        return _slope(d, tau).mean(0), tau, 0.0
    d = _binary_perturbed_log_odds(ctx.kind, probs, gumbel, sample, ctx.gap)
    return _slope(d, tau), tau, 0.0


def _binary_factor(
    ctx: Any, probs: Tensor, gumbel: Tensor, exponentials: Tensor | None, sample: Tensor
) -> Tensor:
    r"""The factor :math:`F` of :math:`\partial L/\partial p = F\,\bar y` for a Bernoulli kind
    of :data:`_DIRECT_BINARY` (its VJP and its JVP: the map is diagonal).

    With :math:`s = \operatorname{softmax}((\ell + \delta)/\tau)` over the two classes,
    :math:`r_1 s_0 + r_0 s_1 = s_0 s_1 (1/q_1 + 1/q_0) = s_0 s_1 / (p (1 - p))`, so a
    one-term kind has :math:`F = \sigma'(d/\tau) / (\tau p (1 - p))` for the perturbed
    log-odds :math:`d`, with :math:`\sigma'` at :math:`-|d|/\tau` (no cancellation);
    ReinMax and Gumbel-Rao are sums and means of such terms (:func:`_binary_numerator`).
    Elementwise, where the two-class terms stack, take a logsumexp and two exponentials
    (2-8x the time). Where :math:`p (1 - p)` or the numerator is not a normal number
    (:math:`p` = 0 or 1, a subnormal :math:`p`, or a slope that would underflow before the
    division)
    the terms, computed in log space, give the value (the limit at 0 and 1): in eager mode
    for those entries only, under ``torch.compile`` and ``torch.func`` (no data-dependent
    branch) everywhere, then selected; the same values.
    """
    q = opmath(probs)
    variance = q * (1 - q)
    numerator, over, offset = _binary_numerator(ctx, q, probs, gumbel, exponentials, sample)
    tiny = torch.finfo(variance.dtype).tiny
    edge = ~((variance >= tiny) & (numerator >= tiny))
    factor = numerator.div_(variance.mul_(over) if over != 1 else variance)
    if offset:
        factor = factor.add_(offset)
    if not eager_plain(probs):  # no data-dependent branch: the terms everywhere, then chosen
        limit = _terms_factor(ctx, probs, gumbel, exponentials, sample)
        return torch.where(edge, limit, factor)
    if bool(edge.any()):  # the terms are elementwise: the same values on a subset
        index = edge.nonzero(as_tuple=True)
        # (k, *shape, 2) -> the k draws of those entries, (k, entries, 2)
        drawn = None if exponentials is None else exponentials.movedim(0, -1)[index].movedim(-1, 0)
        limit = _terms_factor(ctx, probs[index], gumbel[index], drawn, sample[index])
        factor = factor.index_put(index, limit)
    return factor


def _terms_factor(
    ctx: Any, probs: Tensor, gumbel: Tensor, exponentials: Tensor | None, sample: Tensor
) -> Tensor:
    """:func:`_binary_factor` from the two-class terms, as :func:`_vjp` computes them."""
    on = sample.to(opmath(probs).dtype)
    two_class = torch.stack((1 - on, on), -1)
    log_q = log_probs(probs, True)
    kind = ctx.kind
    terms = _terms(kind, log_q, gumbel, exponentials, two_class, -1, ctx.tau, ctx.gap, ctx.floor)
    total: Tensor | None = None
    for coefficient, s, r, tau in terms:
        part = (r[..., 1] * s[..., 0] + r[..., 0] * s[..., 1]) * (coefficient / tau)
        if kind == "gumbel_rao":
            # The mean over the draws, added in order: the same bits for a subset of the
            # entries as for all of them (a reduction's order depends on the shape).
            part = functools.reduce(torch.add, part.unbind(0)) / part.shape[0]
        total = part if total is None else total + part
    assert total is not None
    return total


def _probs_map(ctx: Any, vector: Tensor, apply: Any) -> Tensor:
    """:func:`_vjp` or :func:`_jvp` of ``vector`` from what ``ctx`` saved."""
    probs, gumbel, exponentials, sample = ctx.saved_tensors
    binary, dim = ctx.binary, ctx.dim
    averaged = ctx.kind == "gumbel_rao"
    if ctx.kind == "st" and ctx.tau == 1 and not binary:
        # softmax(log q) = q / sum q and r = s / q = 1 / sum q: the same term without a
        # logarithm, a logsumexp and two exponentials (Bernoulli units take the identity)
        q = opmath(probs)
        total = q.sum(dim, keepdim=True)
        return apply(
            [(1.0, q / total, total.reciprocal().expand_as(q), 1.0)],
            opmath(vector),
            dim,
            binary,
            averaged,
        )
    if binary and ctx.kind in _DIRECT_BINARY:
        return _binary_factor(ctx, probs, gumbel, exponentials, sample) * opmath(vector)
    log_q = log_probs(probs, binary)
    if binary:
        dim = -1
        if sample is not None and ctx.kind in ("gst", "gumbel_rao", "reinmax"):
            on = sample.to(log_q.dtype)
            sample = torch.stack((1 - on, on), -1)
    terms = _terms(ctx.kind, log_q, gumbel, exponentials, sample, dim, ctx.tau, ctx.gap, ctx.floor)
    return apply(terms, opmath(vector), dim, binary, averaged)


@forward_mode(_ProbsSample)
@cached_signature
class _ProbsSampleJVP(_ProbsSample):
    """:class:`_ProbsSample` with its forward-mode rule (the transpose of the backward's map)."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        _ProbsSample.setup_context(ctx, inputs, output)
        if ctx.kind != "identity":
            ctx.save_for_forward(inputs[0], inputs[1], inputs[2], output)

    @staticmethod
    def jvp(ctx: Any, tangent: Tensor, *_others: Any) -> Tensor:
        if ctx.kind == "identity":
            return tangent
        return _probs_map(ctx, tangent, _jvp).to(tangent.dtype)


def sample_from_probs(
    kind: str,
    probs: Tensor,
    noise: Any,
    dim: int,
    *,
    tau: float = 1.0,
    gap: float = 1.0,
    binary: bool,
) -> Tensor:
    """The sample of the estimator ``kind`` from ``probs`` (``noise`` as its ``noise()``
    drew it for the logits' shape: two-class for a Bernoulli unit)."""
    gumbel, exponentials = noise if kind == "gumbel_rao" else (noise, None)
    if binary and kind == "st" and tau == 1:
        # dL/dp = sigma'(l) / (p (1 - p)) * ybar = ybar exactly, 0 and 1 included: the
        # identity's backward (the terms' exp/logsumexp would give it to a few ulps, at
        # 3x the cost of the whole sample)
        kind = "identity"
    if binary:
        dim = -1
    elif dim >= 0:
        dim -= probs.dim()  # from the back: Gumbel-Rao's draws add a leading dimension
    floor = math.log(torch.finfo(probs.dtype).eps) if tau > 1 else -math.inf
    return apply_function(
        _ProbsSample, probs, gumbel, exponentials, dim, kind, tau, gap, floor, binary
    )
