"""The ``poly`` benchmark: closed-form loss, sample budgets, tiny in-process runs."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

import hardgrad as hg
import hardgrad.bench.poly  # registers the task
from hardgrad.bench import BenchSettings, run_tasks
from hardgrad.bench.poly import (
    PolyConfig,
    default_config,
    exact_loss,
    num_samples_for,
    optimum,
    st_stall_probability,
)
from hardgrad.bench.report import PlainProgress
from hardgrad.estimators import get

T = 0.45


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


@pytest.mark.parametrize("power", [1.5, 2.0, 3.0])
def test_exact_loss_against_enumeration(power: float) -> None:
    """The closed form against the sum over all 2^5 configurations of 5 bits."""
    probs = torch.tensor(
        [[0.1, 0.5, 0.93, 0.0, 0.7], [0.2, 0.2, 0.4, 1.0, 0.05]], dtype=torch.float64
    )
    expected = torch.zeros(2, dtype=torch.float64)
    for bits in itertools.product((0.0, 1.0), repeat=5):
        z = torch.tensor(bits, dtype=torch.float64)
        weight = torch.where(z == 1, probs, 1 - probs).prod(-1)
        expected += weight * (z - T).abs().pow(power).mean()
    torch.testing.assert_close(exact_loss(probs, power, T), expected)
    # Optimum: every probability 0; the literature's values.
    assert float(exact_loss(torch.zeros(4, dtype=torch.float64), power, T)) == pytest.approx(
        optimum(power, T), rel=1e-12
    )
    assert optimum(power) == pytest.approx(
        {1.5: 0.301869, 2.0: 0.2025, 3.0: 0.091125}[power], abs=5e-7
    )
    # Several powers at once broadcast over the leading dimension.
    both = exact_loss(probs, torch.tensor([power, 2.0], dtype=torch.float64), T)
    assert float(both[0]) == pytest.approx(float(expected[0]))


def test_straight_through_stalls_where_the_closed_form_says() -> None:
    """ST's mean gradient, measured through hg.expectation, vanishes at the stall point
    (and is clearly nonzero at p = 1/2, where it points towards the optimum)."""
    power, m = 3.0, 2**15
    gen = torch.Generator().manual_seed(0)
    pi = st_stall_probability(power, T)

    def mean_grad(prob: float) -> tuple[float, float]:
        logits = torch.full(
            (m, 1), math.log(prob / (1 - prob)), dtype=torch.float64, requires_grad=True
        )
        value = hg.expectation(
            lambda z: (z - T).abs().pow(power).mean(-1), logits, estimator="st", generator=gen
        )
        value.sum().backward()
        assert logits.grad is not None
        return float(logits.grad.mean()), float(logits.grad.std()) / math.sqrt(m)

    at_stall, se = mean_grad(pi)
    at_half, _ = mean_grad(0.5)
    assert abs(at_stall) < 4.5 * se
    assert at_half > 20 * se  # the gradient pushes p down, towards the optimum


def test_sample_budgets() -> None:
    assert num_samples_for(get("st"), 64) == 64
    assert num_samples_for(get("disarm"), 64) == 64
    assert num_samples_for(get("disarm"), 1) == 2  # at least one pair
    assert num_samples_for(get("rloo"), 1) == 2
    assert num_samples_for(get("rebar"), 64) == 21  # 3 evaluations per draw: 63
    assert default_config(True).steps < default_config(False).steps == 8000
    assert default_config(False).batch == 64 and default_config(False).lr == 1e-3


def test_exact_and_unknown_estimators_are_rejected() -> None:
    for names in (("st", "exact"), ("nope",)):
        config = PolyConfig(steps=2, estimators=names)
        with pytest.raises(ValueError, match="Unknown estimator"):
            run_tasks(["poly"], BenchSettings(threads=1), configs={"poly": config})


TINY = PolyConfig(
    variables=16,
    batch=8,
    steps=30,
    seeds=2,
    record_every=10,
    lr=0.05,
    estimators=("st", "disarm", "rebar", "reinforce(ema)"),
)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, dict[str, Any]]:
    out = tmp_path_factory.mktemp("poly")
    settings = BenchSettings(out=out, seed=2, threads=1)
    (result,) = run_tasks(["poly"], settings, configs={"poly": TINY}, progress=PlainProgress())
    document: dict[str, Any] = json.loads((out / "results.json").read_text())
    return out, result, document


def test_tiny_run_is_complete_and_finite(tiny_run: tuple[Path, Any, dict[str, Any]]) -> None:
    out, result, document = tiny_run
    task = document["tasks"]["poly"]
    data = task["results"]
    assert data["steps"] == [0, 10, 20, 30]
    assert list(data["runs"]) == ["closed-form", *TINY.estimators]
    evaluations = {n: e["evaluations_per_step"] for n, e in data["runs"].items()}
    assert evaluations == {"closed-form": 0, "st": 8, "disarm": 8, "rebar": 6, "reinforce(ema)": 8}
    for name, entry in data["runs"].items():
        assert entry["wall_s"] > 0 and entry["ms_per_step"] > 0
        assert set(entry["powers"]) == {"1.5", "2.0", "3.0"}
        for key, s in entry["powers"].items():
            best = optimum(float(key))
            assert s["optimum"] == pytest.approx(best)
            values = [*s["mean"], *s["min"], *s["max"], *s["final"]]
            assert len(s["mean"]) == 4 and len(s["final"]) == TINY.seeds
            assert all(_finite(v) and v >= best * (1 - 1e-9) for v in values), (name, key)
            # Step 0: every probability 1/2.
            assert s["mean"][0] == pytest.approx(0.5 * (0.55 ** float(key) + best))
            assert _finite(s["gap_mean"]) and _finite(s["final_std"])
    assert "final_tau" in data["runs"]["rebar"]
    # Tables: one per power, one of costs; every run a row.
    assert len(result.tables) == 4
    assert all(len(t.rows) == 5 for t in result.tables)
    assert result.figures == ["poly_curves.png"]
    assert (out / "poly_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    notes = task["notes"]
    assert any(n.startswith("Straight-through") for n in notes)
    assert "| disarm " in (out / "report.md").read_text()


def test_optimisation_heads_to_the_optimum() -> None:
    """Small setting: the closed-form gradient gets within 1 %, DisARM closes most of the
    gap, straight-through ends at its stall point, far from the optimum."""
    config = PolyConfig(
        powers=(2.0,),
        variables=8,
        batch=16,
        steps=250,
        lr=0.04,
        seeds=2,
        record_every=10,
        estimators=("disarm", "st"),
        plot=False,
    )
    (result,) = run_tasks(["poly"], BenchSettings(seed=1, threads=1), configs={"poly": config})
    runs = result.data["runs"]
    reference = runs["closed-form"]["powers"]["2.0"]
    assert all(s is not None for s in reference["steps_within"])
    assert reference["gap_mean"] <= 0.01
    disarm = runs["disarm"]["powers"]["2.0"]
    assert disarm["gap_mean"] < 0.3 * disarm["gap_at_start"]
    st = runs["st"]["powers"]["2.0"]
    stall = result.data["st_stall"]["2.0"]["loss"]
    assert st["final_mean"] == pytest.approx(stall, rel=0.03) and st["gap_mean"] > 0.15
    assert any("approaching the optimum" in n for n in result.notes)


def test_quick_config_leaves_out_only_relax_mlp() -> None:
    quick = default_config(True)
    assert quick.estimators is not None and "relax(mlp)" not in quick.estimators
    assert {"st", "reinmax", "disarm", "rebar", "relax", "reinforce(ema)"} <= set(quick.estimators)
    assert "exact" not in quick.estimators
    assert dataclasses.replace(quick, estimators=None).estimators is None
