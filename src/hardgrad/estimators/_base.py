"""The estimator base classes (:class:`Estimator`, :class:`ScoreFunctionEstimator`), the
registry :data:`ESTIMATORS` and name resolution (:func:`get`, :func:`resolve`)."""

from __future__ import annotations

import abc
import functools
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

import torch
from torch import Tensor

from .._core.kernels import constant, eager_plain, opmath
from .._core.registry import Registry
from ..ops._autograd import apply_identity
from ._noise import _logistic_of, gumbel_noise, logistic_noise, logistic_pair, uniform
from ._problem import Problem
from ._probs import sample_from_probs

#: The registry of gradient estimators, name to class; ``ESTIMATORS.names()`` lists them.
ESTIMATORS: Registry[type[Estimator]] = Registry("estimator")

F = TypeVar("F", bound=Callable[..., Any])


class Estimator(abc.ABC):
    """Base class of every gradient estimator.

    An estimator carries its settings (``tau``, ``k``, ...) and, for the pathwise family,
    maps logits and noise to a sample whose backward is the estimator.

    Class attributes:
        name: the registry name.
        pathwise: whether :func:`hardgrad.bernoulli` / :func:`hardgrad.categorical` can
            use it (a sample whose backward carries the estimate).
        unbiased: whether its gradient equals the true gradient in expectation.
        discrete: whether the forward value is an exact sample (one-hot / {0, 1});
            ``False`` for relaxations such as the Gumbel-softmax.
        evaluations_per_sample: how many times :func:`hardgrad.expectation` evaluates
            ``f`` per sample (3 for REBAR and for RELAX with ``use_objective=True``: one
            hard and two relaxed inputs).
    """

    name: ClassVar[str] = ""
    pathwise: ClassVar[bool] = True
    unbiased: ClassVar[bool] = False
    discrete: ClassVar[bool] = True
    evaluations_per_sample: ClassVar[int] = 1
    #: The probability-space backward a built-in pathwise estimator uses with ``probs=``
    #: (see :mod:`hardgrad.estimators._probs`); ``None``: the chain rule through the logits.
    probs_kind: ClassVar[str | None] = None
    #: Whether a Bernoulli sample may draw one logistic variable :math:`L` per unit instead
    #: of two Gumbels: true for estimators whose two-class sample and backward depend on
    #: the Gumbels only through :math:`g_1 - g_0` (Gumbel-max and softmax relaxations), for
    #: which the noise ``(0, L)`` gives exactly the categorical estimator on ``[0, logits]``.
    logistic_bernoulli_noise: ClassVar[bool] = False

    def noise(self, logits: Tensor, generator: torch.Generator | None) -> Any:
        """Draw the randomness one sample needs, shaped like ``logits`` (more for some).

        The default is standard Gumbel noise, in float32 for half-precision logits so that
        samples are exact draws in every dtype (a bfloat16 uniform has 8 bits).
        """
        return gumbel_noise(logits, generator)

    def bernoulli_noise(self, logits: Tensor, generator: torch.Generator | None) -> Any:
        r"""Draw the randomness one Bernoulli sample needs, for log-odds ``logits``.

        By default what :meth:`noise` draws for the two-class logits ``[0, logits]``
        (shape ``(*logits.shape, 2)``). With :attr:`logistic_bernoulli_noise`, the pair
        ``(0, L)`` with one standard logistic :math:`L = \log(u / (1 - u))` per unit,
        distributed as the difference of two Gumbels: half the uniforms, a quarter of the logarithms.
        """
        if self.logistic_bernoulli_noise:
            return logistic_pair(logits, generator)
        return self.noise(logits.unsqueeze(-1).expand(*logits.shape, 2), generator)

    def sample_categorical(
        self, logits: Tensor, generator: torch.Generator | None, dim: int
    ) -> Tensor:
        """What :func:`hardgrad.categorical` runs for logits: :meth:`categorical` on
        :meth:`noise`. An estimator may do both in one step, with the same numbers
        (:class:`GumbelRao` never holds its ``k`` draws on CPU)."""
        return self.categorical(logits, self.noise(logits, generator), dim)

    def sample_bernoulli(self, logits: Tensor, generator: torch.Generator | None) -> Tensor:
        """What :func:`hardgrad.bernoulli` runs for log-odds: :meth:`bernoulli` on
        :meth:`bernoulli_noise`, or an equivalent single step (see :meth:`sample_categorical`).

        In eager mode, where :meth:`bernoulli` takes the logistic difference alone
        (:func:`accepts_logistic_difference`) and the noise is the default logistic pair
        ``(0, L)``, it gets :math:`L` without the pair: the same draws, sample and gradient,
        without building the pair and subtracting its zero half."""
        if (
            self.logistic_bernoulli_noise
            and getattr(type(self).bernoulli, "accepts_logistic_difference", False)
            and type(self).bernoulli_noise is Estimator.bernoulli_noise
            and eager_plain(logits)
        ):
            return self.bernoulli(logits, logistic_noise(logits, generator))
        return self.bernoulli(logits, self.bernoulli_noise(logits, generator))

    def sample_bernoulli_probs(self, probs: Tensor, generator: torch.Generator | None) -> Tensor:
        """What :func:`hardgrad.bernoulli` runs for probabilities: :meth:`bernoulli_probs` on
        :meth:`bernoulli_noise`. Where that backward is the identity (ST at ``tau = 1``,
        ST-identity) and neither method is overridden, in eager mode, the same sample in one
        step from the same uniforms, without the two-class pair (:func:`_identity_probs_sample`)."""
        if (
            self.logistic_bernoulli_noise
            and self._probs_backward_is_identity()
            and type(self).bernoulli_probs is Estimator.bernoulli_probs
            and type(self).bernoulli_noise is Estimator.bernoulli_noise
            and eager_plain(probs)
        ):
            return _identity_probs_sample(probs, generator)
        return self.bernoulli_probs(probs, self.bernoulli_noise(probs, generator))

    def _probs_backward_is_identity(self) -> bool:
        """Whether the Bernoulli probability-space backward is the identity, as
        :func:`hardgrad.estimators._probs.sample_from_probs` decides it."""
        kind = self.probs_kind
        return kind == "identity" or (kind == "st" and self._probs_settings().get("tau") == 1)

    def bernoulli(self, logits: Tensor, noise: Any) -> Tensor:
        """The {0, 1} sample for log-odds ``logits``, given :meth:`bernoulli_noise`: noise for
        the two-class logits ``[0, logits]`` (last dimension).

        By definition the categorical estimator on ``[0, logits]``, class 1; this default
        computes exactly that. Estimators may override it with a direct binary form that
        gives the same sample and, up to rounding, the same gradient.
        """
        two_class = torch.stack((torch.zeros_like(logits), logits), dim=-1)
        return self.categorical(two_class, noise, two_class.dim() - 1)[..., 1]

    @abc.abstractmethod
    def categorical(self, logits: Tensor, noise: Any, dim: int) -> Tensor:
        """The one-hot sample (or relaxation) for ``logits`` and ``noise`` along ``dim``.

        A deterministic map of its inputs: the same noise gives the same value and gradient.
        """

    def bernoulli_probs(self, probs: Tensor, noise: Any) -> Tensor:
        r"""The {0, 1} sample for probabilities ``probs`` in [0, 1] (``noise`` as for
        :meth:`bernoulli`), differentiable in ``probs``.

        Built-in estimators use their probability-space backward, finite at 0 and 1 (see
        :func:`hardgrad.bernoulli`). An estimator without one gets :meth:`bernoulli` at the
        log-odds :math:`\log p - \log(1 - p)` with autograd's chain rule: exact inside
        (0, 1); at exactly 0 or 1 its backward sees infinite log-odds and is multiplied by
        :math:`1/(p(1-p)) = \infty`. Override this method to give the limit there.
        """
        if self.probs_kind is not None:
            return sample_from_probs(
                self.probs_kind, probs, noise, -1, binary=True, **self._probs_settings()
            )
        q = opmath(probs)
        log_odds = (torch.log(q) - torch.log1p(-q)).to(probs.dtype)
        return self.bernoulli(log_odds, noise)

    def categorical_probs(self, probs: Tensor, noise: Any, dim: int) -> Tensor:
        r"""The one-hot sample for category probabilities ``probs`` along ``dim`` (``noise``
        as for :meth:`categorical`), differentiable in ``probs``; the chain rule through
        :math:`\log q` for estimators without a probability-space backward, as in
        :meth:`bernoulli_probs`."""
        if self.probs_kind is not None:
            return sample_from_probs(
                self.probs_kind, probs, noise, dim, binary=False, **self._probs_settings()
            )
        return self.categorical(torch.log(opmath(probs)).to(probs.dtype), noise, dim)

    def _probs_settings(self) -> dict[str, float]:
        """``tau`` and ``gap`` for the probability-space backward."""
        settings = {}
        for key in ("tau", "gap"):
            value = getattr(self, key, None)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                settings[key] = float(value)
        return settings

    def infinite_at_probs_endpoints(self) -> bool:
        """Whether the probability-space backward's limit at probabilities of exactly 0
        (and 1 for Bernoulli units) is infinite: a temperature above 1 (see
        :func:`hardgrad.bernoulli`)."""
        tau = self._probs_settings().get("tau", 1.0)
        return self.probs_kind not in (None, "identity") and tau > 1


def _identity_probs_sample(probs: Tensor, generator: torch.Generator | None) -> Tensor:
    r"""The Bernoulli sample from ``probs`` with the identity backward, in eager mode: the
    value :func:`hardgrad.estimators._probs.sample_from_probs` computes from
    :func:`logistic_pair`, :math:`b = 1 - [\log p - \log(1-p) + L \le 0]`, from the same
    uniforms and the same :math:`L = \log(u/(1 - u))`, without the pair's zero half (the
    comparison with it is the comparison with 0). One op of
    :func:`hardgrad.ops._autograd.apply_identity` (autograd's own copy on small CPU
    tensors)."""
    u = uniform(probs, generator)
    logistic = _logistic_of(u, out=u)
    return apply_identity(probs, functools.partial(_sample_above, logistic=logistic))


def _sample_above(probs: Tensor, logistic: Tensor) -> Tensor:
    """``1 - [log-odds(probs) + logistic <= 0]`` in ``probs``' dtype (eager mode): the
    log-odds of :func:`~hardgrad.estimators._probs.binary_log_odds` (``logistic`` is in its
    compute dtype) and the sum written in place, the comparison straight into ``probs``'
    dtype (no bool tensor: 7 kernels instead of 9)."""
    q = opmath(probs)
    perturbed = torch.log(q).sub_(torch.log1p(q.neg())).add_(logistic)
    sample = torch.le(perturbed, constant(0.0, perturbed), out=torch.empty_like(probs))
    return torch.sub(constant(1.0, sample), sample, out=sample)


