r"""What :func:`hardgrad.expectation` hands an estimator: the objective, the logits, the
distribution, and the helpers every estimator of :math:`\nabla_\theta E_{p_\theta}[f(b)]` shares.

Layout. Estimators work in a *canonical* layout: for a Bernoulli problem the logits are
``(*batch)``; for a categorical one the category axis is moved last, ``(*batch, C)``.
:meth:`Problem.evaluate` moves it back before calling ``f``, so ``f`` always sees samples in
the caller's layout, ``(num_samples, *logits.shape)``.

Independence. ``f`` returns ``(num_samples, *prefix)`` where ``prefix`` is a prefix of the
batch shape: entry ``j`` of the result is taken to depend only on the variables at batch
position ``j`` (a per-example loss), so the score of the variables at ``j`` is weighted by
``f``'s value at ``j`` alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from .._kernels import finite, one_hot, opmath
from ._base import gumbel_noise, uniform

Objective = Callable[[Tensor], Tensor]


def check_values(
    values: object, n: int, batch_shape: torch.Size, prefix_ndim: int | None = None
) -> int:
    """Check that ``f`` returned a floating ``(n, *prefix)`` tensor, ``prefix`` a prefix of
    ``batch_shape`` (of length ``prefix_ndim`` when given); return the prefix's length."""
    if not isinstance(values, Tensor):
        raise TypeError(f"Expected `f` to return a Tensor, but found {type(values).__name__}")
    if not values.is_floating_point():
        raise TypeError(f"Expected `f` to return a floating tensor, but found dtype {values.dtype}")
    batch = tuple(batch_shape)
    shape = tuple(values.shape)
    allowed = [(n, *batch[:k]) for k in range(len(batch) + 1)]
    if prefix_ndim is not None:
        allowed = [allowed[prefix_ndim]]
    if shape not in allowed:
        choices = " or ".join(str(a) for a in allowed)
        raise ValueError(
            "Expected `f` to return one value per sample and batch entry, shape "
            f"(num_samples, *prefix) with prefix a prefix of the batch shape {batch}: "
            f"{choices}; but found {shape}"
        )
    return len(shape) - 1


