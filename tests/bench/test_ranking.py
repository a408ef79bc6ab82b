"""The ``ranking`` benchmark: a tiny run end to end."""

from __future__ import annotations

from hardgrad.bench import TASKS, BenchSettings, run_tasks
from hardgrad.bench.ranking import METHODS, RankingConfig
from hardgrad.bench.report import PlainProgress


def test_tiny_run(tmp_path):
    assert "ranking" in TASKS.names()
    config = RankingConfig(steps=3, seeds=2, train=20, test=10, items=5)
    (result,) = run_tasks(
        ["ranking"], BenchSettings(quick=True, out=tmp_path), configs={"ranking": config},
        progress=PlainProgress(),
    )  # fmt: skip
    assert [row[0] for row in result.tables[0].rows] == list(METHODS)
    for row in result.data["rows"]:
        assert -1 <= row["spearman"]["mean"] <= 1 and 0 <= row["exact"]["mean"] <= 1
