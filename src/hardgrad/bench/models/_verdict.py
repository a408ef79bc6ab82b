"""The ``models`` task's verdict: the training step with hardgrad at most 1.0x the
hand-written one (see :mod:`hardgrad.bench.verdict`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._claims import Verdict, _ratio_claim


def _models(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    from .._timing import ratio_verdict

    models = data["models"]
    summaries = {
        name: {"ratio": m["ratio"], "verdict": ratio_verdict(m.get("round_ratios") or [])}
        for name, m in models.items()
    }
    claim = _ratio_claim("training step <= 1.0x hand-written", summaries)
    faster = sum(s["verdict"] == "faster" for s in summaries.values())
    return Verdict(
        "models",
        f"{len(models)} hand-written models vs the same with hardgrad, step time",
        f"hardgrad faster in {faster}/{len(models)}",
        [claim],
    )
