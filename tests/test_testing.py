"""hardgrad.testing: the public assertions catch what they promise to catch, pass what they
should pass, and reject bad arguments. (The conformance suites in test_ops_conformance.py
and test_expectation.py run them over every registered op and estimator.)"""

from __future__ import annotations

import math

import pytest
import torch

import hardgrad as hg
from hardgrad.surrogates import SURROGATES
from hardgrad.testing import (
    UnbiasednessTest,
    assert_compiles,
    assert_straight_through,
    assert_unbiased,
    default_inputs,
)

DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def identity(x: torch.Tensor) -> torch.Tensor:
    return x


def clipped(x: torch.Tensor) -> torch.Tensor:
    return torch.clamp(x, -1, 1)


def heaviside_hard(x: torch.Tensor) -> torch.Tensor:
    return (x > 0).to(x.dtype)


# --------------------------------------------------------------------------------------
# default_inputs
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_default_inputs_cover_discontinuities_subnormals_and_large_values(dtype):
    x = default_inputs(dtype)
    assert x.dtype == dtype and x.dim() == 1 and bool(x.isfinite().all())
    values = set(x.double().tolist())
    assert {k / 2 for k in range(-6, 7)} <= values  # every integer and half-integer in [-3, 3]
    assert torch.signbit(x[x == 0]).any()  # -0.0 is there
    info = torch.finfo(dtype)
    tiny = x.abs()[x != 0].min()
    assert tiny < info.smallest_normal  # a subnormal
    assert x.abs().max() >= {torch.float16: 6e4}.get(dtype, 1e30)
    assert torch.equal(default_inputs(dtype), x)  # seeded


def test_default_inputs_reject_integer_dtypes():
    with pytest.raises(TypeError, match="`dtype`"):
        default_inputs(torch.int64)


# --------------------------------------------------------------------------------------
# assert_straight_through
# --------------------------------------------------------------------------------------


def test_passes_for_hardgrad_ops_in_every_dtype():
    assert_straight_through(hg.round, torch.round, identity)
    assert_straight_through(hg.sign, torch.sign, clipped)
    assert_straight_through(hg.heaviside, heaviside_hard, torch.sigmoid)
    # a Surrogate instance: the backward is upstream * s'(x)
    assert_straight_through(hg.heaviside, heaviside_hard, hg.surrogates.Sigmoid())


def test_the_detach_trick_loses_the_sign_of_zero():
    def detach_round(x):
        return x + (torch.round(x) - x).detach()

    with pytest.raises(AssertionError, match=r"forward of detach_round differs from round in"):
        assert_straight_through(detach_round, torch.round, identity)
    # its values are right otherwise, and its backward is the identity
    assert_straight_through(detach_round, torch.round, identity, signed_zeros=False)


def test_the_detach_trick_with_an_unbounded_soft_part_is_wrong_at_large_values():
    def detach_sign(x):
        return x + (torch.sign(x) - x).detach()

    with pytest.raises(AssertionError, match=r"in bfloat16 .*x\[\d+\]=1\.00026e\+30: got 0, "):
        assert_straight_through(detach_sign, torch.sign, identity, dtypes=[torch.bfloat16])


def test_a_wrong_backward_fails_with_the_first_mismatches():
    with pytest.raises(AssertionError, match=r"backward of sign is not the surrogate's gradient"):
        assert_straight_through(hg.sign, torch.sign, torch.tanh)
    with pytest.raises(AssertionError, match="backward of heaviside"):
        assert_straight_through(hg.heaviside, heaviside_hard, hg.surrogates.Sigmoid(slope=4.0))


def test_a_backward_off_by_a_factor_fails():
    halved = hg.straight_through(torch.round, lambda t: t / 2)
    halved.__name__ = "halved"
    with pytest.raises(AssertionError, match="backward of halved"):
        assert_straight_through(halved, torch.round, identity)
    assert_straight_through(halved, torch.round, lambda t: t / 2)


def test_a_zero_or_missing_gradient_fails():
    with pytest.raises(AssertionError, match="backward of round is not the surrogate's gradient"):
        assert_straight_through(torch.round, torch.round, identity)  # PyTorch's zero gradient
    with pytest.raises(AssertionError, match="does not require grad"):
        assert_straight_through(lambda x: torch.round(x).detach(), torch.round, identity)


class _NoGradient(torch.autograd.Function):
    """round whose backward returns None: autograd gives the input an all-zero gradient."""

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.round(x)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        pass

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> None:
        return None


def _no_gradient(x: torch.Tensor) -> torch.Tensor:
    return _NoGradient.apply(x)


