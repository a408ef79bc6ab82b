"""The ``l0`` benchmark: a tiny run end to end."""

from __future__ import annotations

from hardgrad.bench import TASKS, BenchSettings, run_tasks
from hardgrad.bench.l0 import L0Config
from hardgrad.bench.report import PlainProgress


def test_tiny_run(tmp_path):
    assert "l0" in TASKS.names()
    config = L0Config(lambdas=(0.0, 50.0), steps=30, seeds=2, hidden=16, gate_lr=0.2)
    (result,) = run_tasks(
        ["l0"], BenchSettings(quick=True, out=tmp_path), configs={"l0": config},
        progress=PlainProgress(),
    )  # fmt: skip
    assert [row[0] for row in result.tables[0].rows] == ["0", "50"]
    rows = result.data["rows"]
    for row in rows:
        assert 0 <= row["accuracy"]["mean"] <= 1 and 0 <= row["weight_sparsity"]["mean"] <= 1
    assert rows[0]["gate_sparsity"]["mean"] == 0.0  # no penalty, 30 steps: nothing pruned
    assert rows[1]["gate_sparsity"]["mean"] > 0.0
    assert any("lambda" in note for note in result.notes)
    assert result.figures == ["l0.png"] and (tmp_path / "l0.png").stat().st_size > 0
