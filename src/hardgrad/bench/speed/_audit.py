"""The cost of :func:`hardgrad.diagnostics.audit`: one training step with and without it.

The step is an MLP classifier step on a batch (forward with hardgrad ops, cross-entropy,
backward), timed in interleaved rounds as itself and wrapped in ``with audit():``. Two
sizes show the two regimes: a small batch, where the per-call cost of the watcher (a
Python ``__torch_function__`` per torch call) shows, and a large one, where the kernels
dominate.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ... import ops as _ops
from ...diagnostics import audit
from .._task import BenchSettings, Table
from .._timing import median, round_ratios, time_interleaved

#: (label, batch, width) of the MLP steps timed.
SIZES = (("small", 32, 64), ("large", 1024, 512))


def _step(batch: int, width: int, settings: BenchSettings, seed: int) -> Callable[[], None]:
    generator = torch.Generator().manual_seed(seed)
    device = settings.device
    model = torch.nn.Sequential(
        torch.nn.Linear(64, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
        torch.nn.ReLU(), torch.nn.Linear(width, 10),
    ).to(device)  # fmt: skip
    x = torch.randn(batch, 64, generator=generator).to(device)
    y = torch.randint(0, 10, (batch,), generator=generator).to(device)

    def step() -> None:
        h = model[1](model[0](x))
        h = _ops.clamp(_ops.round(h * 4) / 4, 0.0, 2.0)  # hard ops on the hidden layer
        logits = model[4](model[3](model[2](h)))
        loss = F.cross_entropy(logits, y)
        model.zero_grad(set_to_none=True)
        loss.backward()

    return step


def run_audit_overhead(
    settings: BenchSettings, rounds: int, min_run_time: float, rng: random.Random
) -> dict[str, Any]:
    """Median seconds per step with and without ``audit()``, per size, and their ratio."""
    results: dict[str, Any] = {}
    for label, batch, width in SIZES:
        step = _step(batch, width, settings, settings.seed)

        def audited(step: Callable[[], None] = step) -> None:
            with audit():
                step()

        with audit() as report:  # the watched step must be clean: nothing to report
            step()
        times = time_interleaved(
            {"plain": step, "audit": audited},
            rounds=rounds,
            min_run_time=min_run_time,
            threads=settings.threads,
            rng=rng,
        )
        plain, watched = median(times["plain"]), median(times["audit"])
        ratios = round_ratios(times, "audit", "plain")
        results[label] = {
            "batch": batch,
            "width": width,
            "plain_ms": plain * 1e3,
            "audit_ms": watched * 1e3,
            "ratio": watched / plain,
            "round_ratios": ratios,
            "torch_calls_watched": report.ops_seen,
            "findings": len(report.findings),
        }
    return results


def audit_table(results: dict[str, Any]) -> Table:
    table = Table(
        "audit() overhead: one MLP training step (forward with hg.round/hg.clamp, "
        "cross-entropy, backward)",
        ["step", "batch x width", "torch calls", "plain ms", "under audit() ms", "ratio"],
    )
    for label, r in results.items():
        table.rows.append(
            [
                label,
                f"{r['batch']} x {r['width']}",
                str(r["torch_calls_watched"]),
                f"{r['plain_ms']:.3f}",
                f"{r['audit_ms']:.3f}",
                f"{r['ratio']:.2f}",
            ]
        )
    table.notes.append(
        "The watcher runs a Python check per torch call made in the block; the cost per step is "
        "about constant, so it matters for tiny steps and fades for real ones."
    )
    return table
