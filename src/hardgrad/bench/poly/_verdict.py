"""The ``poly`` task's verdict: the published optima and ReinMax's approach to them (see
:mod:`hardgrad.bench.verdict`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._claims import Verdict, _best, _share

#: The polynomial programming optima the ReinMax paper reports (p = 1.5, 2, 3).
PUBLISHED_POLY_OPTIMA = {"1.5": 0.301869, "2.0": 0.2025, "3.0": 0.091125}


def _poly(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    from ._report import verdict as poly_verdict

    runs = data["runs"]
    within = float(settings.get("within", 0.01))
    optima = data["optima"]
    matches = [
        abs(float(optima[p]) - v) <= 5e-7 for p, v in PUBLISHED_POLY_OPTIMA.items() if p in optima
    ]
    claims = [_share(sum(matches), len(matches), "optima 0.301869, 0.2025, 0.091125 (Liu 2023)")]
    estimators = {k: v for k, v in runs.items() if k != "closed-form"}
    gaps = {
        k: sum(s["gap_mean"] for s in v["powers"].values()) / len(v["powers"])
        for k, v in estimators.items()
    }
    if "reinmax" in runs:
        states = [poly_verdict(s, within) for s in runs["reinmax"]["powers"].values()]
        near = sum(s in ("reached", "approaching") for s in states)
        claims.append(
            _share(near, len(states), "ReinMax approaches the optimum (Liu 2023)", "powers")
        )
    best = _best(gaps)
    winner = f"{best[0]} (mean gap {100 * best[1]:.1f} %)" if best else "n/a"
    return Verdict("poly", f"{len(estimators)} estimators, exact loss vs optimum", winner, claims)
