r"""What autograd says at a kink: its derivative next to the one-sided difference quotients.

For a scalar function :math:`\phi` and a point :math:`x`, :func:`probe` reports

.. math::

    \phi'_{\text{autograd}}(x), \qquad
    D^- = \frac{\phi(x) - \phi(x - h)}{h}, \qquad
    D^+ = \frac{\phi(x + h) - \phi(x)}{h}, \qquad h = \epsilon \max(1, |x|),

in float64, flags a **kink** where :math:`D^-` and :math:`D^+` differ, a **jump** where
:math:`\phi(x \pm h) - \phi(x)` does not shrink with :math:`h` (the quotients then grow
like :math:`1/h`), and names the convention autograd used there: the left or right
derivative, their mean, zero, or something else.

The step is relative for :math:`|x| > 1`: a fixed :math:`\epsilon` would vanish below the
spacing of float64 near :math:`|x| = 10^{30}` (:math:`x \pm \epsilon = x`). The quotients
are taken over the steps :math:`x - (x - h)` and :math:`(x + h) - x` as rounded, and the
kink and jump tolerances include the rounding of :math:`\phi`'s values in the dtype ``fn``
returns (:math:`8 u \max|\phi| / h` for a unit roundoff :math:`u`), so that a smooth
function is not flagged at any magnitude; a kink of slope change :math:`\Delta` is still
found when :math:`\Delta` is above :math:`10^3 \epsilon` times the slopes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor

from .._core.validation import check_positive


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
        eps: the step of the difference quotients, > 0, relative to :math:`|x|` where
            :math:`|x| > 1` (the step is ``eps * max(1, |x|)``).

    Returns:
        A :class:`ProbeReport`, one :class:`ProbePoint` per point.

    Raises:
        TypeError: ``fn`` is not callable, or returns something other than a tensor (a
            Python number has no gradient to probe: return ``torch`` operations on ``x``).
        ValueError: ``fn`` returns a tensor with more than one element, or ``points`` /
            ``eps`` are bad.

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
    return ProbeReport(str(name), [_probe_point(fn, float(x), step, str(name)) for x in xs])


def _checked(out: object, name: str) -> Tensor:
    """``out`` if it is a one-element floating or integer tensor, else an error naming ``fn``."""
    if not isinstance(out, Tensor):
        raise TypeError(
            f"Expected `fn` ({name}) to return a tensor (torch operations on its float64 "
            f"argument), but it returned {type(out).__name__} {out!r}"
        )
    if out.numel() != 1:
        raise ValueError(
            f"Expected `fn` ({name}) to return one element per point (probe passes a 0-d "
            f"tensor), but it returned a tensor of shape {tuple(out.shape)}"
        )
    if out.is_complex():
        raise TypeError(f"Expected `fn` ({name}) to return a real tensor, but found {out.dtype}")
    return out


def _evaluate(fn: Callable[[Tensor], Tensor], x: float, name: str) -> tuple[float, float]:
    """``fn(x)`` as a float and the unit roundoff of the dtype it came in."""
    with torch.no_grad():
        out = _checked(fn(torch.tensor(x, dtype=torch.float64)), name)
    roundoff = torch.finfo(out.dtype).eps / 2 if out.is_floating_point() else 0.0
    return float(out), roundoff


def _probe_point(fn: Callable[[Tensor], Tensor], x: float, eps: float, name: str) -> ProbePoint:
    step = eps * max(1.0, abs(x))
    # The steps as float64 rounds them (exact differences of representable numbers).
    lower, upper = x - step, x + step
    down, up = x - lower, upper - x
    values = [_evaluate(fn, t, name) for t in (x, lower, upper, x - step / 16, x + step / 16)]
    (here, below, above, near_below, near_above) = (v for v, _ in values)
    roundoff = max(u for _, u in values)
    left, right = (here - below) / down, (above - here) / up
    magnitude = max(abs(here), abs(below), abs(above))
    # A jump: the one-sided differences do not shrink with the step (rounding aside).
    tolerance = max(1e-9 * max(1.0, abs(here)), 8 * roundoff * magnitude)
    jump = any(
        abs(near - here) > tolerance and abs(near - here) > 0.5 * abs(far - here)
        for near, far in ((near_below, below), (near_above, above))
    )
    # Curvature makes the quotients differ by about h * phi''; a kink differs by O(1);
    # rounding phi's values moves each quotient by up to 2 u max|phi| / h.
    noise = 8 * roundoff * magnitude / min(down, up)
    bound = max(1e-6, 1e3 * eps) * max(1.0, abs(left), abs(right)) + noise
    kink = jump or abs(left - right) > bound
    leaf = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    try:
        out = _checked(fn(leaf), name)
        if not out.requires_grad:
            autograd: float | None = None
            convention = "no gradient (the output does not require grad)"
        else:
            (grad,) = torch.autograd.grad(out.sum(), leaf, allow_unused=True)
            autograd = 0.0 if grad is None else float(grad)
            convention = _convention(autograd, left, right, kink, jump)
    except (RuntimeError, NotImplementedError) as error:
        autograd = None
        convention = f"no gradient ({str(error).splitlines()[0][:60]})"
    return ProbePoint(x, here, autograd, left, right, kink, jump, convention)
