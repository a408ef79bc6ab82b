"""hardgrad.diagnostics.probe() at the kinks and jumps of relu, abs, clamp, maximum, round,
sqrt, heaviside; smooth functions at every magnitude; the report's exports and bad input."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor

from hardgrad.diagnostics import ProbePoint, ProbeReport, probe

# --------------------------------------------------------------------------------------
# 6. probe()
# --------------------------------------------------------------------------------------


def one_point(fn: Callable[[Tensor], Tensor], x: float) -> ProbePoint:
    (point,) = probe(fn, [x]).points
    assert point.point == x
    return point


def test_probe_relu_kink_uses_the_left_derivative() -> None:
    p = one_point(torch.relu, 0.0)
    assert p.kink and not p.jump
    assert p.autograd == 0.0 and p.left == pytest.approx(0.0) and p.right == pytest.approx(1.0)
    assert p.value == 0.0
    assert p.convention == "left derivative"


def test_probe_abs_uses_the_mean() -> None:
    p = one_point(torch.abs, 0.0)
    assert p.kink and not p.jump and p.autograd == 0.0
    assert p.left == pytest.approx(-1.0) and p.right == pytest.approx(1.0)
    assert p.convention.startswith("mean")


def test_probe_clamp_and_maximum() -> None:
    report = probe(lambda x: x.clamp(0, 1), [0.0, 1.0, 0.5])
    at0, at1, inside = report.points
    assert at0.kink and at0.autograd == 1.0 and at0.convention == "right derivative"
    assert at1.kink and at1.autograd == 1.0 and at1.convention == "left derivative"
    assert not inside.kink and inside.autograd == 1.0 and inside.convention == "derivative"
    assert report.kinks == [at0, at1]

    p = one_point(lambda x: torch.maximum(x, torch.zeros_like(x)), 0.0)
    assert p.kink and p.autograd == 0.5
    assert p.convention.startswith("mean")


def test_probe_round_jump_and_smooth_sin() -> None:
    p = one_point(torch.round, 0.5)
    assert p.jump and p.kink and p.autograd == 0.0
    assert p.convention.startswith("zero")
    assert p.right > 1e3  # the quotient grows like 1/eps across the jump
    flat = one_point(torch.round, 0.2)
    assert not flat.jump and not flat.kink and flat.autograd == 0.0

    points = [-2.0, -0.5, 0.0, 0.3, 1.0, 2.5]
    report = probe(torch.sin, points)
    assert report.kinks == []
    for x, p in zip(points, report.points, strict=True):
        assert not p.kink and not p.jump and p.convention == "derivative"
        assert p.autograd == pytest.approx(math.cos(x), abs=1e-12)
        assert p.value == pytest.approx(math.sin(x), abs=1e-15)
        assert p.left == pytest.approx(math.cos(x), abs=1e-3)
        assert p.right == pytest.approx(math.cos(x), abs=1e-3)


def test_probe_sqrt_and_heaviside() -> None:
    p = one_point(torch.sqrt, 0.0)
    assert p.autograd == math.inf and p.convention == "infinite"

    heaviside = probe(lambda x: torch.heaviside(x, torch.tensor(0.5, dtype=x.dtype)), [0.0, 1.0])
    at0, at1 = heaviside.points
    assert at0.jump and at0.autograd is None
    assert at0.convention.startswith("no gradient")
    assert at1.autograd is None and at1.convention.startswith("no gradient") and not at1.kink
    assert heaviside.kinks == [at0]


def test_probe_report_exports() -> None:
    report = probe(torch.relu, torch.tensor([-1.0, 0.0, 1.0]))
    assert isinstance(report, ProbeReport) and report.name == "relu"
    assert [p.point for p in report.kinks] == [0.0]
    markdown = report.to_markdown().splitlines()
    assert len(markdown) == 2 + 3
    assert "autograd" in markdown[0] and "convention" in markdown[0]
    assert "left derivative" in markdown[3]
    data = report.to_dict()
    decoded = json.loads(json.dumps(data))
    assert decoded["name"] == "relu" and len(decoded["points"]) == 3
    assert decoded["points"][1]["convention"] == "left derivative"
    assert decoded["points"][1]["kink"] is True
    text = str(report)
    assert "relu" in text and "left derivative" in text and "autograd" in text
    assert len(text.splitlines()) == 1 + 2 + 3
    # A missing autograd value and an infinite one print as words.
    assert "none" in str(probe(lambda x: torch.heaviside(x, x), [1.0]))
    assert "inf" in str(probe(torch.sqrt, [0.0]))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"fn": 3, "points": [0.0]}, TypeError, "fn"),
        ({"fn": torch.relu, "points": [0.0], "eps": 0.0}, ValueError, "eps"),
        ({"fn": torch.relu, "points": [0.0], "eps": -1e-3}, ValueError, "eps"),
        ({"fn": torch.relu, "points": []}, ValueError, "points"),
        ({"fn": torch.relu, "points": [0.0, math.nan]}, ValueError, "points"),
        ({"fn": torch.relu, "points": [math.inf]}, ValueError, "points"),
        ({"fn": torch.relu, "points": torch.tensor([]).reshape(0, 2)}, ValueError, "points"),
    ],
)
def test_probe_bad_input(kwargs: dict[str, Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        probe(**kwargs)


def test_probe_points_are_float64() -> None:
    """The quotients are taken in float64 whatever the input type of the points."""
    p = one_point(lambda x: x * x, 1.0)
    assert p.autograd == 2.0
    assert p.left == pytest.approx(2.0, abs=2e-4) and p.right == pytest.approx(2.0, abs=2e-4)
    assert not p.kink
    seen: list[torch.dtype] = []
    probe(lambda x: seen.append(x.dtype) or x, torch.tensor([0.5], dtype=torch.float32))
    assert set(seen) == {torch.float64}


@pytest.mark.parametrize("x", [-1e30, -1e-30, 1e-30, 1.0, 1e15, 1e30])
@pytest.mark.parametrize(
    ("name", "fn", "derivative"),
    [
        ("square", lambda x: x * x, lambda x: 2 * x),
        ("tanh", torch.tanh, lambda x: 1 - math.tanh(x) ** 2),
        ("identity", lambda x: x, lambda x: 1.0),
        ("float32 tanh", lambda x: torch.tanh(x.float()), lambda x: 1 - math.tanh(x) ** 2),
    ],
)
def test_probe_smooth_functions_have_no_kink_at_any_magnitude(name, fn, derivative, x) -> None:
    """Regression: at |x| = 1e30 a fixed step of 1e-4 is below float64's spacing
    (x + 1e-4 == x), both quotients came out 0 and x * x was reported as differing from its
    derivative 2e30. The step is now eps * max(1, |x|) and the tolerances include the
    rounding of the values in the dtype fn returns (float32 for the last case)."""
    p = one_point(fn, x)
    assert not p.kink and not p.jump, (name, x, p)
    assert p.convention == "derivative", (name, x, p)
    expected = derivative(x)
    assert p.autograd == pytest.approx(expected, rel=1e-6, abs=1e-6)
    # The quotients agree with the derivative to about the (relative) step.
    assert p.left == pytest.approx(expected, rel=1e-3, abs=1e-3)
    assert p.right == pytest.approx(expected, rel=1e-3, abs=1e-3)


@pytest.mark.parametrize(
    ("fn", "x", "left", "right", "jump"),
    [
        (torch.abs, 0.0, -1.0, 1.0, False),
        (torch.relu, 0.0, 0.0, 1.0, False),
        (torch.round, 0.5, 0.0, None, True),
        (lambda x: torch.relu(x.float()), 0.0, 0.0, 1.0, False),
        (lambda x: (x - 1e30).abs(), 1e30, -1.0, 1.0, False),  # a kink far out
        (lambda x: torch.relu(x - 1e30), 1e30, 0.0, 1.0, False),
    ],
)
def test_probe_still_finds_real_kinks(fn, x, left, right, jump) -> None:
    p = one_point(fn, x)
    assert p.kink and p.jump == jump, p
    assert p.left == pytest.approx(left, abs=1e-6)
    if right is not None:
        assert p.right == pytest.approx(right, abs=1e-6)


@pytest.mark.parametrize(
    ("fn", "error", "match"),
    [
        (lambda x: 1.0, TypeError, r"`fn` \(<lambda>\) to return a tensor.*float 1.0"),
        (lambda x: x.item(), TypeError, r"`fn` \(<lambda>\).*returned float 0.25"),
        (lambda x: torch.stack([x, x]), ValueError, r"`fn` \(<lambda>\).*shape \(2,\)"),
        (lambda x: x.expand(3, 2), ValueError, r"`fn`.*shape \(3, 2\)"),
        (lambda x: torch.complex(x, x), TypeError, r"`fn`.*real tensor"),
    ],
)
def test_probe_names_fn_when_it_returns_a_non_scalar(fn, error, match) -> None:
    """Regression: a Python float raised AttributeError ('float' object has no attribute
    'requires_grad') and a vector torch's "only one element tensors can be converted",
    neither naming ``fn``. A Python number is rejected rather than accepted: it has no
    gradient, so there is nothing for probe to report."""
    with pytest.raises(error, match=match):
        probe(fn, [0.25])


def test_probe_accepts_a_one_element_result_of_any_shape() -> None:
    p = one_point(lambda x: torch.relu(x).reshape(1, 1), 0.0)
    assert p.kink and p.autograd == 0.0 and p.convention == "left derivative"
