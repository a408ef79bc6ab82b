r""":func:`assert_unbiased`: a z-test of an estimator's mean against the exact gradient."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ..diagnostics import exact_gradient, gradient_samples
from ..estimators import Estimator
from ..estimators._problem import Objective

__all__ = ["UnbiasednessTest", "assert_unbiased"]


@dataclass(frozen=True)
class UnbiasednessTest:
    r"""The outcome of :func:`assert_unbiased`, coordinate by coordinate (float64).

    Attributes:
        estimator: the estimator's name (or repr).
        num_draws: independent gradient estimates :math:`M`.
        false_failure_rate: the chance :math:`\alpha` that an unbiased estimator fails.
        threshold: the critical value :math:`c` a coordinate's :math:`|z|` must exceed.
        exact: the exact gradient, by enumeration.
        mean: the mean of the :math:`M` estimates.
        standard_error: their sample standard deviation over :math:`\sqrt M`.
        z: :math:`(\text{mean} - \text{exact}) / \text{standard error}` (0 where both the
            difference is within rounding and the standard error is 0).
        rounding: the absolute difference treated as rounding, not bias.
        passed: whether every coordinate is consistent with no bias.
    """

    estimator: str
    num_draws: int
    false_failure_rate: float
    threshold: float
    exact: Tensor
    mean: Tensor
    standard_error: Tensor
    z: Tensor
    rounding: float
    passed: bool

    @property
    def max_abs_z(self) -> float:
        """The largest :math:`|z|` over the coordinates."""
        return float(self.z.abs().max()) if self.z.numel() else 0.0

    @property
    def detectable_bias(self) -> float:
        r"""The smallest bias the test would reliably see: :math:`c` standard errors of the
        noisiest coordinate (a bias below it may pass: draw more to see smaller ones)."""
        if not self.standard_error.numel():
            return 0.0
        return self.threshold * float(self.standard_error.max()) + self.rounding

    def __str__(self) -> str:
        verdict = "consistent with unbiased" if self.passed else "BIASED"
        return (
            f"{self.estimator}: {verdict}; max |z| = {self.max_abs_z:.3g} against the threshold "
            f"{self.threshold:.3g} (false-failure rate {self.false_failure_rate:g} over "
            f"{self.z.numel()} coordinates, {self.num_draws} draws; detects a bias above "
            f"{self.detectable_bias:.3g})"
        )


def assert_unbiased(
    estimator: str | Estimator,
    f: Objective,
    logits: Tensor,
    *,
    dist: str = "bernoulli",
    dim: int = -1,
    num_samples: int | None = None,
    num_draws: int = 10_000,
    false_failure_rate: float = 1e-6,
    generator: torch.Generator | None = None,
) -> UnbiasednessTest:
    r"""Assert that ``estimator``'s gradient of :math:`\sum_j E[f_j(b)]` has the exact mean.

    Draws :math:`M` = ``num_draws`` independent estimates :math:`\hat g^{(m)}` of the
    logits gradient (:func:`hardgrad.diagnostics.gradient_samples`, each one
    :func:`hardgrad.expectation` call with ``num_samples`` samples), computes the exact
    gradient :math:`g` by enumerating every configuration
    (:func:`hardgrad.diagnostics.exact_gradient`), and for every coordinate :math:`i` the
    statistic

    .. math::

        z_i = \frac{\bar g_i - g_i}{s_i / \sqrt M},

    with :math:`\bar g_i` and :math:`s_i` the sample mean and standard deviation. The test
    fails when some :math:`|z_i|` exceeds :math:`c = \Phi^{-1}(1 - \alpha / (2n))` over
    the :math:`n` coordinates with :math:`s_i > 0` (Bonferroni), so that an unbiased
    estimator fails with probability at most :math:`\alpha` = ``false_failure_rate``. A
    coordinate with :math:`s_i = 0` (a deterministic estimate) fails when it differs from
    :math:`g_i` by more than rounding. The rate is nominal: it rests on the normal
    approximation of :math:`\bar g_i`, which is accurate for the thousands of draws used
    here unless the estimates are extremely heavy-tailed; a seeded ``generator`` makes the
    outcome reproducible. The result's ``detectable_bias`` says how small a bias the test
    can see; raise ``num_draws`` to see smaller ones.

    Use float64 logits for a sharp test (rounding in float32 is far below the noise of
    most estimators, but not of near-deterministic ones).

    Args:
        estimator: a name or instance from :mod:`hardgrad.estimators` (stateful ones, such
            as ``Reinforce(baseline="ema")``, are used and updated as they are).
        f: the objective, ``(n, *logits.shape) -> (n, *prefix)``; small enough to enumerate
            (at most 2**16 configurations per prefix entry).
        logits: floating tensor of log-odds (Bernoulli) or logits along ``dim``.
        dist: ``"bernoulli"`` or ``"categorical"``.
        dim: the category dimension (categorical only).
        num_samples: samples per estimate (``None``: the estimator's default).
        num_draws: independent estimates :math:`M`, >= 2.
        false_failure_rate: :math:`\alpha`, in (0, 1).
        generator: the source of randomness.

    Returns:
        The :class:`UnbiasednessTest` (with every :math:`z_i`), when the test passes.

    Raises:
        AssertionError: a coordinate's mean is too far from the exact gradient; the
            message gives the worst coordinates.
        TypeError, ValueError: bad arguments.

    Example:
        >>> import torch, hardgrad as hg
        >>> from hardgrad.testing import assert_unbiased
        >>> f = lambda b: (b - torch.tensor([0.45, 0.2, 0.7])).square().sum(-1)
        >>> logits = torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64)
        >>> result = assert_unbiased("disarm", f, logits,
        ...                          generator=torch.Generator().manual_seed(0))
        >>> result.passed, result.threshold < 6
        (True, True)
        >>> assert_unbiased("st", f, logits, generator=torch.Generator().manual_seed(0))
        Traceback (most recent call last):
        ...
        AssertionError: st: BIASED; max |z| = ...
    """
    _check_test_args(num_draws, false_failure_rate)
    exact = exact_gradient(f, logits, dist=dist, dim=dim).to(torch.float64)
    draws = gradient_samples(
        f,
        logits,
        estimator=estimator,
        dist=dist,
        num_draws=num_draws,
        num_samples=num_samples,
        dim=dim,
        generator=generator,
    ).to(torch.float64)
    name = estimator if isinstance(estimator, str) else _describe(estimator)
    result = _z_test(name, draws, exact, torch.finfo(logits.dtype).eps, false_failure_rate)
    if not result.passed:
        raise AssertionError(f"{result}; worst coordinates: {_worst(result)}")
    return result


def _check_test_args(num_draws: object, false_failure_rate: object) -> None:
    """``num_draws`` an int >= 2, ``false_failure_rate`` a float in (0, 1)."""
    if isinstance(num_draws, bool) or not isinstance(num_draws, int):
        raise TypeError(f"Expected `num_draws` to be an int, but found {type(num_draws).__name__}")
    if num_draws < 2:
        raise ValueError(f"Expected `num_draws` >= 2, but found num_draws={num_draws}")
    if isinstance(false_failure_rate, bool) or not isinstance(false_failure_rate, (int, float)):
        raise TypeError(
            "Expected `false_failure_rate` to be a float, "
            f"but found {type(false_failure_rate).__name__}"
        )
    if not 0 < false_failure_rate < 1:
        raise ValueError(
            f"Expected 0 < `false_failure_rate` < 1, but found false_failure_rate={false_failure_rate}"
        )


def _z_test(
    name: str, draws: Tensor, exact: Tensor, eps: float, false_failure_rate: float
) -> UnbiasednessTest:
    """The Bonferroni z-test of :func:`assert_unbiased` on float64 ``draws`` ``(M, *shape)``
    against ``exact`` (``eps``: the machine epsilon of the computation, for rounding)."""
    num_draws = draws.shape[0]
    mean = draws.mean(0)
    standard_error = draws.std(0) / math.sqrt(num_draws)
    scale = max(1.0, float(exact.abs().max()), float(mean.abs().max())) if exact.numel() else 1.0
    rounding = 64 * eps * scale
    difference = mean - exact
    noisy = standard_error > 0
    z = torch.where(noisy, difference / standard_error.where(noisy, 1.0), 0.0)
    # A difference within rounding is never bias, whatever its z (near-deterministic draws).
    z = torch.where(difference.abs() <= rounding, 0.0, z)
    deterministic_miss = ~noisy & (difference.abs() > rounding)
    z = torch.where(deterministic_miss, math.inf * difference.sign(), z)
    tested = max(1, int(noisy.sum()))
    threshold = _upper_normal_quantile(false_failure_rate / (2 * tested))
    passed = bool((z.abs() <= threshold).all())
    return UnbiasednessTest(
        estimator=name,
        num_draws=num_draws,
        false_failure_rate=false_failure_rate,
        threshold=threshold,
        exact=exact,
        mean=mean,
        standard_error=standard_error,
        z=z,
        rounding=rounding,
        passed=passed,
    )


def _describe(estimator: Estimator) -> str:
    """The registry name, else a custom ``repr``, else the class name."""
    name = getattr(estimator, "name", "")
    if name:
        return str(name)
    if type(estimator).__repr__ is not object.__repr__:
        return repr(estimator)
    return type(estimator).__name__


def _upper_normal_quantile(tail: float) -> float:
    """The ``c`` with ``P(Z > c) = tail`` for a standard normal ``Z`` (float64)."""
    return -float(torch.special.ndtri(torch.tensor(tail, dtype=torch.float64)))


def _worst(result: UnbiasednessTest, count: int = 3) -> str:
    flat_z = result.z.reshape(-1)
    order = flat_z.abs().argsort(descending=True)[:count]
    shape = tuple(result.z.shape)
    parts = []
    for k in order.tolist():
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(k), shape)) if shape else ()
        parts.append(
            f"[{', '.join(map(str, index))}] mean {float(result.mean[index]):.6g} ± "
            f"{float(result.standard_error[index]):.2g}, exact {float(result.exact[index]):.6g}, "
            f"z = {float(result.z[index]):.3g}"
        )
    return "; ".join(parts)
