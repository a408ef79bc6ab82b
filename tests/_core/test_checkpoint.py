"""Checkpoints refuse to load into another configuration (issue 14, item 4).

Every stateful module and estimator saves the settings that give its state its meaning
(a quantizer's grid, an EMA baseline's decay, a control variate's form, a unit's
temperature schedule) in the state dict's metadata, and ``load_state_dict`` names the
module, the setting and both values when they differ, instead of loading numbers that mean
something else. The state dict itself stays names to tensors; a checkpoint without the
metadata (older, or a plain dict) loads as before.
"""

from __future__ import annotations

import io

import pytest
import torch
from torch import nn

import hardgrad as hg
from hardgrad._core.checkpoint import SETTINGS_KEY, SettingsInState
from hardgrad.estimators import ESTIMATORS


def _round_trip(state: dict) -> dict:
    buffer = io.BytesIO()  # through serialisation, as a checkpoint goes
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _used_reinforce(**kwargs) -> hg.estimators.Reinforce:
    estimator = hg.estimators.Reinforce(baseline="ema", **kwargs)
    logits = torch.zeros(3, requires_grad=True)
    for seed in range(3):
        hg.expectation(
            lambda b: b.sum(-1),
            logits,
            estimator=estimator,
            num_samples=4,
            generator=torch.Generator().manual_seed(seed),
        ).backward()
    return estimator


def test_reinforce_refuses_an_average_kept_with_another_decay():
    state = _round_trip(_used_reinforce(decay=0.9).state_dict())
    fresh = hg.estimators.Reinforce(baseline="ema", decay=0.99)
    with pytest.raises(RuntimeError) as info:
        fresh.load_state_dict(state)
    message = str(info.value)
    assert "setting 'decay'" in message and "Reinforce" in message
    assert "saved with decay=0.9" in message and "has decay=0.99" in message
    assert int(fresh.steps) == 0  # nothing was loaded


def test_reinforce_with_the_same_settings_round_trips():
    original = _used_reinforce(decay=0.8)
    fresh = hg.estimators.Reinforce(baseline="ema", decay=0.8)
    fresh.load_state_dict(_round_trip(original.state_dict()))
    assert torch.equal(fresh.ema, original.ema) and int(fresh.steps) == 3


def test_reinforce_baselines_differ_by_name_in_the_message():
    state = hg.estimators.Reinforce(baseline="optimal").state_dict()
    with pytest.raises(RuntimeError, match=r"baseline='optimal'.*baseline=None"):
        hg.estimators.Reinforce().load_state_dict(state)


def test_the_state_dict_stays_names_to_tensors():
    state = _used_reinforce().state_dict()
    assert set(state) == {"ema", "steps"}
    assert all(isinstance(v, torch.Tensor) for v in state.values())
    assert state._metadata[""][SETTINGS_KEY] == {"baseline": "ema", "decay": 0.9}


def test_strict_false_does_not_skip_the_check():
    state = _used_reinforce(decay=0.9).state_dict()
    with pytest.raises(RuntimeError, match="decay"):
        hg.estimators.Reinforce(baseline="ema", decay=0.5).load_state_dict(state, strict=False)


def test_a_checkpoint_without_settings_loads_as_before():
    """Saved before the settings were stored, or rebuilt as a plain dict (the documented
    way to transfer state across settings on purpose)."""
    original = _used_reinforce(decay=0.9)
    fresh = hg.estimators.Reinforce(baseline="ema", decay=0.5)
    fresh.load_state_dict(dict(original.state_dict()))
    assert torch.equal(fresh.ema, original.ema) and fresh.decay == 0.5


def test_relax_refuses_another_control_variate_form():
    def net() -> nn.Module:
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 1), nn.Flatten(-2))

    state = hg.estimators.RELAX(net(), use_objective=False).state_dict()
    with pytest.raises(RuntimeError, match=r"use_objective=False.*use_objective=True"):
        hg.estimators.RELAX(net()).load_state_dict(state)
    hg.estimators.RELAX(net(), use_objective=False).load_state_dict(state)
    # RELAX without a network is REBAR: their checkpoints are interchangeable.
    hg.estimators.RELAX().load_state_dict(hg.estimators.REBAR(tau=0.3).state_dict())


def test_a_unit_refuses_a_step_counted_along_another_schedule():
    unit = hg.nn.Bernoulli(estimator="st_gumbel", tau=hg.nn.anneal(1.0, 0.1, 100))
    for _ in range(7):
        unit(torch.zeros(3))
    state = _round_trip(unit.state_dict())
    other = hg.nn.Bernoulli(estimator="st_gumbel", tau=hg.nn.anneal(1.0, 0.1, 1000))
    with pytest.raises(RuntimeError) as info:
        other.load_state_dict(state)
    assert "steps=100" in str(info.value) and "steps=1000" in str(info.value)
    assert other.step == 0
    fixed = hg.nn.Bernoulli(estimator="st_gumbel", tau=0.5)
    with pytest.raises(RuntimeError, match="tau="):
        fixed.load_state_dict(state)
    # The estimator is not state: the same schedule with another estimator loads.
    same_schedule = hg.nn.Bernoulli(estimator="gst", tau=hg.nn.anneal(1.0, 0.1, 100))
    same_schedule.load_state_dict(state)
    assert same_schedule.step == 7


