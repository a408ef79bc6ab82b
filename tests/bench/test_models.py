"""The ``models`` benchmark: each pair computes the same thing, and the task reports ratios."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from hardgrad.bench import BenchSettings, run_tasks
from hardgrad.bench import models as models_task
from hardgrad.bench.models import (
    MODELS,
    ModelCheckError,
    ModelsConfig,
    _spiking,
    build_pair,
    check_pair,
)
from hardgrad.bench.report import PlainProgress

SETTINGS = BenchSettings(seed=3, threads=1)
TINY = ModelsConfig(rounds=2, min_run_time=0.001, time_steps=5)


@pytest.mark.parametrize("name", MODELS)
def test_both_versions_compute_the_same(name: str) -> None:
    pair = build_pair(name, SETTINGS, TINY)
    errors = check_pair(pair)
    assert errors["gradient"] <= 1e-4
    # Training steps change the weights of both versions alike.
    before = [p.detach().clone() for p in pair.hardgrad.parameters()]
    pair.step_fn("hardgrad")()
    pair.step_fn("original")()
    after = list(pair.hardgrad.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_the_check_catches_a_different_backward(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hardgrad spike with another surrogate slope is not the original model."""
    monkeypatch.setattr(_spiking, "SLOPE", 5.0)  # the original's slope; hardgrad keeps 25
    pair = build_pair("snn", SETTINGS, TINY)
    pair.hardgrad.surrogate = _spiking.surrogates.FastSigmoid(slope=25.0)
    with pytest.raises(ModelCheckError, match="snn"):
        check_pair(pair)


def test_binarynet_latent_weights_stay_clipped() -> None:
    pair = build_pair("binarynet-mlp", SETTINGS, TINY)
    step = pair.step_fn("hardgrad")
    with torch.no_grad():
        next(pair.hardgrad.parameters()).mul_(5)
    step()
    for module in pair.hardgrad.modules():
        if isinstance(module, torch.nn.Linear):
            assert float(module.weight.detach().abs().max()) <= 1.0


def test_task_reports_every_model(capsys: pytest.CaptureFixture[str]) -> None:
    (result,) = run_tasks(["models"], SETTINGS, configs={"models": TINY}, progress=PlainProgress())
    assert "[models" in capsys.readouterr().err
    entries = result.data["models"]
    assert list(entries) == list(MODELS)
    for entry in entries.values():
        for key in ("original_ms", "hardgrad_ms", "ratio"):
            assert math.isfinite(entry[key]) and entry[key] > 0
        assert len(entry["round_ratios"]) == TINY.rounds
        assert 0 <= entry["rounds_faster"] <= TINY.rounds
    (table,) = result.tables
    assert [row[0] for row in table.rows] == list(MODELS)


def test_unknown_model_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="nope"):
        run_tasks(
            ["models"],
            SETTINGS,
            configs={"models": ModelsConfig(models=("nope",))},
            progress=PlainProgress(),
        )


def _same_state(a: object, b: object) -> bool:
    """Equal state-dict values: tensors bit for bit, dicts (extra state) entry by entry."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return (
            isinstance(b, dict) and a.keys() == b.keys() and all(_same_state(a[k], b[k]) for k in a)
        )
    return a == b


@pytest.mark.parametrize("name", ["binarynet-mlp", "vq-vae"])
def test_training_restarts_from_its_snapshot(name: str) -> None:
    """The models task starts every round from the warm-up snapshot: weights, buffers and
    extra state (BatchNorm's running statistics, the VQ layer's usage counts and generator)
    and Adam's state come back exactly, and the next step repeats the first one after the
    snapshot."""
    pair = build_pair(name, SETTINGS, TINY)
    training = models_task.Training(pair, "hardgrad")
    with pytest.raises(RuntimeError, match="keep"):
        training.restart()
    training.step()
    training.keep()
    kept = copy.deepcopy(pair.hardgrad.state_dict())
    training.step()
    after_one = copy.deepcopy(pair.hardgrad.state_dict())
    assert not _same_state(after_one, kept)
    training.step()
    training.restart()
    assert _same_state(pair.hardgrad.state_dict(), kept)
    state = training.optimizer.state_dict()["state"]
    assert all(int(s["step"]) == 1 for s in state.values())
    training.step()
    assert _same_state(pair.hardgrad.state_dict(), after_one)


def test_the_pact_pair_trains_both_clipping_levels() -> None:
    """PACT's levels start where part of each layer's outputs clips: the check compares
    non-zero clipping-level gradients, not two zeros."""
    pair = build_pair("pact-mlp", SETTINGS, TINY)
    for model in (pair.original, pair.hardgrad):
        pair.loss(model, pair.inputs, pair.targets).backward()
        alphas = [p for name, p in model.named_parameters() if name.endswith("alpha")]
        assert len(alphas) == 2 and all(float(a.grad.abs()) > 0 for a in alphas)
