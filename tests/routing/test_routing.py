"""hg.topk_route and hg.routing: forward exactness against plain-torch routers, every
backward against an independent float64 formula, DenseMixer against the dense-softmax
gradient, SparseMixer as published, Plackett-Luce enumeration, unbiasedness, compile, bad
input.

Statistical tests are seeded (deterministic); each states the false-failure rate of its
threshold for a fresh seed.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import hardgrad as hg
from hardgrad.routing._topk import _weights

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
NORMS = ["renormalize", "selected", "none"]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _logits(n: int = 7, e: int = 6, dtype=torch.float64, seed: int = 0, scale: float = 1.5):
    return (scale * torch.randn(n, e, generator=_gen(seed), dtype=torch.float64)).to(dtype)


# --------------------------------------------------------------------------- plain routers


def _plain_router(logits: torch.Tensor, k: int, normalize: str):
    """The routers as the models write them (HF Mixtral / Mistral reference / Switch)."""
    if normalize == "selected":  # Mistral's reference Mixtral
        top, idx = torch.topk(logits, k, dim=-1)
        return torch.softmax(top, dim=-1), idx
    weights = torch.softmax(logits, dim=-1)  # HF Mixtral, Qwen-MoE, Switch
    top, idx = torch.topk(weights, k, dim=-1)
    if normalize == "renormalize":
        top = top / top.sum(dim=-1, keepdim=True)
    return top, idx


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("normalize", NORMS)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_forward_is_the_plain_router_bit_for_bit(dtype, normalize, k):
    logits = _logits(dtype=dtype)
    big = torch.cat([logits, 30 * logits, logits.round()])  # large values and exact ties
    for estimator in ("sparse", "dense"):
        gates, idx = hg.topk_route(big, k, estimator=estimator, normalize=normalize)
        ref_gates, ref_idx = _plain_router(big, k, normalize)
        assert torch.equal(idx, ref_idx)
        assert torch.equal(gates, ref_gates)
        assert gates.dtype == dtype and idx.dtype == torch.int64


def test_forward_along_another_dim():
    logits = _logits(n=5, e=4).T.contiguous()  # experts on dim 0
    gates, idx = hg.topk_route(logits, 2, dim=0)
    ref_gates, ref_idx = _plain_router(logits.T, 2, "renormalize")
    assert torch.equal(gates, ref_gates.T) and torch.equal(idx, ref_idx.T)
    assert gates.shape == (2, 5)


def test_selected_and_renormalize_agree_up_to_rounding():
    logits = _logits()
    a, ia = hg.topk_route(logits, 3, normalize="selected")
    b, ib = hg.topk_route(logits, 3, normalize="renormalize")
    assert torch.equal(ia, ib)
    torch.testing.assert_close(a, b, rtol=1e-14, atol=0)


# --------------------------------------------------------------------------- sparse backward


def _sparse_reference(logits, idx, gbar, normalize):
    """Independent float64 gradient of sum_r gbar_r g_r for the deterministic gates."""
    theta = logits.double()
    out = torch.zeros_like(theta)
    for t in range(theta.shape[0]):
        s = idx[t].tolist()
        if normalize == "none":
            p = torch.exp(theta[t]) / torch.exp(theta[t]).sum()
            c = torch.zeros_like(p)
            c[s] = gbar[t].double()
            out[t] = p * (c - (c * p).sum())
        else:
            w = torch.exp(theta[t, s]) / torch.exp(theta[t, s]).sum()
            gb = gbar[t].double()
            out[t, s] = w * (gb - (w * gb).sum())
    return out


@pytest.mark.parametrize("normalize", NORMS)
@pytest.mark.parametrize("k", [1, 2, 4])
def test_sparse_backward_against_formula(normalize, k):
    logits = _logits().requires_grad_()
    gbar = torch.randn(7, k, generator=_gen(1), dtype=torch.float64)
    gates, idx = hg.topk_route(logits, k, normalize=normalize)
    (gates * gbar).sum().backward()
    torch.testing.assert_close(
        logits.grad,
        _sparse_reference(logits.detach(), idx, gbar, normalize),
        rtol=1e-10,
        atol=1e-12,
    )


def test_sparse_gradient_is_the_true_gradient_of_the_deterministic_loss():
    """Almost everywhere the selection is locally constant: finite differences agree."""
    logits = _logits(n=3, e=5)
    w = torch.randn(3, 2, generator=_gen(2), dtype=torch.float64)
    for normalize in NORMS:
        x = logits.clone().requires_grad_()
        torch.autograd.gradcheck(
            lambda z, nm=normalize: (hg.topk_route(z, 2, normalize=nm)[0] * w).sum(), (x,)
        )


# --------------------------------------------------------------------------- DenseMixer


def _dense_setup(n=5, e=6, d=3, seed=3):
    logits = _logits(n=n, e=e, seed=seed).requires_grad_()
    outputs = torch.randn(e, n, d, generator=_gen(seed + 1), dtype=torch.float64)  # E_j(x_t)
    upstream = torch.randn(n, d, generator=_gen(seed + 2), dtype=torch.float64)
    return logits, outputs, upstream


def _dense_reference(logits, outputs, upstream, idx, normalize):
    """d/dtheta <upstream, sum_j w_j(theta) E_j(x)>, w the full softmax ("none") or
    DenseMixer's partscale weights (p_S / s, p_U / sg(s)), in float64 by autograd on the
    dense formula (no hardgrad code)."""
    theta = logits.detach().clone().requires_grad_()
    p = torch.softmax(theta, -1)
    if normalize == "none":
        w = p
    else:
        mask = torch.zeros_like(p).scatter(-1, idx, 1.0)
        s = (p * mask).sum(-1, keepdim=True)
        w = p * mask / s + p * (1 - mask) / s.detach()
    dense = torch.einsum("te,etd->td", w, outputs)
    (grad,) = torch.autograd.grad((dense * upstream).sum(), theta)
    return grad


@pytest.mark.parametrize("normalize", NORMS)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_densemixer_equals_dense_softmax_gradient(normalize, k):
    logits, outputs, upstream = _dense_setup()
    n, e = logits.shape
    calls = []

    def unselected(tokens, experts):
        calls.append((tokens.clone(), experts.clone(), torch.is_grad_enabled()))
        return outputs[experts, tokens]

    gates, idx = hg.topk_route(logits, k, estimator="dense", normalize=normalize)
    sparse = (gates.unsqueeze(-1) * outputs[idx, torch.arange(n)[:, None]]).sum(1)
    y = hg.routing.dense_mixer(sparse, logits, idx, unselected, normalize=normalize)
    assert torch.equal(y, sparse)  # the forward stays sparse
    assert not calls  # nothing extra computed in forward
    (y * upstream).sum().backward()
    reference = _dense_reference(logits, outputs, upstream, idx, normalize)
    torch.testing.assert_close(logits.grad, reference, rtol=0, atol=1e-6)
    torch.testing.assert_close(logits.grad, reference, rtol=1e-10, atol=1e-13)
    ((tokens, experts, grad_mode),) = calls  # once, in backward, under no_grad
    assert not grad_mode and tokens.shape == (n * (e - k),)
    picked = torch.zeros(n, e, dtype=torch.bool).scatter(-1, idx, True)
    assert not picked[tokens, experts].any()  # only unselected pairs
    assert (~picked).sum() == tokens.numel()


@pytest.mark.parametrize("normalize", ["none", "renormalize"])
def test_unselected_gates_give_the_same_gradient(normalize):
    logits, outputs, upstream = _dense_setup(seed=5)
    n = logits.shape[0]
    gates, idx = hg.topk_route(logits, 2, estimator="dense", normalize=normalize)
    extra, rest = hg.routing.unselected_gates(logits, idx, normalize=normalize)
    assert torch.equal(extra, torch.zeros_like(extra))
    all_gates, all_idx = torch.cat([gates, extra], -1), torch.cat([idx, rest], -1)
    y = (all_gates.unsqueeze(-1) * outputs[all_idx, torch.arange(n)[:, None]]).sum(1)
    (y * upstream).sum().backward()
    reference = _dense_reference(logits, outputs, upstream, idx, normalize)
    torch.testing.assert_close(logits.grad, reference, rtol=1e-10, atol=1e-13)


def test_dense_without_the_tap_is_the_sparse_gradient():
    logits, _, _ = _dense_setup()
    gbar = torch.randn(5, 2, generator=_gen(9), dtype=torch.float64)
    grads = []
    for estimator in ("sparse", "dense"):
        x = logits.detach().clone().requires_grad_()
        (hg.topk_route(x, 2, estimator=estimator)[0] * gbar).sum().backward()
        grads.append(x.grad)
    assert torch.equal(grads[0], grads[1])


# --------------------------------------------------------------------------- SparseMixer


def _published_sparsemixer_eval(scores, k, eps):
    """PhiMoE's sparsemixer with training=False, re-derived step by step in float64."""
    gates, chosen = [], []
    masked_scores = scores.clone()
    for _ in range(k):
        top = masked_scores.max(-1, keepdim=True).values
        factor = scores.abs().clamp(min=top)
        drop = ((top - scores) / factor) > 2 * eps
        logits_r = masked_scores.masked_fill(drop, -math.inf)
        sel = logits_r.argmax(-1, keepdim=True)
        pi = torch.softmax(logits_r, -1)
        gates.append(pi.gather(-1, sel))
        chosen.append(sel)
        masked_scores = masked_scores.scatter(-1, sel, -math.inf)
    return torch.cat(gates, -1), torch.cat(chosen, -1)


