"""The ``moe`` benchmark: a tiny run end to end (every estimator, noisy gating and the
capacity rows, the table, the notes and the verdict)."""

from __future__ import annotations

import json
import math

from hardgrad.bench import TASKS, BenchSettings, run_tasks
from hardgrad.bench.moe import ESTIMATORS, MoEConfig, _flops, _matching_accuracy
from hardgrad.bench.verdict import derive


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
    assert table.rows[0][-3:] == ["1.00", "1.00", "-"]  # sparse relative to itself
    assert any(note.startswith("DenseMixer (dense) vs sparse, 2 seed(s)") for note in result.notes)
    assert any(note.startswith("Default MoE (default) vs sparse") for note in result.notes)
    rows = {row["estimator"]: row for row in result.data["rows"]}
    assert rows["exact"]["bias"]["mean"] < 1e-6  # the reference against itself
    assert abs(rows["exact"]["cosine"]["mean"] - 1) < 1e-6
    for row in rows.values():
        assert 0 <= row["accuracy"]["mean"] <= 1 and row["ms_per_step"]["mean"] > 0
        assert math.isfinite(row["test_mse"]["mean"]) and math.isfinite(row["bias"]["mean"])
        assert 0 <= row["dropped_train"]["mean"] <= 1 and 0 <= row["dropped_test"]["mean"] <= 1
    # noisy gating: a stochastic router gradient (std > 0) with a defined cosine
    assert rows["noisy_topk"]["std"]["mean"] > 0 and -1 <= rows["noisy_topk"]["cosine"]["mean"] <= 1
    # nothing is dropped without a capacity; at factor 1.0 the untrained router drops some,
    # and a larger factor never drops more in the same run's test forward
    assert (
        rows["sparse"]["dropped_train"]["mean"] == 0 == rows["noisy_topk"]["dropped_test"]["mean"]
    )
    assert rows["sparse_c1.0"]["dropped_train"]["mean"] > 0
    cells = {row[0]: row[-1] for row in table.rows}
    assert cells["sparse"] == "-" and cells["sparse_c1.0"] != "-"
    assert any(
        note.startswith("Capacity factor 1.0 (sparse_c1.0) vs sparse") for note in result.notes
    )
    verdict = derive("moe", result.summary, result.data, result.settings)
    (claim,) = verdict.claims
    assert claim.text.startswith("capacity 1.0-1.25") and "c 1.25:" in claim.detail
    assert json.loads((tmp_path / "results.json").read_text())


def test_capacity_on_a_skewed_router():
    """The task's capacity rows build the layer with their factor: a router that sends every
    token to experts 0 and 1 drops 3/4 of the assignments at factor 1.0, none without one."""
    import torch

    from hardgrad.bench.moe._train import _build

    config = MoEConfig()
    x = torch.randn(64, config.features, generator=torch.Generator().manual_seed(0))
    for name, expected in (("sparse", 0.0), ("sparse_c1.0", 0.75), ("sparse_c2.0", 0.5)):
        model = _build(name, config, seed=0)
        with torch.no_grad():
            model.router.weight.zero_()
            model.router.weight[:2, 0] = 100.0  # experts 0 and 1 for every token (x_0 > 0)
        model(x.abs())
        assert float(model.dropped_fraction) == expected, name  # capacity 16, then 32, of 64 each


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
