"""The ``vq`` task's verdict (:func:`_vq`, see :mod:`hardgrad.bench.verdict`): the rotation
trick against STE, FSQ's code usage, and what the residual rows show, as ``(claim, status,
detail)`` triples (:func:`residual_claims`) that the verdict turns into its claims and the
report into notes (plain Python: read from ``results.json`` data, nothing imported from the
bench but the verdicts' vocabulary, :mod:`hardgrad.bench._claims`)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

from .._claims import HELD, NOT_HELD, UNRESOLVED, Claim, Verdict, _rows_best

#: A claim as a plain ``(claim, status, detail)`` triple.
Triple = tuple[str, str, str]


def _e3(value: float) -> str:
    return f"{1000 * value:.2f}"


def _resolved(a: Mapping[str, float], b: Mapping[str, float], seeds: int) -> bool:
    """A difference counts from two seeds on and beyond twice the larger seed spread."""
    return seeds >= 2 and abs(a["mean"] - b["mean"]) > 2 * max(a["std"], b["std"])


def _pairs_claim(text: str, pairs: Sequence[tuple[bool, bool]], detail: str) -> Triple:
    """``pairs`` of (went the claimed way, resolved): held when all went the way and were
    resolved, not held when one resolved the other way, else unresolved."""
    if not pairs:
        return (text, UNRESOLVED, "nothing to compare")
    if all(ok and sure for ok, sure in pairs):
        return (text, HELD, detail)
    if any(sure and not ok for ok, sure in pairs):
        return (text, NOT_HELD, detail)
    return (text, UNRESOLVED, detail)


def residual_claims(data: Mapping[str, Any], settings: Mapping[str, Any]) -> list[Triple]:
    """The claims of the residual rows ``data["residual"]`` (none when there are none)."""
    rows = data.get("residual") or []
    if not rows:
        return []
    seeds = int(rows[0]["seeds"])
    runs = f"{seeds} seed{'s' if seeds != 1 else ''}"
    plain = [r for r in rows if r["gradient"] == "total" and not r["dropout"]]
    claims = []
    # 1. within every trained model, each further stage lowers the test reconstruction error
    steps = [
        b < a
        for r in rows
        for run in r["runs"]
        for a, b in itertools.pairwise(run["stage_mse"])
    ]  # fmt: skip
    deepest = max(plain or rows, key=lambda r: r["stages"])
    curve = "→".join(_e3(s["mean"]) for s in deepest["stage_mse"])
    failed = len(steps) - sum(steps)
    text = "each residual stage lowers test recon MSE"
    detail = f"{sum(steps)}/{len(steps)} stage steps; {deepest['label']}: {curve} e-3"
    if not steps:
        claims.append((text, UNRESOLVED, "no model with 2 stages or more"))
    else:
        claims.append((text, HELD if failed == 0 else NOT_HELD, detail))
    # 2. more stages, lower final error (each model trained with its own stage count)
    plain.sort(key=lambda r: r["stages"])
    pairs = [
        (b["recon_mse"]["mean"] < a["recon_mse"]["mean"], _resolved(a["recon_mse"], b["recon_mse"], seeds))
        for a, b in itertools.pairwise(plain)
    ]  # fmt: skip
    finals = ", ".join(f"{r['stages']}: {_e3(r['recon_mse']['mean'])}" for r in plain)
    if len(plain) >= 2:
        claims.append(
            _pairs_claim("more stages, lower final recon MSE", pairs, f"{finals} e-3, {runs}")
        )
    by = {(r["stages"], r["gradient"], r["dropout"]): r for r in rows}
    # 3. the gradient conventions side by side
    for (n, gradient, dropout), r in by.items():
        base = by.get((n, "total", False))
        if gradient != "per_stage" or dropout or base is None:
            continue
        a, b = base["recon_mse"], r["recon_mse"]
        same = abs(a["mean"] - b["mean"]) <= 2 * max(a["std"], b["std"])
        status = UNRESOLVED if seeds < 2 else (HELD if same else NOT_HELD)
        claims.append(
            (
                f"gradient total (EnCodec) and per-stage (vector-quantize-pytorch) train alike "
                f"at {n} stages",
                status,
                f"recon MSE {_e3(a['mean'])} vs {_e3(b['mean'])} e-3, {runs}",
            )
        )
    # 4. quantizer dropout: the first k < n stages of the dropout model against those of the
    # model trained with all n every step
    for (n, gradient, dropout), r in by.items():
        base = by.get((n, "total", False))
        if not dropout or gradient != "total" or base is None or n < 2:
            continue
        pairs = [
            (d["mean"] < s["mean"], _resolved(d, s, seeds))
            for d, s in zip(r["stage_mse"][:-1], base["stage_mse"][:-1], strict=True)
        ]
        detail = ", ".join(
            f"{k + 1}: {_e3(d['mean'])} vs {_e3(s['mean'])}"
            for k, (d, s) in enumerate(zip(r["stage_mse"], base["stage_mse"], strict=True))
        )
        claims.append(
            _pairs_claim(
                f"quantizer dropout lowers recon MSE with k < {n} of {n} stages (Zeghidour 2021)",
                pairs,
                f"stages {detail} e-3 (dropout vs none), {runs}",
            )
        )
    return claims


def _vq(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    rows = data["rows"]
    by = {r["variant"]: r for r in rows}
    seeds = int(settings.get("seeds", 1))
    claims = []
    if "STE" in by and "rotation" in by:
        a, b = by["rotation"], by["STE"]
        better = [
            a["recon_mse"]["mean"] < b["recon_mse"]["mean"],
            a["usage"]["mean"] > b["usage"]["mean"],
        ]
        resolved = [
            seeds >= 2 and abs(a[k]["mean"] - b[k]["mean"]) > 2 * max(a[k]["std"], b[k]["std"])
            for k in ("recon_mse", "usage")
        ]
        if all(better) and all(resolved):
            status = HELD
        elif any(r and not g for g, r in zip(better, resolved, strict=True)):
            status = NOT_HELD
        else:
            status = UNRESOLVED
        detail = (
            f"MSE {'lower' if better[0] else 'higher'}, usage {'higher' if better[1] else 'lower'}"
            f", {seeds} seed{'s' if seeds != 1 else ''}"
        )
        claims.append(Claim("rotation trick beats STE (Fifty 2024)", status, detail))
    if "FSQ" in by:
        usage = by["FSQ"]["usage"]["mean"]
        claims.append(
            Claim(
                "FSQ uses >= 90 % of codes (Mentzer 2023)",
                HELD if usage >= 0.9 else NOT_HELD,
                f"{100 * usage:.0f} %",
            )
        )
    claims += [Claim(*claim) for claim in residual_claims(data, settings)]
    return Verdict(
        "vq",
        f"{len(rows)} VQ bottlenecks, test reconstruction",
        _rows_best(rows, "variant", "recon_mse", True),
        claims,
    )
