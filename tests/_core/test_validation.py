"""Bad input: every public op raises TypeError/ValueError naming the argument, what was
expected and what was found (API.md, conventions)."""

from __future__ import annotations

import dataclasses
import inspect
import math
import re

import pytest
import torch

import hardgrad as hg
from hardgrad.ops import OPS
from hardgrad.surrogates import SURROGATES, Surrogate

INF, NAN = math.inf, math.nan
ALL_OPS = list(OPS)
WITH_SURROGATE = [name for name, spec in OPS.items() if spec.family is not None]
SELECTIONS = [name for name, spec in OPS.items() if spec.family is None]


def first_argument(name: str) -> str:
    return next(iter(inspect.signature(OPS.get(name).op).parameters))


def good_input(name: str) -> torch.Tensor:
    return torch.randn(3, 5)


# --------------------------------------------------------------------------------------
# Every op: the tensor argument.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL_OPS)
@pytest.mark.parametrize("bad", [[1.0, 2.0], 1.5, None, "x"], ids=repr)
def test_non_tensor_input(name, bad):
    arg = first_argument(name)
    with pytest.raises(TypeError, match=f"`{arg}`.*torch.Tensor.*{type(bad).__name__}"):
        OPS.get(name)(bad)


@pytest.mark.parametrize("name", ALL_OPS)
@pytest.mark.parametrize(
    "bad",
    [
        torch.arange(6).reshape(2, 3),
        torch.ones(2, 3, dtype=torch.bool),
        torch.ones(2, 3, dtype=torch.complex64),
    ],
    ids=["int64", "bool", "complex64"],
)
def test_non_floating_tensor(name, bad):
    arg = first_argument(name)
    with pytest.raises(TypeError, match=f"`{arg}`.*floating-point.*{bad.dtype}"):
        OPS.get(name)(bad)


# --------------------------------------------------------------------------------------
# Surrogates.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", WITH_SURROGATE)
def test_unknown_surrogate_lists_the_names(name):
    with pytest.raises(ValueError, match=r"'nope'.*`surrogate`") as info:
        OPS.get(name)(good_input(name), surrogate="nope")
    for known in SURROGATES.names():
        assert repr(known) in str(info.value)


@pytest.mark.parametrize("name", WITH_SURROGATE)
@pytest.mark.parametrize("bad", [3, None, torch.tanh, hg.surrogates.Sigmoid], ids=repr)
def test_surrogate_of_the_wrong_type(name, bad):
    with pytest.raises(TypeError, match="`surrogate`"):
        OPS.get(name)(good_input(name), surrogate=bad)


@pytest.mark.parametrize("name", WITH_SURROGATE)
def test_surrogate_of_the_wrong_family(name):
    spec = OPS.get(name)
    wrong = [n for n, cls in SURROGATES.items() if spec.family not in cls.applies_to]
    assert wrong, f"every surrogate serves {spec.family!r}?"
    for surrogate in wrong:
        for given in (surrogate, SURROGATES.get(surrogate)()):
            with pytest.raises(ValueError, match=f"`{name}`"):
                spec(good_input(name), surrogate=given)


def test_documented_wrong_family_examples():
    # The message names the op and the surrogate (in either order).
    with pytest.raises(ValueError, match=r"(?=.*Sigmoid\(slope=1.0\))(?=.*`round`)"):
        hg.round(torch.randn(3), surrogate="sigmoid")
    with pytest.raises(ValueError, match=r"(?=.*Clipped\(width=1.0\))(?=.*`clamp`)"):
        hg.clamp(torch.randn(3), -1.0, 1.0, surrogate="clipped")
    with pytest.raises(ValueError, match="`quantize`"):
        hg.quantize(torch.randn(3), 0.1, surrogate="clipped")


@dataclasses.dataclass(frozen=True)
class SmoothClamp(Surrogate):
    """A user-defined smooth surrogate claiming the clamp family."""

    applies_to = frozenset({"clamp"})

    def function(self, x):
        return torch.tanh(x)

    def derivative(self, x):
        return 1 - torch.tanh(x) ** 2


