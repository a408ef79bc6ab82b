"""The notes of the ``vae-categorical`` benchmark, computed from its runs."""

from __future__ import annotations

import math
from typing import Any


def _mean_distance(a: dict[str, Any], b: dict[str, Any]) -> float | None:
    """``||mean_a - mean_b|| / ||exact||``."""
    norm = a.get("exact_norm")
    if not norm:
        return None
    diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(a["mean"], b["mean"], strict=True)))
    return diff / norm


def _notes(
    label: str, shared: dict[int, dict[str, dict[str, Any]]], runs: dict[str, dict[str, Any]]
) -> list[str]:
    notes: list[str] = []
    steps = list(shared)
    if "gumbel_rao" in runs and "st_gumbel" in runs:
        ratios, same = [], 0
        distances = []
        for per in shared.values():
            gr, sg = per["gumbel_rao"], per["st_gumbel"]
            if gr["std"] and sg["std"]:
                ratios.append(gr["std"] / sg["std"])
            d = _mean_distance(gr, sg)
            floor = math.hypot(gr["bias_floor"] or 0.0, sg["bias_floor"] or 0.0)
            if d is not None:
                distances.append((d, floor))
                same += d <= 3 * floor
        lower = sum(r < 1 for r in ratios)
        notes.append(
            f"{label}: Gumbel-Rao / ST-Gumbel std ratio "
            + ", ".join(f"{r:.3g}" for r in ratios)
            + f" at steps {steps} (lower at {lower}/{len(ratios)}); distance between their "
            "mean gradients / ||exact|| "
            + ", ".join(f"{d:.3g} (noise {f:.3g})" for d, f in distances)
            + f": same mean within 3 noise levels at {same}/{len(distances)}. Literature "
            "(Paulus et al. 2021: same mean, lower variance): "
            + (
                "holds."
                if lower == len(ratios) and same == len(distances)
                else "does NOT fully hold here (see the figures)."
            )
        )
    if "reinmax" in runs:
        parts = []
        for other in ("reinmax", "st", "st_gumbel", "gumbel_rao"):
            if other in runs:
                b = [
                    per[other]["bias"] for per in shared.values() if per[other]["bias"] is not None
                ]
                c = [
                    per[other]["cosine"]
                    for per in shared.values()
                    if per[other]["cosine"] is not None
                ]
                if b and c:
                    parts.append(f"{other} {sum(b) / len(b):.3g} / {sum(c) / len(c):.3g}")
        finite = sorted(
            (n for n in runs if math.isfinite(runs[n]["test_neg_elbo"])),
            key=lambda n: runs[n]["test_neg_elbo"],
        )
        rank = finite.index("reinmax") + 1 if "reinmax" in finite else None
        notes.append(
            f"{label}: ReinMax's mean relative bias / cosine over the checkpoints: "
            + "; ".join(parts)
            + f". ReinMax's test -ELBO ranks {rank} of {len(finite)}."
        )
    flagged = [
        f"{name} at step {step} (bias {per[name]['bias']:.3g}, floor {per[name]['bias_floor']:.3g})"
        for step, per in shared.items()
        for name in per
        if runs[name]["unbiased"]
        and per[name]["bias"] is not None
        and per[name]["bias_floor"] is not None
        and per[name]["bias"] > 4 * per[name]["bias_floor"]
    ]
    notes.append(
        f"{label}: unbiased estimators whose measured bias exceeds 4x its noise floor: "
        + ("; ".join(flagged) if flagged else "none (all consistent with unbiasedness)")
        + "."
    )
    usable = {n: r for n, r in runs.items() if math.isfinite(r["test_neg_elbo"])}
    if usable:
        order = sorted(usable, key=lambda n: usable[n]["test_neg_elbo"])
        notes.append(
            f"{label}: trains best: {order[0]} (test -ELBO {usable[order[0]]['test_neg_elbo']:.2f});"
            " order: " + ", ".join(f"{n} {usable[n]['test_neg_elbo']:.2f}" for n in order) + "."
        )
    return notes
