"""hg.perturbed's multiplicative perturbation, leave-one-out baseline and the Fenchel-Young
loss's ``reduction``.

References written here in float64 from PyEPO's published code (khalil-research/PyEPO,
``pkg/pyepo/func/perturbed.py``: ``perturbedOpt``, ``perturbedOptMul``,
``perturbedFenchelYoungMul``), in its layout (batch, samples, dimension) and its sense (costs
minimised), on noise drawn here from the same seed; the baseline's unbiasedness by z-tests
against closed forms.
"""

from __future__ import annotations

import math

import pytest
import torch

import hardgrad as hg
from _solver_references import Recorder, argmax_solver, argmin_solver, gen

M = 5


def pyepo_reference(c, noise, sols, grad_output, *, sigma, mul, variance_reduction):
    """PyEPO's ``perturbedOptFunc.backward`` (``perturbedOptMul`` when ``mul``) for costs
    ``c`` (b, d), its noises and perturbed solutions (b, n, d)."""
    reward = torch.einsum("bnd,bd->bn", sols, grad_output)
    n = reward.shape[1]
    if variance_reduction and n > 1:
        reward = (reward - reward.mean(dim=1, keepdim=True)) * (n / (n - 1))
    grad = torch.einsum("bnd,bn->bd", noise, reward)
    return grad / (n * sigma * c) if mul else grad / (n * sigma)


