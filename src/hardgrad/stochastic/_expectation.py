r"""``hg.expectation``: :math:`E_{b \sim p_\theta}[f(b)]` with any gradient estimator."""

from __future__ import annotations

import math
import typing

import torch
from torch import Tensor

from .. import estimators as _estimators
from .._core.validation import check_dim, check_int, value_checks_apply
from ..estimators import ScoreFunctionEstimator
from ..estimators._problem import Objective, Problem, check_values
from ..estimators._shift import raise_all_excluded
from ._checks import EstimatorLike, _check_generator, _one_of, _resolve, check_probs
from ._samplers import _sample_bernoulli, _sample_categorical

__all__ = ["expectation"]

DISTRIBUTIONS = ("bernoulli", "categorical")


def expectation(
    f: Objective,
    logits: Tensor | None = None,
    *,
    probs: Tensor | None = None,
    dist: str = "bernoulli",
    estimator: EstimatorLike = "disarm",
    num_samples: int | None = None,
    dim: int = -1,
    generator: torch.Generator | None = None,
) -> Tensor:
    r"""The Monte-Carlo estimate of :math:`E_{b \sim p_\theta}[f(b)]` whose gradient with
    respect to the logits (or the probabilities, given ``probs``) is the chosen estimator.

    Forward: :math:`\tfrac1n \sum_{s=1}^n f(b_s)` over the estimator's samples (for
    ``"exact"``, :math:`\sum_b p_\theta(b) f(b)` over every configuration). Backward: with
    respect to ``logits``, the estimator :math:`\hat g` (e.g. DisARM, RLOO, or a pathwise
    estimator's gradient through its samples); with respect to ``f``'s own parameters,
    the ordinary :math:`\tfrac1n \sum_s \nabla_\psi f(b_s)`. So
    ``hg.expectation(...).mean().backward()`` trains the logits' producer and ``f``.

    Shapes: ``f`` receives samples ``(num_samples, *logits.shape)`` (one-hot along ``dim``
    for categorical) and returns ``(num_samples, *prefix)``, where ``prefix`` is a prefix of
    the batch shape (the logits' shape, without ``dim`` for categorical), possibly empty;
    the result has shape ``prefix``. Entry ``j`` of ``f``'s value must depend only on the
    variables at batch position ``j`` (a per-example loss): score-function estimators weight
    each entry's score by that entry's value only.

    Estimators (see :mod:`hardgrad.estimators` for each one's formula):

    * every pathwise estimator (``"st"``, ``"gumbel_rao"``, ...): ``num_samples``
      independent samples from :func:`hardgrad.bernoulli` / :func:`hardgrad.categorical`,
      differentiated through; default 1;
    * ``"reinforce"`` (default 1; 2 for ``Reinforce(baseline="optimal")``), ``"rloo"``
      (>= 2, default 2), ``"arm"`` and ``"disarm"`` (Bernoulli only; an even number, pairs;
      default 2), ``"rebar"`` and ``"relax"`` (``num_samples`` draws, each evaluating ``f``
      three times), ``"exact"`` (every configuration; leave ``num_samples`` ``None``).

    Higher-order gradients: ``"exact"`` is ordinary autograd, exact to every order.
    Score-function estimators are first-order: differentiating their gradient again raises
    a ``RuntimeError`` rather than returning a wrong second derivative. Pathwise estimators
    give the derivative of their own backward formula, not of :math:`E[f]`.

    Transforms: pathwise estimators, ``"reinforce"``, ``"rloo"``, ``"arm"``, ``"disarm"``
    and ``"exact"`` work under ``torch.compile(fullgraph=True)`` (with ``generator=None``)
    and ``torch.func.grad`` (except ``Reinforce(baseline="ema")``, whose in-place state
    update ``torch.func`` refuses); ``"rebar"`` and ``"relax"`` are eager-only (they call
    ``torch.autograd.grad``).

    Probabilities. ``probs=`` instead of ``logits``: Bernoulli probabilities in [0, 1], or
    category probabilities along ``dim`` summing to 1, checked as in
    :func:`hardgrad.bernoulli` / :func:`hardgrad.categorical`. ``f`` sees samples of
    ``probs``' shape, and the result's gradient goes to ``probs``: every estimator's
    logits-space estimate times :math:`d\ell/dp = 1/(p(1-p))` (or :math:`1/q`, through the
    normalisation :math:`q/\sum_j q_j`) inside (0, 1), computed in probability space so
    that it stays finite at exactly 0 and 1 (score :math:`b/p - (1-b)/(1-p)` with
    ``torch.where``). There it is the per-draw limit of the estimator's formula, which for
    the sampling estimators is not an unbiased gradient any more: a probability of 0 never
    draws the value whose ``f`` the derivative needs. ``"exact"`` stays exact there;
    ``"arm"`` gives 0 for a coordinate at 0 or 1 (its limit is infinite); ``"rebar"`` and
    ``"relax"`` raise ``ValueError`` there when a gradient is wanted (their relaxation
    :math:`\log p - \log(1-p) + \text{noise}` is infinite). The table per estimator is in the
    docs of :mod:`hardgrad.stochastic`.

    Args:
        f: the objective, ``(num_samples, *logits.shape) -> (num_samples, *prefix)``.
        logits: floating tensor of log-odds (Bernoulli) or unnormalised log-probabilities
            along ``dim`` (categorical). ``-inf`` excludes a value or category exactly and
            ``+inf`` forces it (a point mass, shared equally by several ``+inf`` in one
            categorical row), for every estimator, ``"exact"`` included; the gradient with
            respect to an infinite logit is 0 (``"st_identity"``, which copies the
            gradient, excepted). Categorical draws depend on logit differences only
            (:func:`hardgrad.categorical`). Rejected while validation is on: NaN, and a
            categorical row of ``-inf`` only (no distribution). Positional; pass exactly
            one of ``logits`` and ``probs``.
        probs: floating tensor of probabilities (keyword only), instead of ``logits``.
        dist: ``"bernoulli"`` or ``"categorical"``.
        estimator: a registry name or an instance from :mod:`hardgrad.estimators`.
        num_samples: evaluations of ``f`` (draws for REBAR/RELAX); ``None`` for the
            estimator's default.
        dim: the category dimension (categorical only).
        generator: the source of randomness.

    Raises:
        TypeError: ``f`` is not callable or returns no floating tensor; ``logits`` or
            ``probs`` sparse or nested; an ``Estimator`` subclass that is neither pathwise
            nor a :class:`~hardgrad.estimators.ScoreFunctionEstimator`; bad argument types.
        ValueError: unknown ``dist`` or estimator, an estimator not defined for ``dist``,
            ``num_samples`` too small or not a multiple the estimator needs, ``f``'s value
            of the wrong shape, NaN logits or a categorical row of ``-inf`` only, or
            ``"exact"`` over its ``max_configurations`` (or over 2**63 - 1 configurations);
            both or neither of ``logits`` and ``probs``; with validation on, ``probs``
            out of range, NaN or not normalised.

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.zeros(3, requires_grad=True)
        >>> target = torch.tensor([0.0, 1.0, 0.0])
        >>> loss = hg.expectation(lambda b: (b - target).square(), logits,   # one value per bit
        ...                       estimator="disarm", generator=torch.Generator().manual_seed(0))
        >>> loss   # the Monte-Carlo mean of one antithetic pair
        tensor([0.5000, 0.5000, 0.5000], grad_fn=<AddBackward0>)
        >>> loss.sum().backward()
        >>> logits.grad   # exact here: p(1-p)(1-2t) at p = 1/2 (DisARM has 0 variance at 0)
        tensor([ 0.2500, -0.2500,  0.2500])
        >>> probs = torch.tensor([0.0, 0.5, 1.0], requires_grad=True)
        >>> hg.expectation(lambda b: (b - target).square(), probs=probs,
        ...                estimator="exact").sum().backward()
        >>> probs.grad   # d/dp of (1-p) t^2 + p (1-t)^2: 1 - 2t
        tensor([ 1., -1.,  1.])
    """
    if not callable(f):
        raise TypeError(f"Expected `f` to be callable, but found {type(f).__name__}")
    tensor, is_probs = _one_of(logits, probs)
    name = "probs" if is_probs else "logits"
    if dist not in DISTRIBUTIONS:
        raise ValueError(f"Expected `dist` to be one of {DISTRIBUTIONS}, but found {dist!r}")
    _check_generator(generator)
    chosen = _estimators.resolve(estimator)
    if not chosen.pathwise and not isinstance(chosen, ScoreFunctionEstimator):
        raise TypeError(_not_usable(chosen))
    is_categorical = dist == "categorical"
    d = check_dim(tensor, dim) if is_categorical else 0
    if is_categorical and tensor.shape[d] == 0:
        raise ValueError(
            f"Expected `{name}` to have at least one category along dim={dim}, "
            f"but found shape {tuple(tensor.shape)}"
        )
    if is_probs:
        check_probs(
            tensor,
            categorical=is_categorical,
            dim=d,
            estimator=chosen if chosen.pathwise else None,
        )
    elif value_checks_apply(tensor):
        _check_logits(tensor, is_categorical, d)
    n = _check_num_samples(chosen, dist, num_samples)

    if chosen.pathwise:
        _resolve(chosen, tensor, "hg.expectation")  # its tau against the dtype, as the samplers do
        return _pathwise_expectation(chosen, f, tensor, is_probs, is_categorical, d, n, generator)
    chosen = typing.cast(ScoreFunctionEstimator, chosen)  # (checked above)
    canonical = tensor.movedim(d, -1) if is_categorical else tensor
    if is_probs:
        problem = Problem.from_probs(f, canonical, is_categorical, d, n, generator)
    else:
        problem = Problem(
            f=f,
            logits=canonical,
            categorical=is_categorical,
            dim=d,
            num_samples=n,
            generator=generator,
        )
    return chosen.expectation(problem)


