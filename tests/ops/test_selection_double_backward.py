"""Second derivatives of hg.topk_mask: its backward is the VJP of the sigmoid-threshold
relaxation (hg.ops.soft_topk_mask), and differentiating that backward gives the
relaxation's second derivatives (gradgradcheck and finite differences, float64)."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradgradcheck

import hardgrad as hg


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize(
    ("k", "dim", "tau"), [(1, -1, 1.0), (2, -1, 0.3), (3, 0, 2.0), (0, -1, 1.0), (6, -1, 1.0)]
)
def test_topk_mask_gradgradcheck(k, dim, tau):
    x = torch.randn(6, 6, generator=gen(k), dtype=torch.float64).requires_grad_()
    assert gradgradcheck(lambda t: hg.topk_mask(t, k, dim=dim, tau=tau), (x,))


def _surrogate_gradient(
    x: torch.Tensor, c: torch.Tensor, k: int, tau: float, create_graph: bool = False
):
    x = x.detach().requires_grad_()
    y = hg.topk_mask(x, k, tau=tau)
    # Linear in y: an upstream that depends on y would bring in y's surrogate derivative
    # (J^T J terms) that differencing the piecewise-constant forward cannot see.
    loss = (c * y).sum()
    (g,) = torch.autograd.grad(loss, x, create_graph=create_graph)
    return x, g


def test_topk_mask_hvp_matches_finite_differences_and_the_relaxation():
    x = torch.randn(4, 7, generator=gen(1), dtype=torch.float64)
    c = torch.randn(4, 7, generator=gen(2), dtype=torch.float64)
    v = torch.randn(4, 7, generator=gen(3), dtype=torch.float64)
    k, tau, h = 3, 0.7, 1e-6
    leaf, g = _surrogate_gradient(x, c, k, tau, create_graph=True)
    (hvp,) = torch.autograd.grad((g * v).sum(), leaf)
    fd = (
        _surrogate_gradient(x + h * v, c, k, tau)[1] - _surrogate_gradient(x - h * v, c, k, tau)[1]
    ) / (2 * h)
    torch.testing.assert_close(hvp, fd, rtol=1e-6, atol=1e-8)
    # The same as differentiating <c, relaxation> twice.
    z = x.clone().requires_grad_()
    (g2,) = torch.autograd.grad(
        (c * hg.ops.soft_topk_mask(z, k, tau=tau)).sum(), z, create_graph=True
    )
    (want,) = torch.autograd.grad((g2 * v).sum(), z)
    torch.testing.assert_close(hvp, want, rtol=1e-10, atol=1e-12)
    assert hvp.abs().max() > 1e-2  # a second derivative that is not zero


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_topk_mask_double_backward_in_low_precision(dtype):
    x = torch.randn(3, 8, generator=gen(4), dtype=torch.float64)
    c = torch.randn(3, 8, generator=gen(5), dtype=torch.float64)
    v = torch.randn(3, 8, generator=gen(6), dtype=torch.float64)
    out = []
    for dt in (torch.float64, dtype):
        leaf = x.to(dt).requires_grad_()
        (g,) = torch.autograd.grad(
            (c.to(dt) * hg.topk_mask(leaf, 2, tau=0.5)).sum(), leaf, create_graph=True
        )
        (hvp,) = torch.autograd.grad((g * v.to(dt)).sum(), leaf)
        assert hvp.dtype == dt and torch.isfinite(hvp).all()
        out.append(hvp.to(torch.float64))
    # bf16 rounds the inputs, gradient and result (8 bits): within a few of its ulps.
    tol = 1e-4 if dtype == torch.float32 else 0.05
    torch.testing.assert_close(out[1], out[0], rtol=tol, atol=tol * float(out[0].abs().max()))