def accepts_logistic_difference(bernoulli: F) -> F:
    """Mark an estimator's ``bernoulli(logits, noise)`` as taking, besides the two-class
    noise pair (shape ``(*logits.shape, 2)``), the logistic difference :math:`g_1 - g_0`
    alone (``logits``' shape; the pair's first class is then 0). A subclass that overrides
    the method without this mark gets pairs only."""
    bernoulli.accepts_logistic_difference = True  # type: ignore[attr-defined]
    return bernoulli


class ScoreFunctionEstimator(Estimator):
    """An estimator that works through :func:`hardgrad.expectation` only: it needs ``f``.

    Subclasses implement :meth:`expectation`. Class attributes beyond :class:`Estimator`'s:
    ``dists`` (the distributions it is defined for), ``min_samples`` and
    ``sample_multiple`` (``num_samples`` must be a multiple, e.g. 2 for antithetic pairs).
    """

    pathwise: ClassVar[bool] = False
    unbiased: ClassVar[bool] = True
    dists: ClassVar[tuple[str, ...]] = ("bernoulli", "categorical")
    min_samples: ClassVar[int] = 1
    sample_multiple: ClassVar[int] = 1

    def categorical(self, logits: Tensor, noise: Any, dim: int) -> Tensor:
        raise TypeError(f"{type(self).__name__} needs the objective: use it through hg.expectation")

    def default_num_samples(self) -> int:
        """The natural ``num_samples`` when the caller passes ``None``."""
        return max(self.min_samples, self.sample_multiple)

    @abc.abstractmethod
    def expectation(self, problem: Problem) -> Tensor:
        """The value of shape ``prefix`` whose logits-gradient is the estimator."""


def get(name: str) -> Estimator:
    """The default instance of the estimator registered as ``name``.

    Stateless estimators are made once and shared; stateful ones (``nn.Module`` instances such as
    ``REBAR``) are made afresh on every call, so no state leaks between callers: pass
    an instance to keep and train one.

    Example:
        >>> import hardgrad as hg
        >>> hg.estimators.get("st_gumbel")
        STGumbel(tau=1.0)
    """
    cls = ESTIMATORS.get(name, "estimator")
    if issubclass(cls, torch.nn.Module):  # stateful: a fresh instance, never shared
        fresh: Estimator = cls()
        return fresh
    instance: Estimator = ESTIMATORS.default(name, "estimator")
    return instance


def resolve(estimator: str | Estimator, *, pathwise: bool = False, where: str = "") -> Estimator:
    """Turn a name or an instance into an :class:`Estimator` instance.

    Raises:
        TypeError: neither a string nor an :class:`Estimator`.
        ValueError: unknown name, or a non-pathwise estimator where a pathwise one is needed.
    """
    if isinstance(estimator, str):
        instance = get(estimator)
    elif isinstance(estimator, Estimator):
        instance = estimator
    else:
        raise TypeError(
            "Expected `estimator` to be a name or a hardgrad.estimators.Estimator, "
            f"but found {type(estimator).__name__}"
        )
    if pathwise and not instance.pathwise:
        usable = ", ".join(repr(n) for n, cls in ESTIMATORS.items() if cls.pathwise)
        if not isinstance(instance, ScoreFunctionEstimator):
            raise TypeError(
                f"Expected a pathwise `estimator` for {where}, but found "
                f"{type(instance).__name__}, an Estimator subclass with pathwise=False that "
                "is not a ScoreFunctionEstimator, which nothing can use: set the class attribute "
                "pathwise = True and implement categorical(logits, noise, dim) (a sample whose "
                "backward is the estimate), or subclass "
                "hardgrad.estimators.ScoreFunctionEstimator and implement expectation(problem) "
                f"to use it through hg.expectation; built-in pathwise estimators: {usable}"
            )
        raise ValueError(
            f"Expected a pathwise `estimator` for {where}, but found {instance!r}, which "
            f"works through hg.expectation only; pathwise: {usable}"
        )
    return instance
