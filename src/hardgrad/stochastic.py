r"""Stochastic binary and categorical units with pathwise gradient estimators.

``hg.categorical`` draws an exact one-hot sample of :math:`\operatorname{Cat}(\operatorname{softmax}(\ell))`
(Gumbel-max: :math:`\arg\max_i \ell_i + g_i`, :math:`g_i` standard Gumbel) whose backward is
the chosen estimator; ``hg.bernoulli`` is, by definition, the categorical unit on the
two-class logits :math:`[0, \ell]` (class 1 = "on"), so the two share every estimator.
Both take probabilities instead of logits as ``probs=`` (exactly 0 and 1 included; see
:func:`bernoulli`).

Randomness comes only from ``generator`` (the global RNG when it is ``None``); noise is
drawn on the logits' device, in their dtype, or in float32 for float16/bfloat16 logits so
that samples stay exact draws. Uniforms are kept in :math:`[\text{tiny}, 1 - \epsilon]`, so
no sample or gradient is NaN for finite logits.
"""

from __future__ import annotations

import torch
from torch import Tensor

from . import estimators as _estimators
from ._core.kernels import random_tensor
from ._core.validation import (
    check_dim,
    check_floating,
    check_normal,
    check_real,
    value_checks_apply,
)
from .estimators._base import noise_dtype, uniform

__all__ = ["bernoulli", "categorical", "noisy_rectifier", "stochastic_times_smooth"]

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


def _sample_categorical(
    tensor: Tensor,
    is_probs: bool,
    dim: int,
    chosen: _estimators.Estimator,
    generator: torch.Generator | None,
) -> Tensor:
    if is_probs:
        return chosen.categorical_probs(tensor, chosen.noise(tensor, generator), dim)
    return chosen.sample_categorical(tensor, generator, dim)


def _sample_bernoulli(
    tensor: Tensor, is_probs: bool, chosen: _estimators.Estimator, generator: torch.Generator | None
) -> Tensor:
    if is_probs:
        return chosen.sample_bernoulli_probs(tensor, generator)
    return chosen.sample_bernoulli(tensor, generator)