def _check_logits(logits: Tensor, categorical: bool, dim: int) -> None:
    """No NaN, and (categorical) no row of -inf only, which has no distribution: one
    reduction each and one read-back."""
    if logits.numel() == 0:
        return
    has_nan = torch.isnan(logits).any()
    if not categorical:
        if bool(has_nan):
            raise ValueError("Expected `logits` without NaN, but found NaN")
        return
    top = logits.detach().amax(dim, keepdim=True)
    nan, lowest = torch.stack((has_nan.to(top.dtype), top.min())).tolist()
    if nan:
        raise ValueError("Expected `logits` without NaN, but found NaN")
    if lowest == -math.inf:
        raise_all_excluded(logits, top, dim, "logits")


def _not_usable(chosen: _estimators.Estimator) -> str:
    """Why ``hg.expectation`` cannot use an :class:`~hardgrad.estimators.Estimator` that is
    neither pathwise nor a score-function estimator, and what it must implement."""
    name = type(chosen).__name__
    return (
        f"Expected `estimator` to be usable by hg.expectation, but found {name}, an "
        "Estimator subclass with pathwise=False that is not a "
        "hardgrad.estimators.ScoreFunctionEstimator. Either set the class attribute "
        "pathwise = True and implement categorical(logits, noise, dim) (a sample whose "
        "backward is the estimate; optionally bernoulli(logits, noise) and noise(logits, "
        "generator)), or subclass hardgrad.estimators.ScoreFunctionEstimator and implement "
        "expectation(problem) (the Monte-Carlo value whose gradient is the estimate; see "
        "hardgrad.estimators.attach_gradient)"
    )