def _pi(scores, previous, eps):
    """The masked softmax of the slot after ``previous`` experts were taken (float64)."""
    remaining = scores.clone()
    for j in previous:
        remaining[j] = -math.inf
    top = remaining.max()
    factor = scores.abs().clamp(min=float(top))
    drop = ((top - scores) / factor) > 2 * eps
    return torch.softmax(remaining.masked_fill(drop, -math.inf), -1)


@pytest.mark.parametrize("k", [1, 2])
def test_sparsemixer_eval_is_the_published_forward(k):
    scores = _logits(n=50, e=8, scale=0.05)  # small logits: several experts survive the mask
    gates, idx = hg.topk_route(scores, k, estimator="sparsemixer", training=False)
    ref_gates, ref_idx = _published_sparsemixer_eval(scores, k, 0.01)
    assert torch.equal(idx, ref_idx)
    torch.testing.assert_close(gates, ref_gates, rtol=1e-15, atol=0)


@pytest.mark.parametrize("version,k", [(2, 1), (2, 2), (1, 1)])
def test_sparsemixer_training_forward_and_backward(version, k):
    eps = 0.01 if version == 2 else 0.1
    scores = _logits(n=200, e=8, scale=0.1, seed=4).requires_grad_()
    gbar = torch.randn(200, k, generator=_gen(5), dtype=torch.float64)
    est = hg.routing.SparseMixer(version=version)
    gates, idx = hg.topk_route(scores, k, estimator=est, generator=_gen(6))
    (gates * gbar).sum().backward()
    gates = gates.detach()
    expected = torch.zeros_like(scores)
    low = 0.3333 if version == 2 else 0.5
    scale = 1.0 if version == 2 else 2.0
    lows = 0
    for t in range(200):
        for r in range(k):
            pi = _pi(scores[t].detach(), idx[t, :r].tolist(), eps)
            d = int(idx[t, r])
            assert pi[d] > 0  # never a masked expert
            omega = float(gates[t, r]) / float(pi[d])
            assert math.isclose(omega, 1.0, rel_tol=1e-12) or math.isclose(
                omega, low, rel_tol=1e-12
            )
            if d == int(pi.argmax()):
                assert math.isclose(omega, 1.0, rel_tol=1e-12)
            lows += omega < 0.9
            e_d = torch.zeros(8, dtype=torch.float64)
            e_d[d] = 1
            expected[t] += scale * gbar[t, r] * pi[d] * (e_d - pi)
    assert lows > 0  # the multiplier was exercised
    torch.testing.assert_close(scores.grad, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.statistical
def test_sparsemixer_draws_and_multiplier_frequencies():
    """One slot, 20 000 tokens with the same logits. The drawn expert's counts against pi
    (chi-square, 3 degrees of freedom after masking: threshold 25 has false-failure rate
    1.5e-5) and the share of omega = 1 among non-argmax draws against 1/4 (z < 4.5:
    6.8e-6)."""
    n = 20_000
    scores = torch.tensor([[1.0, 0.995, 0.99, 0.985, 0.5, 0.2]], dtype=torch.float64).expand(n, 6)
    gates, idx = hg.topk_route(scores, 1, estimator="sparsemixer", generator=_gen(11))
    pi = _pi(scores[0], [], 0.01)
    assert (pi[4:] == 0).all() and (pi[:4] > 0).all()
    counts = torch.bincount(idx[:, 0], minlength=6).double()
    assert counts[4:].sum() == 0
    expected = n * pi[:4]
    chi2 = float(((counts[:4] - expected) ** 2 / expected).sum())
    assert chi2 < 25
    others = idx[:, 0] != 0
    ones = (gates[others, 0] / pi[idx[others, 0]] > 0.9).double()
    m = int(others.sum())
    z = (float(ones.mean()) - 0.25) / math.sqrt(0.25 * 0.75 / m)
    assert abs(z) < 4.5


# --------------------------------------------------------------------------- stochastic routing


def _st_reference(logits, idx, gbar, normalize):
    """Independent float64 gradient of sum_r gbar_r <D_r, w> with straight-through
    one-hots (tau = 1): D_r = onehot + q_r - sg(q_r), q_r the softmax of the logits with
    the earlier slots' experts removed; w the gates' weights, by autograd."""
    theta = logits.detach().clone().requires_grad_()
    n, e = theta.shape
    total = torch.zeros((), dtype=torch.float64)
    for t in range(n):
        s = idx[t].tolist()
        if normalize == "none":
            w = torch.softmax(theta[t], -1)
        else:
            outside = torch.ones(e, dtype=torch.bool)
            outside[s] = False
            w = torch.softmax(theta[t].masked_fill(outside, -math.inf), -1)
        for r, d in enumerate(s):
            taken = torch.zeros(e, dtype=torch.bool)
            taken[s[:r]] = True
            q = torch.softmax(theta[t].masked_fill(taken, -math.inf), -1)
            onehot = torch.zeros(e, dtype=torch.float64)
            onehot[d] = 1
            total = total + gbar[t, r] * ((onehot + q - q.detach()) * w).sum()
    (grad,) = torch.autograd.grad(total, theta)
    return grad


@pytest.mark.parametrize("normalize", ["none", "renormalize"])
def test_stochastic_st_backward_against_formula(normalize):
    logits = _logits(n=6, e=5, seed=7).requires_grad_()
    gbar = torch.randn(6, 3, generator=_gen(8), dtype=torch.float64)
    gates, idx = hg.topk_route(logits, 3, estimator="st", normalize=normalize, generator=_gen(9))
    assert all(len(set(row.tolist())) == 3 for row in idx)  # without replacement
    # the gates are exactly the weights of the drawn experts
    ref_gates = _weights(logits.detach(), idx, normalize)
    assert torch.equal(gates.detach(), ref_gates)
    (gates * gbar).sum().backward()
    torch.testing.assert_close(
        logits.grad, _st_reference(logits, idx, gbar, normalize), rtol=1e-10, atol=1e-12
    )


@pytest.mark.statistical
def test_gumbel_topk_draws_follow_plackett_luce():
    """30 000 draws of top-2 of 4 experts against the enumerated subset probabilities:
    chi-square with 5 degrees of freedom, threshold 30 (false-failure rate 1.5e-5)."""
    n = 30_000
    theta = torch.tensor([1.0, 0.0, -0.5, 0.7], dtype=torch.float64)
    _, idx = hg.topk_route(theta.expand(n, 4), 2, estimator="st_gumbel", generator=_gen(12))
    subsets, log_probs = hg.routing.enumerate_routes(theta, 2)
    key = {tuple(s): i for i, s in enumerate(subsets.tolist())}
    counts = torch.zeros(len(key), dtype=torch.float64)
    for row in idx.sort(-1).values.tolist():
        counts[key[tuple(row)]] += 1
    expected = n * log_probs.exp()
    assert float(((counts - expected) ** 2 / expected).sum()) < 30


@pytest.mark.parametrize(
    "estimator", ["st", "st_gumbel", "reinmax", "gst", "st_identity", "gumbel_rao"]
)
def test_every_discrete_pathwise_estimator_routes(estimator):
    logits = _logits(dtype=torch.float32).requires_grad_()
    gates, idx = hg.topk_route(logits, 2, estimator=estimator, generator=_gen(0))
    assert gates.shape == idx.shape == (7, 2)
    assert torch.equal(gates.detach(), _weights(logits.detach(), idx, "renormalize"))
    gates.sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_same_seed_same_routes_and_gradients():
    out = []
    for _ in range(2):
        x = _logits().requires_grad_()
        gates, idx = hg.topk_route(x, 2, estimator="reinmax", generator=_gen(3))
        gates.square().sum().backward()
        out.append((idx, x.grad))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])