def test_smooth_surrogate_rejected_where_only_masks_work():
    with pytest.raises(ValueError, match="`quantize`"):
        hg.quantize(torch.randn(3), 0.1, surrogate=SmoothClamp())
    with pytest.raises(ValueError, match="tensor bounds"):
        hg.clamp(torch.randn(3), torch.tensor(-1.0), 1.0, surrogate=SmoothClamp())


# --------------------------------------------------------------------------------------
# Selections: tau, dim, k, shapes.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SELECTIONS)
@pytest.mark.parametrize("tau", [0, 0.0, -1.0, NAN, INF, -INF], ids=repr)
def test_tau_must_be_positive_and_finite(name, tau):
    with pytest.raises(ValueError, match="`tau`"):
        OPS.get(name)(good_input(name), tau=tau)


def test_tau_zero_message():
    with pytest.raises(ValueError, match=r"Expected `tau` > 0.*tau=0.0"):
        hg.one_hot_argmax(torch.randn(3), tau=0.0)


@pytest.mark.parametrize("name", SELECTIONS)
@pytest.mark.parametrize("tau", ["1", None, True, torch.tensor(1.0)], ids=repr)
def test_tau_must_be_a_number(name, tau):
    with pytest.raises(TypeError, match="`tau`"):
        OPS.get(name)(good_input(name), tau=tau)


@pytest.mark.parametrize("name", SELECTIONS)
@pytest.mark.parametrize("dim", [2, -3, 10])
def test_dim_out_of_range(name, dim):
    with pytest.raises(ValueError, match=rf"`dim` in \[-2, 1\].*dim={dim}"):
        OPS.get(name)(good_input(name), dim=dim)


@pytest.mark.parametrize("name", SELECTIONS)
@pytest.mark.parametrize("dim", [1.0, "1", None], ids=repr)
def test_dim_must_be_an_int(name, dim):
    with pytest.raises(TypeError, match="`dim`"):
        OPS.get(name)(good_input(name), dim=dim)


@pytest.mark.parametrize("name", SELECTIONS)
def test_zero_dim_input(name):
    arg = first_argument(name)
    with pytest.raises(ValueError, match=f"`{arg}`.*0-dim"):
        OPS.get(name)(torch.tensor(1.0))


@pytest.mark.parametrize("name", SELECTIONS)
@pytest.mark.parametrize("shape", [(0,), (3, 0)], ids=str)
def test_empty_category_dim(name, shape):
    arg = first_argument(name)
    found = re.escape(str(tuple(shape)))
    with pytest.raises(ValueError, match=rf"`{arg}`.*at least one entry.*{found}"):
        OPS.get(name)(torch.empty(shape))


@pytest.mark.parametrize("k", [-1, 6, 100])
def test_topk_k_out_of_range(k):
    with pytest.raises(ValueError, match=f"`k`.*k={k}"):
        hg.topk_mask(torch.randn(4, 5), k)
    with pytest.raises(ValueError, match=f"`k`.*k={k}"):
        hg.ops.soft_topk_mask(torch.randn(4, 5), k)


@pytest.mark.parametrize("k", [2.0, "2", None, True], ids=repr)
def test_topk_k_must_be_an_int(k):
    with pytest.raises(TypeError, match="`k`"):
        hg.topk_mask(torch.randn(4, 5), k)


def test_topk_k_range_follows_dim():
    x = torch.randn(2, 5)
    hg.topk_mask(x, 2, dim=0)  # fine
    with pytest.raises(ValueError, match="`k` <= 2"):
        hg.topk_mask(x, 3, dim=0)


# --------------------------------------------------------------------------------------
# quantize.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("scale", [0, 0.0, -0.1, NAN, INF], ids=repr)
def test_quantize_number_scale_must_be_positive(scale):
    with pytest.raises(ValueError, match="`scale`"):
        hg.quantize(torch.randn(4), scale)


@pytest.mark.parametrize("bad", [0.0, -0.1, NAN, INF], ids=repr)
def test_quantize_tensor_scale_must_be_positive(bad):
    scale = torch.tensor([[0.1], [bad], [0.2]])
    with pytest.raises(ValueError, match="`scale` > 0"):
        hg.quantize(torch.randn(3, 4), scale)
    with pytest.raises(ValueError, match="`scale` > 0"):
        hg.quantize(torch.randn(3, 4), torch.tensor(bad))


