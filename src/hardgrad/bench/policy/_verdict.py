"""The ``policy`` task's verdict: which sequence estimators tilt the gradient's direction
(see :mod:`hardgrad.bench.verdict`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._claims import Z_BIAS, Claim, Verdict, _best, _share


def _policy(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    rows = data["rows"]

    def tilts(name: str) -> list[tuple[int, float, float]]:
        out = []
        for r in rows:
            if r["estimator"] == name and r["cosine"] is not None and r["cosine_se"]:
                gap = 1 - r["cosine"] - r["cosine_noise"]
                out.append((r["group_size"], gap, gap / r["cosine_se"]))
        return out

    def measured(name: str, text: str) -> Claim:
        found = tilts(name)
        seen = sum(z > Z_BIAS for _, _, z in found)
        worst = max(found, key=lambda t: t[1], default=None)
        detail = f"1 - cos up to {worst[1]:.4f} at n = {worst[0]}" if worst else ""
        return _share(seen, len(found), text, detail)

    grpo = {n: gap for n, gap, _ in tilts("grpo")}
    removed = [(n, gap, z) for name in ("dr-grpo", "rloo") for n, gap, z in tilts(name)]
    unbiased = sum(z <= Z_BIAS for _, _, z in removed)
    worst = max((gap for _, gap, _ in removed), default=0.0)
    claims = [
        measured("grpo-token-sum", "GRPO's std scaling tilts the direction"),
        measured("grpo-no-std", "GRPO's length normalisation tilts the direction"),
        measured("grpo", "GRPO (both) tilts the direction"),
        _share(unbiased, len(removed), "Dr. GRPO and RLOO remove the tilt",
               f"1 - cos at most {worst:.4f} vs GRPO's up to {max(grpo.values(), default=0):.4f}"),
    ]  # fmt: skip
    best = _best(  # the highest E[R] at the fixed training step (the first optimizer's)
        {f"{r['estimator']} n={r['group_size']}": next(iter(r["training"].values()))
         ["reward_at"]["mean"] for r in rows if r.get("training")},
        lower=False,
    )  # fmt: skip
    return Verdict(
        "policy",
        f"{len({r['estimator'] for r in rows})} sequence estimators x "
        f"{len({r['group_size'] for r in rows})} group sizes, direction against the exact gradient",
        f"{best[0]} (E[R] {best[1]:.3f} after {settings.get('eval_step', '?')} "
        f"{next(iter(settings.get('optimizers') or ['?']))} steps)"
        if best
        else "-",
        claims,
    )
