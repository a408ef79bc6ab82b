"""Timing and memory helpers shared by the benchmarks.

* :func:`time_interleaved` times several candidates in rounds, each candidate once per
  round in a shuffled order, so slow drifts of a noisy machine (page faults, frequency,
  neighbours) hit every candidate alike; the figure kept is the median over rounds.
  A time budget (``budget_s``, or :func:`round_budget` around a whole benchmark) caps the
  rounds, so that a loaded machine, where every round takes longer, does not stretch a
  comparison without end: the rounds stop once the next one would end past the budget
  (after at least :data:`MIN_ROUNDS`).
* :func:`ratio_interval` gives a distribution-free confidence interval of the median of
  the per-round ratios; :func:`ratio_verdict` calls a ratio "unresolved (noise)" when that
  interval straddles 1.
* :func:`saved_bytes_per_element` counts what autograd keeps alive for backward.
"""

from __future__ import annotations

import contextlib
import math
import random
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextvars import ContextVar
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


#: The fewest rounds a time budget leaves a comparison (a median and a spread need some).
MIN_ROUNDS = 3

_BUDGET: ContextVar[float | None] = ContextVar("hardgrad_bench_round_budget", default=None)


@contextlib.contextmanager
def round_budget(seconds: float | None) -> Iterator[None]:
    """Within the block, every :func:`time_interleaved` call not given ``budget_s`` stops
    its rounds after about ``seconds`` of wall time (``None``: no budget)."""
    if seconds is not None and not seconds > 0:
        raise ValueError(f"round_budget: seconds must be > 0 or None, but found {seconds!r}")
    token = _BUDGET.set(seconds)
    try:
        yield
    finally:
        _BUDGET.reset(token)


def time_interleaved(
    candidates: Mapping[str, Callable[[], Any]],
    *,
    rounds: int,
    min_run_time: float,
    threads: int,
    rng: random.Random,
    after_round: Callable[[int], None] | None = None,
    budget_s: float | None = None,
    clock: Callable[[], float] = time.perf_counter,
    timer: Callable[..., float] | None = None,
) -> dict[str, list[float]]:
    """Seconds per call of every candidate, one figure per round.

    Each round times every candidate once (``blocked_autorange`` with ``min_run_time``),
    in an order shuffled by ``rng``. Take :func:`median` of each list.

    At most ``rounds`` rounds; with a time budget (``budget_s``, else the one of an
    enclosing :func:`round_budget`) fewer: after :data:`MIN_ROUNDS` rounds, none is
    started that would end (at the mean round time so far) more than ``budget_s`` seconds
    of ``clock`` after the first began. The lists are as long as the rounds run. ``timer``
    replaces :func:`time_once` (tests).
    """
    budget = budget_s if budget_s is not None else _BUDGET.get()
    measure = timer if timer is not None else time_once
    names = list(candidates)
    times: dict[str, list[float]] = {name: [] for name in names}
    start = clock()
    for r in range(rounds):
        if budget is not None and r >= MIN_ROUNDS:
            elapsed = clock() - start
            if elapsed + elapsed / r > budget:
                break
        order = names[:]
        rng.shuffle(order)
        for name in order:
            times[name].append(
                measure(candidates[name], min_run_time=min_run_time, threads=threads)
            )
        if after_round is not None:
            after_round(r)
    return times


#: Confidence of :func:`ratio_interval` (where the rounds allow it).
CONFIDENCE = 0.95


def ratio_interval(ratios: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """A confidence interval of the median of ``ratios`` from their order statistics.

    The interval ``[r_(k), r_(n+1-k)]`` of the sorted ratios covers the median with
    probability ``1 - 2 P(Binomial(n, 1/2) < k)`` whatever their distribution; ``k`` is
    the largest that keeps this at least ``confidence``. With fewer than 6 rounds no ``k``
    does, and the interval is ``[min, max]`` (coverage ``1 - 2^(1-n)``: 75 % for 3 rounds,
    94 % for 5). ``(nan, nan)`` for no ratios.
    """
    values = sorted(r for r in ratios if r == r)
    n = len(values)
    if n == 0:
        return float("nan"), float("nan")

    def coverage(k: int) -> float:  # 1 - 2 P(Binomial(n, 1/2) < k)
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2**n

    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= confidence:
        k += 1
    return values[k - 1], values[n - k]


#: What :func:`ratio_verdict` calls a ratio whose interval straddles 1.
UNRESOLVED = "unresolved (noise)"


def ratio_verdict(ratios: Sequence[float]) -> str:
    """``"faster"`` (the interval of :func:`ratio_interval` at or below 1), ``"slower"``
    (above 1), :data:`UNRESOLVED` (it straddles 1) or ``"n/a"`` (no rounds)."""
    low, high = ratio_interval(ratios)
    if low != low:
        return "n/a"
    if high <= 1.0:
        return "faster"
    if low > 1.0:
        return "slower"
    return UNRESOLVED


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
    more than twice its fastest round shared the cores with another process. ``ratio_ci`` is
    the confidence interval of :func:`ratio_interval` over the per-round ratios and
    ``verdict`` that of :func:`ratio_verdict` (``"unresolved (noise)"`` when it straddles 1).
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
        "rounds": len(floor),
        "ratio_ci": [float("nan"), float("nan")],
        "verdict": "n/a",
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
            ratio_ci=list(ratio_interval(paired)),
            verdict=ratio_verdict(paired),
        )
        if quiet:
            summary["quiet_ratio"] = median([times[hg_key][i] for i in quiet]) / median(
                [times[best.key][i] for i in quiet]
            )
    return summary
