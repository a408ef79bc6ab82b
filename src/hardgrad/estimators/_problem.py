r"""What :func:`hardgrad.expectation` hands an estimator: the objective, the logits, the
distribution, and the helpers every estimator of :math:`\nabla_\theta E_{p_\theta}[f(b)]` shares.

Layout. Estimators work in a *canonical* layout: for a Bernoulli problem the logits are
``(*batch)``; for a categorical one the category axis is moved last, ``(*batch, C)``.
:meth:`Problem.evaluate` moves it back before calling ``f``, so ``f`` always sees samples in
the caller's layout, ``(num_samples, *logits.shape)``.

Probabilities. When the caller passed ``probs`` instead of logits, :attr:`Problem.probs` holds
them (canonical layout) and receives the gradient (:attr:`Problem.parameter`);
:attr:`Problem.logits` then holds the logits derived from them (:math:`\log p - \log(1-p)`
or :math:`\log q`, :math:`\pm\infty` at 0 and 1), detached. The built-in estimators work in
probability space there (:meth:`Problem.parameter_score`), so their gradients stay finite at
probabilities of 0 and 1.

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

from .._core.kernels import finite, one_hot, opmath
from ._noise import gumbel_noise, uniform
from ._shift import finite_shifted

Objective = Callable[[Tensor], Tensor]

#: The most configurations an enumeration can index (``torch.arange``'s int64 range).
INDEX_LIMIT = 2**63 - 1


def configuration_count(values: int, m: int, limit: int) -> int | None:
    """``values ** m`` (the configurations of ``m`` variables with ``values`` values each),
    or ``None`` when it certainly exceeds both ``limit`` and :data:`INDEX_LIMIT`, without
    computing it (for ``m`` in the billions the power alone would take minutes and
    gigabytes)."""
    if values <= 1:
        return 1
    bound = max(limit, INDEX_LIMIT).bit_length()
    if m > bound:  # values**m >= 2**m > 2**bound > max(limit, INDEX_LIMIT)
        return None
    return values**m


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
            back to the caller's logits. With ``probs``, the logits derived from them,
            detached.
        categorical: ``True`` for a categorical problem, ``False`` for Bernoulli.
        dim: the caller's (non-negative) category dimension; unused for Bernoulli.
        num_samples: how many samples the estimator draws (its own meaning per estimator).
        generator: the source of randomness.
        prefix_ndim: the number of batch dimensions ``f``'s values keep, known after the
            first :meth:`evaluate`.
        probs: the caller's probabilities in canonical layout (``None`` when they passed
            logits); they carry the graph back to the caller's ``probs``.
    """

    f: Objective
    logits: Tensor
    categorical: bool
    dim: int
    num_samples: int
    generator: torch.Generator | None
    prefix_ndim: int | None = field(default=None)
    probs: Tensor | None = field(default=None)

    @classmethod
    def from_probs(
        cls,
        f: Objective,
        probs: Tensor,
        categorical: bool,
        dim: int,
        num_samples: int,
        generator: torch.Generator | None,
    ) -> Problem:
        """A problem over probabilities (canonical layout): :attr:`logits` derived from them."""
        q = opmath(probs.detach())
        logits = torch.log(q) if categorical else torch.log(q) - torch.log1p(-q)
        return cls(f, logits.to(probs.dtype), categorical, dim, num_samples, generator, probs=probs)

    @property
    def parameter(self) -> Tensor:
        """The tensor the gradient goes to: :attr:`probs` if given, else :attr:`logits`."""
        return self.logits if self.probs is None else self.probs

    # -- shapes ---------------------------------------------------------------------------
    @property
    def batch_shape(self) -> torch.Size:
        """The logits' shape without the category axis."""
        return self.logits.shape[:-1] if self.categorical else self.logits.shape

    @property
    def prefix_shape(self) -> torch.Size:
        """The batch dimensions ``f``'s values keep; known once :meth:`evaluate` has run."""
        if self.prefix_ndim is None:
            raise RuntimeError(
                "Problem.prefix_shape is known only after Problem.evaluate() has run f once "
                "(f's value tells how many batch dimensions it keeps); call evaluate first"
            )
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
        with NaN -> 0 and +-inf -> +-(a large finite value); with :attr:`probs`, derived
        from them in that dtype. Categorical logits are first shifted to a largest entry
        of 0 (:func:`~hardgrad.estimators._shift.shift_to_zero`): samples then depend on
        logit differences only, a -inf logit stays below every other one (its category is
        never drawn and its score is exactly 0) and +inf is a point mass."""
        if self.probs is not None:
            q = opmath(self.probs.detach())
            logits = torch.log(q) if self.categorical else torch.log(q) - torch.log1p(-q)
            return finite(logits)
        if self.categorical:
            return finite_shifted(opmath(self.logits.detach()), -1)
        return finite(opmath(self.logits.detach()))

    def exact_logits(self) -> Tensor:
        """:attr:`logits` in the compute dtype for exact enumeration, differentiable, as
        :attr:`work_logits` reads them: categorical rows shifted by their (detached)
        maximum, which changes no softmax or its gradient but keeps -inf below every
        finite logit after :func:`~hardgrad._core.kernels.finite` (which alone maps -inf to
        -max/4, above a logit of -1e38). A row whose maximum is infinite (+inf entries,
        or all -inf) is its point mass: 0 at the entries equal to the maximum, -inf
        elsewhere, with gradient 0 (the limit). The gradient with respect to a -inf logit
        is 0."""
        work = opmath(self.logits)
        if not self.categorical:
            return finite(work)
        top = work.detach().amax(-1, keepdim=True)
        infinite = top.abs() == math.inf
        # A +inf row: its +inf entries become 0, every other entry -inf (a point mass
        # shared by the +inf entries), with gradient 0 to all of them (the limit).
        point_mass = torch.where(work == top, 0.0, -math.inf).detach()
        shifted = torch.where(infinite, point_mass, work - torch.where(infinite, 0.0, top))
        return finite(shifted)

    @property
    def work(self) -> Tensor:
        """What the built-in estimators compute from: :attr:`work_logits`, or with
        :attr:`probs`, the detached probabilities in the compute dtype. The argument of
        :meth:`draw` and :meth:`parameter_score`."""
        if self.probs is not None:
            return opmath(self.probs.detach())
        return self.work_logits

    def probabilities(self, logits: Tensor) -> Tensor:
        """:math:`\\sigma(\\theta)` or :math:`\\operatorname{softmax}(\\theta)` (last axis)."""
        return torch.softmax(logits, -1) if self.categorical else torch.sigmoid(logits)

    def score(self, samples: Tensor, logits: Tensor) -> Tensor:
        r""":math:`\nabla_\theta \log p_\theta(b) = b - \sigma(\theta)` (Bernoulli) or
        :math:`D - \operatorname{softmax}(\theta)` (categorical), per coordinate."""
        return samples - self.probabilities(logits)

    def draw(self, n: int, work: Tensor) -> Tensor:
        """:meth:`sample` from :attr:`work`: for probabilities, ``u < p`` (Bernoulli, on the
        same uniforms as from logits) or Gumbel-max on ``log q``, so probabilities of 0 and
        1 give fixed values."""
        if self.probs is None:
            return self.sample(n, work)
        shape = (n, *work.shape)
        if self.categorical:
            noise = gumbel_noise(work.expand(shape), self.generator)
            index = (torch.log(work) + noise).argmax(-1, keepdim=True)
            return one_hot(work.expand(shape), -1, index)
        u = uniform(work, self.generator, shape)
        return (u < work).to(work.dtype)

    def parameter_score(self, samples: Tensor, work: Tensor) -> Tensor:
        r"""The score with respect to :attr:`parameter`, per coordinate: :meth:`score` for
        logits; for probabilities :math:`b/p - (1-b)/(1-p)` (Bernoulli) or
        :math:`D_i/q_i - 1/\sum_j q_j` (categorical, through the normalisation
        :math:`q/\sum_j q_j`), written with ``torch.where`` so that the values a sample can
        take at probabilities of 0 and 1 (:math:`-1` at :math:`p = 0`, 1 at :math:`p = 1`)
        come out finite, without 0/0."""
        if self.probs is None:
            return self.score(samples, work)
        on = samples > 0
        if self.categorical:
            total = work.sum(-1, keepdim=True)
            return torch.where(on, work.reciprocal(), 0) - total.reciprocal()
        return torch.where(on, work.reciprocal(), -(1 - work).reciprocal())

    def logits_score(self, samples: Tensor, work: Tensor) -> Tensor:
        r"""The score with respect to the logits, :math:`b - p` or :math:`D - q/\sum_j q_j`,
        from :attr:`work` (bounded: for weights such as the optimal baseline's)."""
        if self.probs is None:
            return self.score(samples, work)
        if self.categorical:
            return samples - work / work.sum(-1, keepdim=True)
        return samples - work

    def logits_to_parameter(self, work: Tensor) -> Tensor | None:
        r"""What turns a logits gradient into a :attr:`parameter` gradient inside (0, 1):
        :math:`1/(p(1-p))` (Bernoulli) or :math:`1/q` (categorical); ``None`` for logits."""
        if self.probs is None:
            return None
        if self.categorical:
            return work.reciprocal()
        return (work * (1 - work)).reciprocal()

    def at_endpoints(self) -> bool:
        """Whether some probability is exactly 0 or 1 (Bernoulli) or 0 (categorical); False
        for logits. A device synchronisation."""
        if self.probs is None:
            return False
        q = self.probs.detach()
        edge = q == 0 if self.categorical else (q == 0) | (q == 1)
        return bool(edge.any())

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

    def probability(self, configurations: Tensor) -> Tensor:
        r""":math:`p(b)` per prefix entry from :attr:`probs`, differentiable in them and exact
        at probabilities of 0 and 1 (a product, no logarithms): :math:`\prod_i p_i^{b_i}
        (1 - p_i)^{1 - b_i}`, or :math:`\prod_i q_{i, D_i}` with :math:`q` normalised."""
        if self.probs is None:
            raise RuntimeError(
                "Problem.probability needs a problem over probabilities (hg.expectation "
                "called with probs=), but this one has logits; use Problem.log_prob"
            )
        q = opmath(self.probs)
        if self.categorical:
            q = q / q.sum(-1, keepdim=True)
            per_variable = (configurations.to(q.dtype) * q).sum(-1)
        else:
            per_variable = torch.where(configurations > 0, q, 1 - q)
        extra = len(self.batch_shape) - (self.prefix_ndim or 0)
        if extra == 0:
            return per_variable
        return per_variable.flatten(per_variable.dim() - extra).prod(-1)

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
        count = configuration_count(values, m, limit)
        if count is None or count > min(limit, INDEX_LIMIT):
            size = f"{values}^{m}" if count is None else f"{values}^{m} = {count}"
            cap = (
                ""
                if limit <= INDEX_LIMIT
                else f" (and at most {INDEX_LIMIT}, 2^63 - 1, the most a tensor can index)"
            )
            raise ValueError(
                f"Expected at most `max_configurations`={limit}{cap} configurations to "
                f"enumerate, but found {size} ({m} variables per prefix entry, prefix "
                f"{tuple(batch[:k])}); use a sampling estimator instead (e.g. "
                "estimator='disarm' or 'rloo' for Bernoulli, 'rloo' or 'reinforce' for "
                "categorical), or make f return one value per batch entry (a longer prefix) "
                "so that fewer variables are enumerated jointly"
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