def categorical(
    logits: Tensor | None = None,
    *,
    probs: Tensor | None = None,
    dim: int = -1,
    estimator: EstimatorLike = "st",
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""A one-hot sample of :math:`\operatorname{Cat}(\operatorname{softmax}(\ell))` along
    ``dim``, or of :math:`\operatorname{Cat}(q)` given probabilities ``probs``.

    Forward: :math:`D = \operatorname{onehot}(\arg\max_i \ell_i + g_i)`, an exact draw
    (for ``"gumbel_softmax"``, the relaxed :math:`\operatorname{softmax}((\ell + g)/\tau)`
    instead); with ``probs``, :math:`\ell = \log q`, so a category of probability 0 is
    never drawn (and gets exactly 0 in the relaxation). Backward: the estimator's, see
    :mod:`hardgrad.estimators` for each one's formula and bias; with ``probs``, see
    "Probabilities instead of logits" in :func:`bernoulli` and the table in the docs of
    :mod:`hardgrad.stochastic`.

    Args:
        logits: floating tensor; unnormalised log-probabilities along ``dim``. Sampling
            depends on logit differences only: the noise is added to
            :math:`\ell - \max_j \ell_j` (the row maximum detached), so equal logits are
            drawn uniformly at any magnitude, and the same generator seed gives the same
            sample for ``logits`` and ``logits + c`` wherever ``logits + c`` is exact
            (:mod:`hardgrad.estimators._shift`). ``-inf`` excludes a category exactly (and
            its gradient is 0, except for ``"st_identity"``, which copies the gradient to
            every logit); ``+inf`` is a point mass (several ``+inf`` in one row share it
            equally); a row of ``-inf`` only has no distribution: ``ValueError`` naming
            ``logits`` while validation is on (the row maxima are read back: one small
            reduction; unchecked, such a row is drawn uniformly). NaN is not rejected
            (scanning for it would cost a pass): it counts as the largest logit, as in
            :func:`torch.argmax`, so a NaN category is chosen, and the backward reads it as
            0, so the gradient stays finite. :func:`hardgrad.expectation` rejects NaN
            logits. Positional; pass exactly one of ``logits`` and ``probs``.
        probs: floating tensor of category probabilities along ``dim`` (keyword only),
            instead of ``logits``: non-negative and summing to 1 within
            :math:`\max(10^{-6}, 8\epsilon)` (:math:`\epsilon` the dtype's machine epsilon;
            ``torch.distributions``' simplex check), checked while validation is on
            (:func:`hardgrad.set_validation`), ``ValueError`` otherwise. Unchecked (validation
            off, ``torch.compile``, ``torch.func``) unnormalised values act as
            ``probs / probs.sum(dim)``. Zeros are allowed: see :func:`bernoulli`.
        dim: the category dimension.
        estimator: a pathwise estimator, by name or instance (e.g.
            ``hg.estimators.GumbelRao(tau=0.5, k=10)``). Its ``tau`` must be a normal
            number of the dtype the backward computes in (float32 for half types, so
            ``tau >= 1.2e-38`` there); ``ValueError`` otherwise.
        generator: the source of randomness; the same seed gives the same sample and
            gradient. Under ``torch.compile(fullgraph=True)`` pass ``None`` (torch 2.13's
            dynamo cannot trace a ``torch.Generator`` argument; the global RNG is used).

    Raises:
        TypeError: ``logits`` or ``probs`` not a dense floating tensor (sparse and nested
            tensors are refused); bad argument types.
        ValueError: both or neither of ``logits`` and ``probs``; bad ``dim``, ``tau`` or
            estimator; while validation is on, a row of ``logits`` that is all ``-inf``,
            ``probs`` negative, NaN or not summing to 1, or exactly 0 with a temperature
            above 1 while ``probs`` requires grad.

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.tensor([[1.0, 2.0, 0.5]], requires_grad=True)
        >>> y = hg.categorical(logits, estimator="st_gumbel", generator=torch.Generator().manual_seed(0))
        >>> y
        tensor([[0., 1., 0.]], grad_fn=<_GumbelStraightThroughSampleBackward>)
        >>> probs = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]], requires_grad=True)
        >>> hg.categorical(probs=probs, generator=torch.Generator().manual_seed(0))
        tensor([[0., 1., 0.],
                [0., 0., 1.]], grad_fn=<_ProbsSampleBackward>)
    """
    tensor, is_probs = _one_of(logits, probs)
    name = "probs" if is_probs else "logits"
    d = check_dim(tensor, dim)
    if tensor.shape[d] == 0:
        raise ValueError(
            f"Expected `{name}` to have at least one category along dim={dim}, "
            f"but found shape {tuple(tensor.shape)}"
        )
    _check_generator(generator)
    chosen = _resolve(estimator, tensor, "hg.categorical")
    if is_probs:
        check_probs(tensor, categorical=True, dim=d, estimator=chosen)
    return _sample_categorical(tensor, is_probs, d, chosen, generator)


def bernoulli(
    logits: Tensor | None = None,
    *,
    probs: Tensor | None = None,
    estimator: EstimatorLike = "st",
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""A sample :math:`b \in \{0, 1\}` of :math:`\operatorname{Bern}(\sigma(\ell))`, or of
    :math:`\operatorname{Bern}(p)` given probabilities ``probs``, elementwise.

    Defined as the categorical unit on the two-class logits :math:`[0, \ell]` with class 1
    = "on" (with ``probs``, on the probabilities :math:`(1 - p, p)`), so every estimator
    means the same thing for both: e.g. ``"st"`` backpropagates
    :math:`\sigma'(\ell/\tau)/\tau` (the sigmoid-adjusted straight-through of Bengio et
    al. 2013, https://arxiv.org/abs/1308.3432) and ``"gumbel_softmax"`` returns the binary
    Concrete relaxation :math:`\sigma((\ell + L)/\tau)` with logistic noise :math:`L`.

    Probabilities instead of logits. ``probs=p`` draws :math:`b = 1` exactly when
    :math:`\log p - \log(1-p) + g_1 > g_0` (the logits path's test on the same noise), so
    :math:`P(b = 1) = p` and ``p = 0`` / ``p = 1`` give 0 / 1 every time. The gradient goes
    to ``probs``: inside (0, 1) it is the logits estimator times
    :math:`d\ell/dp = 1/(p(1-p))` (for ``"st"``:
    :math:`\partial b/\partial p = \sigma'(\ell/\tau)/(\tau p(1-p))`, exactly 1 at
    :math:`\tau = 1`), computed in a form that stays finite at 0 and 1, where it equals the
    limit of that formula. The limit is 0 for a temperature :math:`\tau < 1`, finite for
    :math:`\tau = 1`, and infinite for :math:`\tau > 1`: then, while validation is on and
    ``probs`` requires grad, exact 0s and 1s raise ``ValueError``; unchecked, the backward
    uses the dtype's machine epsilon in place of an exact 0 (and :math:`1 - \epsilon` for
    1), a large finite value. ``"st_identity"`` copies the incoming gradient onto ``probs``
    unchanged (:math:`\partial b/\partial p = 1`, not the logits' :math:`1/(p(1-p))`). The
    table of every estimator's value at 0 and 1 is in the docs of
    :mod:`hardgrad.stochastic`.

    Args:
        logits: floating tensor of log-odds (any shape, 0-dim included). ``-inf`` gives 0
            and ``+inf`` gives 1, with gradient 0 (except ``"st_identity"``); the draw
            compares the log-odds (a difference already) with logistic noise, so it is the
            two-class categorical draw on ``[0, logits]`` at every magnitude; NaN gives 1 (the class-1 logit of ``[0, NaN]`` counts as
            the larger, as in :func:`categorical`), with a finite gradient. Positional;
            pass exactly one of ``logits`` and ``probs``.
        probs: floating tensor of probabilities in [0, 1] (keyword only), instead of
            ``logits``; NaN or values outside [0, 1] raise ``ValueError`` while validation
            is on (:func:`hardgrad.set_validation`; unchecked, they give unspecified
            samples).
        estimator: a pathwise estimator, by name or instance; its ``tau`` is checked as
            in :func:`categorical`.
        generator: the source of randomness. ``hg.bernoulli(probs=torch.sigmoid(l))`` uses
            the same noise as ``hg.bernoulli(l)`` and draws the same sample except where
            the noise falls within the rounding error of :math:`\log p - \log(1-p)` from
            the threshold.

    Raises:
        TypeError: ``logits`` or ``probs`` not a floating tensor; bad argument types.
        ValueError: both or neither of ``logits`` and ``probs``; bad ``tau`` or estimator;
            while validation is on, ``probs`` outside [0, 1] or NaN, or exactly 0 or 1
            with a temperature above 1 while ``probs`` requires grad.

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.tensor([-3.0, 0.0, 3.0], requires_grad=True)
        >>> b = hg.bernoulli(logits, generator=torch.Generator().manual_seed(0))
        >>> b.tolist()
        [0.0, 1.0, 1.0]
        >>> probs = torch.tensor([0.0, 0.3, 1.0], requires_grad=True)   # e.g. a hard sigmoid
        >>> b = hg.bernoulli(probs=probs, generator=torch.Generator().manual_seed(0))
        >>> b.sum().backward(); b.detach(), probs.grad   # "st" at tau = 1: db/dp = 1
        (tensor([0., 1., 1.]), tensor([1., 1., 1.]))
    """
    tensor, is_probs = _one_of(logits, probs)
    _check_generator(generator)
    chosen = _resolve(estimator, tensor, "hg.bernoulli")
    if is_probs:
        check_probs(tensor, categorical=False, dim=-1, estimator=chosen)
    return _sample_bernoulli(tensor, is_probs, chosen, generator)


