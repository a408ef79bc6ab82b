"""The ``qat`` task's verdict: LSQ against STE per bit width (see
:mod:`hardgrad.bench.verdict`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from .._claims import HELD, NOT_HELD, UNRESOLVED, Claim, Verdict, _best


def _qat(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    rows = {r["label"]: r for r in data["rows"]}
    acc = {k: r["test_accuracy"]["mean"] for k, r in rows.items() if k != "float"}
    claims = []
    for bits in sorted({r["bits"] for r in rows.values() if r["bits"]}):
        ste, lsq = rows.get(f"STE {bits}-bit"), rows.get(f"LSQ {bits}-bit")
        if ste is None or lsq is None:
            continue
        a, b = lsq["test_accuracy"], ste["test_accuracy"]
        diff = a["mean"] - b["mean"]
        n = min(len(a["values"]), len(b["values"]))
        noise = math.hypot(a["std"], b["std"]) / math.sqrt(n) if n > 1 else float("nan")
        text = f"LSQ >= STE at {bits} bits (Esser 2020)"
        detail = f"{100 * diff:+.1f} pp, {n} seed{'s' if n != 1 else ''}"
        if math.isnan(noise) or abs(diff) <= 2 * noise:  # within the noise: not resolved
            status = UNRESOLVED
        else:
            status = HELD if diff > 0 else NOT_HELD
        claims.append(Claim(text, status, detail))
    best = _best(acc, lower=False)
    floating = rows.get("float")
    winner = f"{best[0]} ({100 * best[1]:.1f} %" if best else "n/a"
    if best and floating:
        winner += f"; float {100 * floating['test_accuracy']['mean']:.1f} %)"
    elif best:
        winner += ")"
    return Verdict("qat", f"float vs {len(acc)} quantized MLPs, test accuracy", winner, claims)
