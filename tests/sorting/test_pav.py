"""The batched pool-adjacent-violators (hardgrad.sorting._pav) against an independent
sequential PAV (float64 Python scalars; tests/_sorting_references.py): the same blocks, entry for entry, on
the problems the soft sorts solve, at ties, large magnitudes, n = 1 and 2, rows of 1000,
with and without the cascades and the sequential finish."""

from __future__ import annotations

import pytest
import torch

import hardgrad.sorting._pav as pav
from _sorting_references import reference_starts


def problems(x: torch.Tensor, eps: float):
    """(s, w, kl) of soft_rank and soft_sort (descending, as _soft passes them)."""
    n = x.shape[-1]
    rho = torch.arange(n, 0, -1, dtype=torch.float64).expand_as(x).contiguous()
    s = torch.sort(x / eps, -1, descending=True).values
    w = torch.sort(x, -1, descending=True).values
    return [(s, rho, False), (s, rho.log(), True), (rho / eps, w, False), (rho / eps, w, True)]


def check(x: torch.Tensor, eps: float) -> None:
    for s, w, kl in problems(x, eps):
        got = pav.pav_starts(s, w, kl)
        assert got.dtype == torch.int64 and got.shape == s.shape
        for row_s, row_w, row in zip(s.tolist(), w.tolist(), got.tolist(), strict=True):
            assert row == reference_starts(row_s, row_w, kl), (kl, eps)


@pytest.mark.parametrize("eps", [0.01, 0.3, 1.0, 10.0, 300.0])
@pytest.mark.parametrize("n", [1, 2, 3, 37, 100])
def test_blocks_equal_the_sequential_scan(n, eps):
    g = torch.Generator().manual_seed(n)
    x = torch.randn(6, n, generator=g, dtype=torch.float64) * 3
    x[1] = torch.round(x[1])  # ties
    x[2, ::2] = x[2, 0]  # many equal entries
    x[3] = 0.25  # constant row: one block (rank) or none pooled (sort)
    check(x, eps)


@pytest.mark.parametrize("scale", [1e-6, 1e6, 1e30])
def test_blocks_at_large_and_small_magnitudes(scale):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 50, generator=g, dtype=torch.float64) * scale
    x[0, :3] = torch.tensor([scale * 1e3, -scale * 1e3, 0.0], dtype=torch.float64)
    # kl with |s| in the 1e30s: exp of the differences is 0 or 1, as in the scan.
    check(x, 1.0)


def test_rows_of_1000_and_the_sequential_finish(monkeypatch):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 1000, generator=g, dtype=torch.float64)
    for eps in (0.05, 1.0, 100.0):
        check(x, eps)
    # One batched pass, then the Python scan over the blocks left.
    monkeypatch.setattr(pav, "MAX_PASSES", 1)
    check(x[:, :200], 1.0)
    check(x[:, :200], 100.0)


def test_float32_input_is_read_exactly():
    """Blocks are found in float64 from the float32 values, the same as from their float64
    copies."""
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(3))
    for (s32, w32, kl), (s64, w64, _) in zip(
        problems(x, 0.7), problems(x.double(), 0.7), strict=True
    ):
        assert torch.equal(pav.pav_starts(s32, w32, kl), pav.pav_starts(s64, w64, kl))


def test_empty_and_batched_shapes():
    s = torch.randn(2, 3, 0)
    assert pav.pav_starts(s, s, False).shape == (2, 3, 0)
    s = torch.randn(0, 5)
    assert pav.pav_starts(s, s, True).shape == (0, 5)
    x = torch.randn(2, 3, 40, dtype=torch.float64)
    rho = torch.arange(40, 0, -1, dtype=torch.float64).expand_as(x)
    s = torch.sort(x, -1, descending=True).values
    flat = pav.pav_starts(s.reshape(6, 40), rho.reshape(6, 40), False).reshape(2, 3, 40)
    assert torch.equal(pav.pav_starts(s, rho, False), flat)


@pytest.mark.parametrize("max_passes", [2, 24])
def test_rows_leave_the_passes_when_solved(monkeypatch, max_passes):
    """Rows done after 0, 1 or many passes in one batch (solved rows are set aside between
    passes; the rest go on, or finish sequentially after MAX_PASSES)."""
    monkeypatch.setattr(pav, "MAX_PASSES", max_passes)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(12, 60, generator=g, dtype=torch.float64)
    x[0] = torch.arange(60, dtype=torch.float64) * 100.0  # far apart: no pooling
    x[1] = 0.5  # constant row
    x[2:5] *= 20.0
    for eps in (0.05, 1.0, 30.0):
        check(x, eps)
