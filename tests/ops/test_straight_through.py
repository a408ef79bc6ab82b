"""hg.straight_through: forward exactly hard(x), backward that of soft (callable or surrogate)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.func import grad, vmap

import hardgrad as hg
from hardgrad.surrogates import SURROGATES

# Every test here runs on both of a small op's autograd routes (see conftest.autograd_route).
pytestmark = pytest.mark.usefixtures("autograd_route")

INF, NAN = math.inf, math.nan


def _step(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x > 0.3, 1.0, -1.0).to(x.dtype)


HARDS = [torch.round, torch.sign, torch.floor, _step]
SOFTS = {
    "none": None,
    "tanh": torch.tanh,
    "sin": torch.sin,
    "linear_1000": lambda x: 1000 * x,  # unbounded: the naive detach trick rounds with it
    "exp": torch.exp,  # overflows to inf for large x
    "log": torch.log,  # NaN for negative x
    "softmax": lambda x: torch.softmax(x, -1),  # mixes entries
}


def inputs(dtype: torch.dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    big = {torch.float64: 1e300, torch.float32: 1e8, torch.float16: 1e4, torch.bfloat16: 1e4}[dtype]
    values = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 0.3, 300.0, -300.0, big, -big, INF, -INF, NAN]
    return torch.cat([torch.randn(30, generator=g) * 3, torch.tensor(values)]).to(dtype)


@pytest.mark.parametrize("soft", list(SOFTS), ids=str)
@pytest.mark.parametrize("hard", HARDS, ids=lambda f: f.__name__)
def test_forward_is_exactly_hard(hard, soft, dtype, assert_same):
    x = inputs(dtype)
    op = hg.straight_through(hard, SOFTS[soft])
    assert_same(op(x), hard(x))
    assert_same(op(x.clone().requires_grad_()).detach(), hard(x))


@pytest.mark.parametrize("surrogate", SURROGATES.names())
def test_forward_with_every_surrogate(surrogate, dtype, assert_same):
    x = inputs(dtype)
    for soft in (surrogate, SURROGATES.get(surrogate)()):
        assert_same(
            hg.straight_through(torch.sign, soft)(x.clone().requires_grad_()).detach(),
            torch.sign(x),
        )


def test_naive_detach_trick_is_not_exact_where_this_is():
    # The reason straight_through does not use soft + (hard - soft).detach() (DESIGN.md).
    x = torch.tensor([300.0], dtype=torch.bfloat16)
    naive = x + (torch.sign(x) - x).detach()
    assert naive.item() != 1.0
    assert hg.straight_through(torch.sign, lambda t: t)(x).item() == 1.0


@pytest.mark.parametrize("soft", ["tanh", "sin", "linear_1000", "softmax"])
def test_gradient_is_the_vjp_of_a_callable_soft(soft):
    fn = SOFTS[soft]
    x = torch.randn(4, 5, dtype=torch.float64)
    g = torch.randn(4, 5, dtype=torch.float64)
    xr = x.clone().requires_grad_()
    (got,) = torch.autograd.grad(hg.straight_through(torch.round, fn)(xr), xr, g)
    _, pullback = torch.func.vjp(fn, x)
    (expected,) = pullback(g)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_gradient_of_sin_is_cos_docstring_example():
    stair = hg.straight_through(torch.round, torch.sin)
    x = torch.tensor([0.4, 2.6], requires_grad=True)
    y = stair(x)
    y.sum().backward()
    assert y.tolist() == [0.0, 3.0]
    torch.testing.assert_close(x.grad, torch.cos(x.detach()))


def test_soft_overflowing_in_some_entries_leaves_the_others_alone():
    x = torch.tensor([1000.0, 1.0, -2.0], requires_grad=True)
    y = hg.straight_through(torch.round, torch.exp)(x)  # exp(1000) = inf in float32
    assert y.tolist() == [1000.0, 1.0, -2.0]
    y.sum().backward()
    # Where soft(x) overflows its own derivative is infinite, so no finite value is owed
    # there; every other entry gets exactly soft's gradient.
    torch.testing.assert_close(x.grad[1:], torch.tensor([math.e, math.exp(-2.0)]))


@pytest.mark.parametrize("surrogate", SURROGATES.names())
def test_gradient_with_a_surrogate_matches_closed_form(
    surrogate, dtype, tol, closed_form, assert_close_to
):
    x = (torch.randn(40) * 2).to(dtype)
    g = torch.randn(40).to(dtype)
    for soft in (surrogate, SURROGATES.get(surrogate)()):
        instance = SURROGATES.get(surrogate)()
        xr = x.clone().requires_grad_()
        (got,) = torch.autograd.grad(hg.straight_through(torch.sign, soft)(xr), xr, g)
        assert got.dtype == dtype
        assert_close_to(got, g.double() * closed_form(instance, x), tol)


def test_soft_none_is_the_identity(dtype):
    x = (torch.randn(20) * 3).to(dtype).requires_grad_()
    g = torch.randn(20).to(dtype)
    (got,) = torch.autograd.grad(hg.straight_through(torch.round)(x), x, g)
    assert torch.equal(got, g)


def test_double_backward_through_a_callable_soft():
    x = torch.tensor([-1.2, 0.3, 0.9, 2.0], dtype=torch.float64, requires_grad=True)
    y = hg.straight_through(torch.round, torch.sin)(x)
    (first,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    (second,) = torch.autograd.grad(first.sum(), x)
    torch.testing.assert_close(first.detach(), torch.cos(x.detach()))
    torch.testing.assert_close(second, -torch.sin(x.detach()))


@pytest.mark.parametrize("soft", [None, "tanh", "clipped", torch.sin], ids=str)
def test_torch_func_and_vmap(soft, assert_same):
    op = hg.straight_through(torch.round, soft)
    x = torch.randn(3, 5, dtype=torch.float64) * 2
    w = torch.randn(3, 5, dtype=torch.float64)
    xr = x.clone().requires_grad_()
    (op(xr) * w).sum().backward()
    torch.testing.assert_close(grad(lambda t: (op(t) * w).sum())(x), xr.grad)
    assert_same(vmap(op)(x), torch.round(x))
    per_row = vmap(grad(lambda t, v: (op(t) * v).sum()))(x, w)
    torch.testing.assert_close(per_row, xr.grad)


def test_saved_memory():
    def saved(op, x):
        total = 0

        def pack(t):
            nonlocal total
            total += t.numel() * t.element_size()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            op(x)
        return total

    x = torch.randn(32, 32, requires_grad=True)
    assert saved(hg.straight_through(torch.round), x) == 0
    assert saved(hg.straight_through(torch.round, "identity"), x) == 0
    assert saved(hg.straight_through(torch.sign, "clipped"), x) <= x.numel()


@pytest.mark.parametrize("soft", [None, "sigmoid", torch.tanh], ids=str)
@pytest.mark.parametrize("shape", [(0,), (3, 0), (2, 3, 4)], ids=str)
def test_shape_and_dtype_preserved(soft, shape, dtype):
    x = torch.randn(shape).to(dtype).requires_grad_()
    y = hg.straight_through(torch.round, soft)(x)
    assert y.shape == x.shape and y.dtype == dtype
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape and x.grad.dtype == dtype


def _soft(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x)


def test_repr():
    assert repr(hg.straight_through(_step, _soft)) == "straight_through(hard=_step, soft=_soft)"
    assert repr(hg.straight_through(_step)) == "straight_through(hard=_step, soft=None)"
    assert repr(hg.straight_through(_step, hg.surrogates.Tanh(slope=2.0))) == (
        "straight_through(hard=_step, soft=Tanh(slope=2.0))"
    )
    assert repr(hg.straight_through(_step, "sigmoid")) == (
        "straight_through(hard=_step, soft=Sigmoid(slope=1.0))"
    )
    # torch functions are named by their own names.
    text = repr(hg.straight_through(torch.round, torch.sin))
    assert "round" in text and "sin" in text


# --------------------------------------------------------------------------------------
# Bad input.
# --------------------------------------------------------------------------------------


def test_hard_must_be_callable():
    with pytest.raises(TypeError, match="`hard`"):
        hg.straight_through(3.0)  # type: ignore[arg-type]


def test_soft_must_be_none_name_surrogate_or_callable():
    with pytest.raises(TypeError, match="`soft`"):
        hg.straight_through(torch.round, 3.0)  # type: ignore[arg-type]


def test_unknown_soft_name_lists_the_names():
    with pytest.raises(ValueError, match="nope") as info:
        hg.straight_through(torch.round, "nope")
    for name in SURROGATES.names():
        assert repr(name) in str(info.value)


@pytest.mark.parametrize("soft", [None, "tanh", torch.tanh], ids=str)
def test_x_must_be_a_floating_tensor(soft):
    op = hg.straight_through(torch.round, soft)
    with pytest.raises(TypeError, match="`x`"):
        op([1.0, 2.0])
    with pytest.raises(TypeError, match=r"`x`.*floating"):
        op(torch.arange(3))


@pytest.mark.parametrize("soft", [None, "clipped", "tanh", torch.tanh], ids=str)
def test_hard_must_keep_shape_and_dtype(soft):
    x = torch.randn(4, requires_grad=True)
    with pytest.raises(ValueError, match=r"`hard\(x\)`"):
        hg.straight_through(lambda t: t.sum(), soft)(x)
    with pytest.raises(ValueError, match=r"`hard\(x\)`"):
        hg.straight_through(lambda t: t.round().double(), soft)(x)
    with pytest.raises(TypeError, match=r"`hard\(x\)`"):
        hg.straight_through(lambda t: 1.0, soft)(x)


def test_soft_must_keep_shape_and_dtype():
    x = torch.randn(4, requires_grad=True)
    with pytest.raises(ValueError, match=r"`soft\(x\)`"):
        hg.straight_through(torch.round, lambda t: t.sum())(x)
    with pytest.raises(ValueError, match=r"`soft\(x\)`"):
        hg.straight_through(torch.round, lambda t: t.double())(x)
    with pytest.raises(TypeError, match=r"`soft\(x\)`"):
        hg.straight_through(torch.round, lambda t: 1.0)(x)


def test_unknown_soft_name_names_the_soft_argument():
    """Regression (tests/test_properties_ops.py): an unknown surrogate name given as ``soft``
    raised a message naming `surrogate`, an argument straight_through does not have."""
    with pytest.raises(ValueError, match="`soft`"):
        hg.straight_through(torch.round, "no_such_surrogate")