def _check_num_samples(chosen: _estimators.Estimator, dist: str, num_samples: int | None) -> int:
    """``num_samples`` resolved to the estimator's default and checked against its needs."""
    if not isinstance(chosen, ScoreFunctionEstimator):
        return 1 if num_samples is None else check_int(num_samples, "num_samples", low=1)
    if dist not in chosen.dists:
        raise ValueError(
            f"Expected `dist` to be one that the estimator {chosen!r} is defined for "
            f"({', '.join(chosen.dists)}), but found dist={dist!r}"
        )
    if isinstance(chosen, _estimators.Exact):
        if num_samples is not None:
            raise ValueError(
                "Expected `num_samples`=None for the exact estimator, which evaluates f on "
                f"every configuration, but found num_samples={num_samples!r}"
            )
        return 0
    if num_samples is None:
        return chosen.default_num_samples()
    n = check_int(num_samples, "num_samples", low=1)
    if n < chosen.min_samples:
        raise ValueError(
            f"Expected `num_samples` >= {chosen.min_samples} for {chosen!r}, "
            f"but found num_samples={n}"
        )
    if n % chosen.sample_multiple:
        raise ValueError(
            f"Expected `num_samples` to be a multiple of {chosen.sample_multiple} for "
            f"{chosen!r} (antithetic pairs), but found num_samples={n}"
        )
    return n


def _pathwise_expectation(
    chosen: _estimators.Estimator,
    f: Objective,
    tensor: Tensor,
    is_probs: bool,
    is_categorical: bool,
    dim: int,
    n: int,
    generator: torch.Generator | None,
) -> Tensor:
    """``mean_s f(b_s)`` over ``n`` samples of the pathwise unit, differentiated through."""
    expanded = tensor.expand(n, *tensor.shape)
    if is_categorical:
        samples = _sample_categorical(expanded, is_probs, dim + 1, chosen, generator)
        batch = tensor.shape[:dim] + tensor.shape[dim + 1 :]
    else:
        samples = _sample_bernoulli(expanded, is_probs, chosen, generator)
        batch = tensor.shape
    values = f(samples)
    check_values(values, n, batch)
    return values.mean(0)