def test_quantize_tensor_scale_scan_follows_set_validation(validation_off):
    assert not hg.validation_enabled()
    y = hg.quantize(torch.randn(4), torch.tensor(-0.1))  # not scanned: no sync
    assert y.shape == (4,)
    with pytest.raises(ValueError, match="`scale`"):  # number checks always run
        hg.quantize(torch.randn(4), -0.1)
    with pytest.raises(ValueError, match="`scale`"):  # shape checks always run
        hg.quantize(torch.randn(3, 4), torch.full((2, 1), 0.1))


def test_set_validation_type():
    with pytest.raises(TypeError, match="`enabled`"):
        hg.set_validation(1)  # type: ignore[arg-type]
    assert hg.validation_enabled()


@pytest.mark.parametrize(
    "scale", ["0.1", None, [0.1], torch.tensor(1), torch.tensor(True)], ids=repr
)
def test_quantize_scale_type(scale):
    with pytest.raises(TypeError, match="`scale`"):
        hg.quantize(torch.randn(4), scale)


@pytest.mark.parametrize("shape", [(3,), (2, 1), (3, 4, 1), (1, 5)], ids=str)
def test_quantize_scale_shape(shape):
    with pytest.raises(ValueError, match=r"`scale` to be broadcastable.*\(3, 4\)"):
        hg.quantize(torch.randn(3, 4), torch.full(shape, 0.1))


def test_quantize_zero_point_checks():
    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match="`zero_point` to be broadcastable"):
        hg.quantize(x, 0.1, torch.zeros(2, 1))
    with pytest.raises(ValueError, match="`zero_point`"):
        hg.quantize(x, 0.1, NAN)
    with pytest.raises(TypeError, match="`zero_point`"):
        hg.quantize(x, 0.1, "0")
    with pytest.raises(TypeError, match="`zero_point`"):
        hg.quantize(x, 0.1, torch.zeros(3, 1, dtype=torch.bool))


@pytest.mark.parametrize(("quant_min", "quant_max"), [(0, 0), (5, 4), (127, -128)])
def test_quantize_range_must_be_increasing(quant_min, quant_max):
    with pytest.raises(
        ValueError,
        match=rf"`quant_min` < `quant_max`.*quant_min={quant_min}, quant_max={quant_max}",
    ):
        hg.quantize(torch.randn(4), 0.1, quant_min=quant_min, quant_max=quant_max)


@pytest.mark.parametrize("argument", ["quant_min", "quant_max"])
@pytest.mark.parametrize("bad", [0.0, "1", None, True], ids=repr)
def test_quantize_range_must_be_ints(argument, bad):
    with pytest.raises(TypeError, match=f"`{argument}`"):
        hg.quantize(torch.randn(4), 0.1, **{argument: bad})


@pytest.mark.parametrize("grad_scale", [0.0, -1.0, NAN, INF], ids=repr)
def test_quantize_grad_scale(grad_scale):
    with pytest.raises(ValueError, match="`grad_scale`"):
        hg.quantize(torch.randn(4), torch.tensor(0.1, requires_grad=True), grad_scale=grad_scale)


# --------------------------------------------------------------------------------------
# clamp.
# --------------------------------------------------------------------------------------


def test_clamp_needs_a_bound():
    with pytest.raises(ValueError, match="`min` and `max`"):
        hg.clamp(torch.randn(4))
    with pytest.raises(ValueError, match="`min` and `max`"):
        hg.clamp(torch.randn(4), None, None)


def test_clamp_min_above_max():
    with pytest.raises(ValueError, match=r"`min` <= `max`.*min=1.0, max=0.0"):
        hg.clamp(torch.randn(4), 1.0, 0.0)


@pytest.mark.parametrize("argument", ["min", "max"])
def test_clamp_bound_checks(argument):
    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match=f"`{argument}`"):
        hg.clamp(x, **{argument: NAN})
    with pytest.raises(TypeError, match=f"`{argument}`"):
        hg.clamp(x, **{argument: "1"})
    with pytest.raises(TypeError, match=f"`{argument}`.*floating"):
        hg.clamp(x, **{argument: torch.tensor(1)})
    with pytest.raises(ValueError, match=f"`{argument}` to be broadcastable"):
        hg.clamp(x, **{argument: torch.zeros(2, 1)})


