"""The vocabulary of the bench's verdicts (:mod:`hardgrad.bench.verdict`): the claim
statuses, :class:`Claim` and :class:`Verdict`, and the small helpers that several tasks'
derivers (``<task>/_verdict.py``) share. Plain Python: it reads ``results.json`` data and
imports nothing from the bench."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

HELD, NOT_HELD, UNRESOLVED = "held", "not held", "unresolved"
STATUSES = (HELD, NOT_HELD, UNRESOLVED)

#: A bias is detected when the mean is this many standard errors from the exact value.
Z_BIAS = 4.0


@dataclass
class Claim:
    """A published claim and what this run says of it.

    Attributes:
        text: the claim, short (``"DisARM var < ARM, RLOO"``).
        status: ``"held"``, ``"not held"`` or ``"unresolved"``.
        detail: the evidence, short (``"12/12 settings"``).
    """

    text: str
    status: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(
                f"Claim status must be one of {', '.join(STATUSES)}, but found {self.status!r}"
            )


@dataclass
class Verdict:
    """One task's verdict: what was compared, the winner, the claims."""

    task: str
    compared: str
    winner: str
    claims: list[Claim] = field(default_factory=list)


def _share(held: int, total: int, text: str, detail: str = "") -> Claim:
    """``held`` of ``total`` comparisons went the claimed way: held when all did, not held
    when at most half did, unresolved in between (or when there was nothing to compare)."""
    counted = f"{held}/{total}" + (f" {detail}" if detail else "")
    if total == 0:
        return Claim(text, UNRESOLVED, "nothing to compare")
    if held == total:
        return Claim(text, HELD, counted)
    if 2 * held <= total:
        return Claim(text, NOT_HELD, counted)
    return Claim(text, UNRESOLVED, counted)


def _best(scores: Mapping[str, float], lower: bool = True) -> tuple[str, float] | None:
    finite = {k: v for k, v in scores.items() if isinstance(v, (int, float)) and math.isfinite(v)}
    if not finite:
        return None
    key = (min if lower else max)(finite, key=finite.__getitem__)
    return key, finite[key]


def _ratio_claim(text: str, summaries: Mapping[str, Mapping[str, Any] | None]) -> Claim:
    """``ratio <= 1`` over the comparisons: held when every resolved one is faster and none
    is unresolved; not held (naming the slower) when one is slower; else unresolved."""
    slower: list[str] = []
    unresolved: list[str] = []
    faster: list[str] = []
    for name, s in summaries.items():
        if not s:
            continue
        verdict = s.get("verdict")
        if verdict is None:  # results without intervals: the point estimate
            ratio = s.get("ratio", float("nan"))
            verdict = "n/a" if ratio != ratio else ("faster" if ratio <= 1.0 else "slower")
        {"faster": faster, "slower": slower}.get(verdict, unresolved).append(name)
    total = len(faster) + len(slower) + len(unresolved)
    detail = f"{len(faster)}/{total} faster"
    if slower:
        detail += f", slower: {', '.join(slower[:4])}" + (" ..." if len(slower) > 4 else "")
    if unresolved:
        detail += f", {len(unresolved)} unresolved (noise)"
    if total == 0:
        return Claim(text, UNRESOLVED, "nothing timed")
    if slower:
        return Claim(text, NOT_HELD, detail)
    return Claim(text, HELD if not unresolved else UNRESOLVED, detail)


def _mean(value: Any) -> float:
    """A figure that is either a number or a ``{"mean": ...}`` summary over seeds."""
    return float(value["mean"] if isinstance(value, Mapping) else value)


def _rows_best(rows: Sequence[Mapping[str, Any]], label: str, key: str, lower: bool) -> str:
    best = _best({str(r[label]): _mean(r[key]) for r in rows}, lower=lower)
    return f"{best[0]} ({key.replace('_', ' ')} {best[1]:.3g})" if best else "n/a"


def _rows_task(
    task: str, compared: str, label: str, key: str, lower: bool
) -> Callable[..., Verdict]:
    def derive_rows(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
        rows = data["rows"]
        return Verdict(task, compared.format(n=len(rows)), _rows_best(rows, label, key, lower))

    return derive_rows
