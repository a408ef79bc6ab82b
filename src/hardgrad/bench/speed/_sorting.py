"""Soft sort and soft rank against torchsort, side by side.

``hg.soft_sort`` and ``hg.soft_rank`` (projection onto the permutahedron, Blondel et al.
2020, https://arxiv.org/abs/2002.08871), ``"l2"`` and ``"kl"`` regularization, against
torchsort's ``soft_sort``/``soft_rank`` (its C++ isotonic-regression extension) with the
same ``regularization_strength`` and ``regularization``: forward plus backward to ``x``,
float32, per shape, in interleaved rounds.

torchsort is optional and never a dependency: it is imported here, inside the run. When
the import fails every row says "torchsort not installed" and only hardgrad is timed.
Before timing, the two forwards must agree to float32 tolerance (128 float32 epsilons of
the largest entry: both pool the same blocks, summed in different orders); a torchsort
that computes something else is reported and left out of the timing. The gradients are
not compared: torchsort's float32 KL ``soft_rank`` gradient can be off by tens of percent
where blocks are long (issue 42), hardgrad's is held to float64 in its own tests.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch
from torch import Tensor

from ... import sorting as _sorting
from .._task import BenchSettings, Table
from .._timing import (
    UNRESOLVED,
    median,
    ratio_interval,
    ratio_verdict,
    round_ratios,
    time_interleaved,
)

#: (op, regularization) of the rows, per shape.
ROWS = (
    ("soft_sort", "l2"),
    ("soft_sort", "kl"),
    ("soft_rank", "l2"),
    ("soft_rank", "kl"),
)
STRENGTH = 1.0
#: Forward agreement: max |diff| within this many float32 epsilons of the largest entry.
TOLERANCE_EPS = 128
NOT_INSTALLED = "torchsort not installed"


def _torchsort() -> ModuleType | None:
    """torchsort, or ``None`` when it cannot be imported (optional, never required)."""
    try:
        import torchsort  # type: ignore[import-not-found]
    except ImportError:
        return None
    return torchsort


def _steps(
    op: str, regularization: str, shape: tuple[int, int], settings: BenchSettings,
    torchsort: Any,
) -> tuple[Callable[[], Any], Callable[[], Any] | None, str | None]:  # fmt: skip
    """``(hardgrad step, torchsort step or None, why torchsort is not timed or None)``."""
    generator = torch.Generator().manual_seed(settings.seed + shape[0] + shape[1])
    x = torch.randn(shape, generator=generator).to(settings.device).requires_grad_()
    g = torch.randn(shape, generator=generator).to(settings.device)
    hg_fn = getattr(_sorting, op)

    def forward_hg() -> Tensor:
        return hg_fn(x, strength=STRENGTH, regularization=regularization)

    def step_hg() -> tuple[Tensor, ...]:
        return torch.autograd.grad(forward_hg(), x, g)

    if torchsort is None:
        return step_hg, None, NOT_INSTALLED
    ts_fn = getattr(torchsort, op)

    def forward_ts() -> Tensor:
        return ts_fn(x, regularization_strength=STRENGTH, regularization=regularization)

    def step_ts() -> tuple[Tensor, ...]:
        return torch.autograd.grad(forward_ts(), x, g)

    with torch.no_grad():
        mine, theirs = forward_hg(), forward_ts()
    error = _forward_error(mine, theirs)
    if error is not None:
        return step_hg, None, f"left out: {error}"
    return step_hg, step_ts, None


def _forward_error(mine: Tensor, theirs: Tensor) -> str | None:
    """Why torchsort's forward is not hardgrad's at float32 tolerance, or ``None``."""
    if theirs.shape != mine.shape or theirs.dtype != mine.dtype:
        return (
            f"torchsort returns {tuple(theirs.shape)} {theirs.dtype}, "
            f"hardgrad {tuple(mine.shape)} {mine.dtype}"
        )
    diff = float((mine - theirs).abs().max()) if mine.numel() else 0.0
    tolerance = TOLERANCE_EPS * torch.finfo(mine.dtype).eps * (1.0 + float(mine.abs().max()))
    if not diff <= tolerance:
        return f"the forward differs from hardgrad's (max |diff| {diff:.3g} > {tolerance:.3g})"
    return None


def run_sorting(
    shapes: tuple[tuple[int, int], ...],
    settings: BenchSettings,
    rounds: int,
    min_run_time: float,
    rng: random.Random,
    budget_s: float | None = None,
    torchsort: Any = None,
) -> dict[str, Any]:
    """Per shape and row: median ms of both (torchsort's ``None`` when not timed), their
    ratio and the per-round ratios, and a ``note`` when torchsort was not timed;
    ``budget_s``: wall seconds of rounds per row (``None``: an enclosing budget's);
    ``torchsort``: a stand-in for the module (tests), else it is imported if it can be."""
    torchsort = torchsort if torchsort is not None else _torchsort()
    results: dict[str, Any] = {}
    for shape in shapes:
        for op, regularization in ROWS:
            step_hg, step_ts, note = _steps(op, regularization, shape, settings, torchsort)
            steps = {"hardgrad": step_hg} | ({"torchsort": step_ts} if step_ts else {})
            for step in steps.values():  # warm-up
                step()
            times = time_interleaved(
                steps,
                rounds=rounds,
                min_run_time=min_run_time,
                threads=settings.threads,
                rng=rng,
                budget_s=budget_s,
            )
            hg_s = median(times["hardgrad"])
            row: dict[str, Any] = {
                "op": op,
                "regularization": regularization,
                "shape": list(shape),
                "hardgrad_ms": hg_s * 1e3,
                "torchsort_ms": None,
                "note": note,
            }
            if "torchsort" in times:
                ts_s = median(times["torchsort"])
                ratios = round_ratios(times, "hardgrad", "torchsort")
                row |= {
                    "torchsort_ms": ts_s * 1e3,
                    "ratio": hg_s / ts_s,
                    "round_ratios": ratios,
                    "rounds_faster": sum(r < 1.0 for r in ratios),
                    "ratio_ci": list(ratio_interval(ratios)),
                    "verdict": ratio_verdict(ratios),
                }
            results[f"{op}/{regularization}/{shape[0]}x{shape[1]}"] = row
    return results


def sorting_table(results: dict[str, Any]) -> Table:
    table = Table(
        "Soft sort and rank: hg.soft_sort / hg.soft_rank against torchsort, forward+backward, "
        f"float32, strength {STRENGTH}",
        [
            "op",
            "regularization",
            "shape",
            "torchsort ms",
            "hardgrad ms",
            "ratio",
            "hardgrad faster",
        ],
    )
    for r in results.values():
        timed = r["torchsort_ms"] is not None
        ratio = "n/a"
        if timed:
            ratio = f"{r['ratio']:.2f}" + (
                " unresolved (noise)" if r.get("verdict") == UNRESOLVED else ""
            )
        table.rows.append(
            [
                r["op"],
                r["regularization"],
                " x ".join(map(str, r["shape"])),
                f"{r['torchsort_ms']:.3f}" if timed else (r["note"] or "n/a"),
                f"{r['hardgrad_ms']:.3f}",
                ratio,
                f"{r['rounds_faster']}/{len(r['round_ratios'])}" if timed else "-",
            ]
        )
    table.notes.append(
        "torchsort (optional, never a dependency) is timed when `import torchsort` works, "
        "with the same regularization_strength and regularization. Checked before timing: "
        f"the forwards agree within {TOLERANCE_EPS} float32 epsilons of the largest entry "
        "(torchsort is otherwise left out and the row says why); the gradients are not "
        "compared (torchsort's float32 KL soft_rank gradient can be far off where blocks "
        "are long)."
    )
    return table
