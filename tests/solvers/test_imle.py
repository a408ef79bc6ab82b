"""hg.imle's target distribution (``target_alpha``, ``target_tau``) and ``reduce="none"``.

The reference is torch-imle's published formula (uclnlp/torch-imle, ``imle/wrapper.py`` and
``imle/target.py``), written again here in its own layout (samples batch-major, the target
``alpha * theta - beta * dy + target_noise_temperature * eps``, the gradient the mean over
samples of ``y - y'`` with no division), on the noise the layer drew (a recording solver
hands back the scores it was called with). Float64 throughout.
"""

from __future__ import annotations

import pytest
import torch

import hardgrad as hg
from _solver_references import Recorder, argmax_solver, data, gen, top2_solver


def torch_imle_reference(solver, theta, eps, dy, *, alpha, beta, tau_in, tau_target):
    """torch-imle's forward (``(N * M, n)``, batch-major) and backward for ``eps`` of shape
    ``(N, M, n)`` and per-sample incoming gradients ``dy`` of shape ``(N * M, n)``."""
    n_batch, m, n = eps.shape
    perturbed = theta.view(n_batch, 1, -1).repeat(1, m, 1) + eps * tau_in
    out = solver(perturbed.view(-1, n)).view(n_batch, m, n)
    input_2d = theta.view(n_batch, 1, -1).repeat(1, m, 1).view(dy.shape)
    target = (alpha * input_2d - beta * dy).view(n_batch, m, n) + eps * tau_target
    target_out = solver(target.view(-1, n)).view(n_batch, m, n)
    return out.view(-1, n), (out - target_out).mean(1)


def drawn_noise(rec, theta, m, tau):
    """The standard noise ``eps`` (``(N, M, n)``) behind the layer's first solver call."""
    first = rec.calls[0].reshape(m, *theta.shape)
    return ((first - theta.detach()) / tau).transpose(0, 1)


CASES = [  # (noise, alpha, target_tau, M)
    ("normal", 1.0, None, 1),
    ("normal", 0.0, 2.0, 3),
    ("gumbel", 0.5, 0.0, 4),
    ("sum_of_gamma", 1.0, 5.0, 2),
    ("sum_of_gamma", -0.5, None, 3),
]


