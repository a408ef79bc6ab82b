r"""REINFORCE with its baselines (none, a moving average, the optimal one) and RLOO, its
leave-one-out form: score-function estimators (notation in :mod:`hardgrad.estimators._score`)."""

from __future__ import annotations

from typing import Any, ClassVar

import torch
from torch import Tensor

from .._core.checkpoint import SettingsInState
from .._core.kernels import eager_plain, rounded_to
from .._core.validation import check_real
from ._base import ESTIMATORS, ScoreFunctionEstimator
from ._problem import Problem
from ._score import _WithoutSettings, attach_parameter_gradient


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
