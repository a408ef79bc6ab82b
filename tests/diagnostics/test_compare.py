"""hardgrad.diagnostics.compare() on the Bernoulli toy ``f(b) = (b - t)^2`` (DESIGN.md,
reference problems): the exact gradient ``p(1-p)(1-2t)``, RLOO's and DisARM's closed-form
variances and straight-through's predicted bias, each within 5 %; the ``Comparison`` API and
bad input.

Monte-Carlo tests are seeded (deterministic); each docstring states the false-failure rate
of its thresholds for a fresh seed. Two-sided normal tail: ``P(|Z| > 5) = 5.7e-7``.
"""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import Tensor

import hardgrad as hg
from _references import CAT_LOGITS, two_categoricals, two_categoricals_gradient
from hardgrad.diagnostics import Comparison, ComparisonRow, compare, exact_gradient


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# --------------------------------------------------------------------------------------
# 4. compare() on the Bernoulli toy, and the Comparison API.
# --------------------------------------------------------------------------------------

T = 0.45


def toy(b: Tensor) -> Tensor:
    return (b - T).square().sum(-1)


def rloo_variance(phi: float, t: float) -> float:
    p = sigmoid(phi)
    q = 2 * p * (1 - p)
    return (1 - 2 * t) ** 2 * q * (1 - q) / 4


def disarm_variance(phi: float, t: float) -> float:
    r = 2 * sigmoid(-abs(phi))
    return 0.25 * (1 - 2 * t) ** 2 * sigmoid(abs(phi)) ** 2 * r * (1 - r)


@pytest.mark.statistical
@pytest.mark.parametrize("phi", [0.5, -1.0])
def test_compare_reproduces_the_closed_forms_on_the_toy(phi: float) -> None:
    """M = 200000 draws per estimator at t = 0.45.

    Variances (RLOO, DisARM) within 5 %: each draw is a two-point law with probability v
    (q for RLOO, r for DisARM), so the sample variance has relative standard error
    sqrt((1/(v(1-v)) - 4) / M), at most 0.0027 here (DisARM, phi = 0.5, r = 0.755): 5 % is
    18 standard errors, false-failure rate < 1e-70.
    Straight-through's relative bias within 5 % of |2(p-t)p(1-p) - g*| / |g*|: each draw is
    2(b - t)p(1-p), standard error of the relative mean 2 sqrt(p(1-p)/M) / (1 - 2t) = 0.022
    (phi = 0.5; 0.020 at phi = -1), and 5 % of the predicted 2.45 (4.62) is 5.6 (11.6)
    standard errors: false-failure rate 2e-8.
    RLOO's and DisARM's means: |z| < 5 with the closed-form variance (5.7e-7 each).
    Total over both phis: about 2.3e-6."""
    m = 200_000
    logits = torch.tensor([phi], dtype=torch.float64)
    result = compare(
        toy, logits, estimators=["rloo", "disarm", "st"], num_draws=m, generator=gen(11)
    )
    p = sigmoid(phi)
    exact = p * (1 - p) * (1 - 2 * T)
    assert result.exact is not None
    torch.testing.assert_close(result.exact, torch.tensor([exact], dtype=torch.float64))
    rows = {row.estimator: row for row in result.rows}
    assert [row.estimator for row in result.rows] == ["rloo", "disarm", "st"]

    for name, formula in (("rloo", rloo_variance), ("disarm", disarm_variance)):
        row = rows[name]
        assert row.std is not None and row.bias is not None and row.num_draws == m
        variance = (row.std * abs(exact)) ** 2  # std is relative to ||g*||
        expected = formula(phi, T)
        assert abs(variance / expected - 1) < 0.05, (name, variance, expected)
        assert row.bias * abs(exact) < 5 * math.sqrt(expected / m), (name, row.bias)
        assert row.cosine == pytest.approx(1.0)

    st = rows["st"]
    predicted = abs(2 * (p - T) * p * (1 - p) - exact) / abs(exact)
    assert st.bias is not None
    assert abs(st.bias / predicted - 1) < 0.05, (st.bias, predicted)
    st_std = 2 * p * (1 - p) * math.sqrt(p * (1 - p))  # the two-point law of 2(b-t)p(1-p)
    assert st.std is not None
    assert abs((st.std * abs(exact)) / st_std - 1) < 0.05
    assert st.cosine == pytest.approx(math.copysign(1.0, (p - T) * exact))


