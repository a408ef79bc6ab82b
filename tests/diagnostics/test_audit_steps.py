"""``audit()`` and optimizers (issue 39): a parameter that backwards give a gradient but
that no optimizer stepped in the block steps is a problem with its fix (``quantize_``'s
``optimizer=`` for hardgrad's LSQ step sizes); a group added to an optimizer later counts."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import hardgrad as hg
from hardgrad.diagnostics import audit


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _train(model: torch.nn.Module, opt: torch.optim.Optimizer, steps: int = 2) -> None:
    for _ in range(steps):
        x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


@pytest.mark.parametrize("pass_optimizer", [False, True])
def test_quantizer_step_sizes_the_optimizer_does_not_hold(pass_optimizer: bool) -> None:
    model = _model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    hg.nn.quantize_(model, weight_bits=4, act_bits=4, optimizer=opt if pass_optimizer else None)
    with audit() as report:
        _train(model, opt)
    if pass_optimizer:
        assert not report.problems, report.format(notes=True)
        return
    (problem,) = report.problems
    assert problem.kind == "no_gradient" and "no optimizer step" in problem.op
    assert "weight_quantizer.scale" in problem.op and "act_quantizer.scale" in problem.op
    assert "optimizer=opt" in problem.suggestion


def test_layer_left_out_of_the_optimizer_and_a_group_added_after_a_step() -> None:
    model = _model()
    opt = torch.optim.SGD(model[0].parameters(), lr=0.1)
    with audit() as report:
        _train(model, opt)
    (problem,) = report.problems
    assert "Sequential.2.weight" in problem.op and "Sequential.2.bias" in problem.op
    assert "quantize_" not in problem.suggestion and "add_param_group" in problem.suggestion
    with audit() as report:
        _train(model, opt, steps=1)
        opt.add_param_group({"params": list(model[2].parameters())})
        _train(model, opt, steps=1)
    assert not report.problems, report.format(notes=True)
