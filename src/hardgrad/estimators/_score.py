r"""Score-function estimators and exact enumeration, used through :func:`hardgrad.expectation`.

Notation: logits :math:`\theta`, samples :math:`b` (one-hot :math:`D` for categorical),
:math:`p = \sigma(\theta)` or :math:`\pi = \operatorname{softmax}(\theta)`, the score
:math:`s(b) = \nabla_\theta \log p_\theta(b) = b - p` (or :math:`D - \pi`), and :math:`n`
evaluations :math:`f_1, \dots, f_n` of the objective. Each estimator returns the Monte-Carlo
estimate :math:`\bar f = \tfrac1n \sum_s f_s` as its value; the value's gradient with
respect to the logits is the estimator :math:`\hat g`, and with respect to ``f``'s own
parameters the ordinary :math:`\tfrac1n \sum_s \nabla_\psi f_s`.

The estimate is injected with an autograd Function whose forward is exactly zero, so the
value is bit-for-bit the Monte-Carlo mean; its backward multiplies :math:`\hat g` by the
incoming gradient. It is first-order: differentiating the gradient again raises (the
second derivative of :math:`E[f]` is not :math:`\nabla \hat g`). :class:`Exact` is plain
autograd and supports every order.

Probabilities. With ``probs=`` the estimators compute in probability space: the score is
:math:`b/p - (1-b)/(1-p)` (categorical :math:`D_i/q_i - 1/\sum_j q_j`, through the
normalisation), written with ``torch.where`` so that it is :math:`-1` at :math:`p = 0` and
:math:`+1` at :math:`p = 1`, the values the sample takes there; ARM's and DisARM's weights
are divided by :math:`p(1-p)` (each class says its value at 0 and 1). Inside (0, 1) that is
the logits estimate times :math:`d\ell/dp`, and unbiased where it was; exactly at 0 or 1
no estimator that only evaluates :math:`f` at samples is unbiased (the sample never takes
the other value, whose :math:`f` the derivative needs).
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import torch
from torch import Tensor

from .._core.checkpoint import SettingsInState
from .._core.kernels import eager_plain, rounded_to
from .._core.validation import check_int, check_real
from ..ops._autograd import apply_function, cached_signature, has_tangent
from ._base import ESTIMATORS, Estimator, uniform
from ._problem import Problem


class _FirstOrderOnly(torch.autograd.Function):
    """Identity in ``x``, tied to ``anchor`` (the logits) so that any second derivative
    with respect to them (``backward``, ``autograd.grad``, ``autograd.functional.hessian``)
    reaches this node, whose backward raises."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, anchor: Tensor) -> Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, Tensor]:
        raise RuntimeError(
            "hg.expectation's score-function estimators (REINFORCE, RLOO, ARM, DisARM, REBAR, "
            "RELAX) are first-order: their gradient cannot be differentiated again (its "
            "derivative is not the second derivative of E[f]); use estimator='exact' for "
            "higher orders"
        )


def first_order_only(gradient: Tensor, logits: Tensor) -> Tensor:
    """``gradient``, made to raise if a second derivative (``create_graph=True``) reaches it.

    Eager autograd only: under ``torch.func`` transforms and ``torch.compile`` the gradient
    is returned as is, so a nested ``torch.func.grad`` sees the estimate as a constant (its
    second derivative comes out 0: not supported).
    """
    if not torch.is_grad_enabled() or not eager_plain(gradient):
        return gradient
    return apply_function(_FirstOrderOnly, gradient.detach(), logits)


@cached_signature
class _ScoreGradient(torch.autograd.Function):
    """Forward: zeros shaped like ``like`` (the prefix). Backward: ``gradient`` times the
    incoming gradient, broadcast over the logits' trailing dimensions."""

    generate_vmap_rule = True

    @staticmethod
    def forward(logits: Tensor, gradient: Tensor, like: Tensor) -> Tensor:
        return torch.zeros_like(like)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
        logits, gradient, _ = inputs
        ctx.save_for_backward(gradient, logits)
        ctx.extra = gradient.dim() - output.dim()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        gradient, logits = ctx.saved_tensors
        spread = grad.reshape(tuple(grad.shape) + (1,) * ctx.extra)  # () for 0-dim logits
        return first_order_only((gradient * spread).to(gradient.dtype), logits), None, None