@pytest.mark.parametrize(("noise", "alpha", "target_tau", "m"), CASES)
def test_samples_and_gradient_are_torch_imles(noise, alpha, target_tau, m):
    """reduce="none", lam = beta / nb_samples: the samples are torch-imle's (reordered) and
    its gradient is lam times hardgrad's, for any per-sample loss."""
    theta, _ = data()
    theta.requires_grad_(True)
    beta, tau = 6.0, 0.7
    rec = Recorder()
    layer = hg.imle(
        rec, lam=beta / m, noise=noise, k=2, tau=tau, num_samples=m, target_alpha=alpha,
        target_tau=target_tau, reduce="none", generator=gen(1),
    )  # fmt: skip
    ys = layer(theta)
    assert ys.shape == (m, 3, 5) and ys.dtype == torch.float64
    w = torch.randn(ys.shape, generator=gen(2), dtype=torch.float64)
    (ys * w).sum().backward()
    eps = drawn_noise(rec, theta, m, tau)
    dy = w.transpose(0, 1).reshape(-1, 5)  # torch-imle's per-sample gradients, batch-major
    ref_out, ref_grad = torch_imle_reference(
        top2_solver, theta.detach(), eps, dy, alpha=alpha, beta=beta, tau_in=tau,
        tau_target=tau if target_tau is None else target_tau,
    )  # fmt: skip
    assert torch.equal(ys.detach().transpose(0, 1).reshape(-1, 5), ref_out)
    torch.testing.assert_close(theta.grad * layer.lam, ref_grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(("noise", "alpha", "target_tau", "m"), CASES)
def test_mean_is_torch_imle_on_the_mean_of_its_samples(noise, alpha, target_tau, m):
    """reduce="mean": a loss <g, mean of samples> is torch-imle with dy = g / M per sample,
    and reduce="none" with the mean taken outside gives the same gradient."""
    theta, g = data()
    beta, tau = 6.0, 0.7
    grads = []
    for reduce in ("mean", "none"):
        rec = Recorder()
        t = theta.clone().requires_grad_(True)
        layer = hg.imle(
            rec, lam=beta / m, noise=noise, k=2, tau=tau, num_samples=m, target_alpha=alpha,
            target_tau=target_tau, reduce=reduce, generator=gen(3),
        )  # fmt: skip
        y = layer(t)
        y = y if reduce == "mean" else y.mean(0)
        (y * g).sum().backward()
        grads.append(t.grad)
    eps = drawn_noise(rec, theta, m, tau)
    dy = (g / m).unsqueeze(1).repeat(1, m, 1).reshape(-1, 5)
    _, ref_grad = torch_imle_reference(
        top2_solver, theta, eps, dy, alpha=alpha, beta=beta, tau_in=tau,
        tau_target=tau if target_tau is None else target_tau,
    )  # fmt: skip
    torch.testing.assert_close(grads[0] * (beta / m), ref_grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-12, atol=1e-12)


def test_defaults_keep_the_old_numbers():
    """target_alpha=1 and target_tau=tau (or None) change nothing, bit for bit."""
    theta, g = data()
    outs = []
    for extra in ({}, {"target_alpha": 1.0, "target_tau": 0.5}):
        t = theta.clone().requires_grad_(True)
        y = hg.imle(top2_solver, k=2, tau=0.5, num_samples=3, generator=gen(4), **extra)(t)
        (y * g).sum().backward()
        outs.append((y.detach(), t.grad))
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dtypes(dtype):
    """Half types: noise and scores in float32, one solver call in the input's dtype; the
    samples are the solver's 0/1 solutions in the input's dtype."""
    theta, g = (v.to(dtype) for v in data())
    theta.requires_grad_(True)
    layer = hg.imle(
        top2_solver, k=2, num_samples=3, target_alpha=0.5, target_tau=2.0, reduce="none",
        generator=gen(5),
    )  # fmt: skip
    ys = layer(theta)
    assert ys.dtype == dtype and ys.shape == (3, 3, 5)
    assert torch.equal(ys.sum(-1), torch.full((3, 3), 2.0, dtype=dtype))
    (ys * g).sum().backward()
    assert theta.grad.dtype == dtype and torch.isfinite(theta.grad).all()


def test_one_instance_empty_batch_and_seeds():
    theta = torch.tensor([0.5, -0.2, 1.0, 0.3, 0.0])
    one, batch = theta.clone().requires_grad_(True), theta[None].clone().requires_grad_(True)
    make = lambda: hg.imle(top2_solver, k=2, num_samples=3, reduce="none", generator=gen(6))  # noqa: E731
    y1, y2 = make()(one), make()(batch)
    assert y1.shape == (3, 5) and torch.equal(y1, y2[:, 0])
    (y1 * theta).sum().backward()
    (y2[:, 0] * theta).sum().backward()
    assert torch.equal(one.grad, batch.grad[0])
    empty = torch.zeros(0, 5, requires_grad=True)
    ys = make()(empty)
    assert ys.shape == (3, 0, 5)
    ys.sum().backward()
    assert empty.grad.shape == (0, 5)


@pytest.mark.compile
def test_compile_with_a_changing_batch():
    """Compiled (aot_eager, fullgraph, automatic dynamic shapes) equals eager bit for bit on
    batches of 8, 5 and 3, values and gradients (global RNG reseeded alike)."""
    layer = hg.imle(
        top2_solver, k=2, num_samples=2, target_alpha=0.5, target_tau=2.0, reduce="none"
    )
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: layer(t), fullgraph=True, backend="aot_eager")
    for batch in (8, 5, 3):
        x = torch.randn(batch, 5, generator=gen(batch), dtype=torch.float32)
        outs = []
        for fn in (compiled, layer):
            leaf = x.clone().requires_grad_(True)
            torch.manual_seed(batch)
            y = fn(leaf)
            (y * torch.arange(y.numel(), dtype=y.dtype).reshape(y.shape)).sum().backward()
            outs.append((y.detach(), leaf.grad))
        assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    torch._dynamo.reset()


def test_torch_func():
    theta, g = data()
    layer = hg.imle(top2_solver, lam=2.0, noise="none", target_alpha=0.5, reduce="none")
    grad = torch.func.grad(lambda t: (layer(t)[0] * g).sum())(theta)
    expected = (top2_solver(theta) - top2_solver(0.5 * theta - 2.0 * g)) / 2.0
    torch.testing.assert_close(grad, expected)
    out = torch.vmap(layer)(torch.stack([theta, theta + 1.0]))
    assert out.shape == (2, 1, 3, 5)
    with pytest.raises(NotImplementedError, match=r"hg\.imle's backward is not linear"):
        torch.func.jvp(layer, (theta,), (g,))


def test_bad_input():
    with pytest.raises(TypeError, match="`target_alpha`"):
        hg.imle(argmax_solver, target_alpha="1")  # type: ignore[arg-type]
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="`target_alpha`"):
            hg.imle(argmax_solver, target_alpha=bad)
    with pytest.raises(ValueError, match="`target_tau` >= 0"):
        hg.imle(argmax_solver, target_tau=-1.0)
    with pytest.raises(TypeError, match="`target_tau`"):
        hg.imle(argmax_solver, target_tau=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"`reduce`.*'mean', 'none'"):
        hg.imle(argmax_solver, reduce="sum")
    text = repr(hg.imle(argmax_solver, target_alpha=0.0, target_tau=2.0, reduce="none"))
    assert "target_alpha=0.0, target_tau=2.0, reduce='none'" in text
    assert "target_alpha" not in repr(hg.imle(argmax_solver))