# --------------------------------------------------------------------------- enumeration


def test_enumeration_closed_forms():
    theta = _logits(n=3, e=5, seed=13)
    p = torch.softmax(theta, -1)
    subsets, log_probs = hg.routing.enumerate_routes(theta, 1)
    torch.testing.assert_close(log_probs.exp().T, p)
    subsets, log_probs = hg.routing.enumerate_routes(theta, 2)
    for m, (i, j) in enumerate(subsets.tolist()):
        closed = p[:, i] * p[:, j] / (1 - p[:, i]) + p[:, j] * p[:, i] / (1 - p[:, j])
        torch.testing.assert_close(log_probs[m].exp(), closed)
    for k in range(1, 6):
        _, log_probs = hg.routing.enumerate_routes(theta, k)
        torch.testing.assert_close(log_probs.exp().sum(0), torch.ones(3, dtype=torch.float64))
        assert log_probs.shape == (math.comb(5, k), 3)


def test_enumeration_three_of_four_by_hand():
    theta = torch.log(torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64))
    subsets, log_probs = hg.routing.enumerate_routes(theta, 3)
    p = [0.4, 0.3, 0.2, 0.1]
    for s, lp in zip(subsets.tolist(), log_probs, strict=True):
        total = 0.0
        for order in itertools.permutations(s):
            prob, left = 1.0, 1.0
            for j in order:
                prob *= p[j] / left
                left -= p[j]
            total += prob
        assert math.isclose(float(lp.exp()), total, rel_tol=1e-12)