def attach_gradient(problem: Problem, value: Tensor, gradient: Tensor) -> Tensor:
    """``value`` (exactly) whose gradient with respect to the logits is ``gradient`` times
    the incoming gradient.

    ``gradient`` is with respect to the logits (:attr:`Problem.work_logits`). When the caller
    passed ``probs``, it is turned into their gradient by the chain rule,
    ``gradient * problem.logits_to_parameter(problem.work)`` (0 where ``gradient`` is 0): an
    estimator that wants finite gradients at probabilities of exactly 0 and 1 computes in
    probability space and calls :func:`attach_parameter_gradient` instead.
    """
    chain = problem.logits_to_parameter(problem.work)
    if chain is not None:
        gradient = torch.where(gradient == 0, 0, gradient * chain)
    return attach_parameter_gradient(problem, value, gradient)


def attach_parameter_gradient(problem: Problem, value: Tensor, gradient: Tensor) -> Tensor:
    """``value`` (exactly) whose gradient with respect to :attr:`Problem.parameter` (the
    logits, or the probabilities the caller passed) is ``gradient`` times the incoming
    gradient."""
    parameter = problem.parameter
    if not (parameter.requires_grad and torch.is_grad_enabled()) and not has_tangent(parameter):
        return value
    zero = apply_function(
        _ScoreGradient, parameter, gradient.detach().to(parameter.dtype), value.detach()
    )
    return value + zero


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