def test_repeated_clamps_are_checked_like_first_ones():
    """Number-bound clamps reuse their checked plan: the errors still come on every call,
    True never passes for a cached 1, -0.0 and 0.0 stay different bounds, and a bound
    rounded to one dtype is not reused for another."""
    x = torch.tensor([-0.0, 0.0, -2.0, 3.0], requires_grad=True)
    for _ in range(2):
        hg.clamp(x, 1, 2)
        with pytest.raises(TypeError, match="`min`"):
            hg.clamp(x, True, 2)
        with pytest.raises(ValueError, match="`min` <= `max`"):
            hg.clamp(x, 2.0, 1.0)
        with pytest.raises(ValueError, match="`max`"):
            hg.clamp(x, max=NAN)
    for bound in (0.0, -0.0, 0.0):
        got = hg.clamp(x, min=bound).detach()
        want = torch.clamp(x.detach(), min=bound)
        assert torch.equal(got, want) and torch.equal(got.signbit(), want.signbit())
    wide = torch.tensor([1e30, -1e30], dtype=torch.float64)
    for tensor in (wide.float(), wide, wide.half(), wide):
        got = hg.clamp(tensor, -1e300, 1e300)
        assert got.dtype == tensor.dtype and torch.equal(got, tensor)


def test_repeated_tensor_bound_clamps_are_checked_like_first_ones():
    """Small tensor-bound clamps (torch's clamp) reuse their checks too: every error still
    comes on every call, a number bound keeps its exact type and zero sign, a bound of
    another dtype is cast, and nothing is reused across shapes, dtypes or surrogates."""
    x = torch.tensor([[-0.0, 0.0, -2.0, 3.0]], requires_grad=True)
    alpha = torch.tensor(1.5, requires_grad=True)
    for _ in range(2):
        y = hg.clamp(x, 0.0, alpha)
        assert torch.equal(y, torch.clamp(x, torch.tensor(0.0), alpha))
        with pytest.raises(TypeError, match="`min`"):
            hg.clamp(x, True, alpha)
        with pytest.raises(ValueError, match="`min`"):
            hg.clamp(x, NAN, alpha)
        with pytest.raises(TypeError, match=r"`max`.*floating"):
            hg.clamp(x, 0.0, torch.tensor(1))
        with pytest.raises(ValueError, match="`max` to be broadcastable"):
            hg.clamp(x, 0.0, torch.ones(2, 1))
        with pytest.raises(ValueError, match="serves 'clamp' ops"):
            hg.clamp(x, 0.0, alpha, surrogate="sigmoid")
        with pytest.raises(TypeError, match="`x`"):
            hg.clamp(x.detach().long(), 0.0, alpha)
    for bound in (0.0, -0.0, 0.0):
        got = hg.clamp(x, bound, alpha).detach()
        assert torch.equal(got.signbit(), torch.clamp(x.detach(), min=bound).signbit())
    for dtype in (torch.float64, torch.float32, torch.float64):
        got = hg.clamp(x, 0.0, alpha.to(dtype))
        assert got.dtype == torch.float32 and float(got.detach().max()) == 1.5
    wide = x.detach().repeat(2, 1).requires_grad_()  # another shape: checked again
    assert hg.clamp(wide, 0.0, alpha).shape == (2, 4)
    with pytest.raises(ValueError, match="`max` to be broadcastable"):
        hg.clamp(x, 0.0, torch.ones(3, 1))


def test_repeated_selections_are_checked_like_first_ones():
    """one_hot_argmax and topk_mask reuse their checked (dim, tau): the errors still come on
    every call (an integer or empty tensor, a dim out of range, a bad tau, a bool dim)."""
    x = torch.randn(3, 4)
    for _ in range(2):
        assert hg.one_hot_argmax(x, dim=1, tau=0.5).shape == (3, 4)
        with pytest.raises(TypeError, match="`logits`"):
            hg.one_hot_argmax(torch.arange(12).view(3, 4), dim=1, tau=0.5)
        with pytest.raises(ValueError, match="at least one entry"):
            hg.one_hot_argmax(torch.randn(3, 0), dim=1, tau=0.5)
        with pytest.raises(ValueError, match="`dim`"):
            hg.one_hot_argmax(x, dim=2)
        with pytest.raises(ValueError, match="`tau`"):
            hg.one_hot_argmax(x, tau=-1.0)
        with pytest.raises(TypeError, match="`dim`"):
            hg.topk_mask(x, 2, dim=True)
    assert hg.one_hot_argmax(torch.randn(2, 3, 4), dim=1).shape == (2, 3, 4)  # another rank


