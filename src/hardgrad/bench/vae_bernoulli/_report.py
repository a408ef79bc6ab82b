"""The notes of the ``vae-bernoulli`` benchmark, computed from its runs."""

from __future__ import annotations

from typing import Any


def _variance_notes(
    shared: dict[int, dict[str, dict[str, Any]]], runs: dict[str, dict[str, Any]]
) -> list[str]:
    """DisARM against ARM and RLOO, at the same parameters and along own training."""
    notes = []
    for other in ("arm", "rloo"):
        if "disarm" not in runs or other not in runs:
            continue
        ratios = [
            per["disarm"]["var"] / per[other]["var"]
            for per in shared.values()
            if "disarm" in per and other in per and per[other]["var"] > 0
        ]
        if ratios:
            below = sum(r < 1 for r in ratios)
            verdict = (
                "holds"
                if below == len(ratios)
                else ("does NOT hold" if below == 0 else "holds only partly")
            )
            notes.append(
                f"DisARM vs {other.upper()} at equal evaluations ({runs['disarm']['evaluations']} "
                f"vs {runs[other]['evaluations']}), same parameters: variance ratio "
                + ", ".join(f"{r:.3g}" for r in ratios)
                + f" at the {len(ratios)} checkpoints; DisARM lower at {below}/{len(ratios)}: "
                f"the literature's ordering (DisARM below {other.upper()}) {verdict}."
            )
        own = [
            (a["var"], b["var"])
            for a, b in zip(runs["disarm"]["diagnostics"], runs[other]["diagnostics"], strict=True)
        ]
        below_own = sum(a < b for a, b in own)
        notes.append(
            f"Along each run's own training, DisARM's variance is below {other.upper()}'s at "
            f"{below_own}/{len(own)} checkpoints (different parameters: indicative only)."
        )
    return notes
