"""hardgrad.testing's ``default_inputs`` and ``assert_straight_through``: they catch what they
promise to catch, pass what they should pass, and reject bad arguments; the helpers are
exported at the package level. (The conformance suite in tests/ops/test_conformance.py runs them
over every registered op.)"""

from __future__ import annotations

import math

import pytest
import torch

import hardgrad as hg
from hardgrad.surrogates import SURROGATES
from hardgrad.testing import assert_straight_through, default_inputs

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


def test_helpers_are_exported_at_the_package_level():
    assert hg.testing.assert_straight_through is assert_straight_through
    assert set(hg.testing.__all__) >= {
        "assert_straight_through",
        "assert_unbiased",
        "assert_compiles",
    }
    assert math.isfinite(default_inputs().double().abs().max().item())
