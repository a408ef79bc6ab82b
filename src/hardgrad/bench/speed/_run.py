"""The ``speed`` benchmark's runner: each op's candidates checked and timed, eager and
compiled, and the registered task (see :mod:`hardgrad.bench.speed`)."""

from __future__ import annotations

import dataclasses
import gc
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ...ops import OPS, OpSpec
from .._task import BenchSettings, Progress, TaskResult, available_threads, task
from .._timing import (
    compare_to_best,
    compile_warm,
    copy_floors,
    grad_step,
    median,
    ms,
    page_faults_per_call,
    round_budget,
    saved_bytes_per_element,
    time_interleaved,
)
from ._audit import audit_table, run_audit_overhead
from ._candidates import (
    Candidate,
    SpeedCheckError,
    alternatives_for,
    surrogate_label,
)
from ._config import SpeedConfig, default_config
from ._lsq import lsq_table, run_lsq
from ._rao import rao_table, run_rao_sweep
from ._report import notes, plot, tables
from ._sampler_report import sampler_tables
from ._samplers import progress_steps, resolve_rows, run_samplers
from ._sorting import run_sorting, sorting_table

# --------------------------------------------------------------------------- checks


@dataclass
class _Check:
    mismatches: int = 0
    max_error: float = 0.0


def _check_forward(cand: Candidate, y: Tensor, ref: Tensor, x: Tensor, where: str) -> _Check:
    if y.shape != ref.shape or y.dtype != ref.dtype:
        raise SpeedCheckError(
            f"{where}: {cand.label} returns shape {tuple(y.shape)} {y.dtype}, "
            f"expected {tuple(ref.shape)} {ref.dtype}"
        )
    y = y.detach()
    if torch.equal(y, ref):
        return _Check()
    diff = (y - ref).abs()
    mismatches = int((y != ref).sum())
    max_error = float(diff.max())
    # The detach trick's s + (h - s) may be off by a few ulps of the values involved.
    scale = 1.0 + float(ref.abs().max()) + float(x.detach().abs().max())
    tolerance = 8 * torch.finfo(ref.dtype).eps * scale
    if cand.exact or not max_error <= tolerance:
        raise SpeedCheckError(
            f"{where}: the forward of {cand.label} ({cand.code}) differs from the reference in "
            f"{mismatches} of {ref.numel()} elements (max |diff| {max_error:.3g})"
        )
    return _Check(mismatches, max_error)


def _check_gradient(cand: Candidate, grad: Tensor, expected: Tensor, where: str) -> None:
    try:
        torch.testing.assert_close(grad, expected, rtol=1e-5, atol=1e-6)
    except AssertionError as error:
        raise SpeedCheckError(
            f"{where}: the gradient of {cand.label} ({cand.code}) differs from hardgrad's: {error}"
        ) from None


# --------------------------------------------------------------------------- running


