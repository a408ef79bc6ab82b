"""The ``moe`` task's verdict: the router gradients' cosine to the exact one and the
capacity rows' drops (see :mod:`hardgrad.bench.verdict`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._claims import Verdict, _mean, _rows_best, _share


def _moe(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    rows = [r for r in data["rows"] if r["estimator"] != "exact"]
    claims = []
    caps = [r for r in rows if r["estimator"] in ("sparse_c1.0", "sparse_c1.25")]
    if caps and all("dropped_train" in r for r in caps):  # (runs before the capacity rows)
        low = sum(_mean(r["dropped_train"]) < 0.01 for r in caps)
        detail = ", ".join(
            f"c {r['estimator'][8:]}: {100 * _mean(r['dropped_train']):.1f} % train, "
            f"{100 * _mean(r['dropped_test']):.1f} % test" for r in caps
        )  # fmt: skip
        text = "capacity 1.0-1.25 keeps drops < 1 % with the load loss (Switch, Fedus 2021)"
        claims.append(_share(low, len(caps), text, f"dropped {detail}"))
    return Verdict(
        "moe",
        f"{len(rows)} router gradients and layer options, cosine to the exact one",
        _rows_best(rows, "estimator", "cosine", False),
        claims,
    )