def _zero(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(x)


ALL_ZERO = r"zero at every input .*no gradient at all.*nothing is checked"


@pytest.mark.parametrize(
    ("op", "surrogate", "match"),
    [
        (torch.round, _zero, ALL_ZERO),  # PyTorch's own zero gradient, a surrogate with none
        (_no_gradient, _zero, "the input gets no gradient"),  # backward returns None
        (torch.round, lambda x: x.detach(), ALL_ZERO),  # a surrogate without grad
        (torch.round, lambda x: x * 0, ALL_ZERO),
        (torch.round, hg.surrogates.Sigmoid(), ALL_ZERO),  # s' ~ 0 on every input (below)
    ],
)
def test_no_gradient_at_all_fails_instead_of_passing_vacuously(op, surrogate, match):
    """Issue 38: with a surrogate whose gradient is zero on the inputs, an op with no
    gradient at all matched it and the helper passed, having checked nothing."""
    inputs = None
    if isinstance(surrogate, hg.surrogates.Surrogate):  # where sigmoid' underflows to 0
        inputs = torch.tensor([-1e300, 1e300, 2e300, -3e300], dtype=torch.float64)
    with pytest.raises(AssertionError, match=match):
        assert_straight_through(op, torch.round, surrogate, inputs=inputs)


def test_an_op_whose_output_does_not_require_grad_fails():
    for op in (lambda x: torch.round(x).detach(), lambda x: torch.round(x.detach())):
        with pytest.raises(AssertionError, match="does not require grad"):
            assert_straight_through(op, torch.round, _zero)


@pytest.mark.parametrize(
    ("hard", "surrogate", "inputs"),
    [
        (torch.round, identity, [-2.0, 0.0, 1.0, 3.0]),  # integers: round(x) == x
        (torch.sign, clipped, [-2.0, 0.0, 1.0, 5.0]),  # sign == clamp(x, -1, 1) there
        (heaviside_hard, hg.surrogates.Sigmoid(), [-1e300, 1e300]),  # saturated sigmoid
    ],
)
def test_inputs_that_hit_no_kink_or_jump_fail(hard, surrogate, inputs):
    """Issue 38: on inputs where ``hard`` equals the smooth surrogate the plain surrogate
    passes as the op (``lambda x: x`` as a straight-through round on integers): fail."""
    x = torch.tensor(inputs, dtype=torch.float64)
    soft = surrogate.function if isinstance(surrogate, hg.surrogates.Surrogate) else surrogate
    with pytest.raises(AssertionError, match=r"hit no kink or jump.*nothing is checked"):
        assert_straight_through(soft, hard, surrogate, inputs=x)
    # One input on a jump or kink, and the impostor is caught; the real op passes.
    kinked = torch.cat([x, torch.tensor([0.5, 0.25, -0.75], dtype=torch.float64)])
    with pytest.raises(AssertionError, match="forward of"):
        assert_straight_through(soft, hard, surrogate, inputs=kinked)


def test_the_real_ops_pass_on_inputs_with_a_kink():
    x = torch.tensor([-2.0, 0.0, 0.5, 1.0, 3.0], dtype=torch.float64)
    assert_straight_through(hg.round, torch.round, identity, inputs=x)
    assert_straight_through(hg.sign, torch.sign, clipped, inputs=x)


def test_empty_inputs_no_dtypes_and_a_zero_upstream_fail():
    with pytest.raises(AssertionError, match="`inputs` is empty, so nothing is checked"):
        assert_straight_through(hg.round, torch.round, identity, inputs=torch.zeros(0, 3))
    with pytest.raises(ValueError, match=r"`dtypes`.*at least one"):
        assert_straight_through(hg.round, torch.round, identity, dtypes=[])
    with pytest.raises(ValueError, match=r"`grad_output`.*all zeros"):
        assert_straight_through(hg.round, torch.round, identity, grad_output=torch.zeros(88))


def test_wrong_dtype_or_shape_fails():
    with pytest.raises(AssertionError, match=r"dtype torch\.float32 instead of torch\.float64"):
        assert_straight_through(
            lambda x: hg.round(x).float(), torch.round, identity, dtypes=[torch.float64]
        )
    with pytest.raises(AssertionError, match="shape"):
        assert_straight_through(lambda x: hg.round(x)[1:], torch.round, identity)


def test_custom_inputs_any_shape_and_a_given_upstream_gradient():
    x = torch.randn(3, 4, 5, generator=gen(0), dtype=torch.float64) * 3
    assert_straight_through(
        lambda t: hg.one_hot_argmax(t, tau=0.5),
        lambda t: torch.nn.functional.one_hot(t.argmax(-1), t.shape[-1]).to(t.dtype),
        lambda t: torch.softmax(t / 0.5, -1),
        inputs=x,
        grad_output=torch.ones(3, 4, 5),
    )
    with pytest.raises(AssertionError, match="backward of"):  # the wrong temperature
        assert_straight_through(
            lambda t: hg.one_hot_argmax(t, tau=0.5),
            lambda t: torch.nn.functional.one_hot(t.argmax(-1), t.shape[-1]).to(t.dtype),
            lambda t: torch.softmax(t, -1),
            inputs=x,
        )


def test_a_surrogate_of_the_wrong_shape_is_reported():
    with pytest.raises(AssertionError, match="must map the input to a tensor of the same shape"):
        assert_straight_through(hg.round, torch.round, lambda x: x.sum())


@pytest.mark.parametrize("name", [n for n, cls in SURROGATES.items() if "step" in cls.applies_to])
def test_straight_through_takes_a_surrogate_name_as_every_op_does(name):
    """Issue 13: ``assert_straight_through(op, hard, "sigmoid")`` raised TypeError."""
    assert_straight_through(lambda x: hg.sign(x, surrogate=name), torch.sign, name)
    other = "identity" if name != "identity" else "clipped"
    with pytest.raises(AssertionError, match="is not the surrogate's gradient"):
        assert_straight_through(lambda x: hg.sign(x, surrogate=other), torch.sign, name)


def test_straight_through_unknown_surrogate_name_lists_the_names():
    with pytest.raises(ValueError, match="`surrogate`") as info:
        assert_straight_through(hg.sign, torch.sign, "clippd")
    for name in SURROGATES.names():
        assert repr(name) in str(info.value)


def test_straight_through_bad_arguments():
    with pytest.raises(TypeError, match="`op`"):
        assert_straight_through(1, torch.round, identity)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`hard`"):
        assert_straight_through(hg.round, None, identity)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`surrogate`"):
        assert_straight_through(hg.round, torch.round, 3.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`inputs`"):
        assert_straight_through(hg.round, torch.round, identity, inputs=torch.arange(3))
    with pytest.raises(TypeError, match="`dtypes`"):
        assert_straight_through(hg.round, torch.round, identity, dtypes=[torch.int32])
    with pytest.raises(TypeError, match="`grad_output`"):
        assert_straight_through(hg.round, torch.round, identity, grad_output=1.0)  # type: ignore[arg-type]


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


# --------------------------------------------------------------------------------------
# assert_compiles
# --------------------------------------------------------------------------------------


@pytest.fixture
def x() -> torch.Tensor:
    return (torch.randn(32, generator=gen(0)) * 3).requires_grad_()


@pytest.mark.compile
def test_compiles_hard_ops_with_inductor(x):
    assert_compiles(lambda t: hg.sign(t) * hg.round(3 * t) + hg.clamp(t, -1, 1), x)


@pytest.mark.compile
def test_nested_outputs_and_keyword_arguments(x):
    def fn(t, *, scale):
        return {"a": hg.round(t * scale), "b": [hg.sign(t), t.argmax()]}

    assert_compiles(fn, x, kwargs={"scale": torch.tensor(2.0)}, backend="aot_eager")


@pytest.mark.compile
def test_a_graph_break_fails_under_fullgraph_and_passes_without(x):
    def breaks(t):
        if t.sum() > 0:  # data-dependent Python control flow
            return hg.round(t)
        return -hg.round(t)

    with pytest.raises(AssertionError, match="breaks does not compile with fullgraph=True"):
        assert_compiles(breaks, x, backend="aot_eager")
    assert_compiles(breaks, x, backend="aot_eager", fullgraph=False)


@pytest.mark.compile
def test_a_compiled_result_that_differs_fails(x):
    """A function reading Python state that changes between calls: dynamo bakes in the
    value seen while tracing (the second call), eager ran with the first."""
    calls = [0]

    def stateful(t):
        calls[0] += 1
        return t * calls[0]

    with pytest.raises(AssertionError, match="output 0 differs between compiled and eager"):
        assert_compiles(stateful, x, backend="aot_eager")


@pytest.mark.compile
def test_random_functions_need_a_seed(x):
    def noisy(t):
        return hg.bernoulli(t, estimator="st") * t

    assert_compiles(noisy, x, seed=0)  # inductor with fallback_random: eager's numbers
    assert_compiles(noisy, x, seed=0, backend="aot_eager")
    with pytest.raises(AssertionError, match="differs between compiled and eager"):
        assert_compiles(noisy, x, backend="aot_eager")  # unseeded: different draws


@pytest.mark.compile
def test_gradients_are_compared(x):
    """Same values, different gradients: the compiled branch doubles the backward."""

    def fn(t):
        if torch.compiler.is_compiling():
            return hg.straight_through(torch.round, lambda s: 2 * s)(t)
        return hg.round(t)

    with pytest.raises(AssertionError, match="gradient of tensor argument 0 differs"):
        assert_compiles(fn, x, backend="aot_eager")
    assert_compiles(fn, x, backend="aot_eager", check_grad=False)


def test_compiles_bad_arguments(x):
    with pytest.raises(TypeError, match="`fn`"):
        assert_compiles(3, x)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`kwargs`"):
        assert_compiles(hg.round, x, kwargs=[1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`rtol` and `atol`"):
        assert_compiles(hg.round, x, rtol=1e-3)


def test_helpers_are_exported_at_the_package_level():
    assert hg.testing.assert_straight_through is assert_straight_through
    assert set(hg.testing.__all__) >= {
        "assert_straight_through",
        "assert_unbiased",
        "assert_compiles",
    }
    assert math.isfinite(default_inputs().double().abs().max().item())
