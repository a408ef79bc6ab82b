"""The ``l0`` task's verdict: accuracy against the weights removed, per penalty weight (see
:mod:`hardgrad.bench.verdict`)."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from .._claims import HELD, NOT_HELD, Claim, Verdict, _mean


def _l0(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    rows = data["rows"]
    best_accuracy = max(_mean(r["accuracy"]) for r in rows)
    kept = [r for r in rows if _mean(r["accuracy"]) >= best_accuracy - 0.01]
    sparsest = max(kept, key=lambda r: _mean(r["weight_sparsity"]))
    grows = all(
        _mean(a["weight_sparsity"]) <= _mean(b["weight_sparsity"]) + 1e-9
        for a, b in itertools.pairwise(rows)
    )
    return Verdict(
        "l0",
        f"{len(rows)} penalty weights, accuracy vs weights removed",
        f"lambda {sparsest['lambda']:g} ({100 * _mean(sparsest['weight_sparsity']):.0f} % removed, "
        f"accuracy within 1 pp of the best)",
        [Claim("sparsity grows with lambda", HELD if grows else NOT_HELD)],
    )
