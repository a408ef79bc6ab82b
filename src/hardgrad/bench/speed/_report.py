"""Tables, notes and the plot of the ``speed`` benchmark (see :mod:`hardgrad.bench.speed`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from .._pyplot import bars, category_labels, legend_outside, pyplot, quick_title, save_figure
from .._task import BenchSettings, Table
from .._timing import UNRESOLVED, median
from ._config import SpeedConfig

#: Ratios up to this are reported as a tie ("≈") rather than a miss: below the
#: round-to-round noise of a shared machine.
TIE = 1.05

#: Where :mod:`speed` records an alternative whose semantics check failed, per mode.
CHECK_ERROR_KEYS = (
    ("check_error", "eager"),
    ("check_error_compiled", "compiled"),
    ("check_error_small", "small"),
)


def _fmt_ms(value: float | None) -> str:
    if value is None or value != value:
        return "n/a"
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def _fmt_bytes(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}".rstrip("0").rstrip(".") if value % 1 else f"{value:.0f}"


def _fmt_count(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def _ratio_cell(summary: dict[str, Any]) -> str:
    ratio = summary["ratio"]
    if ratio != ratio:
        return "n/a"
    mark = "✓" if ratio <= 1.0 else ("≈" if ratio <= TIE else "✗")
    cell = f"{ratio:.2f} {mark} {summary['rounds_faster']}/{len(summary['round_ratios'])}"
    if summary.get("verdict") == UNRESOLVED:
        cell += " unresolved (noise)"
    return cell


_TITLES = {
    "eager": "Eager: hardgrad vs the fastest hand-written alternative",
    "compiled": "torch.compile: every candidate compiled (fullgraph where possible)",
    "small": "Small tensors, eager: the fixed per-call cost (µs)",
}


def _fmt_us(value: float | None) -> str:
    if value is None or value != value:
        return "n/a"
    return f"{value * 1e3:.1f}"


def _summary_table(ops: dict[str, Any], names: list[str], mode: str) -> Table:
    suffix = "" if mode != "compiled" else "_compiled"
    small = mode == "small"
    unit, fmt = ("µs", _fmt_us) if small else ("ms", _fmt_ms)
    columns = [
        "op",
        "surrogate",
        f"hardgrad {unit}",
        f"best alternative ({unit})",
        "ratio (≤ 1), rounds hg faster",
        "× floor",
    ]
    if not small:
        columns.append("bytes/elt saved: hg vs alternatives")
    table = Table(title=_TITLES[mode], columns=columns)
    for name in names:
        entry = ops[name]
        summary = entry[mode]
        if summary is None:
            continue
        record = entry["candidates"]
        best = summary["best_alternative_label"]
        row = [
            name if not small else f"{name} {tuple(entry['small_shape'])}",
            entry["surrogate"],
            fmt(summary["hardgrad_ms"]),
            "-" if best is None else f"{best} {fmt(summary['best_alternative_ms'])}",
            _ratio_cell(summary),
            f"{summary['x_floor']:.2f}",
        ]
        if not small:
            hg_bytes = record["hardgrad"].get(f"bytes_per_element{suffix}")
            alt_bytes = ", ".join(
                f"{c['label']} {_fmt_bytes(c.get(f'bytes_per_element{suffix}'))}"
                for key, c in record.items()
                if key != "hardgrad" and f"bytes_per_element{suffix}" in c
            )
            row.append(f"{_fmt_bytes(hg_bytes)} vs {alt_bytes or '-'}")
        table.rows.append(row)
    return table


def _detail_table(ops: dict[str, Any], names: list[str], compiled_names: list[str]) -> Table:
    table = Table(
        title="Every candidate (median over rounds; bytes saved for backward per element)",
        columns=[
            "op",
            "candidate",
            "code",
            "eager ms",
            "compiled ms",
            "small µs",
            "bytes/elt eager",
            "bytes/elt compiled",
            "page faults/call eager",
        ],
    )
    for name in names:
        entry = ops[name]
        is_compiled = name in compiled_names
        for c in entry["candidates"].values():
            compiled = "-" if not is_compiled else _fmt_ms(c.get("compiled_ms"))
            if is_compiled and "compile_error" in c:
                compiled = "compile failed"
            elif is_compiled and c.get("fullgraph") is False:
                compiled += " (graph breaks)"
            table.rows.append(
                [
                    name,
                    c["label"],
                    f"`{c['code']}`",
                    _fmt_ms(c.get("eager_ms")),
                    compiled,
                    _fmt_us(c.get("small_ms")) if entry["small"] else "-",
                    _fmt_bytes(c.get("bytes_per_element")),
                    _fmt_bytes(c.get("bytes_per_element_compiled")) if is_compiled else "-",
                    _fmt_count(c.get("page_faults")),
                ]
            )
        comp, small = entry["compiled"], entry["small"]
        table.rows.append(
            [
                name,
                "floor",
                "`out.copy_(x); grad.copy_(x)`",
                _fmt_ms(entry["eager"]["floor_ms"]),
                _fmt_ms(comp["floor_ms"]) if comp else "-",
                _fmt_us(small["floor_ms"]) if small else "-",
                "",
                "",
                _fmt_count(entry["eager"].get("floor_page_faults")),
            ]
        )
    return table


def tables(ops: dict[str, Any], names: list[str], compiled_names: list[str]) -> list[Table]:
    tables = [_summary_table(ops, names, "eager")]
    if compiled_names:
        tables.append(_summary_table(ops, compiled_names, "compiled"))
    smalls = [n for n in names if ops[n]["small"] is not None]
    if smalls:
        tables.append(_summary_table(ops, smalls, "small"))
    tables.append(_detail_table(ops, names, compiled_names))
    return tables


def notes(
    ops: dict[str, Any],
    names: list[str],
    compiled_names: list[str],
    config: SpeedConfig,
    settings: BenchSettings,
) -> list[str]:
    rows, cols = config.matrix
    notes = [
        f"float32 on {settings.device}, {torch.get_num_threads()} threads; elementwise ops on "
        f"{config.numel:,} elements, one_hot_argmax/topk_mask on ({rows:,}, {cols}) logits "
        f"along the last dim; timed statement `y = fn(x); torch.autograd.grad(y, x, g)`.",
        f"Up to {config.rounds} interleaved rounds (order shuffled each round), "
        f"blocked_autorange(min_run_time={config.min_run_time}) per candidate per round; "
        "median over rounds.",
        "ratio = hardgrad / fastest alternative (target ≤ 1.0); × floor = hardgrad / the "
        "floor, two plain copies of x's size into preallocated tensors (forward output and "
        "input gradient), timed in the same rounds.",
        "Before timing, every alternative's forward was checked against the plain-torch "
        "reference (bit for bit; the detach trick within a few ulps) and its gradient "
        "against hardgrad's (allclose, rtol 1e-5, atol 1e-6); hardgrad's forward is "
        "bit-identical to the reference in every mode.",
        "Bytes saved for backward: distinct storages seen by "
        "torch.autograd.graph.saved_tensors_hooks, per element of x (a saved input counts: "
        "it keeps x alive).",
    ]
    floors = [ops[n]["eager"]["floor_ms"] for n in names]
    allocs = [ops[n]["eager"]["floor_alloc_ms"] for n in names]
    notes.append(
        f"Floor (eager rounds) ranged {min(floors):.3f}-{max(floors):.3f} ms; the same two copies "
        f"into freshly allocated tensors (page faults included) {min(allocs):.3f}-"
        f"{max(allocs):.3f} ms."
    )
    rounding = []
    for name in names:
        for c in ops[name]["candidates"].values():
            count = c.get("forward_mismatches", 0)
            if count:
                rounding.append(
                    f"{name} {count:,}/{ops[name]['numel']:,} (≤ {c['max_forward_error']:.2g})"
                )
    if rounding:
        notes.append(
            "The detach trick's forward is not bit-exact: elements that differ from the hard "
            "op, with the largest |difference|: " + "; ".join(rounding) + "."
        )
    wrong = [
        f"{n}/{c['label']} ({mode}: {c[key].splitlines()[0]})"
        for n in names
        for c in ops[n]["candidates"].values()
        for key, mode in CHECK_ERROR_KEYS
        if key in c
    ]
    compiled_wrong = [
        f"{n} ({ops[n]['compiled_error'].splitlines()[0]})"
        for n in names
        if "compiled_error" in ops[n]
    ]
    if compiled_wrong:
        notes.append(
            "hardgrad under torch.compile computed something else than in eager mode, "
            "so that op was not timed compiled (a bug to report): " + "; ".join(compiled_wrong)
        )
    if wrong:
        notes.append(
            "Computed something else than hardgrad's semantics, not timed: "
            + "; ".join(wrong)
            + "."
        )
    if config.compile:
        skipped = [n for n in names if n not in compiled_names]
        compile_s = sum(
            c.get("compile_s", 0.0) for n in compiled_names for c in ops[n]["candidates"].values()
        )
        note = (
            f"torch.compile (inductor, dynamic=False): compilation and warm-up ({compile_s:.0f} s "
            "in all) excluded from the timings; each op's floor is re-timed in its compiled rounds."
        )
        if skipped:
            note += " Not compiled in this setting: " + ", ".join(skipped) + "."
        notes.append(note)
        broken = [
            f"{n}/{c['label']}"
            for n in compiled_names
            for c in ops[n]["candidates"].values()
            if c.get("fullgraph") is False
        ]
        if broken:
            notes.append(
                "Compiled with graph breaks (fullgraph=True failed): " + ", ".join(broken) + "."
            )
        failed = [
            f"{n}/{c['label']} ({c['compile_error']})"
            for n in compiled_names
            for c in ops[n]["candidates"].values()
            if "compile_error" in c
        ]
        if failed:
            notes.append("Failed to compile, not timed: " + "; ".join(failed) + ".")
    notes.append(
        "ratio marks: ✓ at most 1.0; ≈ within 5 % above (a tie on this noisy machine); ✗ "
        "more. k/n: rounds in which hardgrad beat that alternative (paired within a round). "
        "unresolved (noise): the confidence interval of the median per-round ratio (order "
        "statistics, 95 % where the rounds allow, else their range) contains 1, so this run "
        "cannot say which is faster."
    )
    if config.budget_s is not None:
        short = sorted(
            {
                len(ops[n][m]["round_ratios"])
                for n in names
                for m in ("eager", "compiled", "small")
                if ops[n][m] is not None and ops[n][m]["round_ratios"]
            }
        )
        notes.append(
            f"Rounds: at most {config.rounds}, stopped once a comparison's rounds would take "
            f"more than {config.budget_s:g} s (at least 3); rounds run per comparison: "
            f"{', '.join(map(str, short)) or 'none'}."
        )
    if config.small_numel:
        notes.append(
            f"Small tensors: {config.small_numel:,} elements (selection ops "
            f"({max(config.small_numel // cols, 1)}, {cols})), eager; at this size the time "
            "is the fixed cost of a call (Python, autograd bookkeeping), not memory traffic."
        )
    for mode in ("eager", "compiled", "small"):
        missed = [
            f"{n} ({ops[n][mode]['ratio']:.2f}× {ops[n][mode]['best_alternative_label']}, "
            f"faster in {ops[n][mode]['rounds_faster']}/{len(ops[n][mode]['round_ratios'])} rounds)"
            for n in names
            if ops[n][mode] is not None and ops[n][mode]["ratio"] > 1.0
        ]
        if missed:
            notes.append(f"{mode}: slower than the fastest alternative: " + ", ".join(missed) + ".")
    contended = [
        f"{n} {ops[n][m]['quiet_ratio']:.2f} ({ops[n][m]['quiet_rounds']}/{ops[n][m]['rounds']})"
        for m in ("eager",)
        for n in names
        if ops[n][m] is not None and ops[n][m]["quiet_rounds"] < ops[n][m]["rounds"]
    ]
    if contended:
        notes.append(
            "Contention: in some rounds the floor took more than twice its fastest time (other "
            "processes held the cores; with as many threads as cores, every parallel kernel "
            "then waits for a descheduled thread, several ms each). Eager ratio over the quiet "
            "rounds only (quiet/all rounds): " + ", ".join(contended) + "."
        )
    notes.append(
        "Allocation: CPU tensors this large are served by mmap and page-faulted on first "
        "touch (a few ms per 16 MB; 4,096 faults of 4 KiB), and glibc's reuse heuristics "
        "decide which candidate pays it: see the page faults/call column (measured after "
        "warm-up, before timing). Differences of a few ms between candidates with the same "
        "kernels come from that; they vanish with MALLOC_MMAP_THRESHOLD_ and "
        "MALLOC_TRIM_THRESHOLD_ set large."
    )
    spreads = []
    for name in names:
        rounds = ops[name]["candidates"]["hardgrad"].get("eager_rounds_ms", [])
        if len(rounds) >= 2:
            spreads.append((max(rounds) - min(rounds)) / median(rounds))
    if spreads:
        notes.append(
            f"Noise: hardgrad's per-round times spread by {100 * median(spreads):.0f} % of the "
            "median (median over ops of (max - min) / median); per-round figures are in "
            "results.json."
        )
    return notes


def plot(ops: dict[str, Any], names: list[str], out: Path, *, quick: bool = False) -> str | None:
    """``speed_ratio.png``: hardgrad's time over the fastest alternative's per op, eager and
    compiled; an op not compiled or not measured is marked n/a."""
    plt = pyplot()
    if plt is None:  # the bench extra is missing
        return None
    fig, ax = plt.subplots(figsize=(max(8.0, 0.6 * len(names) + 2.5), 3.8), layout="constrained")
    width = 0.4
    positions = list(range(len(names)))
    eager = [ops[n]["eager"]["ratio"] for n in names]
    compiled = [ops[n]["compiled"]["ratio"] if ops[n]["compiled"] else None for n in names]
    not_compiled = "not compiled" + (" in a quick run" if quick else "")
    bars(ax, eager, positions=[p - width / 2 for p in positions], width=width, label="eager",
         missing="not measured", color="C0")  # fmt: skip
    bars(ax, compiled, positions=[p + width / 2 for p in positions], width=width,
         label="torch.compile", color="C1",
         missing=lambda i: not_compiled if compiled[i] is None else "not measured")  # fmt: skip
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    category_labels(ax, names)
    ax.set_ylabel("hardgrad / fastest alternative")
    median = "median over interleaved rounds"
    ax.set_title(
        quick_title(
            f"speed: hardgrad / fastest alternative, forward+backward ({median}; target ≤ 1)",
            quick,
            "shorter timing, a compiled subset",
        ),
        fontsize=10,
    )
    legend_outside(ax)
    return save_figure(
        fig,
        out,
        "speed_ratio.png",
        caption=f"hardgrad's forward+backward time over the fastest alternative's per op, "
        f"eager and compiled ({median}, no error bars); dashed: parity.",
        table=_TITLES["eager"],
    )
