"""Gumbel-Rao's cost against its number of draws ``k``: the ``speed`` task's k sweep.

Gumbel-Rao (Paulus et al. 2021, https://arxiv.org/abs/2010.04838) averages ST-Gumbel's
backward over ``k`` draws of the Gumbels conditioned on the sample, so its cost should grow
linearly in ``k`` and nothing else: per forward+backward call this times
``hg.categorical`` (on ``matrix`` logits) and ``hg.bernoulli`` (on ``N * C`` log-odds) for
each ``k`` next to ST-Gumbel (the same backward with the one unconditioned draw),
interleaved, with the bytes autograd saves per element and the minor page faults per call
(fresh memory): neither should grow with ``k``, as the draws are visited in blocks (see
:mod:`hardgrad.estimators._gumbel_rao_draws`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ...estimators import GumbelRao
from ...stochastic import bernoulli as hg_bernoulli
from ...stochastic import categorical as hg_categorical
from .._task import BenchSettings, Table
from .._timing import (
    grad_step,
    median,
    ms,
    page_faults_per_call,
    saved_bytes_per_element,
    time_interleaved,
)

__all__ = ["rao_table", "run_rao_sweep"]

KINDS = ("categorical", "bernoulli")


def _sampler(kind: str, estimator: Any, generator: torch.Generator) -> Callable[[Tensor], Tensor]:
    if kind == "categorical":
        return lambda x: hg_categorical(x, estimator=estimator, generator=generator)
    return lambda x: hg_bernoulli(x, estimator=estimator, generator=generator)


def run_rao_sweep(
    ks: tuple[int, ...],
    matrix: tuple[int, int],
    rounds: int,
    min_run_time: float,
    settings: BenchSettings,
    rng: random.Random,
) -> dict[str, Any]:
    """Time, saved bytes and page faults of Gumbel-Rao for each ``k`` and of ST-Gumbel,
    for both unit kinds; ``results.json``'s ``gumbel_rao``."""
    device = torch.device(settings.device)
    rows, cols = matrix
    out: dict[str, Any] = {"ks": list(ks)}
    for kind in KINDS:
        shape = (rows, cols) if kind == "categorical" else (rows * cols,)
        source = torch.Generator().manual_seed(settings.seed)
        x = torch.randn(shape, generator=source).to(device).requires_grad_()
        g = torch.randn(shape, generator=source).to(device)
        generator = torch.Generator(device).manual_seed(settings.seed)
        estimators: dict[str, Any] = {"st_gumbel": "st_gumbel"}
        estimators.update({f"k={k}": GumbelRao(k=k) for k in ks})
        fns = {name: _sampler(kind, est, generator) for name, est in estimators.items()}
        steps = {name: grad_step(fn, x, g) for name, fn in fns.items()}
        record: dict[str, dict[str, Any]] = {}
        for name, fn in fns.items():
            steps[name]()  # warm-up
            record[name] = {
                "saved_bytes_per_element": saved_bytes_per_element(fn, x),
                "page_faults": page_faults_per_call(steps[name], calls=1),
            }
        times = time_interleaved(
            steps,
            rounds=rounds,
            min_run_time=min_run_time,
            threads=torch.get_num_threads(),
            rng=rng,
        )
        for name, seconds in times.items():
            record[name]["ms"] = ms(median(seconds))
            record[name]["rounds_ms"] = [ms(s) for s in seconds]
        out[kind] = {"shape": list(shape), "candidates": record}
    return out


def rao_table(data: dict[str, Any]) -> Table:
    """One row per unit kind and ``k`` (ST-Gumbel first): ms per call, its ratio to
    ST-Gumbel, the extra ms per draw, saved bytes and page faults."""
    table = Table(
        title="Gumbel-Rao against k: forward+backward per call (median over rounds)",
        columns=[
            "unit",
            "estimator",
            "ms",
            "× ST-Gumbel",
            "ms per draw over ST-Gumbel",
            "bytes/elt saved",
            "page faults/call",
        ],
    )
    for kind in KINDS:
        entry = data.get(kind)
        if entry is None:
            continue
        record = entry["candidates"]
        base = record["st_gumbel"]["ms"]
        unit = f"{kind} {tuple(entry['shape'])}"
        for name, row in record.items():
            k = None if name == "st_gumbel" else int(name.split("=", 1)[1])
            per_draw = "" if k is None else f"{(row['ms'] - base) / k:.3f}"
            faults = row["page_faults"]
            table.rows.append(
                [
                    unit,
                    "ST-Gumbel" if k is None else f"gumbel_rao, k = {k}",
                    f"{row['ms']:.3f}",
                    f"{row['ms'] / base:.2f}",
                    per_draw,
                    f"{row['saved_bytes_per_element']:g}",
                    "n/a" if faults is None else f"{faults:,.0f}",
                ]
            )
    table.notes.append(
        "Cost linear in k: the ms per draw over ST-Gumbel stays flat. Memory does not grow "
        "with k: the draws are visited in blocks of at most 1 MB. The categorical unit saves "
        "its logits and sample (8 bytes per element) and its backward replays the draws from "
        "the generator state the forward saved (the forward skips the generator past them, "
        "so the stream is that of one draw of all k: an extra 2 ns per uniform); the "
        "Bernoulli unit computes its per-unit slope in the forward and saves only that (4 "
        "bytes). The page faults are those of the call's output-sized tensors, as for "
        "ST-Gumbel's."
    )
    return table
