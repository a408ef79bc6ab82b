"""hardgrad.testing's ``assert_unbiased``: it passes unbiased estimators, fails biased ones
with their worst coordinates, and rejects bad arguments. (The conformance suite in
test_expectation.py runs it over every registered estimator.)"""

from __future__ import annotations

import pytest
import torch

import hardgrad as hg
from hardgrad.testing import UnbiasednessTest, assert_unbiased


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------------------
# assert_unbiased
# --------------------------------------------------------------------------------------

TARGET = torch.tensor([0.45, 0.2, 0.7], dtype=torch.float64)
LOGITS = torch.tensor([0.3, -1.0, 2.0], dtype=torch.float64)


def quadratic(b: torch.Tensor) -> torch.Tensor:
    return (b - TARGET).square().sum(-1)


@pytest.mark.statistical
def test_unbiased_estimators_pass_over_many_seeds():
    """RLOO over 20 seeds: each run fails falsely with probability 1e-6 (the helper's
    default), so this test's false-failure rate is 2e-5."""
    for seed in range(20):
        result = assert_unbiased("rloo", quadratic, LOGITS, num_draws=2000, generator=gen(seed))
        assert result.passed


@pytest.mark.statistical
def test_the_result_reports_z_threshold_and_resolution():
    """Seeded; false-failure rate 1e-6."""
    result = assert_unbiased("disarm", quadratic, LOGITS, generator=gen(1))
    assert isinstance(result, UnbiasednessTest)
    assert result.estimator == "disarm" and result.num_draws == 10_000
    n = 3  # every coordinate is noisy
    expected = -float(torch.special.ndtri(torch.tensor(1e-6 / (2 * n), dtype=torch.float64)))
    assert result.threshold == pytest.approx(expected, rel=1e-12)
    assert 5.0 < result.threshold < 5.2
    exact = hg.diagnostics.exact_gradient(quadratic, LOGITS)
    torch.testing.assert_close(result.exact, exact)
    z = (result.mean - result.exact) / result.standard_error
    torch.testing.assert_close(result.z, z)
    assert result.max_abs_z == pytest.approx(float(z.abs().max()))
    assert result.detectable_bias == pytest.approx(
        result.threshold * float(result.standard_error.max()) + result.rounding
    )
    assert "disarm: consistent with unbiased" in str(result)
    stricter = assert_unbiased(
        "disarm", quadratic, LOGITS, generator=gen(1), false_failure_rate=1e-12
    )
    assert stricter.threshold > result.threshold + 1.5


@pytest.mark.statistical
def test_a_biased_estimator_fails_with_its_worst_coordinates():
    """ST's bias on this quadratic is tens of standard errors (measured |z| > 30)."""
    with pytest.raises(AssertionError, match=r"st: BIASED; .*worst coordinates: \[\d\] mean "):
        assert_unbiased("st", quadratic, LOGITS, generator=gen(0))


def test_a_deterministic_estimate_is_exact_or_fails():
    """On f(b) = 2b the straight-through estimate at tau = 1 is 2 sigma'(l) for every
    sample, exactly the gradient (zero spread, z = 0); at tau = 0.5 it is the constant
    2 sigma'(2 l) * 2, deterministic and wrong: the helper must fail it (no z to hide in)."""

    def linear(b: torch.Tensor) -> torch.Tensor:
        return 2 * b.sum(-1)

    result = assert_unbiased("st", linear, LOGITS, num_draws=50, generator=gen(0))
    assert float(result.standard_error.max()) == 0 and result.max_abs_z == 0
    with pytest.raises(AssertionError, match=r"max \|z\| = inf"):
        assert_unbiased(hg.estimators.ST(tau=0.5), linear, LOGITS, num_draws=50, generator=gen(0))


@pytest.mark.statistical
def test_categorical_and_stateful_estimators():
    """Seeded; false-failure rate 2e-6 (two calls at 1e-6)."""

    def f(d: torch.Tensor) -> torch.Tensor:
        return (d * torch.tensor([0.3, -1.0, 2.0, 0.5], dtype=torch.float64)).sum(-1).tanh()

    logits = torch.tensor([[0.2, -0.4, 1.0, 0.0]], dtype=torch.float64)
    assert_unbiased("rloo", f, logits, dist="categorical", num_draws=3000, generator=gen(2))
    ema = hg.estimators.Reinforce(baseline="ema")
    assert_unbiased(ema, f, logits, dist="categorical", num_draws=3000, generator=gen(3))
    assert int(ema.steps) >= 1  # the stateful estimator was used as it is


def test_unbiased_bad_arguments():
    with pytest.raises(ValueError, match="`num_draws` >= 2"):
        assert_unbiased("rloo", quadratic, LOGITS, num_draws=1)
    with pytest.raises(TypeError, match="`num_draws`"):
        assert_unbiased("rloo", quadratic, LOGITS, num_draws=10.0)  # type: ignore[arg-type]
    for rate in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match="`false_failure_rate`"):
            assert_unbiased("rloo", quadratic, LOGITS, false_failure_rate=rate)
    with pytest.raises(TypeError, match="`false_failure_rate`"):
        assert_unbiased("rloo", quadratic, LOGITS, false_failure_rate="1e-6")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Unknown estimator"):
        assert_unbiased("nope", quadratic, LOGITS)
    with pytest.raises(TypeError, match="`logits`"):
        assert_unbiased("rloo", quadratic, torch.arange(3))
