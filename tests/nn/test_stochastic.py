"""hardgrad.nn's stochastic modules (``Bernoulli``, ``Categorical``) against the functions
with the same seed, and their temperature schedules (``hg.nn.anneal``)."""

from __future__ import annotations

import math

import pytest
import torch

import hardgrad as hg

# --------------------------------------------------------------------------------------
# Stochastic modules and temperature schedules.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "midpoint"),
    [("exponential", math.sqrt(2.0 * 0.5)), ("linear", 1.25), ("cosine", 1.25)],
)
def test_anneal_schedules(kind, midpoint):
    schedule = hg.nn.anneal(2.0, 0.5, 10, kind=kind)
    assert schedule(0) == pytest.approx(2.0)
    assert schedule(5) == pytest.approx(midpoint)
    assert schedule(10) == pytest.approx(0.5)
    assert schedule(10_000) == pytest.approx(0.5)  # constant after the last step
    assert schedule(-3) == pytest.approx(2.0)


@pytest.mark.parametrize("kind", ["exponential", "linear", "cosine"])
@pytest.mark.parametrize(("start", "end"), [(1.0, 1e-300), (1e-300, 1.0), (1e-300, 1e300)])
def test_anneal_keeps_far_apart_ends_exact_and_positive(kind, start, end):
    """start + (end - start) * s rounded 1 -> 1e-300 to 0 (a zero temperature); the
    weighted forms give both ends exactly and stay positive in between."""
    schedule = hg.nn.anneal(start, end, 4, kind=kind)
    assert schedule(0) == start and schedule(4) == end
    assert all(0 < schedule(t) < math.inf for t in range(5))


def test_anneal_bad_arguments():
    with pytest.raises(ValueError, match="start"):
        hg.nn.anneal(0.0, 1.0, 10)
    with pytest.raises(ValueError, match="steps"):
        hg.nn.anneal(1.0, 0.5, 0)
    with pytest.raises(ValueError, match="kind"):
        hg.nn.anneal(1.0, 0.5, 10, kind="step")


def test_stochastic_modules_match_functions_with_the_same_seed():
    logits = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    unit = hg.nn.Categorical(
        estimator="st_gumbel", dim=0, generator=torch.Generator().manual_seed(7)
    )
    expected = hg.categorical(
        logits, dim=0, estimator="st_gumbel", generator=torch.Generator().manual_seed(7)
    )
    assert torch.equal(unit(logits), expected)
    unit = hg.nn.Bernoulli(
        estimator=hg.estimators.ST(tau=0.5), generator=torch.Generator().manual_seed(3)
    )
    x = logits.clone().requires_grad_(True)
    y = unit(x)
    x2 = logits.clone().requires_grad_(True)
    y2 = hg.bernoulli(
        x2, estimator=hg.estimators.ST(tau=0.5), generator=torch.Generator().manual_seed(3)
    )
    assert torch.equal(y, y2)
    assert torch.equal(torch.autograd.grad(y.sum(), x)[0], torch.autograd.grad(y2.sum(), x2)[0])


def test_temperature_schedule_follows_training_steps():
    unit = hg.nn.Categorical(
        estimator="gumbel_softmax", tau=hg.nn.anneal(1.0, 0.25, 2, kind="linear")
    )
    seen = []
    for _ in range(4):
        seen.append(unit.current_estimator().tau)
        unit(torch.zeros(3))
    assert seen == pytest.approx([1.0, 0.625, 0.25, 0.25])
    unit.eval()
    unit(torch.zeros(3))
    assert unit.step == 4  # evaluation does not advance the schedule
    unit.tau = lambda step: 0.1 * (step + 1)  # any callable of the step works
    assert unit.current_estimator().tau == pytest.approx(0.5)
    restored = hg.nn.Categorical(estimator="gumbel_softmax", tau=0.3)
    restored.load_state_dict(unit.state_dict())
    assert restored.step == 4


def test_stochastic_module_reprs_and_errors():
    assert repr(hg.nn.Bernoulli()) == "Bernoulli(estimator=ST(tau=1.0))"
    assert repr(hg.nn.Categorical(tau=0.5)) == "Categorical(dim=-1, estimator=ST(tau=1.0), tau=0.5)"
    with pytest.raises(ValueError, match="tau"):
        hg.nn.Bernoulli(estimator="st_identity", tau=0.5)
    with pytest.raises(ValueError, match="tau"):
        hg.nn.Categorical(tau=-1.0)
    with pytest.raises(ValueError, match="estimator"):
        hg.nn.Bernoulli(estimator="no_such_estimator")
    with pytest.raises(ValueError, match="tau"):
        hg.nn.Bernoulli(tau=lambda step: 0.0)(torch.zeros(2))
