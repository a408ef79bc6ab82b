"""The ``shortest-path`` benchmark: the Dijkstra solver against brute force, and a tiny run."""

from __future__ import annotations

import itertools
import json

import pytest
import torch

pytest.importorskip("scipy")

from hardgrad.bench import TASKS, BenchSettings, run_tasks
from hardgrad.bench.report import PlainProgress
from hardgrad.bench.shortest_path import (
    METHODS,
    ShortestPathConfig,
    grid_shortest_path,
)


def brute_force(c: torch.Tensor) -> float:
    """The cheapest right/down path's cost, over all C(2k-2, k-1) paths."""
    k = c.shape[-1]
    best = float("inf")
    for downs in itertools.combinations(range(2 * k - 2), k - 1):
        r = col = 0
        total = float(c[0, 0])
        for step in range(2 * k - 2):
            r, col = (r + 1, col) if step in downs else (r, col + 1)
            total += float(c[r, col])
        best = min(best, total)
    return best


def test_dijkstra_is_optimal_for_any_sign():
    g = torch.Generator().manual_seed(0)
    c = torch.randn(30, 5, 5, generator=g, dtype=torch.float64) * 3
    y = grid_shortest_path(c)
    assert y.shape == c.shape and y.dtype == c.dtype
    assert torch.equal(y.sum((1, 2)), torch.full((30,), 9.0, dtype=torch.float64))
    assert torch.equal(y[:, 0, 0], torch.ones(30, dtype=torch.float64))
    for i in range(30):
        assert float((y[i] * c[i]).sum()) == pytest.approx(brute_force(c[i]), abs=1e-9)


def test_tiny_run(tmp_path):
    assert "shortest-path" in TASKS.names()
    config = ShortestPathConfig(steps=4, seeds=2, train=40, test=30, num_samples=2, plot=False)
    (result,) = run_tasks(
        ["shortest-path"], BenchSettings(quick=True, out=tmp_path),
        configs={"shortest-path": config}, progress=PlainProgress(),
    )  # fmt: skip
    assert [row[0] for row in result.tables[0].rows] == list(METHODS)
    for row in result.data["rows"]:
        assert row["regret"]["mean"] >= 0 and 0 <= row["optimal"]["mean"] <= 1
        assert row["ms_per_step"]["mean"] > 0
    assert any("vs identity" in note for note in result.notes)
    assert json.loads((tmp_path / "results.json").read_text())
