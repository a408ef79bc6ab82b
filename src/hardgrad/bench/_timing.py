"""Timing and memory helpers shared by the benchmarks.

* :func:`time_interleaved` times several candidates in rounds, each candidate once per
  round in a shuffled order, so slow drifts of a noisy machine (page faults, frequency,
  neighbours) hit every candidate alike; the figure kept is the median over rounds.
* :func:`saved_bytes_per_element` counts what autograd keeps alive for backward.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor
from torch.utils.benchmark import Timer


def median(values: Sequence[float]) -> float:
    """The median of ``values`` (``nan`` when empty)."""
    return float(statistics.median(values)) if values else float("nan")


def round_ratios(times: Mapping[str, Sequence[float]], key: str, against: str) -> list[float]:
    """``key``'s time over ``against``'s, round by round (the rounds of
    :func:`time_interleaved` pair them: a slow spell of the machine cancels)."""
    return [a / b for a, b in zip(times[key], times[against], strict=True)]


def time_once(fn: Callable[[], Any], *, min_run_time: float, threads: int) -> float:
    """Seconds per call of ``fn``: the median block of one ``blocked_autorange``."""
    timer = Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
    return float(timer.blocked_autorange(min_run_time=min_run_time).median)


def time_interleaved(
    candidates: Mapping[str, Callable[[], Any]],
    *,
    rounds: int,
    min_run_time: float,
    threads: int,
    rng: random.Random,
    after_round: Callable[[int], None] | None = None,
) -> dict[str, list[float]]:
    """Seconds per call of every candidate, one figure per round.

    Each round times every candidate once (``blocked_autorange`` with ``min_run_time``),
    in an order shuffled by ``rng``. Take :func:`median` of each list.
    """
    names = list(candidates)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[:]
        rng.shuffle(order)
        for name in order:
            times[name].append(
                time_once(candidates[name], min_run_time=min_run_time, threads=threads)
            )
        if after_round is not None:
            after_round(r)
    return times


def page_faults_per_call(fn: Callable[[], Any], *, calls: int = 3) -> float | None:
    """Minor page faults per call of ``fn`` (``None`` where the OS does not count them).

    Large CPU allocations are served by ``mmap`` and faulted in page by page on first
    touch; this counts how often a call pays for fresh memory.
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None

    def faults() -> int:
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    before = faults()
    for _ in range(calls):
        fn()
    return (faults() - before) / calls


def saved_bytes_per_element(fn: Callable[[Tensor], Tensor], x: Tensor) -> float:
    """Bytes autograd saves for backward when ``fn(x)`` runs, per element of ``x``.

    Counts each distinct storage once, by its full size: a saved view of the input keeps
    the whole input alive, so it counts as the input's bytes.
    """
    y, saved = call_counting_saved(fn, x)
    del y
    return saved


def call_counting_saved(fn: Callable[[Tensor], Tensor], x: Tensor) -> tuple[Tensor, float]:
    """``fn(x)`` and the bytes autograd saved for its backward per element of ``x``.

    Counted as :func:`saved_bytes_per_element` counts them.
    """
    storages: dict[tuple[int, int], int] = {}

    def pack(t: Tensor) -> Tensor:
        storage = t.untyped_storage()
        storages[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
        return t

    def unpack(t: Tensor) -> Tensor:
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = fn(x)
    return y, sum(storages.values()) / max(x.numel(), 1)


def grad_step(fn: Callable[[Tensor], Tensor], x: Tensor, g: Tensor) -> Callable[[], None]:
    """The timed statement: ``y = fn(x); torch.autograd.grad(y, x, g)``."""

    def step() -> None:
        y = fn(x)
        torch.autograd.grad(y, x, g)

    return step


def copy_floors(x: Tensor) -> dict[str, Callable[[], None]]:
    """The floor of an op on ``x``: the two tensors of ``x``'s size it must write (forward
    output and input gradient), as plain copies into preallocated (``"floor"``) or freshly
    allocated (``"floor_alloc"``) tensors."""
    source = x.detach()
    out, grad_in = torch.empty_like(source), torch.empty_like(source)

    def floor() -> None:
        out.copy_(source)
        grad_in.copy_(source)

    def floor_alloc() -> None:
        torch.empty_like(source).copy_(source)
        torch.empty_like(source).copy_(source)

    return {"floor": floor, "floor_alloc": floor_alloc}


def compile_warm(
    fn: Callable[[Tensor], Tensor], x: Tensor, g: Tensor
) -> tuple[Callable[[Tensor], Tensor], bool]:
    """``torch.compile(fn, fullgraph=True)``, or with graph breaks if that fails; warmed up.

    Returns the compiled function and whether it compiled as one graph.
    """
    for fullgraph in (True, False):
        compiled = torch.compile(fn, fullgraph=fullgraph, dynamic=False)
        try:
            y = compiled(x)
            torch.autograd.grad(y, x, g)
        except Exception:
            if not fullgraph:
                raise
            continue
        return compiled, fullgraph
    raise AssertionError("unreachable")  # pragma: no cover


def ms(seconds: float) -> float:
    """Seconds to milliseconds."""
    return seconds * 1e3


def compare_to_best(
    hg_key: str,
    alternatives: Sequence[Any],
    medians: dict[str, float],
    times: dict[str, list[float]],
) -> dict[str, Any]:
    """hardgrad's time against the fastest timed alternative (objects with ``key``, ``label``).

    Gives the median ratio, the per-round ratios (rounds are interleaved, so they cancel slow
    drifts of the machine), the multiple of the copy floor, and the ratio over the quiet
    rounds: the floor, timed in every round, probes contention, and a round whose floor took
    more than twice its fastest round shared the cores with another process.
    """
    timed = [a for a in alternatives if a.key in medians]
    hg_ms = medians.get(hg_key, float("nan"))
    floor = times["floor"]
    quiet = [i for i, t in enumerate(floor) if t <= 2 * min(floor)]
    summary: dict[str, Any] = {
        "hardgrad_ms": hg_ms,
        "best_alternative": None,
        "best_alternative_label": None,
        "best_alternative_ms": float("nan"),
        "ratio": float("nan"),
        "round_ratios": [],
        "rounds_faster": 0,
        "x_floor": hg_ms / medians["floor"],
        "quiet_rounds": len(quiet),
        "quiet_ratio": float("nan"),
    }
    if timed and hg_key in times:
        best = min(timed, key=lambda a: medians[a.key])
        paired = round_ratios(times, hg_key, best.key)
        summary.update(
            best_alternative=best.key,
            best_alternative_label=best.label,
            best_alternative_ms=medians[best.key],
            ratio=hg_ms / medians[best.key],
            round_ratios=paired,
            rounds_faster=sum(r <= 1.0 for r in paired),
        )
        if quiet:
            summary["quiet_ratio"] = median([times[hg_key][i] for i in quiet]) / median(
                [times[best.key][i] for i in quiet]
            )
    return summary