# --------------------------------------------------------------------------- expectation


def _objective(n_tokens=3, e=5, d=2, seed=14):
    outputs = torch.randn(n_tokens, e, d, generator=_gen(seed), dtype=torch.float64)
    target = torch.randn(n_tokens, d, generator=_gen(seed + 1), dtype=torch.float64)
    tokens = torch.arange(n_tokens)

    def f(gates, idx):
        y = (gates.unsqueeze(-1) * outputs[tokens[:, None], idx]).sum(-2)
        return (y - target).square().sum(-1)

    return f


@pytest.mark.parametrize("normalize", NORMS)
def test_exact_expectation_is_differentiable_exactly(normalize):
    f = _objective()
    theta = _logits(n=3, e=5, seed=15).requires_grad_()
    torch.autograd.gradcheck(
        lambda x: hg.routing.expectation(f, x, 2, estimator="exact", normalize=normalize).sum(),
        (theta,),
    )


@pytest.mark.statistical
@pytest.mark.parametrize("estimator,num_samples", [("reinforce", 1), ("rloo", 2), ("rloo", 4)])
def test_score_function_routing_is_unbiased(estimator, num_samples):
    """20 000 draws; every coordinate's mean within 5 standard errors of the exact
    gradient (false-failure rate 5.7e-7 per coordinate, 8.6e-6 over the 15)."""
    f = _objective()
    theta = _logits(n=3, e=5, seed=16)
    dist = hg.routing.TopK(2)
    from hardgrad.diagnostics._routing import routing_exact_gradient, routing_gradient_samples

    exact = routing_exact_gradient(f, theta, dist)
    draws = routing_gradient_samples(
        f,
        theta,
        dist,
        estimator=estimator,
        num_draws=20_000,
        num_samples=num_samples,
        generator=_gen(17),
    )
    mean, se = draws.mean(0), draws.std(0) / math.sqrt(draws.shape[0])
    assert ((mean - exact).abs() <= 5 * se + 1e-12).all()


