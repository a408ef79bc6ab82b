"""Tables and notes of the ``speed`` benchmark's samplers (see :mod:`hardgrad.bench.speed`)."""

from __future__ import annotations

from typing import Any

from .._task import Table
from ._config import SpeedConfig
from ._report import (
    _fmt_bytes,
    _fmt_count,
    _fmt_ms,
    _fmt_us,
    _ratio_cell,
)

# --------------------------------------------------------------------------- samplers


def _sampler_table(samplers: dict[str, Any], mode: str) -> Table:
    suffix = {"eager": "", "compiled": "_compiled", "small": "_small"}[mode]
    title = {
        "eager": "Samplers, eager: hardgrad vs the torch sampler with the same semantics",
        "compiled": "Samplers, torch.compile: every candidate compiled, global RNG",
        "small": "Samplers, small tensors, eager: the fixed per-call cost (µs)",
    }[mode]
    unit, fmt = ("µs", _fmt_us) if mode == "small" else ("ms", _fmt_ms)
    table = Table(
        title=title,
        columns=[
            "sampler",
            "compared with",
            f"hardgrad {unit}",
            f"alternative ({unit})",
            "ratio (≤ 1), rounds hg faster",
            "× floor",
            "bytes/elt saved: hg vs alternative",
        ],
    )
    for kind, entry in samplers.items():
        group = entry[mode]
        if group is None:
            continue
        record = entry["candidates"]
        for name, summary in group["rows"].items():
            best = summary["best_alternative"]
            hg_bytes = record[f"hg.{name}"].get(f"bytes_per_element{suffix}")
            alt_bytes = None if best is None else record[best].get(f"bytes_per_element{suffix}")
            shape = f" {tuple(entry['small_shape'])}" if mode == "small" else ""
            table.rows.append(
                [
                    f"{kind} {name}{shape}",
                    summary["compared_with"],
                    fmt(summary["hardgrad_ms"]),
                    "-"
                    if best is None
                    else f"{summary['best_alternative_label']} {fmt(summary['best_alternative_ms'])}",
                    _ratio_cell(summary),
                    f"{summary['x_floor']:.2f}",
                    f"{_fmt_bytes(hg_bytes)} vs {_fmt_bytes(alt_bytes)}"
                    if best is not None
                    else _fmt_bytes(hg_bytes),
                ]
            )
    return table


def _sampler_detail_table(samplers: dict[str, Any]) -> Table:
    table = Table(
        title="Samplers: every candidate (median over rounds; bytes saved for backward per "
        "element)",
        columns=[
            "sampler",
            "candidate",
            "code",
            "eager ms",
            "compiled ms",
            "bytes/elt eager",
            "bytes/elt compiled",
            "page faults/call eager",
        ],
    )
    for kind, entry in samplers.items():
        comp = entry["compiled"]
        for c in entry["candidates"].values():
            compiled = "-"
            if "compile_error" in c:
                compiled = "compile failed"
            elif "compiled_ms" in c:
                compiled = _fmt_ms(c["compiled_ms"])
                if c.get("fullgraph") is False:
                    compiled += " (graph breaks)"
            table.rows.append(
                [
                    kind,
                    c["label"],
                    f"`{c['code']}`",
                    _fmt_ms(c.get("eager_ms")),
                    compiled,
                    _fmt_bytes(c.get("bytes_per_element")),
                    _fmt_bytes(c.get("bytes_per_element_compiled"))
                    if "bytes_per_element_compiled" in c
                    else "-",
                    _fmt_count(c.get("page_faults")),
                ]
            )
        table.rows.append(
            [
                kind,
                "floor",
                "`out.copy_(l); grad.copy_(l)`",
                _fmt_ms(entry["eager"]["floor_ms"]),
                _fmt_ms(comp["floor_ms"]) if comp else "-",
                "",
                "",
                _fmt_count(entry["eager"].get("floor_page_faults")),
            ]
        )
    return table