@ESTIMATORS.register("reinforce")
class Reinforce(SettingsInState, ScoreFunctionEstimator, torch.nn.Module):
    r"""REINFORCE (the score-function or likelihood-ratio estimator), with a baseline.

    .. math:: \hat g = \frac1n \sum_{s=1}^n (f_s - \beta_s)\, s(b_s),
        \qquad b_s \sim p_\theta \text{ independently.}

    ``baseline``:

    * ``None``: :math:`\beta = 0`.
    * ``"ema"``: :math:`\beta` is an exponential moving average of past values of :math:`\bar f`
      (``decay``), bias-corrected, updated after use, so it never depends on the current
      samples. State: the buffers ``ema`` and ``steps``; it is updated only in training
      mode (``estimator.train()``). Checkpoints carry ``baseline`` and ``decay`` too, and
      ``load_state_dict`` refuses an average kept under other values. When a
      ``torch.distributed`` process group is
      initialised, the mean of :math:`\bar f` over the ranks is what enters the average
      (for equal shards, the mean over the global batch), so every rank keeps the same
      baseline; each training-mode call is then a collective operation.
    * ``"optimal"``: the minimum-variance baseline per coordinate (Bengio et al. 2013, eq.
      (9)), :math:`\beta_{s,i} = \sum_{t \ne s} s_i(b_t)^2 f_t / \sum_{t \ne s} s_i(b_t)^2`,
      estimated leave-one-out from the *other* samples of the same call, so it stays
      unbiased; needs ``num_samples >= 2`` (default 2).

    Unbiased for every baseline. With ``probs`` at :math:`p = 0` (1) the gradient is
    :math:`\mp` the mean of :math:`f - \beta`; with ``"optimal"``, 0 (every sample has the
    same score there, so :math:`\beta` is the mean of the others' :math:`f`, the formula's
    limit). Williams (1992),
    https://doi.org/10.1007/BF00992696; Bengio, Léonard & Courville (2013),
    https://arxiv.org/abs/1308.3432.

    Args:
        baseline: ``None``, ``"ema"`` or ``"optimal"``.
        decay: the moving average's decay in (0, 1), for ``"ema"``.

    Example:
        >>> import torch, hardgrad as hg
        >>> reinforce = hg.estimators.Reinforce(baseline="ema", decay=0.9)
        >>> reinforce
        Reinforce(baseline='ema', decay=0.9)
        >>> logits = torch.zeros(3, requires_grad=True)
        >>> value = hg.expectation(lambda b: b.sum(-1), logits, estimator=reinforce,
        ...                        num_samples=4, generator=torch.Generator().manual_seed(0))
        >>> value.backward(); reinforce.steps
        tensor(1)
    """

    name: ClassVar[str] = "reinforce"
    ema: Tensor
    steps: Tensor
    baselines: ClassVar[tuple[str | None, ...]] = (None, "ema", "optimal")

    def __init__(self, baseline: str | None = None, *, decay: float = 0.9) -> None:
        super().__init__()
        if baseline not in self.baselines:
            raise ValueError(
                f"Expected `baseline` to be one of {self.baselines}, but found {baseline!r}"
            )
        decay = check_real(decay, "decay")
        if not 0 < decay < 1:
            raise ValueError(f"Expected 0 < `decay` < 1, but found decay={decay!r}")
        self.baseline = baseline
        self.decay = decay
        if baseline == "ema":
            # float32: torch.compile (2.13, CPU) drops in-place updates of float64 buffers.
            self.register_buffer("ema", torch.zeros((), dtype=torch.float32))
            self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    @property
    def min_samples(self) -> int:  # type: ignore[override]
        return 2 if self.baseline == "optimal" else 1

    def _checkpoint_settings(self) -> dict[str, Any]:
        """The baseline and decay under which the stored average was kept."""
        return {"baseline": self.baseline, "decay": self.decay}

    def extra_repr(self) -> str:
        text = f"baseline={self.baseline!r}"
        return text + (f", decay={self.decay}" if self.baseline == "ema" else "")

    def expectation(self, problem: Problem) -> Tensor:
        work = problem.work
        n = problem.num_samples
        samples = problem.draw(n, work)
        values = problem.evaluate(samples)
        f = values.detach().to(work.dtype)
        scores = problem.parameter_score(samples, work)
        if self.baseline == "optimal":
            # From the bounded logits scores: the baseline is the same (a coordinate's scale
            # cancels) and no square of 1/p overflows.
            bounded = scores if problem.probs is None else problem.logits_score(samples, work)
            weights = problem.spread(f) - _leave_one_out_optimal_baseline(problem, f, bounded)
        elif self.baseline == "ema":
            weights = problem.spread(f - self._current_ema(f))
            self._update_ema(f)
        else:
            weights = problem.spread(f)
        return attach_parameter_gradient(problem, values.mean(0), (weights * scores).mean(0))

    def _on_host(self, f: Tensor) -> bool:
        """Whether the average is read and kept with Python numbers: CPU buffers of
        float32 or float64 and a CPU ``f`` in plain eager mode, one process. The same
        values as the tensor arithmetic (correctly rounded in the buffer's dtype), at
        about 6 µs a call instead of 75: ten 0-d kernels fewer."""
        return (
            self.ema.is_cpu
            and f.is_cpu
            and self.ema.dtype in _HOST_DTYPES
            and eager_plain(f)
            and not _distributed()
        )

    def _current_ema(self, f: Tensor) -> Tensor | float:
        if self._on_host(f):
            count = int(self.steps.item())
            if count <= 0:
                return 0.0
            bias = max(1 - self.decay**count, _FLOAT64_TINY)  # (in float64, as below)
            return float(self.ema.item()) / bias
        # The bias correction in float64 (the stored average is float32).
        steps = self.steps.to(torch.float64)
        correction = (1 - self.decay**steps).clamp_min(torch.finfo(torch.float64).tiny)
        current = torch.where(self.steps > 0, self.ema.to(torch.float64) / correction, 0.0)
        return current.to(device=f.device, dtype=f.dtype)

    def _update_ema(self, f: Tensor) -> None:
        if not self.training:
            return
        if self._on_host(f):
            # decay * ema + (1 - decay) * mean as the tensor kernels round it: each operand
            # and result in the buffer's dtype (a product or sum of two float32 numbers in
            # float64, rounded once, is the float32 one)
            dtype = self.ema.dtype

            def rounded(value: float) -> float:
                return rounded_to(value, dtype)

            decay, batch_mean = rounded(self.decay), rounded(float(f.mean().item()))
            ema = float(self.ema.item())
            new = rounded(rounded(decay * ema) + rounded(rounded(1 - self.decay) * batch_mean))
            self.ema.fill_(new)
            self.steps.add_(1)
            return
        with torch.no_grad():
            # Averaged across ranks in f's precision, then stored: for equal shards the mean
            # of the ranks' means is the global batch's mean, rounded once as one process
            # would.
            mean = _average_across_ranks(f.mean())
            mean = mean.to(device=self.ema.device, dtype=self.ema.dtype)
            # Out of place, then copied: torch.compile loses the chained in-place update.
            self.ema.copy_(self.decay * self.ema + (1 - self.decay) * mean)
            self.steps.add_(1)


