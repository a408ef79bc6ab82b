"""The categorical and Bernoulli units: :func:`categorical` (Gumbel-max) and
:func:`bernoulli` (the two-class categorical unit), backward the chosen estimator."""

from __future__ import annotations

import torch
from torch import Tensor

from .. import estimators as _estimators
from .._core.validation import check_dim
from ._checks import EstimatorLike, _check_generator, _one_of, _resolve, check_probs


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
