r"""Temperature schedules for the relaxed estimators; exponential decay is the schedule of
Jang et al. (2017), https://arxiv.org/abs/1611.01144.
"""

from __future__ import annotations

import math

from .._core.validation import check_int, check_positive

_SCHEDULES = ("exponential", "linear", "cosine")


class Anneal:
    r"""A temperature schedule: :math:`\tau(t)` from ``start`` to ``end`` over ``steps`` steps.

    .. math::

        \tau(t) = \begin{cases}
            \tau_0 (\tau_1/\tau_0)^{s} & \texttt{exponential} \\
            \tau_0 + (\tau_1 - \tau_0)\, s & \texttt{linear} \\
            \tau_1 + \tfrac12 (\tau_0 - \tau_1)(1 + \cos \pi s) & \texttt{cosine}
        \end{cases}, \qquad s = \min(t / T, 1),

    constant at ``end`` after ``steps``. Exponential decay is the schedule of Jang et al.
    (2017), https://arxiv.org/abs/1611.01144. Build it with :func:`anneal`.
    """

    def __init__(self, start: float, end: float, steps: int, kind: str = "exponential") -> None:
        self.start = check_positive(start, "start")
        self.end = check_positive(end, "end")
        self.steps = check_int(steps, "steps", low=1)
        if kind not in _SCHEDULES:
            raise ValueError(
                f"Unknown schedule {kind!r} for `kind`; available: {', '.join(map(repr, _SCHEDULES))}"
            )
        self.kind = kind

    def __call__(self, step: int) -> float:
        s = min(max(step, 0) / self.steps, 1.0)
        # Weighted forms, w * start + (1 - w) * end (a geometric mean for exponential): exact
        # at both ends and positive for any positive pair, where start + (end - start) * s
        # loses the smaller value to rounding (1 -> 1e-300 would end at 0, not 1e-300).
        if self.kind == "exponential":
            return self.start ** (1 - s) * self.end**s
        weight = 1 - s if self.kind == "linear" else 0.5 * (1 + math.cos(math.pi * s))
        return self.start * weight + self.end * (1 - weight)

    def __repr__(self) -> str:
        return f"anneal(start={self.start}, end={self.end}, steps={self.steps}, kind={self.kind!r})"


def anneal(start: float, end: float, steps: int, *, kind: str = "exponential") -> Anneal:
    """A temperature schedule for :class:`Bernoulli`, :class:`Categorical` (any callable of
    the step works too); see :class:`Anneal` for the formulas.

    Example:
        >>> import hardgrad as hg
        >>> schedule = hg.nn.anneal(1.0, 0.1, 100)
        >>> [round(schedule(t), 4) for t in (0, 50, 100, 1000)]
        [1.0, 0.3162, 0.1, 0.1]
    """
    return Anneal(start, end, steps, kind)