def test_the_prefix_names_the_submodule_inside_a_model():
    model = nn.Sequential(nn.Linear(3, 3), hg.nn.Categorical(tau=0.5))
    other = nn.Sequential(nn.Linear(3, 3), hg.nn.Categorical(tau=0.25))
    with pytest.raises(RuntimeError, match=r"\t1: setting 'tau'.*tau='0\.5'.*tau='0\.25'"):
        other.load_state_dict(model.state_dict())


#: Every stateful module and estimator, built with non-default settings where it has any.
STATEFUL = {
    "Quantize": lambda: hg.nn.Quantize(bits=4, init_scale=0.5),
    "PACT": lambda: hg.nn.PACT(bits=3, alpha=6.0),
    "Bernoulli": lambda: hg.nn.Bernoulli(tau=0.5),
    "Categorical": lambda: hg.nn.Categorical(tau=0.5),
    "reinforce": lambda: hg.estimators.Reinforce(baseline="ema", decay=0.7),
    "rebar": lambda: hg.estimators.REBAR(),
    "relax": lambda: hg.estimators.RELAX(use_objective=True),
    "VectorQuantize": lambda: hg.nn.VectorQuantize(8, 2, codebook_update="ema"),
    "ResidualVQ": lambda: hg.nn.ResidualVQ(2, 8, 2, codebook_update="ema", quantize_dropout=True),
    "MoE": lambda: hg.nn.MoE(3, num_experts=4, k=2),
    "HardConcreteGate": lambda: hg.nn.HardConcreteGate(3, beta=0.5),
    "L0Linear": lambda: hg.nn.L0Linear(3, 2, temperature=0.5),
    "L0Conv2d": lambda: hg.nn.L0Conv2d(1, 2, 3, limit_a=-0.2),
    "LIF": lambda: hg.nn.LIF(torch.full((3,), 0.9), learn_beta=True, reset="zero"),
    "BinaryLinear": lambda: hg.nn.BinaryLinear(3, 2, scale=True),
    "BinaryConv2d": lambda: hg.nn.BinaryConv2d(1, 2, 3, weights="ternary"),
    "QuantLinear": lambda: hg.nn.QuantLinear(3, 2, weight_bits=4, act_bits=6),
    "QuantConv2d": lambda: hg.nn.QuantConv2d(1, 2, 3, weight_bits=3),
}


def _stateful_classes() -> set[str]:
    """Modules of hardgrad.nn with state (built with their required arguments, if any,
    from STATEFUL) and estimators that are modules."""
    names = {name for name, cls in ESTIMATORS.items() if issubclass(cls, nn.Module)}
    for name in hg.nn.__all__:
        cls = getattr(hg.nn, name)
        if isinstance(cls, type) and issubclass(cls, nn.Module):
            instance = STATEFUL[name]() if name in STATEFUL else _build_or_none(cls)
            if instance is None or instance.state_dict() or list(instance.buffers()):
                names.add(name)  # unbuildable without arguments: must be listed to be sure
    return names


def _build_or_none(cls: type) -> nn.Module | None:
    try:
        return cls()
    except (TypeError, ValueError):
        return None


#: Modules with required arguments and no state (their state dict is checked to be empty).
STATELESS_WITH_ARGUMENTS = {
    "Clamp": lambda: hg.nn.Clamp(0.0, 1.0),
    "FSQ": lambda: hg.nn.FSQ([5, 5]),
    "LFQ": lambda: hg.nn.LFQ(2),
}


def test_every_stateful_module_and_estimator_is_covered():
    for name, make in STATELESS_WITH_ARGUMENTS.items():
        assert not make().state_dict(), name
    assert _stateful_classes() - set(STATELESS_WITH_ARGUMENTS) <= set(STATEFUL)


@pytest.mark.parametrize("name", sorted(STATEFUL))
def test_every_stateful_object_saves_and_checks_its_settings(name):
    instance = STATEFUL[name]()
    assert isinstance(instance, SettingsInState)
    model = nn.Sequential(nn.Linear(2, 2), instance)
    state = _round_trip(model.state_dict())
    settings = instance._checkpoint_settings()
    assert settings and state._metadata["1"][SETTINGS_KEY] == settings
    nn.Sequential(nn.Linear(2, 2), STATEFUL[name]()).load_state_dict(state)  # same settings
    key = next(iter(settings))
    state._metadata["1"][SETTINGS_KEY] = {**settings, key: "something else"}
    with pytest.raises(RuntimeError, match=f"1: setting '{key}'"):
        nn.Sequential(nn.Linear(2, 2), STATEFUL[name]()).load_state_dict(state)
