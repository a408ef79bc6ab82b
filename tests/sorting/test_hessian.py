"""Second derivatives of the soft sorts: Hessian-vector products against central finite
differences of the gradient (float64), and ``gradgradcheck``, on both isotonic paths
(the min-max formula below ``PAV_MIN_LENGTH`` entries, PAV from there on), with and
without the compiled kernel."""

from __future__ import annotations

import pytest
import torch
from torch.autograd import gradgradcheck

import hardgrad as hg
from hardgrad.sorting import _native_pav
from hardgrad.sorting._isotonic import PAV_MIN_LENGTH, _pav_blocks

LENGTHS = (2, 3, 5, 8, 16, 31, 32, 40)
STRENGTHS = (0.02, 0.3, 1.0, 10.0)
FUNCTIONS = {"soft_sort": hg.soft_sort, "soft_rank": hg.soft_rank}


def _inputs(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows: a generic point and one with exact ties (pairs of equal entries); the loss's
    weights; directions (at the ties, ones that keep them: the gradient is smooth there)."""
    g = torch.Generator().manual_seed(seed)
    x, c, v = torch.randn(3, 2, n, generator=g, dtype=torch.float64)
    x = 2 * x
    pairs = x[1, 1::2].numel()
    x[1, 1::2] = x[1, 0 : n - 1 : 2][:pairs]
    v[1, 1::2] = v[1, 0 : n - 1 : 2][:pairs]
    return x, c, v


def _loss(f, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    y = f(x)
    return (c * y).sum() + 0.25 * (y * y).sum()


def _gradient(f, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    x = x.detach().requires_grad_()
    (g,) = torch.autograd.grad(_loss(f, x, c), x)
    return g


def _hvp(f, x: torch.Tensor, c: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    x = x.detach().requires_grad_()
    (g,) = torch.autograd.grad(_loss(f, x, c), x, create_graph=True)
    (h,) = torch.autograd.grad((g * v).sum(), x)
    return h


def _pooled(name: str, regularization: str, x: torch.Tensor, strength: float) -> int:
    """How many entries (over the rows) share their isotonic block with another, from PAV's
    blocks of the problem each function solves (see their docstrings): ascending
    soft_sort(x) = -s(-x) with s = rho / strength, w = (-x) sorted decreasingly; soft_rank:
    s = x / strength sorted decreasingly, w = rho (l2) or log rho (kl)."""
    n = x.shape[-1]
    rho = torch.arange(n, 0, -1, dtype=x.dtype).expand_as(x)
    if name == "soft_sort":
        s, w = rho / strength, torch.sort(-x, -1, descending=True).values
    else:
        s = torch.sort(x / strength, -1, descending=True).values
        w = rho if regularization == "l2" else rho.log()
    starts = _pav_blocks(s.contiguous(), w.contiguous(), regularization == "kl")
    first = starts == torch.arange(n)
    last = torch.cat([starts[..., 1:] != starts[..., :-1], torch.ones_like(first[..., :1])], -1)
    return int((~(first & last)).sum())


@pytest.fixture(params=["kernel", pytest.param("no kernel", marks=pytest.mark.slow)])
def kernel(request, monkeypatch):
    """With the compiled PAV kernel where it is built, and without (the eager Functions then
    run the tensor PAV and tensor backward, as on a machine with no C compiler)."""
    if request.param == "no kernel":
        monkeypatch.setattr(_native_pav, "available", lambda *tensors: False)
    return request.param


@pytest.mark.parametrize("regularization", ["l2", "kl"])
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_hessian_vector_products_match_finite_differences(name, regularization, kernel):
    fn = FUNCTIONS[name]
    h = 1e-6
    for n in LENGTHS:
        pooled = unpooled = 0
        for strength in STRENGTHS:
            f = lambda t, s=strength: fn(t, strength=s, regularization=regularization)  # noqa: E731
            x, c, v = _inputs(n, seed=100 * n + int(50 * strength))
            got = _hvp(f, x, c, v)
            fd = (_gradient(f, x + h * v, c) - _gradient(f, x - h * v, c)) / (2 * h)
            scale = fd.abs().amax(-1, keepdim=True).clamp_min(1.0)
            err = float(((got - fd).abs() / scale).max())
            assert err < 1e-5, (name, regularization, n, strength, got, fd)
            shared = _pooled(name, regularization, x, strength)
            pooled += shared > 0
            unpooled += shared < 2 * n
        # Both pooled blocks and entries alone were exercised at this length.
        assert pooled and unpooled, (n, pooled, unpooled)


@pytest.mark.parametrize(
    ("n", "regularization"),
    [(n, "kl") for n in (2, 5, PAV_MIN_LENGTH - 1, PAV_MIN_LENGTH)]
    + [(n, "l2") for n in (3, PAV_MIN_LENGTH)],
)
def test_gradgradcheck_on_both_paths(n, regularization):
    g = torch.Generator().manual_seed(n)
    x = (torch.randn(n, generator=g, dtype=torch.float64) * 2).requires_grad_()
    for fn in FUNCTIONS.values():
        for strength, descending in ((0.5, False), (3.0, True)):
            assert gradgradcheck(
                lambda t, f=fn, s=strength, d=descending: f(
                    t, strength=s, regularization=regularization, descending=d
                ),
                (x,),
                fast_mode=True,
            )


def test_kl_hvp_at_a_known_point_on_the_min_max_path():
    """The case the issue reported (n = 5): the Hessian-vector product of ``"kl"``
    soft_rank equals the finite difference of its gradient."""
    x = torch.tensor([0.3, -1.2, 0.8, 0.1, -0.4], dtype=torch.float64)
    c = torch.tensor([1.0, -2.0, 0.5, 0.0, 1.5], dtype=torch.float64)
    v = torch.tensor([0.2, 1.0, -0.7, 0.4, 0.3], dtype=torch.float64)
    for fn in FUNCTIONS.values():
        f = lambda t, fn=fn: fn(t, strength=1.0, regularization="kl")  # noqa: E731
        got = _hvp(f, x, c, v)
        fd = (_gradient(f, x + 1e-5 * v, c) - _gradient(f, x - 1e-5 * v, c)) / 2e-5
        torch.testing.assert_close(got, fd, rtol=1e-6, atol=1e-8)
