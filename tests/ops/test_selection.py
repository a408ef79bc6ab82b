"""hg.one_hot_argmax, hg.topk_mask and the relaxation hg.ops.soft_topk_mask."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.func import vjp

import hardgrad as hg

INF, NAN = math.inf, math.nan


def soft_topk_bisection(x: torch.Tensor, k: int, tau: float, dim: int = -1) -> torch.Tensor:
    """Independent solution of sum(sigmoid((x - t) / tau)) = k by bisection on t (float64)."""
    x = x.movedim(dim, -1)
    lo = x.amin(-1, keepdim=True) - 60 * tau
    hi = x.amax(-1, keepdim=True) + 60 * tau
    for _ in range(1100):
        t = 0.5 * (lo + hi)
        excess = torch.sigmoid((x - t) / tau).sum(-1, keepdim=True) - k
        lo, hi = torch.where(excess > 0, t, lo), torch.where(excess > 0, hi, t)
    return torch.sigmoid((x - 0.5 * (lo + hi)) / tau).movedim(-1, dim)


def rows(n: int = 6, *, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(5, n, generator=g, dtype=torch.float64) * 2
    ties = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0, -1.0][:n], [0.5] * n], dtype=torch.float64)
    return torch.cat([x, ties]).to(dtype)


# --------------------------------------------------------------------------------------
# one_hot_argmax
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "dim"), [((7, 5), -1), ((7, 5), 0), ((2, 4, 3), 1), ((2, 4, 3), -3), ((6,), 0)]
)
def test_one_hot_argmax_forward(shape, dim, dtype):
    x = (torch.randn(shape) * 3).round().to(dtype)  # rounded: plenty of ties
    y = hg.one_hot_argmax(x, dim=dim)
    expected = F.one_hot(x.argmax(dim), x.shape[dim]).movedim(-1, dim).to(dtype)
    assert y.dtype == dtype and y.shape == x.shape
    assert torch.equal(y, expected)
    assert torch.equal(y.sum(dim), torch.ones_like(y.sum(dim)))


def test_one_hot_argmax_ties_go_to_the_first_index_and_nan_is_largest():
    x = torch.tensor(
        [[1.0, 3.0, 3.0, 0.0], [2.0, NAN, 5.0, NAN], [-INF, -INF, -INF, -INF], [INF, 1.0, INF, 0.0]]
    )
    y = hg.one_hot_argmax(x)
    assert y.tolist() == [[0, 1, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0], [1, 0, 0, 0]]


def test_one_hot_argmax_docstring_example():
    logits = torch.tensor([1.0, 3.0, 3.0, 0.0], requires_grad=True)
    y = hg.one_hot_argmax(logits)
    assert y.tolist() == [0.0, 1.0, 0.0, 0.0]
    (y * torch.tensor([0.0, 1.0, 0.0, 0.0])).sum().backward()
    torch.testing.assert_close(
        logits.grad, torch.tensor([-0.0283, 0.2482, -0.2094, -0.0104]), atol=1e-4, rtol=0
    )


@pytest.mark.parametrize("tau", [0.3, 1.0, 3.0])
@pytest.mark.parametrize(("shape", "dim"), [((7, 5), -1), ((7, 5), 0), ((2, 4, 3), 1)])
def test_one_hot_argmax_backward_is_softmax_vjp(shape, dim, tau):
    g_ = torch.Generator().manual_seed(1)
    logits = torch.randn(shape, generator=g_, dtype=torch.float64) * 2
    g = torch.randn(shape, generator=g_, dtype=torch.float64)
    x = logits.clone().requires_grad_()
    (got,) = torch.autograd.grad(hg.one_hot_argmax(x, dim=dim, tau=tau), x, g)
    _, pullback = vjp(lambda t: torch.softmax(t / tau, dim), logits)
    (expected,) = pullback(g)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-14)


def test_one_hot_argmax_backward_low_precision(dtype):
    logits = torch.randn(6, 5).to(dtype)
    g = torch.randn(6, 5).to(dtype)
    x = logits.clone().requires_grad_()
    (got,) = torch.autograd.grad(hg.one_hot_argmax(x, tau=0.5), x, g)
    _, pullback = vjp(lambda t: torch.softmax(t / 0.5, -1), logits.double())
    (expected,) = pullback(g.double())
    assert got.dtype == dtype
    tol = {torch.float64: 1e-12, torch.float32: 1e-6, torch.float16: 2e-3, torch.bfloat16: 2e-2}[
        dtype
    ]
    torch.testing.assert_close(got.double(), expected, rtol=tol, atol=tol)


def test_one_hot_argmax_single_category():
    x = torch.randn(4, 1, requires_grad=True)
    y = hg.one_hot_argmax(x)
    assert torch.equal(y, torch.ones(4, 1))
    y.sum().backward()
    assert torch.equal(x.grad, torch.zeros(4, 1))


# --------------------------------------------------------------------------------------
# topk_mask
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, 1, 3, 5, 6])
@pytest.mark.parametrize("dim", [-1, 0])
def test_topk_mask_forward(k, dim, dtype):
    x = rows(6, dtype=dtype)
    if dim == 0:
        x = x[:6].T.contiguous()
    y = hg.topk_mask(x, k, dim=dim)
    expected = torch.zeros_like(x).scatter(dim, x.topk(k, dim).indices, 1.0)
    assert y.dtype == dtype
    assert torch.equal(y, expected)
    assert torch.equal(y.sum(dim), torch.full_like(y.sum(dim), k))


@pytest.mark.parametrize("tau", [0.1, 0.5, 1.0, 4.0])
@pytest.mark.parametrize("k", [1, 2, 5])
def test_soft_topk_mask_solves_the_constraint(k, tau):
    x = rows(6)
    m = hg.ops.soft_topk_mask(x, k, tau=tau)
    assert ((m > 0) & (m < 1)).all() or tau <= 0.1
    torch.testing.assert_close(
        m.sum(-1), torch.full((x.shape[0],), float(k), dtype=torch.float64), rtol=0, atol=1e-12
    )
    torch.testing.assert_close(m, soft_topk_bisection(x, k, tau), rtol=1e-10, atol=1e-12)
    # Order preserving: larger x, larger m.
    order = x.argsort(-1)
    assert (m.gather(-1, order).diff(dim=-1) >= 0).all()


def test_soft_topk_mask_approaches_the_hard_mask():
    x = torch.tensor([[0.1, 2.0, -1.0, 1.5, 0.7]], dtype=torch.float64)
    hard = hg.topk_mask(x, 2)
    for tau, atol in ((0.05, 1e-3), (0.01, 1e-12)):
        torch.testing.assert_close(hg.ops.soft_topk_mask(x, 2, tau=tau), hard, rtol=0, atol=atol)


def test_soft_topk_mask_docstring_example():
    m = hg.ops.soft_topk_mask(torch.tensor([0.1, 2.0, -1.0, 1.5]), 2, tau=0.5)
    torch.testing.assert_close(m, torch.tensor([0.2202, 0.9266, 0.0303, 0.8228]), rtol=0, atol=1e-4)
    torch.testing.assert_close(m.sum(), torch.tensor(2.0))


@pytest.mark.parametrize("tau", [0.3, 1.0, 2.5])
@pytest.mark.parametrize("k", [1, 3])
@pytest.mark.parametrize("dim", [-1, 0])
def test_soft_topk_mask_gradcheck(k, tau, dim):
    x = rows(6)[:4] if dim == -1 else rows(6)[:6].T.contiguous()
    x = x + torch.linspace(0, 0.01, x.numel(), dtype=torch.float64).reshape(x.shape)  # no ties
    assert torch.autograd.gradcheck(
        lambda t: hg.ops.soft_topk_mask(t, k, dim=dim, tau=tau), (x.requires_grad_(),)
    )


@pytest.mark.parametrize("tau", [0.3, 1.0, 2.5])
@pytest.mark.parametrize("k", [1, 2, 4])
@pytest.mark.parametrize("dim", [-1, 0])
def test_topk_mask_backward_is_soft_topk_vjp(k, tau, dim):
    x = rows(6) if dim == -1 else rows(6)[:6].T.contiguous()
    g = torch.randn(x.shape, dtype=torch.float64)
    xr = x.clone().requires_grad_()
    (got,) = torch.autograd.grad(hg.topk_mask(xr, k, dim=dim, tau=tau), xr, g)
    _, pullback = vjp(lambda t: hg.ops.soft_topk_mask(t, k, dim=dim, tau=tau), x)
    (expected,) = pullback(g)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    # The mask's total is fixed, so the gradient sums to zero along dim.
    torch.testing.assert_close(got.sum(dim), torch.zeros_like(got.sum(dim)), rtol=0, atol=1e-12)


def test_topk_mask_backward_against_implicit_differentiation_closed_form():
    x = rows(6)
    g = torch.randn(x.shape, dtype=torch.float64)
    xr = x.clone().requires_grad_()
    (got,) = torch.autograd.grad(hg.topk_mask(xr, 2, tau=0.7), xr, g)
    m = soft_topk_bisection(x, 2, 0.7)
    a = m * (1 - m) / 0.7
    expected = a * (g - (g * a).sum(-1, keepdim=True) / a.sum(-1, keepdim=True))
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("k", [0, 6])
def test_topk_mask_trivial_k_has_zero_gradient(k):
    x = rows(6).requires_grad_()
    y = hg.topk_mask(x, k)
    assert torch.equal(y, torch.full_like(y, float(k > 0)))
    (y * torch.randn(y.shape, dtype=y.dtype)).sum().backward()
    assert torch.equal(x.grad, torch.zeros_like(x))
    m = hg.ops.soft_topk_mask(x.detach(), k)
    assert torch.equal(m, torch.full_like(m, float(k > 0)))


def test_topk_mask_docstring_example():
    x = torch.tensor([0.1, 2.0, -1.0, 1.5], requires_grad=True)
    y = hg.topk_mask(x, 2)
    assert y.tolist() == [0.0, 1.0, 0.0, 1.0]
    (y * torch.tensor([1.0, 0.0, 0.0, 0.0])).sum().backward()
    torch.testing.assert_close(
        x.grad, torch.tensor([0.1587, -0.0516, -0.0411, -0.0659]), rtol=0, atol=1e-4
    )


def test_soft_topk_mask_half_precision(dtype):
    x = rows(6, dtype=dtype)
    m = hg.ops.soft_topk_mask(x, 2, tau=0.5)
    assert m.dtype == dtype
    expected = soft_topk_bisection(x.double(), 2, 0.5)
    tol = {torch.float64: 1e-10, torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}[
        dtype
    ]
    torch.testing.assert_close(m.double(), expected, rtol=0, atol=tol)


# --------------------------------------------------------------------------------------
# Non-finite and large logits: finite gradients.
# --------------------------------------------------------------------------------------


def nonfinite_rows(dtype: torch.dtype) -> torch.Tensor:
    big = {torch.float64: 1e300, torch.float32: 1e30, torch.float16: 6e4, torch.bfloat16: 1e38}[
        dtype
    ]
    return torch.tensor(
        [
            [INF, 1.0, -INF, 0.0, INF, 2.0],
            [NAN, 1.0, 2.0, 3.0, NAN, 0.0],
            [-INF] * 6,
            [INF] * 6,
            [NAN] * 6,
            [big, -big, big, 0.0, 1.0, -1.0],
            [0.1, -0.2, 0.3, 0.0, 1.0, -1.0],
        ],
        dtype=torch.float64,
    ).to(dtype)


@pytest.mark.parametrize("tau", [0.1, 1.0])
def test_nonfinite_logits_give_finite_gradients(dtype, tau):
    x = nonfinite_rows(dtype)
    g = torch.randn(x.shape).to(dtype)
    for op in (lambda t: hg.one_hot_argmax(t, tau=tau), lambda t: hg.topk_mask(t, 2, tau=tau)):
        xr = x.clone().requires_grad_()
        y = op(xr)
        counts = y.detach().sum(-1)
        assert torch.equal(counts, torch.full_like(counts, counts[0].item()))
        (grad,) = torch.autograd.grad(y, xr, g)
        assert grad.dtype == dtype
        assert torch.isfinite(grad).all(), grad
    # The relaxation itself stays finite and sums to k on non-NaN rows.
    m = hg.ops.soft_topk_mask(x, 2, tau=tau)
    assert torch.isfinite(m).all()


def test_finite_rows_unaffected_by_nonfinite_rows():
    x = nonfinite_rows(torch.float64)
    g = torch.randn(x.shape, dtype=torch.float64)
    for op in (hg.one_hot_argmax, lambda t: hg.topk_mask(t, 2)):
        xa = x.clone().requires_grad_()
        (ga,) = torch.autograd.grad(op(xa), xa, g)
        xb = x[-1:].clone().requires_grad_()
        (gb,) = torch.autograd.grad(op(xb), xb, g[-1:])
        torch.testing.assert_close(ga[-1:], gb, rtol=0, atol=0)


# --------------------------------------------------------------------------------------
# Regressions found by tests/test_properties_ops.py: temperatures at the dtype's limits.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("op", [hg.one_hot_argmax, lambda x, tau: hg.topk_mask(x, 2, tau=tau)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_temperature_below_the_compute_dtype_is_a_value_error(op, dtype):
    """tau = 1e-300 became 0 in float32: NaN gradients; tau = 1e-39 (subnormal) gave wrong
    infinite ones. Both are now refused, naming `tau`."""
    x = torch.tensor([1.0, 1.0, 0.0, 2.0], dtype=dtype)
    for tau in (1e-300, 1e-39, 1e300):
        with pytest.raises(ValueError, match="`tau`"):
            op(x, tau=tau)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
def test_topk_gradient_at_the_smallest_temperature_is_never_nan(dtype):
    """The top-k VJP divided by tau before the bracket: a/tau overflowed, then
    0 * (g - inf) = NaN. Divided last, it is inf only where the gradient itself is."""
    tau = torch.finfo(torch.float32 if dtype == torch.float16 else dtype).tiny
    x = torch.tensor([1.0, 1.0, 0.0, 2.0, 1.0, 1.0], dtype=dtype, requires_grad=True)
    y = hg.topk_mask(x, 2, tau=tau)
    (g,) = torch.autograd.grad(y, x, torch.tensor([3.0, -2.0, 0.5, 2.0, 1.0, 4.0], dtype=dtype))
    assert not g.isnan().any(), g
    assert (g[[2, 3]] == 0).all()  # saturated entries get nothing
