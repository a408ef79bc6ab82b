"""The ``vq`` benchmark: a tiny run end to end (every variant, the table and the notes)."""

from __future__ import annotations

import json

from hardgrad.bench import TASKS, BenchSettings, run_tasks
from hardgrad.bench.report import PlainProgress
from hardgrad.bench.vq import VARIANTS, VQConfig


def test_tiny_run(tmp_path, capsys):
    assert "vq" in TASKS.names()
    config = VQConfig(steps=5, seeds=2, plot=False)
    (result,) = run_tasks(
        ["vq"], BenchSettings(quick=True, out=tmp_path), configs={"vq": config},
        progress=PlainProgress(),
    )  # fmt: skip
    assert [row[0] for row in result.tables[0].rows] == list(VARIANTS)
    assert any("Rotation trick vs STE" in note for note in result.notes)
    assert any("FSQ" in note for note in result.notes)
    for row in result.data["rows"]:
        assert 0 <= row["usage"]["mean"] <= 1 and row["ms_per_step"]["mean"] > 0
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved
