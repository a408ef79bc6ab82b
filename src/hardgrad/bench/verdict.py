"""The verdict of a ``hardgrad bench`` run: per task, what was compared, the winner, and
which published claims held.

Every verdict is derived from a task's results (``TaskResult.data``, the ``results`` of
``results.json``), never written by hand: :data:`DERIVERS` maps a task's name to a
function ``derive(data, settings) -> Verdict``. A claim is ``"held"``, ``"not held"`` or
``"unresolved"`` (this run cannot tell: the noise, or too few seeds). :func:`verdict_lines`
turns the verdicts into the 10--20 lines printed at the end of ``hardgrad bench`` and put at
the top of ``report.md``.

The vocabulary (:class:`Claim`, :class:`Verdict`, the statuses) lives in
:mod:`hardgrad.bench._claims`, each task's deriver in its folder (``<task>/_verdict.py``;
the two VAE tasks' in ``_vae/_verdict.py``); this module maps the tasks to them.

The claims are those of DESIGN.md's targets: the Bernoulli toy's closed forms within 5 %;
DisARM below ARM and RLOO in variance at equal evaluations (Dong et al. 2020); Gumbel-Rao
below ST-Gumbel in variance with the same mean (Paulus et al. 2021); ReinMax unbiased on
quadratics at tau = 1 (Liu et al. 2023); the polynomial optima 0.301869, 0.2025, 0.091125
(Liu et al. 2023); every hard op and sampler at most 1.0x the fastest hand-written
alternative.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ._claims import HELD as HELD
from ._claims import NOT_HELD as NOT_HELD
from ._claims import STATUSES as STATUSES
from ._claims import UNRESOLVED as UNRESOLVED
from ._claims import Claim, Verdict, _rows_task
from ._vae._verdict import _vae_bernoulli, _vae_categorical
from .l0._verdict import _l0
from .models._verdict import _models
from .moe._verdict import _moe
from .policy._verdict import _policy
from .poly._verdict import _poly
from .qat._verdict import _qat
from .speed._verdict import _speed
from .toy._verdict import _toy
from .vq._verdict import _vq

__all__ = ["DERIVERS", "Claim", "Verdict", "derive", "verdict_lines", "verdicts_of"]


#: Task name -> ``derive(data, settings) -> Verdict``.
DERIVERS: dict[str, Callable[[Mapping[str, Any], Mapping[str, Any]], Verdict]] = {
    "toy": _toy,
    "poly": _poly,
    "vae-categorical": _vae_categorical,
    "vae-bernoulli": _vae_bernoulli,
    "qat": _qat,
    "speed": _speed,
    "vq": _vq,
    "models": _models,
    "moe": _moe,
    "shortest-path": _rows_task(
        "shortest-path", "{n} methods, test regret", "method", "regret", lower=True
    ),
    "l0": _l0,
    "ranking": _rows_task(
        "ranking", "{n} methods, Spearman's rho", "method", "spearman", lower=False
    ),
    "snn": _rows_task(
        "snn", "{n} spike surrogates, test accuracy", "label", "test_accuracy", lower=False
    ),
    "policy": _policy,
}


def derive(
    name: str, summary: str, data: Mapping[str, Any], settings: Mapping[str, Any]
) -> Verdict:
    """The verdict of task ``name`` from its results ``data`` and config ``settings``.

    A task without a deriver, or whose results lack what its deriver reads, gets a verdict
    that says so (the run's other verdicts are still given)."""
    deriver = DERIVERS.get(name)
    if deriver is None:
        return Verdict(name, summary, "see its tables (no claims checked)")
    try:
        return deriver(data, settings)
    except (KeyError, TypeError, ValueError, ZeroDivisionError, StopIteration) as error:
        return Verdict(name, summary, f"no verdict: results lack {error!r}")


def verdicts_of(results: Sequence[Any]) -> list[Verdict]:
    """The verdict of every :class:`~hardgrad.bench.TaskResult` in ``results``."""
    return [derive(r.name, r.summary, r.data, r.settings) for r in results]


def verdict_lines(verdicts: Sequence[Verdict], *, quick: bool) -> list[str]:
    """The verdict block: a heading, the count of claims per status, then per task what
    was compared, the winner and each claim, and a closing line (13 tasks: 17 lines)."""
    counts = {s: sum(c.status == s for v in verdicts for c in v.claims) for s in STATUSES}
    setting = "quick run, reduced settings; drop --quick for the full ones" if quick else "full run"
    lines = [
        f"Verdict: {setting}",
        f"Published claims: {counts[HELD]} held, {counts[NOT_HELD]} not held, "
        f"{counts[UNRESOLVED]} unresolved (noise, or too few seeds).",
    ]
    for v in verdicts:
        line = f"- {v.task}: {v.compared}; best: {v.winner}"
        if v.claims:
            line += ". " + "; ".join(
                f"{c.text}: {c.status.upper() if c.status == NOT_HELD else c.status}"
                + (f" ({c.detail})" if c.detail else "")
                for c in v.claims
            )
        lines.append(line + ".")
    lines.append(
        "Each task's tables and figures: in report.md (and above on stdout); every number: in results.json."
    )
    return lines