def _leave_one_out_optimal_baseline(problem: Problem, f: Tensor, scores: Tensor) -> Tensor:
    """Per coordinate, ``sum_{t != s} s_t^2 f_t / sum_{t != s} s_t^2``, summed without
    cancellation through an (n, n) off-diagonal mask. Where the denominator is 0 (logits
    scores at a probability of exactly 0 or 1, where every sample has the same score): 0
    for logits, whose score is then 0 anyway; with probabilities, whose score there is
    +-1, the limit of the formula, the mean of the other samples' ``f``."""
    n = scores.shape[0]
    others = 1 - torch.eye(n, dtype=scores.dtype, device=scores.device)
    squares = scores * scores
    numerator = torch.tensordot(others, squares * problem.spread(f), dims=([1], [0]))
    denominator = torch.tensordot(others, squares, dims=([1], [0]))
    safe = torch.where(denominator > 0, denominator, 1)
    fallback: Tensor | float = 0
    if problem.probs is not None:
        fallback = problem.spread((f.sum(0) - f) / (n - 1))
    return torch.where(denominator > 0, numerator / safe, fallback)


_HOST_DTYPES = (torch.float32, torch.float64)
_FLOAT64_TINY = torch.finfo(torch.float64).tiny


def _distributed() -> bool:
    dist = torch.distributed
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def _average_across_ranks(x: Tensor) -> Tensor:
    """The mean of ``x`` over the ranks of the default process group, when one is up."""
    dist = torch.distributed
    if _distributed():
        x = x.clone()
        dist.all_reduce(x)
        x /= dist.get_world_size()
    return x


