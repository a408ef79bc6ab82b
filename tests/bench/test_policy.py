"""The ``policy`` benchmark: a tiny run end to end, and its verdict."""

from __future__ import annotations

from hardgrad.bench import TASKS, BenchSettings, run_tasks
from hardgrad.bench.policy import PolicyConfig
from hardgrad.bench.report import PlainProgress
from hardgrad.bench.verdict import derive


def test_tiny_run(tmp_path):
    assert "policy" in TASKS.names()
    config = PolicyConfig(length=4, hidden=8, estimators=("rloo", "grpo", "dr-grpo", "reinforce-ema"),
                          group_sizes=(2, 4), sequences=2048, steps=3, batch=8)  # fmt: skip
    (result,) = run_tasks(
        ["policy"], BenchSettings(quick=True, out=tmp_path), configs={"policy": config},
        progress=PlainProgress(),
    )  # fmt: skip
    rows = result.data["rows"]
    assert [(r["estimator"], r["group_size"]) for r in rows][:4] == [
        ("rloo", 2), ("grpo", 2), ("dr-grpo", 2), ("reinforce-ema", 2)
    ]  # fmt: skip
    by = {(r["estimator"], r["group_size"]): r for r in rows}
    assert abs(by["dr-grpo", 4]["scale"] - 0.75) < 0.1 and abs(by["rloo", 4]["scale"] - 1) < 0.15
    assert by["grpo", 2]["scale"] < 0.5  # std and length scaling shrink it
    for r in rows:
        assert r["final_reward"]["mean"] > result.data["initial_reward"]  # training helps
    assert len(result.tables[0].rows) == 8 and any("n = 2:" in n for n in result.notes)
    assert result.figures == ["policy.png"] and (tmp_path / "policy.png").stat().st_size > 0
    verdict = derive("policy", result.summary, result.data, result.settings)
    assert [c.text for c in verdict.claims][-1] == "Dr. GRPO and RLOO remove the tilt"
    assert "E[R]" in verdict.winner
