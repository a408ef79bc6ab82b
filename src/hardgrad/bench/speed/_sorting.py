"""Soft sort and soft rank against torchsort, side by side.

``hg.soft_sort`` and ``hg.soft_rank`` (projection onto the permutahedron, Blondel et al.
2020, https://arxiv.org/abs/2002.08871), ``"l2"`` and ``"kl"`` regularization, against
torchsort's ``soft_sort``/``soft_rank`` (its C++ isotonic-regression extension) with the
same ``regularization_strength`` and ``regularization``: forward plus backward to ``x``,
float32, per shape, in interleaved rounds.

hardgrad is timed twice in the same rounds: as it runs (on the CPU, with the compiled
pool-adjacent-violators kernel of :mod:`hardgrad.sorting._native_pav` where a C compiler
built it) and inside :func:`hardgrad._core.native.disabled` (its tensor-operation path,
what runs where no compiler is found). Where the kernel is not in use (not compiled, or
the device is not the CPU) the two are the same code and the second is not timed: the
rows say so (``native_kernel``).

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
from ..._core import native
from ...sorting import _native_pav
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
#: The three contenders' keys in the timing rounds.
HARDGRAD, NO_KERNEL, TORCHSORT = "hardgrad", "hardgrad without kernel", "torchsort"


def kernel_in_use(device: str | torch.device) -> bool:
    """Whether hardgrad's eager soft sorts run the compiled kernel on ``device`` here (it
    is compiled now if that was not tried yet)."""
    return _native_pav.available(torch.zeros(1, device=device))


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
) -> tuple[dict[str, Callable[[], Any]], str | None]:  # fmt: skip
    """The steps to time (hardgrad's always; the one without the kernel where the kernel
    is in use; torchsort's when it is installed and agrees) and why torchsort is not timed
    (or ``None``)."""
    generator = torch.Generator().manual_seed(settings.seed + shape[0] + shape[1])
    x = torch.randn(shape, generator=generator).to(settings.device).requires_grad_()
    g = torch.randn(shape, generator=generator).to(settings.device)
    hg_fn = getattr(_sorting, op)

    def forward_hg() -> Tensor:
        return hg_fn(x, strength=STRENGTH, regularization=regularization)

    def step_hg() -> tuple[Tensor, ...]:
        return torch.autograd.grad(forward_hg(), x, g)

    def step_no_kernel() -> tuple[Tensor, ...]:
        with native.disabled():
            return step_hg()

    steps: dict[str, Callable[[], Any]] = {HARDGRAD: step_hg}
    if kernel_in_use(x.device):
        steps[NO_KERNEL] = step_no_kernel
    if torchsort is None:
        return steps, NOT_INSTALLED
    ts_fn = getattr(torchsort, op)

    def forward_ts() -> Tensor:
        return ts_fn(x, regularization_strength=STRENGTH, regularization=regularization)

    def step_ts() -> tuple[Tensor, ...]:
        return torch.autograd.grad(forward_ts(), x, g)

    with torch.no_grad():
        mine, theirs = forward_hg(), forward_ts()
    error = _forward_error(mine, theirs)
    if error is not None:
        return steps, f"left out: {error}"
    return steps | {TORCHSORT: step_ts}, None


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
    """Per shape and row: median ms of hardgrad, of hardgrad without the compiled kernel
    and of torchsort (``None`` when not timed), the ratios to torchsort and hardgrad's
    per-round ratios, whether the kernel was compiled (``native_compiled``) and used
    (``native_kernel``), and a ``note`` when torchsort was not timed; ``budget_s``: wall
    seconds of rounds per row (``None``: an enclosing budget's); ``torchsort``: a stand-in
    for the module (tests), else it is imported if it can be."""
    torchsort = torchsort if torchsort is not None else _torchsort()
    compiled = _native_pav.available(torch.zeros(1))
    results: dict[str, Any] = {}
    for shape in shapes:
        for op, regularization in ROWS:
            steps, note = _steps(op, regularization, shape, settings, torchsort)
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
            hg_s = median(times[HARDGRAD])
            no_kernel_s = median(times[NO_KERNEL]) if NO_KERNEL in times else None
            row: dict[str, Any] = {
                "op": op,
                "regularization": regularization,
                "shape": list(shape),
                "hardgrad_ms": hg_s * 1e3,
                "torchsort_ms": None,
                "note": note,
                "native_compiled": compiled,
                "native_kernel": NO_KERNEL in times,
                "hardgrad_no_kernel_ms": None if no_kernel_s is None else no_kernel_s * 1e3,
                "no_kernel_ratio": None,
            }
            if TORCHSORT in times:
                ts_s = median(times[TORCHSORT])
                ratios = round_ratios(times, HARDGRAD, TORCHSORT)
                row |= {
                    "torchsort_ms": ts_s * 1e3,
                    "ratio": hg_s / ts_s,
                    "round_ratios": ratios,
                    "rounds_faster": sum(r < 1.0 for r in ratios),
                    "ratio_ci": list(ratio_interval(ratios)),
                    "verdict": ratio_verdict(ratios),
                }
                if no_kernel_s is not None:
                    row["no_kernel_ratio"] = no_kernel_s / ts_s
            results[f"{op}/{regularization}/{shape[0]}x{shape[1]}"] = row
    return results


def _no_kernel_cells(r: dict[str, Any]) -> list[str]:
    """The "without kernel" ms and ratio cells of a row."""
    if r.get("hardgrad_no_kernel_ms") is None:
        return ["same as hardgrad", "-"]
    ratio = r.get("no_kernel_ratio")
    return [f"{r['hardgrad_no_kernel_ms']:.3f}", "n/a" if ratio is None else f"{ratio:.2f}"]


def kernel_note(results: dict[str, Any]) -> str:
    """What the hardgrad columns ran: with the compiled kernel, or the tensor path."""
    rows = list(results.values())
    if rows and all(r.get("native_kernel") for r in rows):
        return (
            "The compiled C kernel (pool-adjacent-violators and the sort, "
            "hardgrad.sorting._pav_kernel.c, compiled on first use) ran here: "
            '"hardgrad ms" is with it, "without kernel ms" the same call inside '
            "hardgrad._core.native.disabled(), the tensor-operation path (what runs where "
            "no C compiler is found, or with HARDGRAD_NATIVE=0); both in the same rounds."
        )
    if rows and any(r.get("native_compiled") for r in rows):
        return (
            "The compiled C kernel is built here but runs on CPU tensors only: on this "
            'device "hardgrad ms" is the tensor-operation path, not timed twice.'
        )
    return (
        "The compiled C kernel was not compiled here (no C compiler found, or "
        'HARDGRAD_NATIVE=0): "hardgrad ms" is the tensor-operation path, not timed twice.'
    )


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
            "without kernel ms",
            "without kernel ratio",
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
                *_no_kernel_cells(r),
            ]
        )
    table.notes.append(kernel_note(results))
    table.notes.append(
        "torchsort (optional, never a dependency) is timed when `import torchsort` works, "
        "with the same regularization_strength and regularization; ratios are hardgrad's "
        'time over torchsort\'s (below 1: hardgrad faster), "hardgrad faster" counts the '
        "rounds in which it was. Checked before timing: "
        f"the forwards agree within {TOLERANCE_EPS} float32 epsilons of the largest entry "
        "(torchsort is otherwise left out and the row says why); the gradients are not "
        "compared (torchsort's float32 KL soft_rank gradient can be far off where blocks "
        "are long)."
    )
    return table