def _shape(spec: OpSpec, config: SpeedConfig, small: bool = False) -> tuple[int, ...]:
    if small:
        numel = config.small_numel or 1
        cols = config.matrix[1]
        return (max(numel // cols, 1), cols) if spec.family is None else (numel,)
    return config.matrix if spec.family is None else (config.numel,)


def _inputs(spec: OpSpec, shape: tuple[int, ...], settings: BenchSettings) -> tuple[Tensor, Tensor]:
    generator = torch.Generator().manual_seed(settings.seed + sum(map(ord, spec.name)))
    spread = 4.0 if spec.family == "staircase" else 1.0
    x = (torch.randn(shape, generator=generator) * spread).to(settings.device)
    g = torch.randn(shape, generator=generator).to(settings.device)
    return x.requires_grad_(), g


def _run_mode(
    mode: str,
    spec: OpSpec,
    candidates: list[Candidate],
    x: Tensor,
    g: Tensor,
    ref: Tensor,
    config: SpeedConfig,
    settings: BenchSettings,
    rng: random.Random,
    progress: Progress,
    record: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """Check, measure bytes and time every candidate in one mode.

    ``mode`` is ``"eager"``, ``"compiled"`` (every candidate under ``torch.compile``) or
    ``"small"`` (eager, on the small input).
    """
    where = f"speed/{spec.name}/{mode}"
    steps: dict[str, Callable[[], None]] = {}
    expected: Tensor | None = None
    if mode == "compiled":
        torch._dynamo.reset()
        # Compiled hardgrad is held to eager hardgrad's gradient, the alternatives to it.
        (expected,) = torch.autograd.grad(candidates[0].fn(x), x, g)
    for cand in candidates:
        entry = record.setdefault(cand.key, {"label": cand.label, "code": cand.code})
        fn = cand.fn
        if mode == "compiled":
            t0 = time.perf_counter()
            try:
                fn, fullgraph = compile_warm(cand.fn, x, g)
            except Exception as error:  # a candidate that does not compile is reported
                entry["compile_error"] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
                progress.log(
                    f"{spec.name}: {cand.label} failed to compile: {entry['compile_error']}"
                )
                continue
            entry["compile_s"] = time.perf_counter() - t0
            entry["fullgraph"] = fullgraph
        y = fn(x)
        try:
            check = _check_forward(cand, y, ref, x, where)
            (grad,) = torch.autograd.grad(y, x, g)
            del y
            if expected is None:
                if cand.key != "hardgrad":
                    raise SpeedCheckError(f"{where}: hardgrad's candidate must come first")
                expected = grad
            else:
                _check_gradient(cand, grad, expected, where)
            del grad
        except SpeedCheckError as error:
            if cand.key == "hardgrad":
                raise
            # An alternative that computes something else (a backend's bug, say) is
            # reported and left out of the timing, as one that does not compile.
            entry["check_error" if mode == "eager" else f"check_error_{mode}"] = str(error)
            progress.log(f"{spec.name}: {cand.label} left out: {error}")
            continue
        suffix = {"eager": "", "compiled": "_compiled"}.get(mode, f"_{mode}")
        entry[f"forward_mismatches{suffix}"] = check.mismatches
        entry[f"max_forward_error{suffix}"] = check.max_error
        if mode != "small":
            entry[f"bytes_per_element{suffix}"] = saved_bytes_per_element(fn, x)
        steps[cand.key] = grad_step(fn, x, g)
    del expected
    steps.update(copy_floors(x))
    for step in steps.values():  # warm-up: allocator, caches, lazy init
        step()
        step()
    # Minor page faults per call: fresh memory a call touches (before timing, same order).
    faults = {k: page_faults_per_call(step) for k, step in steps.items()} if mode != "small" else {}
    times = time_interleaved(
        steps,
        rounds=config.rounds,
        min_run_time=config.min_run_time,
        threads=settings.threads,
        rng=rng,
    )
    medians = {key: ms(median(ts)) for key, ts in times.items()}
    for cand in candidates:
        if cand.key in times:
            record[cand.key][f"{mode}_ms"] = medians[cand.key]
            record[cand.key][f"{mode}_rounds_ms"] = [ms(t) for t in times[cand.key]]
    alternatives = [c for c in candidates if c.key != "hardgrad"]
    summary = compare_to_best("hardgrad", alternatives, medians, times)
    summary["floor_ms"] = medians["floor"]
    summary["floor_alloc_ms"] = medians["floor_alloc"]
    summary["floor_rounds_ms"] = [ms(t) for t in times["floor"]]
    if faults:
        summary["floor_page_faults"] = faults["floor"]
        summary["floor_alloc_page_faults"] = faults["floor_alloc"]
        key = "page_faults" if mode == "eager" else "page_faults_compiled"
        for cand in candidates:
            if cand.key in faults:
                record[cand.key][key] = faults[cand.key]
    return summary


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - Windows
        return None


def _resolve_ops(config: SpeedConfig) -> tuple[list[str], list[str]]:
    names = list(OPS.names()) if config.ops is None else list(config.ops)
    for name in names:
        OPS.get(name, "ops")  # ValueError listing the ops
    if not config.compile:
        return names, []
    if config.compile_ops is None:
        return names, names
    for name in config.compile_ops:
        OPS.get(name, "compile_ops")
    return names, [n for n in names if n in config.compile_ops]


def _run_op(
    spec: OpSpec,
    compiled: bool,
    config: SpeedConfig,
    settings: BenchSettings,
    rng: random.Random,
    progress: Progress,
) -> dict[str, Any]:
    """Every mode for one op; its entry of ``results.json``."""
    name = spec.name
    candidates = [
        c
        for c in alternatives_for(spec)
        if c.key == "hardgrad" or config.candidates is None or c.key in config.candidates
    ]
    record: dict[str, dict[str, Any]] = {}
    x, g = _inputs(spec, _shape(spec, config), settings)
    entry: dict[str, Any] = {
        "shape": list(x.shape),
        "numel": x.numel(),
        "dtype": str(x.dtype).removeprefix("torch."),
        "surrogate": surrogate_label(spec),
        "kwargs": dict(spec.kwargs),
        "candidates": record,
        "compiled": None,
        "small": None,
    }
    ref = spec.reference(x.detach())
    common = (spec, candidates, x, g, ref, config, settings, rng, progress, record)
    entry["eager"] = _run_mode("eager", *common)
    progress.advance(f"{name}: eager done")
    if compiled:
        try:
            entry["compiled"] = _run_mode("compiled", *common)
        except SpeedCheckError as error:
            # Compiled hardgrad differs from eager hardgrad (a torch.compile bug in some
            # torch versions): reported, not timed, and the run goes on.
            entry["compiled_error"] = str(error)
            progress.log(f"{name}: compiled hardgrad left out: {error}")
        torch._dynamo.reset()
        progress.advance(f"{name}: compiled done")
    del x, g, ref, common
    gc.collect()
    if config.small_numel:
        xs, gs = _inputs(spec, _shape(spec, config, small=True), settings)
        entry["small_shape"] = list(xs.shape)
        entry["small"] = _run_mode(
            "small",
            spec,
            candidates,
            xs,
            gs,
            spec.reference(xs.detach()),
            config,
            settings,
            rng,
            progress,
            record,
        )
        progress.advance(f"{name}: small done")
    return entry


@task(
    "speed",
    "forward+backward time and bytes saved for backward per op and sampler, vs hand-written "
    "alternatives",
    default_config,
)
def run(settings: BenchSettings, config: SpeedConfig | None, progress: Progress) -> TaskResult:
    """Run the speed benchmark; see the package docstring."""
    config = config if config is not None else default_config(settings.quick)
    names, compiled_names = _resolve_ops(config)
    sampler_rows, compiled_samplers = resolve_rows(
        config.samplers, config.compile_samplers, config.compile
    )
    cols = config.matrix[1]
    small_matrix = (max(config.small_numel // cols, 1), cols) if config.small_numel else None
    rng = random.Random(settings.seed)
    progress.start(
        "speed",
        len(names) * (2 if config.small_numel else 1)
        + len(compiled_names)
        + progress_steps(sampler_rows, compiled_samplers, small=small_matrix is not None)
        + (1 if config.audit else 0)
        + (1 if config.rao_ks else 0)
        + (1 if config.lsq else 0)
        + (1 if config.sorting else 0),
    )
    t_start = time.perf_counter()
    load_before = _load_average()
    ops: dict[str, Any] = {}
    try:
        with round_budget(config.budget_s):
            for name in names:
                ops[name] = _run_op(
                    OPS.get(name), name in compiled_names, config, settings, rng, progress
                )
            samplers = run_samplers(
                sampler_rows,
                compiled_samplers,
                config.matrix,
                config.rounds,
                config.min_run_time,
                settings,
                rng,
                progress,
                small_matrix,
            )
            rao = None
            if config.rao_ks:
                rao = run_rao_sweep(
                    config.rao_ks, config.matrix, config.rounds, config.min_run_time, settings, rng
                )
                progress.advance("gumbel_rao against k")
            audit_overhead = None
            if config.audit:
                audit_overhead = run_audit_overhead(
                    settings, config.rounds, config.min_run_time, rng
                )
                progress.advance("audit() overhead")
            lsq = None
            if config.lsq:
                sizes = {"small": config.small_numel} if config.small_numel else {}
                lsq = run_lsq(
                    {**sizes, "large": config.numel},
                    settings,
                    config.rounds,
                    config.min_run_time,
                    rng,
                )
                progress.advance("LSQ against torch's learnable kernels")
            sorting = None
            if config.sorting:
                sorting = run_sorting(
                    config.sorting,
                    settings,
                    config.rounds,
                    config.min_run_time,
                    rng,
                    config.sorting_budget_s,
                )
                progress.advance("soft sort and rank against torchsort")
    finally:
        progress.finish()
    wall = time.perf_counter() - t_start
    data = {
        "ops": ops,
        "compiled_ops": compiled_names,
        "samplers": samplers,
        "audit_overhead": audit_overhead,
        "gumbel_rao": rao,
        "lsq": lsq,
        "sorting": sorting,
        "threads": torch.get_num_threads(),
        "load_average_before": load_before,
        "load_average_after": _load_average(),
    }
    result = TaskResult(
        name="speed",
        summary="forward+backward time (ms) and bytes saved for backward, float32 on "
        f"{settings.device}",
        settings={k: v for k, v in dataclasses.asdict(config).items()},
        data=data,
        wall_s=wall,
    )
    if names:
        result.tables = tables(ops, names, compiled_names)
        result.notes = notes(ops, names, compiled_names, config, settings)
    result.tables += sampler_tables(samplers, config)
    if rao is not None:
        result.tables.append(rao_table(rao))
    if audit_overhead is not None:
        result.tables.append(audit_table(audit_overhead))
    if lsq is not None:
        result.tables.append(lsq_table(lsq))
    if sorting is not None:
        result.tables.append(sorting_table(sorting))
    if data["load_average_before"] is not None:
        result.notes.append(
            "1-minute load average of the machine: "
            f"{data['load_average_before']:.2f} before, {data['load_average_after']:.2f} after "
            f"the run (on {available_threads()} cores); other processes share the cores, so "
            "absolute times vary between runs more than the ratios of one run do."
        )
    if settings.out is not None and config.plot and names:
        figure = plot(ops, names, settings.out, quick=settings.quick)
        if figure is not None:
            result.figures.append(figure)
    return result
