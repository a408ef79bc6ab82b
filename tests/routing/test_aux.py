"""The routing functions added for issue 42: router_z_loss, cv_squared, noisy_logits,
prob_in_top_k, topk_route's return_threshold and eps, each against a float64 loop."""

from __future__ import annotations

import math

import pytest
import torch

import hardgrad as hg

R = hg.routing
DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


def _logits(n=6, e=5, seed=0, dtype=torch.float64):
    return torch.randn(n, e, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ----------------------------------------------------------------------------- z-loss, cv2


def test_router_z_loss_value_and_gradient_are_the_loop():
    logits = _logits().requires_grad_()
    loss = R.router_z_loss(logits)
    (grad,) = torch.autograd.grad(loss, logits)
    ref, ref_grad = 0.0, torch.zeros_like(logits)
    for t in range(6):
        lse = math.log(sum(math.exp(v) for v in logits[t].tolist()))
        ref += lse**2 / 6
        p = [math.exp(v - lse) for v in logits[t].tolist()]
        ref_grad[t] = torch.tensor(p, dtype=torch.float64) * 2 * lse / 6
    assert abs(loss.item() - ref) < 1e-12
    torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dtype", DTYPES)
def test_router_z_loss_and_cv_squared_dtypes(dtype):
    logits = _logits(dtype=dtype)
    z64 = R.router_z_loss(logits.double())
    z = R.router_z_loss(logits)
    assert z.dtype == dtype and z.shape == ()
    if dtype != torch.float64:
        assert z == R.router_z_loss(logits.float()).to(dtype)  # in float32, rounded once
    torch.testing.assert_close(z.double(), z64, rtol=1e-2 if dtype.itemsize == 2 else 1e-6, atol=0)
    c = R.cv_squared(logits.exp())
    assert c.dtype == dtype
    torch.testing.assert_close(c.double(), R.cv_squared(logits.exp().double()), rtol=1e-2, atol=0)


def test_cv_squared_is_population_variance_over_squared_mean():
    x = torch.tensor([1.0, 2.0, 6.0, 3.0], dtype=torch.float64, requires_grad=True)
    c = R.cv_squared(x)
    xs = x.tolist()
    mean = sum(xs) / 4
    var = sum((v - mean) ** 2 for v in xs) / 4
    assert abs(c.item() - var / (mean**2 + 1e-10)) < 1e-14
    (grad,) = torch.autograd.grad(c, x)
    # d/dx_i [var / m^2] = 2 (x_i - m) / (n m^2) - 2 var / (n m^3)
    ref = [2 * (v - mean) / (4 * mean**2) - 2 * var / (4 * mean**3) for v in xs]
    torch.testing.assert_close(grad, torch.tensor(ref, dtype=torch.float64), rtol=1e-9, atol=0)
    assert R.cv_squared(torch.tensor([3.0])) == 0 and R.cv_squared(torch.zeros(0)) == 0


def test_empty_and_bad_input():
    empty = torch.zeros(0, 4, requires_grad=True)
    z = R.router_z_loss(empty)
    assert z == 0
    z.backward()
    assert torch.equal(empty.grad, torch.zeros(0, 4))
    with pytest.raises(TypeError, match="`logits`"):
        R.router_z_loss(torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="0-dim"):
        R.router_z_loss(torch.tensor(1.0))
    with pytest.raises(ValueError, match="`logits`"):
        R.router_z_loss(torch.tensor([[1.0, math.nan]]))
    with pytest.raises(TypeError, match="`x`"):
        R.cv_squared([1.0, 2.0])


# ----------------------------------------------------------------------------- threshold


@pytest.mark.parametrize("normalize", ["renormalize", "selected", "none"])
@pytest.mark.parametrize("k", [1, 2, 4, 5])
def test_return_threshold_is_the_k_plus_first_logit(normalize, k):
    logits = _logits().requires_grad_()
    gates, indices = hg.topk_route(logits, k, normalize=normalize)
    g2, i2, threshold = hg.topk_route(logits, k, normalize=normalize, return_threshold=True)
    assert torch.equal(gates, g2) and torch.equal(indices, i2)  # the same routing
    assert threshold.shape == (6, 1)
    for t in range(6):
        ranked = sorted(logits[t].tolist(), reverse=True)
        want = ranked[k] if k < 5 else -math.inf
        assert threshold[t, 0].item() == want
    if k < 5:
        (grad,) = torch.autograd.grad(threshold.sum(), logits)
        assert torch.equal(grad.sum(-1), torch.ones(6, dtype=torch.float64))
        assert torch.equal(
            grad.argmax(-1, keepdim=True), (logits == threshold).double().argmax(-1, keepdim=True)
        )


@pytest.mark.parametrize("estimator", ["st_gumbel", "sparsemixer", "dense"])
def test_return_threshold_with_other_estimators_and_dims(estimator):
    logits = _logits(4, 6).T.contiguous()  # experts along dim 0
    g = torch.Generator().manual_seed(0)
    k = 1 if estimator == "sparsemixer" else 2
    gates, _, threshold = hg.topk_route(
        logits, k, dim=0, estimator=estimator, generator=g, return_threshold=True
    )
    assert gates.shape == (k, 4) and threshold.shape == (1, 4)
    torch.testing.assert_close(threshold, logits.sort(0, descending=True).values[k : k + 1])
    with pytest.raises(TypeError, match="`return_threshold`"):
        hg.topk_route(logits, 2, return_threshold=1)


# ----------------------------------------------------------------------------- eps


@pytest.mark.parametrize("estimator", ["sparse", "st"])
def test_eps_in_the_renormalisation(estimator):
    logits = _logits().requires_grad_()
    up = torch.randn(6, 2, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    g = torch.Generator().manual_seed(3)
    gates, indices = hg.topk_route(logits, 2, eps=1e-3, estimator=estimator, generator=g)
    (grad,) = torch.autograd.grad((gates * up).sum(), logits)
    ref_grad = torch.zeros_like(logits)
    for t in range(6):
        theta = logits[t].detach().clone().requires_grad_()
        p = torch.softmax(theta, -1)
        s = [int(i) for i in indices[t]]
        g_ref = torch.stack([p[i] for i in s]) / (p[s[0]] + p[s[1]] + 1e-3)
        torch.testing.assert_close(gates[t], g_ref, rtol=1e-12, atol=1e-14)
        if estimator == "sparse":
            ref_grad[t] = torch.autograd.grad((g_ref * up[t]).sum(), theta)[0]
    if estimator == "sparse":
        torch.testing.assert_close(grad, ref_grad, rtol=1e-10, atol=1e-13)
    # default unchanged: eps=0 is the exact division
    plain, _ = hg.topk_route(logits, 2)
    top = torch.softmax(logits, -1).topk(2).values
    assert torch.equal(plain, top / top.sum(-1, keepdim=True))


def test_eps_bad_input():
    logits = _logits()
    with pytest.raises(ValueError, match="`eps` >= 0"):
        hg.topk_route(logits, 2, eps=-1e-6)
    with pytest.raises(ValueError, match="`eps`=0 unless"):
        hg.topk_route(logits, 2, eps=1e-6, normalize="selected")
    with pytest.raises(ValueError, match="`eps`=0 for SparseMixer"):
        hg.topk_route(logits, 1, eps=1e-6, estimator="sparsemixer")
    with pytest.raises(TypeError, match="`eps`"):
        hg.topk_route(logits, 2, eps="small")


# ----------------------------------------------------------------------------- noisy gating


def _reference_prob(clean, noisy, std, k):
    """P(x, i) = Phi((clean_i - kth largest of the others' noisy logits) / std_i), a loop."""
    rows = []
    for t in range(clean.shape[0]):
        row = []
        for i in range(clean.shape[1]):
            others = torch.cat([noisy[t, :i], noisy[t, i + 1 :]])
            kth = others.sort(descending=True).values[k - 1] if k <= others.numel() else None
            if kth is None:
                row.append(torch.ones((), dtype=clean.dtype))
                continue
            z = (clean[t, i] - kth) / std[t, i]
            row.append(0.5 * torch.erfc(-z / math.sqrt(2)))
        rows.append(torch.stack(row))
    return torch.stack(rows)


@pytest.mark.parametrize("k", [1, 2, 3])
def test_prob_in_top_k_is_the_kth_excluding_rule(k):
    clean = _logits(7, 4).requires_grad_()
    raw = _logits(7, 4, seed=1).requires_grad_()
    noisy, std = R.noisy_logits(clean, raw, generator=torch.Generator().manual_seed(2))
    _, indices, threshold = hg.topk_route(noisy, k, return_threshold=True)
    prob = R.prob_in_top_k(clean, noisy, std, indices, threshold)
    ref = _reference_prob(clean, noisy, std, k)
    torch.testing.assert_close(prob, ref, rtol=1e-12, atol=1e-14)
    up = torch.rand(7, 4, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    grads = torch.autograd.grad((prob * up).sum(), [clean, raw])
    # the reference again, from independently drawn (same-seed) noise
    clean2, raw2 = clean.detach().clone().requires_grad_(), raw.detach().clone().requires_grad_()
    eps = torch.randn(7, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    std2 = torch.log1p(torch.exp(raw2)) + 0.01
    noisy2 = clean2 + eps * std2
    torch.testing.assert_close(noisy2, noisy, rtol=1e-14, atol=1e-14)
    ref_grads = torch.autograd.grad(
        (_reference_prob(clean2, noisy2, std2, k) * up).sum(), [clean2, raw2]
    )
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-13)


def test_prob_in_top_k_with_k_equal_to_e_is_one_without_gradient():
    clean = _logits(3, 3).requires_grad_()
    std = torch.ones(3, 3, dtype=torch.float64, requires_grad=True)
    _, indices, threshold = hg.topk_route(clean, 3, return_threshold=True)
    prob = R.prob_in_top_k(clean, clean, std, indices, threshold)
    assert torch.equal(prob, torch.ones(3, 3, dtype=torch.float64))
    grads = torch.autograd.grad(prob.sum(), [clean, std])
    assert all(torch.equal(g, torch.zeros_like(g)) for g in grads)


@pytest.mark.parametrize("dtype", DTYPES)
def test_noisy_dtypes_seeds_and_empty(dtype):
    clean, raw = _logits(dtype=dtype), _logits(seed=1, dtype=dtype)
    a = R.noisy_logits(clean, raw, generator=torch.Generator().manual_seed(0))
    b = R.noisy_logits(clean, raw, generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(u, v) and u.dtype == dtype for u, v in zip(a, b, strict=True))
    _, idx, thr = hg.topk_route(a[0], 2, return_threshold=True)
    prob = R.prob_in_top_k(clean, a[0], a[1], idx, thr)
    assert prob.dtype == dtype and ((prob >= 0) & (prob <= 1)).all()
    empty = torch.zeros(0, 5, dtype=dtype)
    noisy, std = R.noisy_logits(empty, empty)
    _, idx, thr = hg.topk_route(noisy, 2, return_threshold=True)
    assert R.prob_in_top_k(empty, noisy, std, idx, thr).shape == (0, 5)


def test_noisy_bad_input():
    x = _logits()
    with pytest.raises(ValueError, match="`noise_logits`"):
        R.noisy_logits(x, x[:, :3])
    with pytest.raises(ValueError, match="`noise_epsilon`"):
        R.noisy_logits(x, x, noise_epsilon=-1.0)
    with pytest.raises(TypeError, match="`generator`"):
        R.noisy_logits(x, x, generator=0)
    _, idx, thr = hg.topk_route(x, 2, return_threshold=True)
    with pytest.raises(ValueError, match="`threshold`"):
        R.prob_in_top_k(x, x, x.exp(), idx, thr[:, 0])
    with pytest.raises(ValueError, match="`noise_std`"):
        R.prob_in_top_k(x, x, x[:, :2], idx, thr)
    with pytest.raises(TypeError, match="`indices`"):
        R.prob_in_top_k(x, x, x.exp(), idx.int(), thr)


@pytest.mark.compile
def test_compile_and_func_with_a_changing_batch():
    def load_loss(clean, raw):
        noisy, std = R.noisy_logits(clean, raw)
        _, idx, thr = hg.topk_route(noisy, 2, return_threshold=True)
        return R.cv_squared(R.prob_in_top_k(clean, noisy, std, idx, thr).sum(0)) + R.router_z_loss(
            noisy
        )

    torch._dynamo.reset()
    compiled = torch.compile(load_loss, fullgraph=True, dynamic=True, backend="aot_eager")
    for n in (8, 5, 3):
        clean = _logits(n, dtype=torch.float32).requires_grad_()
        raw = _logits(n, seed=1, dtype=torch.float32)
        torch.manual_seed(n)
        got = compiled(clean, raw)
        (g1,) = torch.autograd.grad(got, clean)
        torch.manual_seed(n)
        want = load_loss(clean, raw)
        (g2,) = torch.autograd.grad(want, clean)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(g1, g2)
    torch._dynamo.reset()
    logits = _logits(dtype=torch.float32)
    grad = torch.func.grad(R.router_z_loss)(logits)
    torch.testing.assert_close(
        grad, torch.autograd.grad(R.router_z_loss(logits.requires_grad_()), logits)[0]
    )
    per_row = torch.vmap(lambda row: R.router_z_loss(row.unsqueeze(0)))(logits.detach())
    torch.testing.assert_close(per_row.mean(), R.router_z_loss(logits.detach()))