def costs(shape=(3, 5), seed=0):
    g = gen(seed)
    c = torch.rand(shape, generator=g, dtype=torch.float64) + 0.5
    c[0, 1] = -c[0, 1]  # one negative cost: its sign is kept
    return c, torch.randn(shape, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("mul", [False, True])
@pytest.mark.parametrize("baseline", ["none", "leave_one_out"])
def test_backward_is_pyepos_estimator(mul, baseline):
    c, g = costs()
    c.requires_grad_(True)
    sigma = 0.7
    rec = Recorder(argmin_solver)
    layer = hg.perturbed(
        rec, noise="normal", sigma=sigma, num_samples=M, minimize=True, generator=gen(1),
        perturbation="multiplicative" if mul else "additive", baseline=baseline,
    )  # fmt: skip
    y = layer(c)
    (y * g).sum().backward()
    z = torch.randn((M, 3, 5), generator=gen(1), dtype=torch.float64).transpose(0, 1)
    z = z if mul else -z  # added to the scores -c: PyEPO's c + sigma * noise with noise = -z
    ptb = (
        c.detach().unsqueeze(1) * torch.exp(sigma * z - sigma**2 / 2)
        if mul
        else c.detach().unsqueeze(1) + sigma * z
    )
    # the solver (a minimiser) got the perturbed costs, sample-major
    torch.testing.assert_close(
        rec.calls[0], ptb.transpose(0, 1).reshape(-1, 5), rtol=1e-14, atol=1e-14
    )
    sols = argmin_solver(ptb)
    torch.testing.assert_close(y.detach(), sols.mean(1), rtol=0, atol=0)
    expected = pyepo_reference(
        c.detach(), z, sols, g, sigma=sigma, mul=mul, variance_reduction=baseline != "none"
    )
    torch.testing.assert_close(c.grad, expected, rtol=1e-12, atol=1e-12)


def test_multiplicative_zero_score_gets_zero_gradient():
    theta = torch.tensor([[0.0, 1.0, 2.0]], dtype=torch.float64, requires_grad=True)
    layer = hg.perturbed(
        argmax_solver,
        noise="normal",
        perturbation="multiplicative",
        num_samples=50,
        generator=gen(2),
    )
    y = layer(theta)
    (y * torch.tensor([[3.0, -1.0, 1.0]], dtype=torch.float64)).sum().backward()
    assert theta.grad[0, 0] == 0 and torch.isfinite(theta.grad).all()


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("mul", [False, True])
def test_fenchel_young_reduction_and_multiplicative(reduction, mul):
    """Value and gradient against PyEPO's perturbedFenchelYoung(Mul) (costs minimised), on
    the same draws."""
    c, _ = costs(seed=3)
    c.requires_grad_(True)
    target = argmin_solver(c.detach() + 0.3 * torch.randn(c.shape, generator=gen(4), dtype=c.dtype))
    sigma = 0.6
    layer = hg.perturbed(
        argmin_solver, noise="normal", sigma=sigma, num_samples=M, minimize=True, generator=gen(5),
        perturbation="multiplicative" if mul else "additive",
    )  # fmt: skip
    loss = layer.fenchel_young_loss(c, target, reduction=reduction)
    z = torch.randn((M, 3, 5), generator=gen(5), dtype=torch.float64).transpose(0, 1)
    z = z if mul else -z
    factor = torch.exp(sigma * z - sigma**2 / 2)
    ptb = c.detach().unsqueeze(1) * factor if mul else c.detach().unsqueeze(1) + sigma * z
    sols = argmin_solver(ptb)
    e_sol = (sols * factor).mean(1) if mul else sols.mean(1)
    f_theta = torch.einsum("bnd,bnd->bn", ptb, sols).mean(dim=1)
    ref = -(f_theta - (c.detach() * target).sum(-1))  # PyEPO: sign = -1 for a minimiser
    grad = target - e_sol
    if reduction == "mean":
        ref, grad = ref.mean(), grad / 3
    elif reduction == "sum":
        ref = ref.sum()
    torch.testing.assert_close(loss.detach(), ref, rtol=1e-12, atol=1e-12)
    loss.sum().backward()
    torch.testing.assert_close(c.grad, grad, rtol=1e-12, atol=1e-12)


def _phi(x):
    return math.exp(-x * x / 2) / math.sqrt(2 * math.pi)


def _exact_gradient(kind, theta, w, sigma):
    """d/dtheta <w, E[argmax(perturbed theta)]> in closed form: softmax(theta / sigma) for
    Gumbel; Phi of the log (multiplicative) or plain (additive) difference over sigma sqrt 2
    for two normal-perturbed entries."""
    if kind == "gumbel":
        p = torch.softmax(theta / sigma, -1)
        return (p * w - p * (p * w).sum()) / sigma
    t1, t2 = theta.tolist()
    s = sigma * math.sqrt(2)
    if kind == "normal":
        d = _phi((t1 - t2) / s) / s
        return torch.tensor([d, -d], dtype=torch.float64) * (w[0] - w[1])
    d = _phi((math.log(t1) - math.log(t2)) / s) / s
    return torch.tensor([d / t1, -d / t2], dtype=torch.float64) * (w[0] - w[1])


@pytest.mark.statistical
@pytest.mark.parametrize("kind", ["gumbel", "normal", "multiplicative"])
@pytest.mark.parametrize("baseline", ["none", "leave_one_out"])
def test_estimators_are_unbiased(kind, baseline):
    """Each row of a (R, n) batch is an independent estimate of the exact gradient (its own
    M = 4 samples; the baseline works within the row). z = (mean - exact) / (std / sqrt R)
    within 5 for every coordinate: 16 z-values over the 6 cases, false-failure rate
    16 * 5.7e-7 < 1e-5 (seeded, so deterministic)."""
    r, sigma = 20000, 0.5
    if kind == "gumbel":
        theta0 = torch.tensor([0.8, 0.2, -0.4, 0.0], dtype=torch.float64)
        w = torch.tensor([1.0, -1.0, 2.0, 0.5], dtype=torch.float64)
    else:
        theta0 = torch.tensor([1.0, 1.3], dtype=torch.float64)
        w = torch.tensor([1.0, -2.0], dtype=torch.float64)
    layer = hg.perturbed(
        argmax_solver, noise="gumbel" if kind == "gumbel" else "normal", sigma=sigma,
        num_samples=4, baseline=baseline, generator=gen(6),
        perturbation="multiplicative" if kind == "multiplicative" else "additive",
    )  # fmt: skip
    theta = theta0.expand(r, -1).clone().requires_grad_(True)
    (layer(theta) * w).sum().backward()
    est = theta.grad
    exact = _exact_gradient(kind, theta0, w, sigma)
    z = (est.mean(0) - exact) / (est.std(0) / math.sqrt(r))
    assert z.abs().max() < 5, z


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dtypes(dtype):
    """Half types: noise, factors and scores in float32; values and gradients in the input's
    dtype and finite."""
    c, g = (v.to(dtype) for v in costs())
    c.requires_grad_(True)
    layer = hg.perturbed(
        argmin_solver, noise="normal", perturbation="multiplicative", baseline="leave_one_out",
        num_samples=M, minimize=True, generator=gen(8),
    )  # fmt: skip
    y = layer(c)
    (y * g).sum().backward()
    loss = layer.fenchel_young_loss(c, argmin_solver(c.detach()), reduction="mean")
    assert y.dtype == c.grad.dtype == loss.dtype == dtype
    assert torch.isfinite(c.grad).all() and torch.isfinite(loss)


@pytest.mark.compile
def test_compile_with_a_changing_batch():
    """aot_eager, fullgraph, automatic dynamic shapes: equal to eager bit for bit on batches
    of 8, 5 and 3 (the global RNG reseeded alike)."""
    layer = hg.perturbed(
        argmax_solver, noise="normal", perturbation="multiplicative", baseline="leave_one_out",
        num_samples=3,
    )  # fmt: skip
    for fn_eager in (
        lambda t: layer(t),
        lambda t: layer.fenchel_young_loss(t, argmax_solver(t.detach()), reduction="mean"),
    ):
        torch._dynamo.reset()
        compiled = torch.compile(fn_eager, fullgraph=True, backend="aot_eager")
        for batch in (8, 5, 3):
            x = torch.rand(batch, 5, generator=gen(batch)) + 0.1
            outs = []
            for fn in (compiled, fn_eager):
                leaf = x.clone().requires_grad_(True)
                torch.manual_seed(batch)
                y = fn(leaf)
                (y * torch.arange(y.numel(), dtype=y.dtype).reshape(y.shape)).sum().backward()
                outs.append((y.detach(), leaf.grad))
            assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    torch._dynamo.reset()


def test_torch_func_seeds_and_empty_batch():
    c, g = costs()
    make = lambda: hg.perturbed(  # noqa: E731
        argmin_solver,
        noise="normal",
        perturbation="multiplicative",
        baseline="leave_one_out",
        num_samples=M,
        minimize=True,
        generator=gen(9),
    )
    grad1 = torch.func.grad(lambda t: (make()(t) * g).sum())(c)
    leaf = c.clone().requires_grad_(True)
    (make()(leaf) * g).sum().backward()
    assert torch.equal(grad1, leaf.grad)
    out = torch.vmap(make(), randomness="different")(c.unsqueeze(1))
    assert out.shape == (3, 1, 5)
    empty = torch.zeros(0, 5, requires_grad=True)
    layer = hg.perturbed(argmax_solver, num_samples=2)
    for reduction, shape in (("none", (0,)), ("mean", ()), ("sum", ())):
        loss = layer.fenchel_young_loss(empty, torch.zeros(0, 5), reduction=reduction)
        assert loss.shape == shape and torch.isfinite(loss).all()
    one = layer.fenchel_young_loss(torch.randn(5), torch.zeros(5), reduction="mean")
    assert one.shape == ()


def test_bad_input():
    with pytest.raises(ValueError, match=r"`perturbation`.*'additive', 'multiplicative'"):
        hg.perturbed(argmax_solver, perturbation="mul")
    with pytest.raises(ValueError, match=r"`noise='normal'` for perturbation='multiplicative'"):
        hg.perturbed(argmax_solver, perturbation="multiplicative")
    with pytest.raises(ValueError, match=r"`baseline`.*'leave_one_out'"):
        hg.perturbed(argmax_solver, baseline="mean")
    with pytest.raises(ValueError, match=r"`reduction`.*'none', 'mean', 'sum'"):
        hg.perturbed(argmax_solver).fenchel_young_loss(
            torch.zeros(2, 3), torch.zeros(2, 3), reduction="avg"
        )
    text = repr(
        hg.perturbed(
            argmax_solver, noise="normal", perturbation="multiplicative", baseline="leave_one_out"
        )
    )
    assert "perturbation='multiplicative', baseline='leave_one_out'" in text
    assert "baseline" not in repr(hg.perturbed(argmax_solver))