@dataclass
class Problem:
    """One call of :func:`hardgrad.expectation`, validated.

    Attributes:
        f: the objective; takes ``(n, *logits.shape)`` samples.
        logits: the logits in canonical layout (category axis last); they carry the graph
            back to the caller's logits.
        categorical: ``True`` for a categorical problem, ``False`` for Bernoulli.
        dim: the caller's (non-negative) category dimension; unused for Bernoulli.
        num_samples: how many samples the estimator draws (its own meaning per estimator).
        generator: the source of randomness.
        prefix_ndim: the number of batch dimensions ``f``'s values keep, known after the
            first :meth:`evaluate`.
    """

    f: Objective
    logits: Tensor
    categorical: bool
    dim: int
    num_samples: int
    generator: torch.Generator | None
    prefix_ndim: int | None = field(default=None)

    # -- shapes ---------------------------------------------------------------------------
    @property
    def batch_shape(self) -> torch.Size:
        """The logits' shape without the category axis."""
        return self.logits.shape[:-1] if self.categorical else self.logits.shape

    @property
    def prefix_shape(self) -> torch.Size:
        assert self.prefix_ndim is not None, "evaluate() first"
        return self.batch_shape[: self.prefix_ndim]

    def to_caller(self, samples: Tensor) -> Tensor:
        """Canonical ``(n, *logits)`` samples in the caller's layout."""
        return samples.movedim(-1, self.dim + 1) if self.categorical else samples

    def evaluate(self, samples: Tensor) -> Tensor:
        """``f`` at ``samples`` (canonical, ``(n, *logits)``), checked to be ``(n, *prefix)``."""
        values = self.f(self.to_caller(samples.to(self.logits.dtype)))
        self.prefix_ndim = check_values(
            values, samples.shape[0], self.batch_shape, self.prefix_ndim
        )
        return values

    def spread(self, values: Tensor) -> Tensor:
        """``(..., *prefix)`` values viewed to broadcast against ``(..., *logits.shape)``."""
        extra = self.logits.dim() - (self.prefix_ndim or 0)
        return values.reshape(*values.shape, *([1] * extra))

    # -- distributions ----------------------------------------------------------------------
    @property
    def work_logits(self) -> Tensor:
        """Detached logits in the dtype the estimators compute in (float32 for half types),
        with NaN -> 0 and +-inf -> +-(a large finite value)."""
        return finite(opmath(self.logits.detach()))

    def probabilities(self, logits: Tensor) -> Tensor:
        """:math:`\\sigma(\\theta)` or :math:`\\operatorname{softmax}(\\theta)` (last axis)."""
        return torch.softmax(logits, -1) if self.categorical else torch.sigmoid(logits)

    def score(self, samples: Tensor, logits: Tensor) -> Tensor:
        r""":math:`\nabla_\theta \log p_\theta(b) = b - \sigma(\theta)` (Bernoulli) or
        :math:`D - \operatorname{softmax}(\theta)` (categorical), per coordinate."""
        return samples - self.probabilities(logits)

    def sample(self, n: int, logits: Tensor) -> Tensor:
        """``n`` exact samples ``(n, *logits.shape)`` in ``logits``' dtype (Gumbel-max for
        categorical, ``u < sigma(theta)`` for Bernoulli), from the problem's generator."""
        shape = (n, *logits.shape)
        if self.categorical:
            noise = gumbel_noise(logits.expand(shape), self.generator)
            return one_hot(logits.expand(shape), -1, (logits + noise).argmax(-1, keepdim=True))
        u = uniform(logits, self.generator, shape)
        return (u < torch.sigmoid(logits)).to(logits.dtype)

    def log_prob(self, samples: Tensor, logits: Tensor) -> Tensor:
        """:math:`\\log p_\\theta(b)` per prefix entry, ``(n, *prefix)``, differentiable in
        ``logits``; ``0 * -inf`` terms (impossible categories not chosen) count as 0."""
        if self.categorical:
            log_p = torch.log_softmax(logits, -1)
            per_variable = torch.where(samples > 0, log_p, 0).sum(-1)
        else:
            per_variable = torch.where(
                samples > 0,
                torch.nn.functional.logsigmoid(logits),
                torch.nn.functional.logsigmoid(-logits),
            )
        return self.per_prefix_variables(per_variable)

    def per_prefix_variables(self, x: Tensor) -> Tensor:
        """Sum ``(..., *batch)`` over the batch dimensions after the prefix."""
        extra = len(self.batch_shape) - (self.prefix_ndim or 0)
        if extra == 0:
            return x
        return x.sum(dim=tuple(range(x.dim() - extra, x.dim())))

    def configurations(self, limit: int, prefix_ndim: int | None = None) -> Tensor:
        """Every joint configuration of the variables of one prefix entry, shared by all
        prefix entries: ``(N, *logits.shape)`` in canonical layout, ``N = 2^m`` (Bernoulli)
        or ``C^m`` (categorical) for the ``m`` variables per entry.

        ``prefix_ndim`` overrides the prefix length (a guess made before ``f`` has run).

        Raises:
            ValueError: ``N`` exceeds ``limit`` (`max_configurations`).
        """
        batch = self.batch_shape
        k = (self.prefix_ndim or 0) if prefix_ndim is None else prefix_ndim
        variables = batch[k:]
        m = math.prod(variables)
        values = self.logits.shape[-1] if self.categorical else 2
        count = values**m
        if count > limit:
            raise ValueError(
                f"Expected at most `max_configurations`={limit} configurations to enumerate, "
                f"but found {values}^{m} = {count} ({m} variables per prefix entry, prefix "
                f"{tuple(batch[:k])})"
            )
        device = self.logits.device
        codes = torch.arange(count, device=device)
        powers = values ** torch.arange(m - 1, -1, -1, device=device)
        digits = (codes.unsqueeze(1) // powers) % values  # (N, m), most significant first
        digits = digits.reshape(count, *([1] * k), *variables)
        dtype = self.logits.dtype
        if self.categorical:
            onehot = torch.nn.functional.one_hot(digits, values).to(dtype)
            return onehot.expand(count, *self.logits.shape)
        return digits.to(dtype).expand(count, *self.logits.shape)