def test_one_sided_clamps():
    x = torch.tensor([-2.0, 0.0, 2.0], requires_grad=True)
    assert hg.clamp(x, min=-1.0).tolist() == [-1.0, 0.0, 2.0]
    assert hg.clamp(x, max=1.0).tolist() == [-2.0, 0.0, 1.0]
    assert hg.clamp(x, torch.tensor(-1.0)).tolist() == [-1.0, 0.0, 2.0]


# --------------------------------------------------------------------------------------
# Messages follow the pattern "Expected ... but found ...".
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: hg.round([1.0]),
        lambda: hg.sign(torch.arange(3)),
        lambda: hg.one_hot_argmax(torch.randn(3), tau=-1.0),
        lambda: hg.topk_mask(torch.randn(3), 5),
        lambda: hg.quantize(torch.randn(3), 0.0),
        lambda: hg.quantize(torch.randn(3), 0.1, quant_min=3, quant_max=3),
        lambda: hg.clamp(torch.randn(3), 1.0, 0.0),
    ],
)
def test_messages_say_what_was_expected_and_found(call):
    with pytest.raises((TypeError, ValueError), match=r"^Expected .* but found "):
        call()


# --------------------------------------------------------------------------------------
# Regressions found by the property tests (tests/test_properties_*.py).
# --------------------------------------------------------------------------------------


def test_numbers_too_large_for_a_float_are_infinite_not_overflow_errors():
    """check_real raised OverflowError (from float()) for an int such as 10**400."""
    x = torch.tensor([-2.0, 0.5, 3.0])
    assert torch.equal(hg.clamp(x, max=10**400), x)
    assert torch.equal(hg.clamp(x, min=-(10**400), max=1.0), torch.tensor([-2.0, 0.5, 1.0]))
    with pytest.raises(ValueError, match="`tau`"):
        hg.one_hot_argmax(x, tau=10**400)
    with pytest.raises(ValueError, match="`sigma`"):
        hg.noisy_rectifier(x, sigma=10**400)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("surrogate", ["masked", "identity"])
def test_clamp_number_bounds_beyond_the_dtype_are_rounded_to_it(dtype, surrogate):
    """torch.clamp (and so hg.clamp) raised RuntimeError "value cannot be converted to type
    ... without overflow" for a number bound beyond x's dtype; the bound is now rounded to
    the dtype, which gives the correctly rounded clamp."""
    x = torch.tensor([-INF, -3.0, 0.0, 2.0, INF], dtype=dtype, requires_grad=True)
    y = hg.clamp(x, -1e300, 1e300, surrogate=surrogate)
    assert torch.equal(y, x.detach())
    y = hg.clamp(x, min=1e300, surrogate=surrogate)  # everything below the bound
    assert torch.equal(y, torch.full_like(x, INF))
    y.sum().backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_all_finite_check_reads_the_values_not_the_sum(dtype) -> None:
    """check_all_finite clears a tensor from its sum when that is finite; a sum that
    overflows on finite values (largest values of the dtype) must not raise, and one inf,
    -inf or NaN anywhere must, in every dtype."""
    from hardgrad._core.validation import check_all_finite

    big = torch.finfo(dtype).max
    x = torch.full((4096,), big, dtype=dtype)
    check_all_finite(x, "x")  # the sum overflows; every value is finite
    check_all_finite(torch.cat([x, -x]), "x")  # inf - inf in the sum: NaN, values finite
    for bad in (INF, -INF, NAN):
        y = torch.randn(1000, dtype=dtype)
        y[617] = bad
        with pytest.raises(ValueError, match="finite `x`"):
            check_all_finite(y, "x")
        y = x.clone()
        y[3] = bad
        with pytest.raises(ValueError, match="finite `x`"):
            check_all_finite(y, "x")