def test_comparison_api() -> None:
    logits = torch.tensor([0.3, -0.7], dtype=torch.float64)
    names = ["rloo", "st", "disarm"]
    result = compare(toy, logits, estimators=names, num_draws=400, generator=gen(1))
    assert isinstance(result, Comparison)
    assert [row.estimator for row in result.rows] == names
    assert all(isinstance(row, ComparisonRow) for row in result.rows)
    for row in result.rows:
        assert row.num_draws == 400 and row.seconds_per_draw > 0
        for value in (row.bias, row.std, row.cosine, row.snr, row.mse):
            assert value is not None and math.isfinite(value)
        assert row.bias is not None and row.std is not None and row.mse is not None
        # mse = bias^2 + (D-1)/D std^2 (the docstring's identity)
        assert row.mse == pytest.approx(row.bias**2 + row.std**2 * 399 / 400, rel=1e-9)
        assert -1.0 <= row.cosine <= 1.0  # type: ignore[operator]

    markdown = result.to_markdown().splitlines()
    assert len(markdown) == 2 + len(names)
    assert markdown[0].startswith("|") and "estimator" in markdown[0] and "bias" in markdown[0]
    assert set(markdown[1]) <= set("|-: ")
    for line, name in zip(markdown[2:], names, strict=True):
        assert line.startswith(f"| {name} |")

    data = result.to_dict()
    decoded = json.loads(json.dumps(data))
    assert [row["estimator"] for row in decoded["rows"]] == names
    assert decoded["exact"] == pytest.approx(exact_gradient(toy, logits).tolist())

    text = str(result)
    for name in names:
        assert name in text
    assert "bias" in text.splitlines()[0]

    categorical = compare(
        two_categoricals, CAT_LOGITS, estimators=["rloo", "st"], dist="categorical",
        num_draws=50, generator=gen(2),
    )  # fmt: skip
    assert [row.estimator for row in categorical.rows] == ["rloo", "st"]
    assert categorical.exact is not None
    torch.testing.assert_close(categorical.exact, two_categoricals_gradient(CAT_LOGITS))
    assert categorical.to_dict()["settings"]["dist"] == "categorical"

    instance = compare(toy, logits, estimators=[hg.estimators.RLOO()], num_draws=10)
    assert len(instance.rows) == 1 and "RLOO" in instance.rows[0].estimator

    # Without the exact reference: no bias, cosine or mse; std relative to the mean's norm.
    free = compare(toy, logits, estimators=names, num_draws=400, exact=False, generator=gen(1))
    assert free.exact is None and free.to_dict()["exact"] is None
    for row, with_exact in zip(free.rows, result.rows, strict=True):
        assert row.bias is None and row.cosine is None and row.mse is None
        assert row.std is not None and row.snr is not None
        assert row.snr == pytest.approx(with_exact.snr)  # same seed: the same draws
        assert row.std == pytest.approx(1 / row.snr)
    assert "-" in str(free) and json.dumps(free.to_dict())


def test_compare_zero_spread_and_zero_norms() -> None:
    """DisARM with one antithetic pair has zero variance on the toy at phi = 0 (up to the
    rounding of the mean); where a norm is exactly 0 the ratio is None, never NaN."""
    result = compare(toy, torch.zeros(1, dtype=torch.float64), estimators=["disarm"], num_draws=50)
    (row,) = result.rows
    assert row.std is not None and row.std < 1e-12
    assert row.bias is not None and row.bias < 1e-12
    assert row.mse is not None and row.mse < 1e-20

    # A constant objective: every RLOO draw is exactly 0, so the mean's norm and the spread
    # are 0, and without an exact reference std and snr have nothing to be relative to.
    def constant(b: Tensor) -> Tensor:
        return torch.ones(b.shape[0], dtype=b.dtype)

    free = compare(constant, torch.zeros(2), estimators=["rloo"], num_draws=20, exact=False)
    (row,) = free.rows
    assert row.std is None and row.snr is None
    assert row.bias is None and row.cosine is None and row.mse is None
    text = json.dumps(free.to_dict()) + str(free) + free.to_markdown()
    assert "nan" not in text.lower()


def test_compare_bad_input() -> None:
    logits = torch.zeros(1)
    with pytest.raises(TypeError, match="estimators"):
        compare(toy, logits, estimators="rloo")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="estimators"):
        compare(toy, logits, estimators=hg.estimators.RLOO())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="estimator"):
        compare(toy, logits, estimators=[])
    with pytest.raises(ValueError, match="num_draws"):
        compare(toy, logits, estimators=["rloo"], num_draws=1)
    with pytest.raises(ValueError, match="num_draws"):
        compare(toy, logits, estimators=["rloo"], num_draws=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"rloo|disarm|available"):
        compare(toy, logits, estimators=["no_such_estimator"])


# --------------------------------------------------------------------------------------
# Regressions found by tests/test_properties_modules.py.
# --------------------------------------------------------------------------------------


def test_compare_bad_entry_names_the_estimators_argument() -> None:
    """A bad entry in the list raised a message naming `estimator`, not `estimators`."""
    f = lambda b: (b - 0.45).square()  # noqa: E731
    with pytest.raises(ValueError, match="`estimators`") as info:
        compare(f, torch.zeros(2), estimators=["st", "no_such_estimator"], num_draws=2)
    assert "'no_such_estimator'" in str(info.value) and "available" in str(info.value)
    with pytest.raises(TypeError, match="`estimators`"):
        compare(f, torch.zeros(2), estimators=["st", 3], num_draws=2)  # type: ignore[list-item]


@pytest.mark.parametrize("exact", [True, False])
def test_compare_of_empty_logits_reports_no_spread(exact: bool) -> None:
    """Empty logits made the variance warn ("degrees of freedom is <= 0"), an error under
    warnings-as-errors; there is nothing to vary, so the relative figures are None."""
    f = lambda b: (b - 0.45).square()  # noqa: E731
    result = compare(f, torch.zeros(0), estimators=["st", "disarm"], num_draws=3, exact=exact)
    for row in result.rows:
        assert row.std is None and row.snr is None and row.bias is None
