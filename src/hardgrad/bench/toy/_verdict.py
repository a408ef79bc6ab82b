"""The ``toy`` task's verdict: the closed forms within 5 %, DisARM's and Gumbel-Rao's
variance, ReinMax's bias (see :mod:`hardgrad.bench.verdict`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .._claims import HELD, NOT_HELD, UNRESOLVED, Z_BIAS, Claim, Verdict, _best, _share


def _toy(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    rows = data["rows"]
    names = list(dict.fromkeys(r["estimator"] for r in rows))
    checks = [c for r in rows for c in (r.get("mean_check"), r.get("var_check")) if c]
    counts = {s: sum(c["status"] == s for c in checks) for s in ("ok", "unresolved", "FAIL")}
    status = NOT_HELD if counts["FAIL"] else (HELD if counts["ok"] else UNRESOLVED)
    claims = [
        Claim(
            "closed forms within 5 %",
            status,
            f"{counts['ok']}/{len(checks)} ok, {counts['unresolved']} unresolved, "
            f"{counts['FAIL']} failed",
        )
    ]

    def row(name: str, t: float, phi: float) -> Mapping[str, Any] | None:
        return next(
            (r for r in rows if r["estimator"] == name and r["t"] == t and r["phi"] == phi), None
        )

    settings_seen = sorted({(r["t"], r["phi"]) for r in rows})
    held = total = 0
    for t, phi in settings_seen:
        d = row("disarm", t, phi)
        for other in ("arm", "rloo"):
            o = row(other, t, phi)
            if d is None or o is None or o["evaluations"] != d["evaluations"]:
                continue
            total += 1
            held += d["var"] <= o["var"]
    claims.append(_share(held, total, "DisARM var <= ARM, RLOO (Dong 2020)"))
    held = total = 0
    for t, phi in settings_seen:
        a, b = row("gumbel_rao", t, phi), row("st_gumbel", t, phi)
        if a is None or b is None:
            continue
        total += 1
        z = (a["mean"] - b["mean"]) / (math.hypot(a["se_mean"], b["se_mean"]) or 1.0)
        held += a["var"] < b["var"] and abs(z) <= Z_BIAS
    claims.append(_share(held, total, "Gumbel-Rao var < ST-Gumbel, same mean (Paulus 2021)"))
    reinmax = [r for r in rows if r["estimator"] == "reinmax"]
    if reinmax:
        worst = max(abs(r["z"]) for r in reinmax)
        claims.append(
            Claim(
                "ReinMax unbiased on the quadratic at tau=1 (Liu 2023)",
                HELD if worst <= Z_BIAS else NOT_HELD,
                f"max |z| {worst:.2f}",
            )
        )
    curves = (data.get("curves") or {}).get("estimators", {})
    best = _best({k: v["final_mean"] for k, v in curves.items() if k != "exact"})
    winner = f"{best[0]} (final p {best[1]:.3f}, optimum 0)" if best else "n/a"
    return Verdict("toy", f"{len(names)} estimators vs closed forms", winner, claims)