def test_compare_reports_router_estimators():
    f = _objective()
    theta = _logits(n=3, e=5, seed=18)
    estimators = ["sparse", "dense", "sparsemixer", "st", "reinmax", "rloo", "exact"]
    result = hg.diagnostics.compare(
        f,
        theta,
        estimators=estimators,
        dist=hg.routing.TopK(2),
        num_draws=400,
        generator=_gen(19),
    )
    rows = {row.estimator: row for row in result.rows}
    assert list(rows) == estimators
    assert rows["exact"].bias < 1e-12 and rows["exact"].std < 1e-12
    assert rows["sparse"].std == 0 and rows["dense"].std == 0  # deterministic
    assert rows["rloo"].bias < 0.25
    assert rows["sparse"].bias > 0.1  # the deterministic router ignores the selection
    assert result.exact is not None and result.exact.shape == theta.shape


def test_expectation_value_is_the_monte_carlo_mean():
    f = _objective()
    theta = _logits(n=3, e=5, seed=20).requires_grad_()
    value = hg.routing.expectation(f, theta, 2, estimator="rloo", num_samples=3, generator=_gen(1))
    g = _gen(1)
    with torch.no_grad():
        noise = hg.estimators.gumbel_noise(theta.expand(3, 3, 5), g)
        idx = torch.topk(theta.expand(3, 3, 5) + noise, 2, -1).indices
        gates = _weights(theta.expand(3, 3, 5), idx, "renormalize")
        expected = f(gates, idx).mean(0)
    assert torch.equal(value.detach(), expected)


