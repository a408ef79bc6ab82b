"""``hg.nn.quantize_`` and the optimizer: the LSQ step sizes it adds are new parameters,
which an optimizer made before does not hold (issue 38, item 1: they got gradients and
never trained, silently)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import hardgrad as hg


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))


def _scales(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if n.endswith("scale")}


def _step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
    x = torch.randn(16, 6, generator=torch.Generator().manual_seed(1))
    optimizer.zero_grad()
    model(x).square().mean().backward()
    optimizer.step()


def test_an_optimizer_made_before_and_not_handed_over_is_warned_about():
    """Before the fix no warning came, and the step sizes kept their values while the
    weights trained."""
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(UserWarning, match=r"added 6 trainable parameters .* 3 layers.*optimizer="):
        hg.nn.quantize_(model, weight_bits=4, act_bits=4)
    model(torch.randn(4, 6))  # the activation scales from a first batch
    before = _scales(model)
    _step(model, optimizer)
    # What the warning is about: gradients, and no change.
    assert all(p.grad is not None for n, p in model.named_parameters() if n.endswith("scale"))
    assert all(torch.equal(before[n], s) for n, s in _scales(model).items())


@pytest.mark.parametrize("make", ["sgd", "adamw"])
def test_handing_the_optimizer_over_trains_the_step_sizes(make):
    model = _model()
    if make == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    else:
        optimizer = torch.optim.AdamW(
            [{"params": model.parameters(), "lr": 3e-3, "betas": (0.8, 0.9)}], weight_decay=0.1
        )
    first = dict(optimizer.param_groups[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hg.nn.quantize_(model, weight_bits=4, act_bits=4, optimizer=optimizer)
    assert len(optimizer.param_groups) == 2
    added = optimizer.param_groups[1]
    expected = [
        p for n, p in model.named_parameters() if n.endswith("scale")
    ]  # every step size, once
    assert [id(p) for p in added["params"]] == [id(p) for p in expected] and len(expected) == 6
    # The first group's hyper-parameters (not the constructor's defaults: lr and betas
    # were given per group above).
    assert {k: v for k, v in added.items() if k != "params"} == {
        k: v for k, v in first.items() if k != "params"
    }
    model(torch.randn(4, 6))
    before = _scales(model)
    for _ in range(2):
        _step(model, optimizer)
    after = _scales(model)
    assert all(not torch.equal(before[n], after[n]) for n in before), (before, after)


def test_optimizer_options_override_the_first_groups_settings():
    model = _model()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=0.01)
    hg.nn.quantize_(
        model,
        weight_bits=4,
        act_bits=None,
        optimizer=optimizer,
        optimizer_options={"lr": 1e-3, "weight_decay": 0.0},
    )
    added = optimizer.param_groups[1]
    assert (added["lr"], added["weight_decay"], added["betas"]) == (1e-3, 0.0, (0.9, 0.999))
    assert len(added["params"]) == 3  # weight scales only
    assert optimizer.param_groups[0]["lr"] == 1e-2  # the first group untouched


@pytest.mark.parametrize(
    "kwargs",
    [
        {"learn_scale": False},  # the scales are buffers
        {"weight_bits": None, "act_bits": None},  # nothing to learn
        {"skip": ["0", "2", "4"]},  # nothing swapped
        {"optimizer": None},  # the optimizer is made afterwards
    ],
    ids=["buffers", "no_bits", "all_skipped", "optimizer_later"],
)
def test_no_warning_without_new_trainable_parameters_or_when_told(kwargs):
    model = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hg.nn.quantize_(model, **kwargs)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)  # holds them all
    assert len(optimizer.param_groups[0]["params"]) == len(list(model.parameters()))


def test_no_group_added_when_nothing_is_new():
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    hg.nn.quantize_(model, learn_scale=False, optimizer=optimizer)
    assert len(optimizer.param_groups) == 1


def test_an_optimizer_that_refuses_the_group_leaves_the_model_unchanged():
    model = _model()
    optimizer = torch.optim.LBFGS(model.parameters())
    with pytest.raises(ValueError, match="LBFGS"):
        hg.nn.quantize_(model, optimizer=optimizer)
    assert all(type(m) is nn.Linear for m in model if not isinstance(m, nn.ReLU))
    assert len(optimizer.param_groups) == 1


@pytest.mark.parametrize(
    "kwargs, error, pattern",
    [
        ({"optimizer": "sgd"}, TypeError, r"`optimizer`.*Optimizer or None.*str"),
        ({"optimizer_options": {"lr": 0.1}}, ValueError, r"`optimizer_options` only with"),
        ({"optimizer": None, "optimizer_options": {}}, ValueError, r"`optimizer_options`"),
        ({"optimizer_options": [("lr", 0.1)], "optimizer": True}, TypeError, r"`optimizer`"),
        ({"optimizer_options": [("lr", 0.1)]}, None, r"`optimizer_options` to be a mapping"),
        ({"optimizer_options": {"params": []}}, None, r"without 'params'"),
    ],
)
def test_bad_optimizer_arguments_name_the_argument(kwargs, error, pattern):
    model = _model()
    if error is None:  # needs a real optimizer
        kwargs = {**kwargs, "optimizer": torch.optim.SGD(model.parameters(), lr=0.1)}
        error = TypeError if "mapping" in pattern else ValueError
    with pytest.raises(error, match=pattern):
        hg.nn.quantize_(model, **kwargs)
    assert type(model[0]) is nn.Linear  # checked before anything changed