def stochastic_times_smooth(logits: Tensor, *, generator: torch.Generator | None = None) -> Tensor:
    r"""The stochastic-times-smooth (STS) unit of Bengio et al. (2013): a sparse gate whose
    smooth part carries the gradient.

    .. math::

        p = \sigma(a), \qquad b \sim \operatorname{Bern}(\sqrt p), \qquad h = b \sqrt p,

    so :math:`E[h] = p`. The binary part :math:`b` is treated as a constant in backward; the
    smooth part is differentiated exactly:
    :math:`\partial h / \partial a = b \sqrt p\,(1 - p)/2`, computed as
    :math:`\sqrt p = \exp(\tfrac12 \log\sigma(a))` so that it stays finite for very
    negative :math:`a`. A biased estimator of :math:`\partial E[L]/\partial a` in general.
    Bengio, Léonard & Courville (2013), https://arxiv.org/abs/1308.3432.

    Args:
        logits: floating tensor of pre-activations :math:`a`.
        generator: the source of randomness for :math:`b`.

    Example:
        >>> import torch, hardgrad as hg
        >>> a = torch.zeros(6, requires_grad=True)
        >>> h = hg.stochastic_times_smooth(a, generator=torch.Generator().manual_seed(0))
        >>> h.detach()  # each entry is 0 or sqrt(sigmoid(0)) = 0.7071
        tensor([0.7071, 0.0000, 0.7071, 0.7071, 0.7071, 0.7071])
    """
    check_floating(logits, "logits")
    _check_generator(generator)
    smooth = torch.exp(0.5 * torch.nn.functional.logsigmoid(logits.to(noise_dtype(logits))))
    gate = (uniform(logits, generator) < smooth.detach()).to(smooth.dtype)
    return (gate * smooth).to(logits.dtype)


def noisy_rectifier(
    x: Tensor, *, sigma: float = 1.0, generator: torch.Generator | None = None
) -> Tensor:
    r"""A rectifier with Gaussian noise injected before the threshold (Bengio et al. 2013).

    .. math:: h = \max(0,\ x + \sigma z), \qquad z \sim \mathcal N(0, 1),

    differentiated along the path: :math:`\partial h / \partial x = \mathbb 1[x + \sigma z > 0]`,
    so units below the threshold still receive a gradient whenever the noise lifts them
    above it. ``sigma=0`` is the plain ReLU. Bengio, Léonard & Courville (2013),
    https://arxiv.org/abs/1308.3432.

    Args:
        x: floating tensor of pre-activations.
        sigma: noise standard deviation, >= 0.
        generator: the source of randomness.

    Example:
        >>> import torch, hardgrad as hg
        >>> h = hg.noisy_rectifier(torch.zeros(4), sigma=0.5, generator=torch.Generator().manual_seed(0))
        >>> bool((h >= 0).all()), h.shape
        (True, torch.Size([4]))
    """
    check_floating(x, "x")
    _check_generator(generator)
    scale = check_real(sigma, "sigma")
    if not 0 <= scale < float("inf"):
        raise ValueError(f"Expected `sigma` >= 0 and finite, but found sigma={sigma!r}")
    noise = random_tensor(torch.randn, x.shape, generator, dtype=noise_dtype(x), device=x.device)
    return torch.relu(x.to(noise.dtype) + scale * noise).to(x.dtype)
