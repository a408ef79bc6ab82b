"""The ``snn`` benchmark: the rate code, the spiking MLP, a tiny run."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

import hardgrad as hg
import hardgrad.bench.snn  # registers the task
from hardgrad.bench import TASKS, BenchSettings, run_tasks
from hardgrad.bench.report import PlainProgress
from hardgrad.bench.snn import SnnConfig, SpikingMLP, _encode, surrogate_choices

TINY = SnnConfig(
    steps=6, hidden=24, epochs=2, seeds=2, batch_size=256, surrogates=("fast_sigmoid", "swish")
)


def test_registered_and_default_surrogates_come_from_the_registry():
    assert "snn" in TASKS.names()
    chosen = surrogate_choices(SnnConfig())
    step = [n for n, cls in hg.surrogates.SURROGATES.items() if "step" in cls.applies_to]
    assert list(chosen) == [*step, "sigmoid25"]
    assert chosen["fast_sigmoid"] == hg.surrogates.FastSigmoid(slope=25.0)
    assert chosen["sigmoid25"] == hg.surrogates.Sigmoid(slope=25.0)
    with pytest.raises(ValueError, match="surrogate"):
        surrogate_choices(SnnConfig(surrogates=("masked",)))


@pytest.mark.statistical
def test_rate_code_has_the_pixel_as_its_rate():
    """200 steps per pixel: the spike frequency is within 5 standard deviations of x (a
    false failure about 6e-7 per pixel; seeded, so deterministic)."""
    x = torch.tensor([[0.0, 0.1, 0.5, 0.9, 1.0]])
    spikes = _encode(x, 200, torch.Generator().manual_seed(0))
    assert spikes.shape == (200, 1, 5) and set(spikes.unique().tolist()) <= {0.0, 1.0}
    rate = spikes.mean(0)
    std = (x * (1 - x) / 200).sqrt()
    assert bool(((rate - x).abs() <= 5 * std + 1e-12).all())


def test_spiking_mlp_counts_output_spikes_and_gets_gradients():
    torch.manual_seed(0)
    model = SpikingMLP(8, 16, 3, 0.9, hg.surrogates.FastSigmoid())
    spikes_in = _encode(torch.rand(4, 8) * 3, 10, torch.Generator().manual_seed(1))
    counts, rate = model(spikes_in)
    assert counts.shape == (4, 3) and bool((counts >= 0).all() and (counts <= 10).all())
    assert 0.0 <= float(rate.detach()) <= 1.0
    counts.sum().backward()
    assert model.fc1.weight.grad.abs().sum() > 0 and model.fc2.weight.grad.abs().sum() > 0


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, dict[str, Any]]:
    out = tmp_path_factory.mktemp("snn")
    settings = BenchSettings(out=out, seed=1, threads=1)
    (result,) = run_tasks(["snn"], settings, configs={"snn": TINY}, progress=PlainProgress())
    return out, result, json.loads((out / "results.json").read_text())


def test_tiny_run_rows_are_complete_and_consistent(tiny_run):
    out, result, document = tiny_run
    rows = document["tasks"]["snn"]["results"]["rows"]
    assert [r["label"] for r in rows] == ["fast_sigmoid", "swish"]
    for r in rows:
        values = r["test_accuracy"]["values"]
        assert len(values) == TINY.seeds
        assert all(0.0 <= v <= 1.0 and abs(v * 359 - round(v * 359)) < 1e-6 for v in values)
        assert 0.0 <= r["spike_rate"] <= 1.0
        assert r["ms_per_step"] > 0 and all(math.isfinite(v) for v in r["final_loss"])
        assert r["trains"] == (r["test_accuracy"]["mean"] >= TINY.trains_at)
        assert r["verdict"] in ("yes", "partly", "no")
        assert (r["verdict"] == "no") == (not r["trains"])
    best = max(r["test_accuracy"]["mean"] for r in rows)
    for r in rows:
        if r["test_accuracy"]["mean"] == best and r["trains"]:
            assert r["verdict"] == "yes"
    (table,) = result.tables
    assert [row[0] for row in table.rows] == ["fast_sigmoid", "swish"]
    assert table.rows[0][1] == "1" and table.rows[1][1] == "5"  # sigma'(0)
    (verdict,) = [n for n in result.notes if n.startswith("Train (mean test accuracy")]
    assert "Partly" in verdict and "Do not train:" in verdict
    assert "| fast_sigmoid " in (out / "report.md").read_text()


def test_bad_config_is_a_value_error():
    with pytest.raises(ValueError, match="`seeds`, `epochs` and `steps`"):
        run_tasks(["snn"], BenchSettings(threads=1), configs={"snn": SnnConfig(steps=0)})