# --------------------------------------------------------------------------- compile, losses


@pytest.mark.parametrize("estimator", ["sparse", "st_gumbel"])
@pytest.mark.compile
def test_compiles_fullgraph(estimator):
    logits = _logits(dtype=torch.float32)
    gbar = torch.randn(7, 2, generator=_gen(21))

    def step(x):
        gates, idx = hg.topk_route(x, 2, estimator=estimator, normalize="none")
        return (gates * gbar).sum(), idx

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    x1 = logits.clone().requires_grad_()
    loss, idx = compiled(x1)
    loss.backward()
    if estimator == "sparse":
        x2 = logits.clone().requires_grad_()
        loss2, idx2 = step(x2)
        loss2.backward()
        assert torch.equal(idx, idx2)
        torch.testing.assert_close(x1.grad, x2.grad)
    assert torch.isfinite(x1.grad).all()


def test_load_balancing_loss():
    logits = torch.zeros(4, 2)
    assert float(hg.routing.load_balancing_loss(logits, torch.tensor([[0], [0], [0], [0]]))) == 1.0
    skewed = torch.tensor([[3.0, 0.0]] * 4, requires_grad=True)
    loss = hg.routing.load_balancing_loss(skewed, torch.tensor([[0]] * 4))
    p0 = torch.sigmoid(torch.tensor(3.0))
    assert math.isclose(float(loss.detach()), 2 * float(p0), rel_tol=1e-6)
    loss.backward()
    assert skewed.grad[:, 0].gt(0).all()  # pushes the overloaded expert's probability down


# --------------------------------------------------------------------------- bad input


