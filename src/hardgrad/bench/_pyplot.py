"""matplotlib's pyplot on the non-interactive Agg backend, or ``None`` without matplotlib
(the ``bench`` extra): the tasks then write their reports without figures.

Also the conventions every benchmark figure follows, so that each is fit for a paper's
appendix: :func:`save_figure` (150 dpi, tight bounding box, a caption and the table the
figure shows for ``report.md``), :func:`legend_outside` (legends never over the data),
:func:`error_bars_allowed` and :func:`spread_caption` (no error bars from one seed, and a
caption that says what the bars are), :func:`quick_title` (a ``--quick`` run says so),
:func:`category_labels` (rotated category labels that do not collide) and :func:`bars`
(a bar not drawn is explained on the axis).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

#: Resolution of every saved figure.
DPI = 150


def pyplot() -> Any:
    """``matplotlib.pyplot`` with the Agg backend selected, or ``None`` if matplotlib is
    not installed."""
    try:
        import matplotlib
    except ImportError:  # pragma: no cover - the bench extra is missing
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


class FigureFile(str):
    """A figure's file name (a plain ``str`` everywhere: JSON, the list of files written)
    that also carries its one-line ``caption`` and ``table``, a part of the title of the
    table it shows (``None``: no table), for the ``Figure:`` lines of ``report.md``: the
    figure goes under the last table whose title contains it."""

    caption: str
    table: str | None

    def __new__(cls, name: str, caption: str = "", table: str | None = None) -> FigureFile:
        self = super().__new__(cls, name)
        self.caption = caption
        self.table = table
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (FigureFile, (str(self), self.caption, self.table))


def save_figure(
    fig: Any, out: Path, name: str, *, caption: str = "", table: str | None = None
) -> FigureFile:
    """Write ``fig`` to ``out/name`` at :data:`DPI` with a tight bounding box (so legends
    outside the axes are kept), close it, and return the name with its caption."""
    out.mkdir(parents=True, exist_ok=True)
    fig.savefig(out / name, dpi=DPI, bbox_inches="tight")
    pyplot().close(fig)
    return FigureFile(name, caption, table)


def legend_outside(ax: Any, *, fontsize: Any = "small", ncol: int = 1, **kwargs: Any) -> Any:
    """``ax``'s legend to the right of the axes, top-aligned: it never covers a curve or a
    bar. ``None`` when nothing is labelled."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return None
    return ax.legend(
        handles,
        labels,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        borderaxespad=0.0,
        fontsize=fontsize,
        ncol=ncol,
        **kwargs,
    )


def error_bars_allowed(n_seeds: int) -> bool:
    """Error bars or bands only from two seeds on: one seed has no spread to show."""
    return n_seeds >= 2


def _seeds(n: int) -> str:
    return f"{n} seed" if n == 1 else f"{n} seeds"


def spread_caption(n_seeds: int, what: str = "± one standard deviation", kind: str = "error bars") -> str:  # fmt: skip
    """What the error bars (``kind``) are, for a caption or legend: ``"error bars: ± one
    standard deviation over 3 seeds"``, or ``"1 seed: no error bars"``."""
    if not error_bars_allowed(n_seeds):
        return f"{_seeds(n_seeds)}: no {kind}"
    return f"{kind}: {what} over {_seeds(n_seeds)}"


def run_size(config: Any) -> str:
    """The size of a run from its config: ``"300 steps, 1 seed"`` (whichever of
    ``steps``/``epochs``/``rounds`` and ``seeds`` it has)."""
    parts = []
    for field, unit in (("steps", "steps"), ("epochs", "epochs"), ("rounds", "timing rounds")):
        value = getattr(config, field, None)
        if isinstance(value, int):
            parts.append(f"{value} {unit[:-1] if value == 1 else unit}")
            break
    seeds = getattr(config, "seeds", None)
    if isinstance(seeds, int):
        parts.append(_seeds(seeds))
    return ", ".join(parts)


def quick_title(title: str, quick: bool, config: Any = None) -> str:
    """``title``, with ``" (quick run: 300 steps, 1 seed)"`` appended for a ``--quick`` run
    (the size from ``config``, see :func:`run_size`, or ``config`` itself if a string)."""
    if not quick:
        return title
    size = config if isinstance(config, str) else run_size(config) if config is not None else ""
    return f"{title} (quick run{': ' + size if size else ''})"


def category_labels(ax: Any, labels: Sequence[str], *, fontsize: Any = "small") -> None:
    """Category tick labels at 0, 1, ...: rotated 35° and right-aligned so that long names
    do not collide."""
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=35, ha="right", rotation_mode="anchor", fontsize=fontsize)


def _missing(value: float | None) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def bars(
    ax: Any,
    values: Sequence[float | None],
    *,
    errors: Sequence[float] | None = None,
    n_seeds: int = 1,
    positions: Sequence[float] | None = None,
    width: float = 0.8,
    missing: str | Callable[[int], str] = "not run",
    **kwargs: Any,
) -> None:
    """One bar per value at ``positions`` (default 0, 1, ...); error bars ``errors`` only
    when :func:`error_bars_allowed` (``n_seeds``); a missing value (``None`` or NaN) draws
    no bar but an ``"n/a: <why>"`` note on the axis (``missing``: the reason, or a function
    of the value's index that returns it)."""
    xs = list(range(len(values))) if positions is None else list(positions)
    drawn = [i for i, v in enumerate(values) if not _missing(v)]
    if errors is not None and error_bars_allowed(n_seeds):
        kwargs = {"yerr": [errors[i] for i in drawn], "capsize": 3, **kwargs}
    ax.bar([xs[i] for i in drawn], [values[i] for i in drawn], width, **kwargs)
    for i, value in enumerate(values):
        if _missing(value):
            why = missing(i) if callable(missing) else missing
            ax.text(
                xs[i], 0.02, f"n/a: {why}", transform=ax.get_xaxis_transform(), rotation=90,
                ha="center", va="bottom", fontsize="x-small", color="dimgray",
            )  # fmt: skip
