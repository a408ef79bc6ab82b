"""Solvers as layers: hg.perturbed, hg.imle, hg.blackbox, hg.identity_solver.

Backwards are checked against float64 formulas written here from the papers, on the very
inputs the solver was called with (a recording solver hands them back), so the tests do not
depend on how the layer draws its noise.
"""

from __future__ import annotations

import math

import pytest
import torch

import hardgrad as hg
from _solver_references import Recorder, argmax_solver, argmin_solver, data, gen, top2_solver
from hardgrad.solvers import gamma_noise, sum_of_gamma_noise

# --------------------------------------------------------------------------- perturbed


@pytest.mark.parametrize("noise", ["gumbel", "normal"])
def test_perturbed_forward_and_backward_formula(noise):
    theta, g = data()
    theta.requires_grad_(True)
    sigma, m = 0.7, 6
    rec = Recorder()
    y = hg.perturbed(rec, noise=noise, sigma=sigma, num_samples=m, generator=gen(1))(theta)
    (y * g).sum().backward()
    (batch,) = rec.calls
    assert batch.shape == (m * 3, 5)
    z = (batch.reshape(m, 3, 5) - theta.detach()) / sigma
    ys = top2_solver(batch).reshape(m, 3, 5)
    torch.testing.assert_close(y.detach(), ys.mean(0), rtol=0, atol=0)
    score = z if noise == "normal" else 1 - torch.exp(-z)
    expected = sum((g * ys[i]).sum(-1, keepdim=True) * score[i] for i in range(m)) / (m * sigma)
    torch.testing.assert_close(theta.grad, expected, rtol=1e-12, atol=1e-12)


def test_perturbed_hard_forward_is_the_unperturbed_solution():
    theta, g = data()
    theta.requires_grad_(True)
    rec = Recorder()
    y = hg.perturbed(rec, num_samples=4, hard=True, generator=gen(2))(theta)
    assert torch.equal(y.detach(), top2_solver(theta.detach()))
    assert len(rec.calls) == 2
    (y * g).sum().backward()
    soft = hg.perturbed(top2_solver, num_samples=4, generator=gen(2))
    theta2 = theta.detach().clone().requires_grad_(True)
    (soft(theta2) * g).sum().backward()
    torch.testing.assert_close(theta.grad, theta2.grad)  # same noise, same Jacobian estimate


@pytest.mark.statistical
def test_perturbed_gumbel_argmax_is_softmax_in_expectation():
    """Forward mean and gradient mean against softmax(theta / sigma) and its VJP.

    Seeded, so deterministic; z-tests at |z| < 5.5 on 10 forward coordinates and 10 gradient
    coordinates: false-failure rate below 20 * 3.8e-8 < 1e-6 for a fresh seed."""
    sigma, n = 0.8, 5
    theta0 = torch.tensor([0.5, -0.3, 1.2, 0.0, -1.0], dtype=torch.float64)
    g0 = torch.tensor([1.0, -2.0, 0.5, 0.0, 3.0], dtype=torch.float64)
    p = torch.softmax(theta0 / sigma, -1)
    # forward: one layer call with many samples
    m = 40000
    y = hg.perturbed(argmax_solver, sigma=sigma, num_samples=m, generator=gen(3))(theta0[None])[0]
    z = (y - p) / torch.sqrt(p * (1 - p) / m)
    assert z.abs().max() < 5.5, z
    # backward: each of many copies of theta gets one sample, so each row's gradient is one
    # independent draw of the estimator
    rows = 40000
    theta = theta0.expand(rows, n).clone().requires_grad_(True)
    out = hg.perturbed(argmax_solver, sigma=sigma, num_samples=1, generator=gen(4))(theta)
    (out * g0).sum().backward()
    exact = p * (g0 - (g0 * p).sum()) / sigma  # the VJP of softmax(theta / sigma)
    mean, se = theta.grad.mean(0), theta.grad.std(0) / math.sqrt(rows)
    zg = (mean - exact) / se
    assert zg.abs().max() < 5.5, zg