def test_bad_input():
    logits = _logits()
    with pytest.raises(ValueError, match="`k` >= 1"):
        hg.topk_route(logits, 0)
    with pytest.raises(ValueError, match="`k` <= the number of experts"):
        hg.topk_route(logits, 7)
    with pytest.raises(TypeError, match="`k` to be an int"):
        hg.topk_route(logits, 2.0)
    with pytest.raises(TypeError, match="`logits` to be a floating-point"):
        hg.topk_route(torch.ones(3, 4, dtype=torch.int64), 1)
    with pytest.raises(ValueError, match="Unknown `estimator`"):
        hg.topk_route(logits, 2, estimator="densemixer")
    with pytest.raises(ValueError, match="needs the objective"):
        hg.topk_route(logits, 2, estimator="rloo")
    with pytest.raises(ValueError, match="discrete pathwise"):
        hg.topk_route(logits, 2, estimator="gumbel_softmax")
    with pytest.raises(ValueError, match="`normalize`"):
        hg.topk_route(logits, 2, normalize="softmax")
    with pytest.raises(ValueError, match="`k` <= 2"):
        hg.topk_route(logits, 3, estimator="sparsemixer")
    with pytest.raises(ValueError, match="`k` <= 1"):
        hg.topk_route(logits, 2, estimator="sparsemixer_v1")
    with pytest.raises(ValueError, match="`normalize`=None"):
        hg.topk_route(logits, 2, estimator="sparsemixer", normalize="none")
    with pytest.raises(ValueError, match="finite `logits`"):
        hg.topk_route(torch.tensor([[0.0, math.inf]]), 1)
    with pytest.raises(TypeError, match="`generator`"):
        hg.topk_route(logits, 2, estimator="st", generator=0)
    with pytest.raises(ValueError, match="`jitter_eps`"):
        hg.routing.SparseMixer(jitter_eps=-1.0)
    with pytest.raises(ValueError, match="`num_samples` >= 2"):
        hg.routing.expectation(_objective(), _logits(n=3, e=5), 2, estimator="rloo", num_samples=1)
    with pytest.raises(ValueError, match="return shape"):
        hg.routing.expectation(lambda g, i: g.sum(-1).sum(-1), _logits(n=3, e=5), 2)
    with pytest.raises(TypeError, match="`unselected` to be callable"):
        hg.routing.dense_mixer(torch.zeros(7, 2), logits, torch.zeros(7, 2, dtype=torch.long), 3)


def test_no_nan_for_extreme_finite_logits():
    for dtype in DTYPES:
        big = torch.tensor([[1e4, -1e4, 0.0, 1e4]], dtype=torch.float64).to(dtype)
        for estimator in ("sparse", "st", "st_gumbel", "reinmax", "sparsemixer"):
            x = big.clone().requires_grad_()
            gates, _ = hg.topk_route(x, 2, estimator=estimator, generator=_gen(0))
            gates.sum().backward()
            assert torch.isfinite(gates).all() and torch.isfinite(x.grad).all(), (dtype, estimator)


def test_torch_func_grad_and_vmap():
    from torch.func import grad, vmap

    x = _logits(n=5, e=6, dtype=torch.float32)
    w = torch.randn(5, 2, generator=_gen(22))

    def f(z):
        return (hg.topk_route(z, 2, normalize="none")[0] * w).sum()

    leaf = x.clone().requires_grad_()
    f(leaf).backward()
    torch.testing.assert_close(grad(f)(x), leaf.grad)
    batched = vmap(lambda z: hg.topk_route(z, 2)[0])(x.unsqueeze(1))
    assert torch.equal(batched.squeeze(1), hg.topk_route(x, 2)[0])
    drawn = vmap(lambda z: hg.topk_route(z, 2, estimator="st")[1], randomness="different")
    assert drawn(x.unsqueeze(1)).shape == (5, 1, 2)
    assert grad(lambda z: hg.topk_route(z, 2, estimator="sparsemixer")[0].sum())(x).shape == x.shape


@pytest.mark.compile
def test_sparsemixer_compiles_fullgraph():
    x = _logits(dtype=torch.float32)
    compiled = torch.compile(
        lambda z: hg.topk_route(z, 2, estimator="sparsemixer", training=False),
        fullgraph=True,
        backend="aot_eager",
    )
    leaf = x.clone().requires_grad_()
    gates, idx = compiled(leaf)
    gates.sum().backward()
    ref_gates, ref_idx = hg.topk_route(x, 2, estimator="sparsemixer", training=False)
    assert torch.equal(idx, ref_idx) and torch.equal(gates.detach(), ref_gates)


def test_dense_mixer_with_nothing_unselected():
    logits = _logits(n=3, e=2).requires_grad_()
    gates, idx = hg.topk_route(logits, 2, estimator="dense")
    y = hg.routing.dense_mixer(gates.sum(-1, keepdim=True), logits, idx, lambda t, e: 1 / 0)
    y.sum().backward()  # the callable is never called
    assert torch.isfinite(logits.grad).all()


def test_exact_gradient_with_topk_dist():
    f = _objective()
    theta = _logits(n=3, e=5, seed=23)
    grad = hg.diagnostics.exact_gradient(f, theta, dist=hg.routing.TopK(2))
    leaf = theta.clone().requires_grad_()
    hg.routing.expectation(f, leaf, 2, estimator="exact").sum().backward()
    torch.testing.assert_close(grad, leaf.grad)