def _sampler_notes(samplers: dict[str, Any], config: SpeedConfig) -> list[str]:
    rows, cols = config.matrix
    notes = [
        f"hg.categorical on ({rows:,}, {cols}) float32 logits along the last dim, hg.bernoulli "
        f"on {rows * cols:,} log-odds; timed statement `y = sampler(l); "
        "torch.autograd.grad(y, l, g)` with fresh noise on every call: hardgrad's samplers "
        "and torch.bernoulli draw from a torch.Generator seeded once, F.gumbel_softmax and "
        "OneHotCategoricalStraightThrough from the global RNG (they take no generator). "
        f"Up to {config.rounds} interleaved rounds per sampler family (the floor, two copies of "
        "l's size, in the same rounds); median over rounds.",
    ]
    common = [
        f"{kind} {name}"
        for kind, entry in samplers.items()
        for name, s in entry["eager"]["rows"].items()
        if s["compared_with"] == "common reference"
    ]
    note = (
        "compared with: 'same semantics' = the torch sampler computing the same forward and "
        "backward (st_gumbel: F.gumbel_softmax(hard=True); gumbel_softmax: "
        "F.gumbel_softmax(hard=False); st: OneHotCategoricalStraightThrough; bernoulli st: "
        "the hand-written ST p = sigmoid(l); torch.bernoulli(p) + (p - p.detach()))."
    )
    if common:
        note += (
            " 'common reference' = estimators torch has no counterpart for ("
            + ", ".join(common)
            + ") against F.gumbel_softmax(hard=True) (Bernoulli: the hand-written ST): a "
            "different, usually cheaper backward, so the ratio is the estimator's cost over "
            "what people run otherwise, not a like-for-like comparison."
        )
    notes.append(note)
    notes.append(
        "Before timing: every discrete sample was checked one-hot / {0, 1} (hardgrad's bit "
        "for bit) with column means within 6 standard errors of the mean probabilities, "
        "relaxations to be probability vectors, every gradient finite; where the matching "
        "alternative's gradient does not depend on the draw (OneHotCategoricalStraightThrough, "
        "the hand-written Bernoulli ST) hardgrad's equals it (allclose, rtol 1e-5, atol 1e-6). "
        "OneHotCategoricalStraightThrough runs torch.distributions' argument validation (on "
        "by default), as hg.categorical runs its own checks."
    )
    rounding = [
        f"{c['label']} {c['forward_mismatches']:,} elements (≤ {c['max_forward_error']:.2g})"
        for entry in samplers.values()
        for c in entry["candidates"].values()
        if c.get("forward_mismatches")
    ]
    if rounding:
        notes.append(
            "Not exactly one-hot (y_hard - y_soft.detach() + y_soft rounds): "
            + "; ".join(rounding)
            + "."
        )
    small_shapes = {kind: e["small_shape"] for kind, e in samplers.items() if e.get("small")}
    if small_shapes:
        notes.append(
            "Small tensors (the same rows, eager): "
            + ", ".join(f"{kind} on {tuple(shape)}" for kind, shape in small_shapes.items())
            + "; at this size the time is mostly the fixed per-call cost (Python, dispatch, "
            "the autograd nodes) and the random number generation."
        )
    for mode in ("eager", "compiled", "small"):
        missed = [
            f"{kind} {name} ({s['ratio']:.2f}× {s['best_alternative_label']}, "
            f"{s['compared_with']}, faster in {s['rounds_faster']}/{len(s['round_ratios'])} "
            "rounds)"
            for kind, entry in samplers.items()
            if entry.get(mode) is not None
            for name, s in entry[mode]["rows"].items()
            if s["ratio"] > 1.0
        ]
        if missed:
            notes.append(f"{mode}: slower than the alternative: " + ", ".join(missed) + ".")
    contended = [
        f"{kind} {name} {s['quiet_ratio']:.2f} ({s['quiet_rounds']}/{s['rounds']})"
        for kind, entry in samplers.items()
        for name, s in entry["eager"]["rows"].items()
        if s["quiet_rounds"] < s["rounds"]
    ]
    if contended:
        notes.append(
            "Contention (rounds whose floor took more than twice its fastest time): eager ratio "
            "over the quiet rounds only (quiet/all rounds): " + ", ".join(contended) + "."
        )
    compiled = [e for e in samplers.values() if e["compiled"] is not None]
    if compiled:
        compile_s = sum(c.get("compile_s", 0.0) for e in compiled for c in e["candidates"].values())
        note = (
            "torch.compile (inductor, dynamic=False; compilation and warm-up, "
            f"{compile_s:.0f} s in all, excluded): every sampler draws from the global RNG "
            "there, because dynamo cannot trace an explicit torch.Generator argument "
            "(hg.categorical(..., generator=gen) compiles only with graph breaks). Compiled: "
            + ", ".join(
                f"{kind} {n}" for kind, e in samplers.items() for n in e["compiled_estimators"]
            )
            + "."
        )
        broken = [
            c["label"]
            for e in compiled
            for c in e["candidates"].values()
            if c.get("fullgraph") is False
        ]
        if broken:
            note += " With graph breaks (fullgraph=True failed): " + ", ".join(broken) + "."
        failed = [
            f"{c['label']} ({c['compile_error']})"
            for e in compiled
            for c in e["candidates"].values()
            if "compile_error" in c
        ]
        if failed:
            note += " Failed to compile, not timed: " + "; ".join(failed) + "."
        notes.append(note)
    return notes


def sampler_tables(samplers: dict[str, Any], config: SpeedConfig) -> list[Table]:
    """The "Samplers" section: eager and compiled ratios, then every candidate."""
    if not samplers:
        return []
    eager = _sampler_table(samplers, "eager")
    eager.notes = _sampler_notes(samplers, config)
    tables = [eager]
    if any(e["compiled"] is not None for e in samplers.values()):
        tables.append(_sampler_table(samplers, "compiled"))
    if any(e.get("small") is not None for e in samplers.values()):
        tables.append(_sampler_table(samplers, "small"))
    tables.append(_sampler_detail_table(samplers))
    return tables
