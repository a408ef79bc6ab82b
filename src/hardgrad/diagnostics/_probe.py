r"""What autograd says at a kink: its derivative next to the one-sided difference quotients.

For a scalar function :math:`\phi` and a point :math:`x`, :func:`probe` reports

.. math::

    \phi'_{\text{autograd}}(x), \qquad
    D^- = \frac{\phi(x) - \phi(x - \epsilon)}{\epsilon}, \qquad
    D^+ = \frac{\phi(x + \epsilon) - \phi(x)}{\epsilon},

in float64, flags a **kink** where :math:`D^-` and :math:`D^+` differ, a **jump** where
:math:`\phi(x \pm \epsilon) - \phi(x)` does not shrink with :math:`\epsilon` (the quotients
then grow like :math:`1/\epsilon`), and names the convention autograd used there: the left
or right derivative, their mean, zero, or something else.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

from .._validation import check_positive


@dataclass(frozen=True)
class ProbePoint:
    """One point of a :class:`ProbeReport`.

    Attributes:
        point: :math:`x`.
        value: :math:`\\phi(x)`.
        autograd: autograd's derivative, ``None`` when autograd gives none (the error is in
            ``convention``).
        left, right: the one-sided difference quotients :math:`D^-`, :math:`D^+`.
        kink: the one-sided derivatives differ.
        jump: :math:`\\phi` is discontinuous at :math:`x`.
        convention: what autograd's value is, in words.
    """

    point: float
    value: float
    autograd: float | None
    left: float
    right: float
    kink: bool
    jump: bool
    convention: str


@dataclass
class ProbeReport:
    """The result of :func:`probe`; ``str()`` prints a table."""

    name: str
    points: list[ProbePoint]

    COLUMNS = ("x", "f(x)", "autograd", "left", "right", "kink", "convention")

    def _cells(self) -> list[list[str]]:
        return [
            [
                _fmt(p.point),
                _fmt(p.value),
                _fmt(p.autograd),
                _fmt(p.left),
                _fmt(p.right),
                "jump" if p.jump else ("yes" if p.kink else ""),
                p.convention,
            ]
            for p in self.points
        ]

    @property
    def kinks(self) -> list[ProbePoint]:
        """The points where the function has a kink or a jump."""
        return [p for p in self.points if p.kink or p.jump]

    def to_markdown(self) -> str:
        head = "| " + " | ".join(self.COLUMNS) + " |"
        rule = "|" + "|".join("---:" if c != "convention" else "---" for c in self.COLUMNS) + "|"
        return "\n".join([head, rule, *("| " + " | ".join(c) + " |" for c in self._cells())])

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "points": [asdict(p) for p in self.points]}

    def __str__(self) -> str:
        cells = [list(self.COLUMNS), *self._cells()]
        widths = [max(len(row[i]) for row in cells) for i in range(len(self.COLUMNS))]
        lines = [f"probe of {self.name}"]
        for k, row in enumerate(cells):
            lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)).rstrip())
            if k == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines)


def _fmt(value: float | None) -> str:
    if value is None:
        return "none"
    if math.isinf(value) or math.isnan(value):
        return str(value)
    return f"{value:.6g}"


def _close(a: float, b: float, scale: float) -> bool:
    return abs(a - b) <= 1e-3 * max(1.0, scale)


def _convention(autograd: float, left: float, right: float, kink: bool, jump: bool) -> str:
    if math.isnan(autograd):
        return "NaN"
    if math.isinf(autograd):
        return "infinite"
    if math.isnan(left) or math.isnan(right):
        return "undefined on the " + ("left" if math.isnan(left) else "right")
    scale = max(abs(left), abs(right), abs(autograd))
    if jump:
        return "zero (jump ignored)" if autograd == 0 else "finite value at a jump"
    if not kink:
        return "derivative" if _close(autograd, left, scale) else "differs from the derivative"
    if _close(autograd, left, scale):
        return "left derivative"
    if _close(autograd, right, scale):
        return "right derivative"
    if _close(autograd, 0.5 * (left + right), scale):
        return "mean of the one-sided derivatives"
    if autograd == 0:
        return "zero"
    return "other"


def probe(
    fn: Callable[[Tensor], Tensor], points: Iterable[float] | Tensor, *, eps: float = 1e-4
) -> ProbeReport:
    """autograd's derivative of ``fn`` at each point, next to the one-sided difference
    quotients, with kinks, jumps and autograd's convention there flagged.

    Args:
        fn: an elementwise function of a float64 tensor (``torch.relu``,
            ``lambda x: x.clamp(0, 1)``, ``hg.round``...).
        points: the points (a list of floats or a 1-d tensor).
        eps: the step of the difference quotients, > 0.

    Returns:
        A :class:`ProbeReport`, one :class:`ProbePoint` per point.

    Example:
        >>> import torch, hardgrad as hg
        >>> report = hg.diagnostics.probe(torch.relu, [-1.0, 0.0, 1.0])
        >>> [(p.point, p.autograd, p.kink, p.convention) for p in report.points]
        [(-1.0, 0.0, False, 'derivative'), (0.0, 0.0, True, 'left derivative'), (1.0, 1.0, False, 'derivative')]
    """
    if not callable(fn):
        raise TypeError(f"Expected `fn` to be callable, but found {type(fn).__name__}")
    step = check_positive(eps, "eps")
    try:
        xs = torch.as_tensor(points, dtype=torch.float64).reshape(-1)
    except (TypeError, ValueError, RuntimeError) as error:
        raise TypeError(
            f"Expected `points` to be numbers or a tensor, but found {points!r}"
        ) from error
    if xs.numel() == 0:
        raise ValueError("Expected at least one point in `points`, but found none")
    if not bool(torch.isfinite(xs).all()):
        raise ValueError("Expected finite `points`, but found inf or NaN")
    name = getattr(fn, "__name__", None) or repr(fn)
    return ProbeReport(str(name), [_probe_point(fn, float(x), step) for x in xs])


def _evaluate(fn: Callable[[Tensor], Tensor], x: float) -> float:
    with torch.no_grad():
        return float(fn(torch.tensor(x, dtype=torch.float64)))


def _probe_point(fn: Callable[[Tensor], Tensor], x: float, eps: float) -> ProbePoint:
    here = _evaluate(fn, x)
    below, above = _evaluate(fn, x - eps), _evaluate(fn, x + eps)
    left, right = (here - below) / eps, (above - here) / eps
    # A jump: the one-sided differences do not shrink with the step.
    small = eps / 16
    near_below, near_above = _evaluate(fn, x - small), _evaluate(fn, x + small)
    tolerance = 1e-9 * max(1.0, abs(here))
    jump = any(
        abs(near - here) > tolerance and abs(near - here) > 0.5 * abs(far - here)
        for near, far in ((near_below, below), (near_above, above))
    )
    # Curvature makes the quotients differ by about eps * phi''; a kink differs by O(1).
    kink = jump or abs(left - right) > max(1e-6, 1e3 * eps) * max(1.0, abs(left), abs(right))
    leaf = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    try:
        out = fn(leaf)
        if not out.requires_grad:
            autograd: float | None = None
            convention = "no gradient (the output does not require grad)"
        else:
            (grad,) = torch.autograd.grad(out, leaf, allow_unused=True)
            autograd = 0.0 if grad is None else float(grad)
            convention = _convention(autograd, left, right, kink, jump)
    except (RuntimeError, NotImplementedError) as error:
        autograd = None
        convention = f"no gradient ({str(error).splitlines()[0][:60]})"
    return ProbePoint(x, here, autograd, left, right, kink, jump, convention)