def test_fenchel_young_loss_value_and_gradient():
    theta, _ = data()
    target = top2_solver(torch.randn(3, 5, generator=gen(5), dtype=torch.float64))
    theta.requires_grad_(True)
    rec = Recorder()
    sigma, m = 0.5, 7
    layer = hg.perturbed(rec, noise="normal", sigma=sigma, num_samples=m, generator=gen(6))
    loss = layer.fenchel_young_loss(theta, target)
    assert loss.shape == (3,)
    w = torch.tensor([1.0, 2.0, -1.0], dtype=torch.float64)
    (loss * w).sum().backward()
    (batch,) = rec.calls
    pert = batch.reshape(m, 3, 5)
    ys = top2_solver(batch).reshape(m, 3, 5)
    value = (pert * ys).sum(-1).mean(0) - (theta.detach() * target).sum(-1)
    torch.testing.assert_close(loss.detach(), value, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(theta.grad, w[:, None] * (ys.mean(0) - target))


def test_perturbed_minimize_negates():
    c, g = data()
    c1 = c.clone().requires_grad_(True)
    c2 = c.clone().requires_grad_(True)
    y1 = hg.perturbed(argmin_solver, noise="normal", minimize=True, generator=gen(7))(c1)
    y2 = hg.perturbed(argmax_solver, noise="normal", generator=gen(7))(-c2)
    torch.testing.assert_close(y1, y2)
    (y1 * g).sum().backward()
    (y2 * g).sum().backward()
    torch.testing.assert_close(c1.grad, c2.grad)


# --------------------------------------------------------------------------- I-MLE


@pytest.mark.parametrize("noise", ["sum_of_gamma", "gumbel", "normal"])
def test_imle_backward_formula(noise):
    theta, g = data()
    theta.requires_grad_(True)
    lam, m = 1.5, 3
    rec = Recorder()
    layer = hg.imle(rec, lam=lam, noise=noise, k=2, tau=0.5, num_samples=m, generator=gen(8))
    y = layer(theta)
    (y * g).sum().backward()
    first, second = rec.calls
    ys = top2_solver(first).reshape(m, 3, 5)
    torch.testing.assert_close(y.detach(), ys.mean(0), rtol=0, atol=0)
    # the backward's scores: theta - lam * g with the same noise
    torch.testing.assert_close(second - first, (-lam * g).repeat(m, 1), rtol=1e-12, atol=1e-12)
    ys_target = top2_solver(second).reshape(m, 3, 5)
    torch.testing.assert_close(theta.grad, (ys - ys_target).mean(0) / lam)


def test_imle_without_noise_is_blackbox():
    theta, g = data()
    t1, t2 = theta.clone().requires_grad_(True), theta.clone().requires_grad_(True)
    y1 = hg.imle(top2_solver, lam=3.0, noise="none")(t1)
    y2 = hg.blackbox(top2_solver, lam=3.0)(t2)
    assert torch.equal(y1, y2)
    (y1 * g).sum().backward()
    (y2 * g).sum().backward()
    assert torch.equal(t1.grad, t2.grad)


@pytest.mark.slow
@pytest.mark.statistical
def test_gamma_and_sum_of_gamma_moments():
    """Means and variances against the closed forms; z-tests at |z| < 5.5 (6 tests:
    false-failure rate below 3e-7; the variance z uses the sample's fourth moment)."""

    def z_mean(x, mu):
        return (x.mean() - mu) / (x.std() / math.sqrt(x.numel()))

    def z_var(x, var):
        c = x - x.mean()
        return (c.pow(2).mean() - var) / (
            (c.pow(4).mean() - c.pow(2).mean() ** 2).sqrt() / math.sqrt(x.numel())
        )

    for alpha in (0.25, 2.5):
        x = gamma_noise(alpha, (200000,), generator=gen(9), dtype=torch.float64)
        assert x.min() >= 0
        assert abs(z_mean(x, alpha)) < 5.5 and abs(z_var(x, alpha)) < 5.5
    k, tau, s = 3, 0.7, 10
    e = sum_of_gamma_noise(
        (200000,), k, tau=tau, num_terms=s, generator=gen(10), dtype=torch.float64
    )
    mean = tau / k * (sum(1 / i for i in range(1, s + 1)) - math.log(s))
    var = tau**2 / k * sum(1 / i**2 for i in range(1, s + 1))
    assert abs(z_mean(e, mean)) < 5.5 and abs(z_var(e, var)) < 5.5


def test_imle_reproducible_and_generator_isolated():
    theta, g = data()
    state = torch.get_rng_state()
    outs = []
    for _ in range(2):
        t = theta.clone().requires_grad_(True)
        y = hg.imle(top2_solver, k=2, num_samples=3, generator=gen(11))(t)
        (y * g).sum().backward()
        outs.append((y.detach(), t.grad))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    assert torch.equal(state, torch.get_rng_state())


# --------------------------------------------------------------------------- blackbox, identity


def test_blackbox_formula_and_minimize():
    theta, g = data()
    theta.requires_grad_(True)
    lam = 2.0
    y = hg.blackbox(top2_solver, lam=lam)(theta)
    assert torch.equal(y.detach(), top2_solver(theta.detach()))
    (y * g).sum().backward()
    expected = (top2_solver(theta.detach()) - top2_solver(theta.detach() - lam * g)) / lam
    torch.testing.assert_close(theta.grad, expected, rtol=0, atol=0)
    # the paper's cost form: w' = w + lam g, dL/dw = -(y(w) - y(w')) / lam
    w = theta.detach().clone().requires_grad_(True)
    yw = hg.blackbox(argmin_solver, lam=lam, minimize=True)(w)
    (yw * g).sum().backward()
    wd = w.detach()
    torch.testing.assert_close(w.grad, -(argmin_solver(wd) - argmin_solver(wd + lam * g)) / lam)


@pytest.mark.parametrize("project", ["none", "norm", "standardize"])
def test_identity_solver(project):
    c, g = data()
    c.requires_grad_(True)
    y = hg.identity_solver(argmin_solver, project=project, minimize=True)(c)
    assert torch.equal(y.detach(), argmin_solver(c.detach()))  # one-hot: fixed size
    (y * g).sum().backward()
    cd = c.detach().clone().requires_grad_(True)
    s = -cd
    if project == "standardize":
        s = s - s.mean(-1, keepdim=True)
    if project != "none":
        s = s / s.norm(dim=-1, keepdim=True)
    (s * g).sum().backward()  # identity: the gradient of <P(-c), g>
    torch.testing.assert_close(c.grad, cd.grad)


# --------------------------------------------------------------------------- dtypes, transforms


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dtypes_keep_shape_and_stay_finite(dtype):
    theta = torch.randn(4, 6, generator=gen(12)).to(dtype).requires_grad_(True)
    layers = [
        hg.perturbed(top2_solver, num_samples=3, generator=gen(13)),
        hg.imle(top2_solver, k=2, generator=gen(14)),
        hg.blackbox(top2_solver, lam=1.0),
        hg.identity_solver(top2_solver, project="norm"),
    ]
    for layer in layers:
        theta.grad = None
        y = layer(theta)
        assert y.dtype == dtype and y.shape == theta.shape
        y.pow(2).sum().backward()
        assert theta.grad.dtype == dtype and torch.isfinite(theta.grad).all()
    pert = hg.perturbed(top2_solver, num_samples=3, generator=gen(13))
    loss = pert.fenchel_young_loss(theta, top2_solver(theta.detach()))
    assert loss.dtype == dtype and torch.isfinite(loss).all()


@pytest.mark.compile
def test_compile_fullgraph():
    """Random layers compile with ``generator=None`` (torch.compile does not trace a
    torch.Generator); aot_eager draws the same global-RNG numbers as eager."""
    theta, g = data(dtype=torch.float32)
    for make in (
        lambda: hg.perturbed(top2_solver, num_samples=3),
        lambda: hg.imle(top2_solver, k=2, num_samples=2),
        lambda: hg.blackbox(top2_solver, lam=1.0),
        lambda: hg.identity_solver(top2_solver, project="norm"),
    ):
        grads = []
        for compiled in (False, True):
            layer = make()

            def fn(t, layer=layer):
                return (layer(t) * g).sum()

            if compiled:
                fn = torch.compile(fn, fullgraph=True, backend="aot_eager")
            t = theta.clone().requires_grad_(True)
            torch.manual_seed(0)
            fn(t).backward()
            grads.append(t.grad)
        torch.testing.assert_close(grads[0], grads[1])


def test_torch_func_grad_and_vmap():
    theta, g = data()
    layer = hg.blackbox(top2_solver, lam=2.0)
    grad = torch.func.grad(lambda t: (layer(t) * g).sum())(theta)
    expected = (top2_solver(theta) - top2_solver(theta - 2.0 * g)) / 2.0
    torch.testing.assert_close(grad, expected)
    # vmap over an extra leading axis: the solver sees each (3, 5) batch
    stack = torch.stack([theta, theta + 1.0])
    out = torch.vmap(hg.identity_solver(top2_solver))(stack)
    assert torch.equal(out, top2_solver(stack.reshape(-1, 5)).reshape(2, 3, 5))


# --------------------------------------------------------------------------- errors


def test_bad_input():
    theta = torch.randn(2, 3)
    with pytest.raises(TypeError, match="`solver`"):
        hg.perturbed(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"`noise`.*'gumbel'"):
        hg.perturbed(argmax_solver, noise="laplace")
    with pytest.raises(ValueError, match="`sigma` > 0"):
        hg.perturbed(argmax_solver, sigma=0.0)
    with pytest.raises(ValueError, match="`num_samples` >= 1"):
        hg.perturbed(argmax_solver, num_samples=0)
    with pytest.raises(TypeError, match="`generator`"):
        hg.perturbed(argmax_solver, generator=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`k`"):
        hg.imle(argmax_solver, noise="sum_of_gamma")
    assert hg.imle(argmax_solver).noise == "gumbel"
    assert hg.imle(argmax_solver, k=1).noise == "sum_of_gamma"
    with pytest.raises(ValueError, match=r"`noise`.*'sum_of_gamma'"):
        hg.imle(argmax_solver, noise="uniform")
    with pytest.raises(ValueError, match="`lam` > 0"):
        hg.blackbox(argmax_solver, lam=-1.0)
    with pytest.raises(TypeError, match="`lam`"):
        hg.blackbox(argmax_solver, lam="big")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`project`"):
        hg.identity_solver(argmax_solver, project="sphere")
    with pytest.raises(TypeError, match="`theta` to be a floating-point"):
        hg.blackbox(argmax_solver, lam=1.0)(torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="`theta` to have a batch"):
        hg.blackbox(argmax_solver, lam=1.0)(torch.tensor(1.0))
    with pytest.raises(ValueError, match="`solver` to return a solution of the scores' shape"):
        hg.blackbox(lambda t: t.sum(-1), lam=1.0)(theta)
    with pytest.raises(TypeError, match=r"`solver` to return a torch\.Tensor"):
        hg.perturbed(lambda t: 0)(theta)
    with pytest.raises(ValueError, match="`target`"):
        hg.perturbed(argmax_solver).fenchel_young_loss(theta, torch.zeros(3))
    assert "PerturbedSolver(argmax_solver" in repr(hg.perturbed(argmax_solver))


# --------------------------------------------------------------------------- diagnostics


@pytest.mark.statistical
def test_compare_layers_against_the_smoothed_reference():
    """Perturbed Gumbel argmax is unbiased for softmax(theta / sigma) under a linear
    objective: its relative bias over 300 draws of 50 samples is within 5 standard errors
    (seeded; a fresh seed fails with probability below 1e-6); blackbox is biased there."""
    torch.manual_seed(0)
    theta = torch.tensor([[0.8, 0.2, -0.4, 0.0]], dtype=torch.float64)
    w = torch.tensor([[1.0, -1.0, 2.0, 0.5]], dtype=torch.float64)
    layers = {
        "perturbed": hg.perturbed(argmax_solver, sigma=0.5, num_samples=50, generator=gen(20)),
        "blackbox": hg.blackbox(argmax_solver, lam=1.0),
    }
    result = hg.diagnostics.compare_layers(
        lambda y: (y * w).sum(), theta, layers=layers,
        reference=lambda t: torch.softmax(t / 0.5, -1), num_draws=300,
    )  # fmt: skip
    perturbed, bb = result.rows
    assert perturbed.estimator == "perturbed" and perturbed.cosine > 0.99
    assert perturbed.bias < 5 * perturbed.std / math.sqrt(300)
    assert bb.std == 0.0 and bb.bias > 0.1
    assert "perturbed" in str(result) and result.to_dict()["rows"][1]["estimator"] == "blackbox"
    with pytest.raises(ValueError, match="`layers`"):
        hg.diagnostics.compare_layers(lambda y: y.sum(), theta, layers={})
    with pytest.raises(ValueError, match="`num_draws`"):
        hg.diagnostics.compare_layers(lambda y: y.sum(), theta, layers=layers, num_draws=1)


def test_empty_batch_scalar_events_and_random_transforms():
    for shape in ((0, 5), (3,)):
        theta = torch.randn(shape, requires_grad=True)
        layer = hg.perturbed(top2_solver if len(shape) == 2 else torch.sign, num_samples=2)
        y = layer(theta)
        y.sum().backward()
        assert y.shape == theta.shape and theta.grad.shape == theta.shape
        loss = layer.fenchel_young_loss(theta, torch.zeros(shape))
        assert loss.shape == ((0,) if len(shape) == 2 else ())
    # a 1-D theta is one instance: the solver sees (1, n), exactly as for theta[None]
    theta = torch.tensor([0.5, -0.2, 1.0, 0.3, 0.0])
    for make in (
        lambda: hg.perturbed(argmax_solver, num_samples=5, generator=gen(30)),
        lambda: hg.imle(top2_solver, k=2, generator=gen(31)),
        lambda: hg.blackbox(top2_solver, lam=1.0),
        lambda: hg.identity_solver(argmin_solver, minimize=True, project="norm"),
    ):
        one, batch = theta.clone().requires_grad_(True), theta[None].clone().requires_grad_(True)
        y1, y2 = make()(one), make()(batch)
        assert y1.shape == (5,) and torch.equal(y1, y2[0])
        (y1 * theta).sum().backward()
        (y2 * theta).sum().backward()
        assert torch.equal(one.grad, batch.grad[0])
    # randomness="different": every vmapped entry draws its own noise
    x = torch.randn(4, 3, 5)
    out = torch.vmap(hg.perturbed(top2_solver, num_samples=3), randomness="different")(x)
    assert out.shape == x.shape
    grad = torch.func.grad(lambda t: (hg.perturbed(top2_solver)(t) * t.detach()).sum())(x[0])
    assert grad.shape == (3, 5) and torch.isfinite(grad).all()
