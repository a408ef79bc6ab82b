"""The ``policy`` benchmark: a tiny run end to end, and its verdict."""

from __future__ import annotations

import math

from hardgrad.bench import TASKS, BenchSettings, run_tasks
from hardgrad.bench.policy import PolicyConfig
from hardgrad.bench.report import PlainProgress
from hardgrad.bench.verdict import derive


def test_tiny_run(tmp_path):
    assert "policy" in TASKS.names()
    config = PolicyConfig(length=4, hidden=8, estimators=("rloo", "grpo", "dr-grpo", "reinforce-ema"),
                          group_sizes=(2, 4), sequences=2048, steps=3, eval_step=2, batch=8,
                          seeds=2)  # fmt: skip
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
    start, target = result.data["initial_reward"], result.data["target_reward"]
    assert start < target < result.data["max_reward"]
    for r in rows:
        assert set(r["training"]) == {"adam", "sgd"}
        for run in r["training"].values():
            assert math.isfinite(run["reward_at"]["mean"]) and run["reward_at"]["std"] >= 0
            assert run["reward_at"]["mean"] > start  # 3 steps of training help
            assert run["runs"] == 2 and 0 <= run["reached"] <= 2
            assert all(s is None or 1 <= s <= config.steps for s in run["steps"])
    # Adam ignores a constant scale: Dr. GRPO is RLOO times (n-1)/n, so the runs coincide
    for n in (2, 4):
        a, b = by["rloo", n]["training"]["adam"], by["dr-grpo", n]["training"]["adam"]
        assert abs(a["reward_at"]["mean"] - b["reward_at"]["mean"]) < 1e-6
    # ... while SGD takes (n-1)/n of RLOO's step: at n = 2 half, so it gains less
    a, b = by["rloo", 2]["training"]["sgd"], by["dr-grpo", 2]["training"]["sgd"]
    assert b["reward_at"]["mean"] < a["reward_at"]["mean"]
    assert len(result.tables[0].rows) == 8 and any("n = 2:" in n for n in result.notes)
    training = result.tables[1]
    assert len(training.rows) == 8 and training.columns[2].startswith("E[R] @ 2 Adam")
    assert result.figures == ["policy.png"] and (tmp_path / "policy.png").stat().st_size > 0
    verdict = derive("policy", result.summary, result.data, result.settings)
    assert [c.text for c in verdict.claims][-1] == "Dr. GRPO and RLOO remove the tilt"
    assert "E[R]" in verdict.winner and "after 2 adam steps" in verdict.winner