class _WithoutSettings(ScoreFunctionEstimator):
    """An estimator with no settings: ``Name()``, and all instances are equal."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))


@ESTIMATORS.register("rloo")
class RLOO(_WithoutSettings):
    r"""REINFORCE with the leave-one-out baseline (RLOO).

    .. math:: \hat g = \frac1n \sum_s \Big(f_s - \frac{1}{n-1}\sum_{t \ne s} f_t\Big) s(b_s)
        = \frac{1}{n-1} \sum_s (f_s - \bar f)\, s(b_s).

    Unbiased; needs ``num_samples >= 2`` (default 2). On the Bernoulli toy with two samples
    its variance is :math:`(1-2t)^2 q(1-q)/4`, :math:`q = 2p(1-p)`. Kool, van Hoof &
    Welling (2019), "Buy 4 REINFORCE samples, get a baseline for free!",
    https://openreview.net/forum?id=r1lgTGL5DE. With ``probs``, 0 at probabilities of 0
    and 1 (every sample has the same score there).

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.zeros(2, 3, requires_grad=True)
        >>> value = hg.expectation(lambda b: b.sum(-1), logits, estimator="rloo",
        ...                        num_samples=8, generator=torch.Generator().manual_seed(0))
        >>> value.shape
        torch.Size([2])
    """

    name: ClassVar[str] = "rloo"
    min_samples: ClassVar[int] = 2

    def expectation(self, problem: Problem) -> Tensor:
        work = problem.work
        n = problem.num_samples
        samples = problem.draw(n, work)
        values = problem.evaluate(samples)
        f = values.detach().to(work.dtype)
        centred = problem.spread(f - f.mean(0))
        gradient = (centred * problem.parameter_score(samples, work)).sum(0) / (n - 1)
        return attach_parameter_gradient(problem, values.mean(0), gradient)


class _Antithetic(_WithoutSettings):
    """Bernoulli estimators built on antithetic pairs ``(u, 1 - u)``: ``num_samples`` is even
    and counts both members of every pair."""

    dists: ClassVar[tuple[str, ...]] = ("bernoulli",)
    min_samples: ClassVar[int] = 2
    sample_multiple: ClassVar[int] = 2

    def expectation(self, problem: Problem) -> Tensor:
        work = problem.work
        pairs = problem.num_samples // 2
        u = uniform(work, problem.generator, (pairs, *work.shape)).to(work.dtype)
        with_probs = problem.probs is not None
        both = self.stacked_pair(work, u, with_probs)
        first, second = both[:pairs], both[pairs:]
        values = problem.evaluate(both)
        f = values.detach().to(work.dtype)
        difference = problem.spread(f[:pairs] - f[pairs:])
        weight = self.weight_probs if with_probs else self.weight
        gradient = (difference * weight(work, u, first, second)).mean(0)
        return attach_parameter_gradient(problem, values.mean(0), gradient)

    def stacked_pair(self, work: Tensor, u: Tensor, with_probs: bool) -> Tensor:
        """:meth:`pair` (or :meth:`pair_probs`) of ``work``, the first samples then the
        second ones along dimension 0 (what ``f`` is evaluated on)."""
        first, second = self.pair_probs(work, u) if with_probs else self.pair(work, u)
        return torch.cat((first, second))

    @abc.abstractmethod
    def pair(self, theta: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        """The two samples of each pair, from the same uniforms."""

    @abc.abstractmethod
    def weight(self, theta: Tensor, u: Tensor, first: Tensor, second: Tensor) -> Tensor:
        """What multiplies ``f(first) - f(second)``."""

    @abc.abstractmethod
    def pair_probs(self, p: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        """:meth:`pair` from probabilities ``p``."""

    @abc.abstractmethod
    def weight_probs(self, p: Tensor, u: Tensor, first: Tensor, second: Tensor) -> Tensor:
        """:meth:`weight` for the gradient with respect to ``p`` (finite at 0 and 1)."""


@ESTIMATORS.register("arm")
class ARM(_Antithetic):
    r"""Augment-REINFORCE-merge (ARM) for Bernoulli variables.

    With :math:`u \sim U(0,1)^d` shared by a pair:

    .. math:: \hat g = \big(f(\mathbb 1[u > \sigma(-\theta)]) - f(\mathbb 1[u < \sigma(\theta)])\big)
        \,(u - \tfrac12),

    averaged over ``num_samples / 2`` pairs (two evaluations each). Unbiased. Bernoulli
    only (the categorical extension, ARSM, is not implemented). Where :math:`\sigma(\theta_i)`
    is exactly 0 or 1 in the compute dtype (infinite logits included) the pair always
    agrees on coordinate :math:`i` and its weight is 0, the term's conditional mean (so an
    infinite logit gets exactly 0). Yin & Zhou (2019),
    https://arxiv.org/abs/1807.11143.

    With ``probs``: the weight :math:`(u - \tfrac12)/(p(1-p))` inside (0, 1); at exactly 0
    or 1 it is 0. There the formula's limit is infinite (the pair agrees on this
    coordinate, but :math:`f(b) - f(\tilde b)` differs whenever another coordinate's pair
    does); 0 is that term's mean given the pair. Near 0 and 1 the variance grows like
    :math:`1/p^2`: prefer DisARM.

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.zeros(3, requires_grad=True)
        >>> value = hg.expectation(lambda b: (b - 0.4).square().sum(-1), logits,
        ...                        estimator="arm", generator=torch.Generator().manual_seed(0))
        >>> value.backward(); logits.grad.shape
        torch.Size([3])
    """

    name: ClassVar[str] = "arm"

    def pair(self, theta: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        return (u > torch.sigmoid(-theta)).to(u.dtype), (u < torch.sigmoid(theta)).to(u.dtype)

    def weight(self, theta: Tensor, u: Tensor, first: Tensor, second: Tensor) -> Tensor:
        # u - 1/2; 0 where sigma(theta) is exactly 0 or 1 (infinite logits, or beyond
        # about +-104 in float32): there the pair always agrees on this coordinate, u is
        # uniform on an interval symmetric about 1/2 given that, and f(b) - f(b~) does not
        # depend on it, so the term's mean is 0 and 0 is its value (unbiased, and the
        # gradient of an infinite logit is exactly 0, as for every estimator).
        certain = (torch.sigmoid(theta) * torch.sigmoid(-theta)) == 0
        return torch.where(certain, 0.0, u - 0.5)

    def pair_probs(self, p: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        return (u > 1 - p).to(u.dtype), (u < p).to(u.dtype)

    def weight_probs(self, p: Tensor, u: Tensor, first: Tensor, second: Tensor) -> Tensor:
        # (u - 1/2) / (p (1 - p)) inside (0, 1); at 0 and 1, where the limit is infinite
        # whenever another coordinate's pair differs, the term's mean given the pair: 0.
        inside = (p > 0) & (p < 1)
        return torch.where(inside, (u - 0.5) / torch.where(inside, p * (1 - p), 1), 0)


@ESTIMATORS.register("disarm")
class DisARM(_Antithetic):
    r"""DisARM: ARM with the uniforms integrated out given the antithetic pair.

    With :math:`b = \mathbb 1[u < \sigma(\theta)]` and :math:`\tilde b = \mathbb 1[1 - u < \sigma(\theta)]`:

    .. math:: \hat g_i = \tfrac12 \big(f(b) - f(\tilde b)\big)\,(-1)^{\tilde b_i}\,
        \mathbb 1[b_i \ne \tilde b_i]\, \sigma(|\theta_i|),

    averaged over ``num_samples / 2`` pairs. Unbiased, with variance never above ARM's; at
    :math:`\theta = 0` a pair always disagrees, so on a one-variable objective the
    variance is 0. Bernoulli only. Dong, Mnih & Tucker (2020),
    https://arxiv.org/abs/2006.10680.

    With ``probs``: the weight :math:`\sigma(|\theta_i|)/(p_i(1-p_i)) = 1/\min(p_i, 1-p_i)`
    where the pair disagrees; at 0 and 1 it never does, so the gradient is 0 (the limit).

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.zeros(1, requires_grad=True)   # the toy at phi = 0: exact every time
        >>> hg.expectation(lambda b: (b - 0.45).square().sum(-1), logits,
        ...                generator=torch.Generator().manual_seed(0)).backward()
        >>> logits.grad   # p(1-p)(1-2t) = 0.25 * 0.1
        tensor([0.0250])
    """

    name: ClassVar[str] = "disarm"

    def stacked_pair(self, work: Tensor, u: Tensor, with_probs: bool) -> Tensor:
        if not eager_plain(u):
            return super().stacked_pair(work, u, with_probs)
        # Both comparisons written as 0/1 straight into the halves of one tensor: 4 passes
        # where two conversions and a concatenation made 7. The same values.
        p = work if with_probs else torch.sigmoid(work)
        pairs = u.shape[0]
        both = u.new_empty((2 * pairs, *u.shape[1:]))
        torch.lt(u, p, out=both[:pairs])
        torch.lt(torch.sub(1, u), p, out=both[pairs:])
        return both

    def pair(self, theta: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        p = torch.sigmoid(theta)
        return (u < p).to(u.dtype), ((1 - u) < p).to(u.dtype)

    def weight(self, theta: Tensor, u: Tensor, first: Tensor, second: Tensor) -> Tensor:
        # (-1)^second [first != second] is first - second, exactly (a 0 where they agree)
        return torch.sigmoid(theta.abs()).mul(first - second).mul_(0.5)

    def pair_probs(self, p: Tensor, u: Tensor) -> tuple[Tensor, Tensor]:
        return (u < p).to(u.dtype), ((1 - u) < p).to(u.dtype)

    def weight_probs(self, p: Tensor, u: Tensor, first: Tensor, second: Tensor) -> Tensor:
        # sigma(|theta|) / (p (1 - p)) = 1 / min(p, 1 - p); a pair never disagrees at 0 or 1.
        # The 0/1 mask multiplies, and moves the divisor off 0 where it is unset (CPU
        # torch.where branches per element, and whether a pair disagrees is a coin flip
        # near p = 1/2); + 0.0 turns the unset entries' -0 into 0. The same values.
        disagree = (first != second).to(second.dtype)
        smaller = torch.minimum(p, 1 - p) + (1 - disagree)
        return 0.5 * (1 - 2 * second) * disagree / smaller + 0.0


@ESTIMATORS.register("exact")
class Exact(ScoreFunctionEstimator):
    r"""The exact expectation, by enumerating every configuration.

    .. math:: E[f] = \sum_{b} p_\theta(b)\, f(b),

    differentiated by ordinary autograd (so its gradient is exact, of every order, for the
    logits and for ``f``'s parameters). The variables of each prefix entry are enumerated
    jointly (:math:`2^m` or :math:`C^m` configurations for :math:`m` variables per entry)
    and all prefix entries are enumerated in parallel. ``f`` is called once when it returns
    one value per batch entry; when its prefix is shorter, a first call on the
    per-entry configurations (2 or C of them) tells the prefix, then all are enumerated. ``num_samples`` must be left ``None``.
    With ``probs``, :math:`p(b)` is a product of probabilities (no logarithms), so the
    gradient is exact at probabilities of 0 and 1 too.

    Args:
        max_configurations: the most configurations it will enumerate; more raise
            ``ValueError``.

    Example:
        >>> import torch, hardgrad as hg
        >>> logits = torch.zeros(3, requires_grad=True)
        >>> hg.expectation(lambda b: b.sum(-1), logits, estimator="exact")
        tensor(1.5000, grad_fn=<SumBackward1>)
    """

    name: ClassVar[str] = "exact"

    def __init__(self, max_configurations: int = 2**16) -> None:
        self.max_configurations = check_int(max_configurations, "max_configurations", low=1)

    def __repr__(self) -> str:
        return f"Exact(max_configurations={self.max_configurations})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Exact) and other.max_configurations == self.max_configurations

    def __hash__(self) -> int:
        return hash((Exact, self.max_configurations))

    def default_num_samples(self) -> int:
        return 0

    def expectation(self, problem: Problem) -> Tensor:
        if problem.prefix_ndim is None:
            # Guess the commonest case, one value per batch entry (each variable alone:
            # 2 or C configurations); f's answer tells the real prefix, and only a shorter
            # one needs a second, full enumeration.
            guess = len(problem.batch_shape)
            configurations = problem.configurations(self.max_configurations, guess)
            values = problem.evaluate(configurations)
            if problem.prefix_ndim != guess:
                configurations = problem.configurations(self.max_configurations)
                values = problem.evaluate(configurations)
        else:
            configurations = problem.configurations(self.max_configurations)
            values = problem.evaluate(configurations)
        if problem.probs is not None:
            # A product of probabilities, no logarithms: exact gradients at 0 and 1.
            probabilities = problem.probability(configurations)
        else:
            # Shifted and finite (Problem.exact_logits): -inf excluded exactly, +inf a point
            # mass with log-probability 0 instead of inf - inf = NaN.
            work = problem.exact_logits()
            probabilities = problem.log_prob(configurations.to(work.dtype), work).exp()
        dtype = torch.promote_types(values.dtype, probabilities.dtype)
        return (probabilities.to(dtype) * values.to(dtype)).sum(0).to(values.dtype)
