"""The ``speed`` task's verdict: every op and sampler at most 1.0x the fastest hand-written
alternative, and the soft sorts at most 1.0x torchsort where torchsort was timed (see
:mod:`hardgrad.bench.verdict`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._claims import Verdict, _ratio_claim


def _speed(data: Mapping[str, Any], settings: Mapping[str, Any]) -> Verdict:
    ops = data.get("ops") or {}
    claims = [
        _ratio_claim("ops <= 1.0x hand-written (eager)", {n: o["eager"] for n, o in ops.items()})
    ]
    compiled = {n: o["compiled"] for n, o in ops.items() if o.get("compiled")}
    if compiled:
        claims.append(_ratio_claim("ops <= 1.0x hand-written (compiled)", compiled))
    samplers = data.get("samplers") or {}
    rows = {
        f"{kind}/{name}": s
        for kind, entry in samplers.items()
        if isinstance(entry, Mapping) and isinstance(entry.get("eager"), Mapping)
        for name, s in entry["eager"].get("rows", {}).items()
        # an estimator timed against a common reference (Gumbel-Rao's k draws against
        # one) is not the claim, which holds samplers to the same semantics
        if s.get("compared_with", "same semantics") == "same semantics"
    }
    if rows:
        claims.append(_ratio_claim("samplers <= 1.0x torch, same semantics (eager)", rows))
    sorting = data.get("sorting") or {}
    against_torchsort = {
        name: row
        for name, row in sorting.items()
        if isinstance(row, Mapping) and row.get("torchsort_ms") is not None
    }
    if against_torchsort:  # torchsort is optional: no claim where it was not timed
        kernel = all(row.get("native_kernel", True) for row in against_torchsort.values())
        path = "with the C kernel" if kernel else "tensor path: no C kernel here"
        claims.append(_ratio_claim(f"soft sort/rank <= 1.0x torchsort ({path})", against_torchsort))
    eager = [o["eager"] for o in ops.values() if o.get("eager")]
    faster = sum(s.get("verdict", "") == "faster" for s in eager)
    winner = f"hardgrad faster in {faster}/{len(eager)} ops (eager)" if eager else "n/a"
    return Verdict("speed", "hardgrad vs the fastest hand-written op, fwd+bwd time", winner, claims)
