"""The ``moe`` benchmark: a tiny run end to end (every estimator, the table and the notes)."""

from __future__ import annotations

import json

from hardgrad.bench import TASKS, BenchSettings, run_tasks
from hardgrad.bench.moe import ESTIMATORS, MoEConfig, _flops, _matching_accuracy


def test_tiny_run(tmp_path):
    assert "moe" in TASKS.names()
    config = MoEConfig(
        steps=4,
        seeds=2,
        probes=2,
        draws=4,
        test_tokens=64,
        batch_size=16,
        timing_rounds=1,
        plot=False,
    )
    from hardgrad.bench.report import PlainProgress

    (result,) = run_tasks(
        ["moe"], BenchSettings(quick=True, out=tmp_path), configs={"moe": config},
        progress=PlainProgress(),
    )  # fmt: skip
    table = result.tables[0]
    assert [row[0] for row in table.rows] == list(ESTIMATORS)
    assert table.rows[0][-2:] == ["1.00", "1.00"]  # sparse relative to itself
    assert any(note.startswith("DenseMixer (dense) vs sparse, 2 seed(s)") for note in result.notes)
    assert any(note.startswith("Default MoE (default) vs sparse") for note in result.notes)
    rows = {row["estimator"]: row for row in result.data["rows"]}
    assert rows["exact"]["bias"]["mean"] < 1e-6  # the reference against itself
    assert abs(rows["exact"]["cosine"]["mean"] - 1) < 1e-6
    for row in rows.values():
        assert 0 <= row["accuracy"]["mean"] <= 1 and row["ms_per_step"]["mean"] > 0
    assert json.loads((tmp_path / "results.json").read_text())


def test_flops_and_matching():
    config = MoEConfig()
    assert _flops("dense", config) / _flops("sparse", config) == 2.0  # 3k + (E - k) vs 3k
    assert _flops("exact", config) / _flops("sparse", config) == 28.0
    import torch

    z = torch.tensor([0, 0, 1, 1, 2])
    assert _matching_accuracy(torch.tensor([2, 2, 0, 0, 1]), z, 3) == 1.0  # a relabelling
    assert _matching_accuracy(torch.tensor([0, 0, 0, 0, 0]), z, 3) == 0.4


def test_paired_differences():
    from hardgrad.bench.moe import _paired, _paired_table

    runs = lambda values: [{"test_mse": v, "accuracy": v, "cosine": v} for v in values]  # noqa: E731
    rows = {
        "sparse": {"runs": runs([1.0, 2.0, 3.0])},
        "dense": {"runs": runs([1.5, 2.5, 3.6])},
    }
    mean, se = _paired(rows, "dense", "test_mse")
    assert abs(mean - 0.5333333) < 1e-6 and abs(se - 0.0333333) < 1e-6
    table = _paired_table(rows, MoEConfig(seeds=3))
    assert table.rows[0][0] == "dense" and table.rows[0][1].endswith("*")
