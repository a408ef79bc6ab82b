"""hg.nn.MoE: the sparse forward against a per-token loop, DenseMixer's router gradient
against the dense-softmax formula, the extra expert compute counted, the load-balancing
loss, eval mode, bad input."""

from __future__ import annotations

import pytest
import torch

import hardgrad as hg


def _moe(estimator="sparse", k=2, num_experts=5, dtype=torch.float64, **kwargs):
    torch.manual_seed(0)
    return hg.nn.MoE(4, 3, num_experts=num_experts, k=k, estimator=estimator, **kwargs).to(dtype)


def _x(n=6, dtype=torch.float64, seed=1):
    return torch.randn(n, 4, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _expert(moe, j, x):
    """Expert j written as two affine maps and a GELU (no hardgrad code)."""
    h = torch.nn.functional.gelu(x @ moe.w1[j] + moe.b1[j])
    return h @ moe.w2[j] + moe.b2[j]


@pytest.mark.parametrize("normalize", ["renormalize", "selected", "none"])
def test_forward_is_the_per_token_loop(normalize):
    moe = _moe(normalize=normalize)
    x = _x()
    y, indices, _ = moe(x)
    logits = x @ moe.router.weight.T
    p = torch.softmax(logits, -1)
    for t in range(x.shape[0]):
        top = torch.topk(p[t] if normalize != "selected" else logits[t], 2)
        assert top.indices.tolist() == indices[t].tolist()
        s = top.indices.tolist()
        g = p[t, s] if normalize == "none" else torch.softmax(logits[t, s], -1)
        expected = sum(g[r] * _expert(moe, j, x[t]) for r, j in enumerate(s))
        torch.testing.assert_close(y[t], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("normalize", ["renormalize", "none"])
def test_dense_router_gradient_is_the_dense_softmax_gradient(normalize):
    dense, sparse = _moe("dense", normalize=normalize), _moe("sparse", normalize=normalize)
    x = _x()
    upstream = torch.randn(6, 3, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    calls = []
    original = dense.expert_pairs

    def counting(xs, experts):
        calls.append((xs.shape[0], torch.is_grad_enabled()))
        return original(xs, experts)

    dense.expert_pairs = counting  # type: ignore[method-assign]
    y_dense, indices, _ = dense(x)
    y_sparse, _, _ = sparse(x)
    assert torch.equal(y_dense, y_sparse)  # the forward stays sparse
    assert calls == [(6 * 2, True)]  # forward: the selected pairs only
    (y_dense * upstream).sum().backward()
    (y_sparse * upstream).sum().backward()
    assert calls[1:] == [(6 * 3, False)]  # backward: N (E - k) pairs, without gradient
    # reference: d/dW_r <upstream, sum_j w_j(W_r x) E_j(x)> with every expert evaluated
    w_r = dense.router.weight.detach().clone().requires_grad_()
    logits = x @ w_r.T
    p = torch.softmax(logits, -1)
    if normalize == "none":
        w = p
    else:
        mask = torch.zeros_like(p).scatter(-1, indices, 1.0)
        s = (p * mask).sum(-1, keepdim=True)
        w = p * mask / s + p * (1 - mask) / s.detach()
    with torch.no_grad():
        outputs = torch.stack([_expert(dense, j, x) for j in range(5)], 1)  # (N, E, out)
    y_ref = (w.unsqueeze(-1) * outputs).sum(1)
    (grad,) = torch.autograd.grad((y_ref * upstream).sum(), w_r)
    torch.testing.assert_close(dense.router.weight.grad, grad, rtol=1e-10, atol=1e-12)
    # the experts' gradients are the sparse layer's: DenseMixer only changes the router's
    for name in ("w1", "b1", "w2", "b2"):
        torch.testing.assert_close(getattr(dense, name).grad, getattr(sparse, name).grad)
    assert not torch.allclose(dense.router.weight.grad, sparse.router.weight.grad)


def test_load_balancing_loss_is_switchs():
    moe = _moe(k=1)
    x = _x(n=40)
    _, indices, loss = moe(x)
    p = torch.softmax(x @ moe.router.weight.T, -1)
    f = torch.bincount(indices[:, 0], minlength=5).double() / 40
    torch.testing.assert_close(loss, 5 * (f * p.mean(0)).sum())
    assert moe.normalize == "none"  # top-1 defaults to Switch's gate p_i


@pytest.mark.parametrize("estimator", ["st_gumbel", "reinmax", "sparsemixer"])
def test_sampling_estimators_train_and_evaluate_deterministically(estimator):
    moe = _moe(estimator, generator=torch.Generator().manual_seed(3))
    x = _x(n=30)
    y, _, loss = moe(x)
    (y.square().mean() + loss).backward()
    assert moe.router.weight.grad.abs().sum() > 0
    moe.eval()
    with torch.no_grad():
        first, second = moe(x), moe(x)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])


def test_shapes_dtypes_and_empty_batch():
    moe = _moe(dtype=torch.float32)
    y, indices, loss = moe(torch.randn(2, 3, 4))
    assert y.shape == (2, 3, 3) and indices.shape == (2, 3, 2) and loss.shape == ()
    y, indices, loss = moe(torch.randn(0, 4))
    assert y.shape == (0, 3) and torch.isfinite(loss)
    y, _, _ = moe(torch.randn(5, 4, dtype=torch.bfloat16))
    assert y.dtype == torch.bfloat16


def test_checkpoint_round_trip():
    a, b = _moe(), hg.nn.MoE(4, 3, num_experts=5, k=2).double()
    b.load_state_dict(a.state_dict())
    x = _x()
    assert torch.equal(a(x)[0], b(x)[0])
    with pytest.raises(RuntimeError, match="num_experts"):
        hg.nn.MoE(4, 3, num_experts=6, k=2).load_state_dict(a.state_dict())


def test_bad_input():
    with pytest.raises(ValueError, match="`k` <= 5"):
        hg.nn.MoE(4, num_experts=5, k=6)
    with pytest.raises(ValueError, match="`k` >= 1"):
        hg.nn.MoE(4, num_experts=5, k=0)
    with pytest.raises(ValueError, match="Unknown `estimator`"):
        hg.nn.MoE(4, estimator="densemixer")
    with pytest.raises(ValueError, match="`k` <= 1"):
        hg.nn.MoE(4, k=2, estimator="sparsemixer_v1")
    with pytest.raises(ValueError, match="in_features=4"):
        _moe()(torch.randn(3, 5, dtype=torch.float64))
    with pytest.raises(TypeError, match="floating-point"):
        _moe()(torch.ones(3, 4, dtype=torch.long))


def test_default_moe_uses_ema_outputs_in_backward_only():
    moe = _moe("default", normalize="none", default_decay=0.5)
    sparse = _moe("sparse", normalize="none")
    calls = []
    original = moe.expert_pairs

    def counting(xs, experts):
        calls.append(xs.shape[0])
        return original(xs, experts)

    moe.expert_pairs = counting  # type: ignore[method-assign]
    x1, x2 = _x(seed=1), _x(seed=2)
    _, idx1, _ = moe(x1)
    # first batch: every expert reached gets the mean of its outputs, the others stay 0
    with torch.no_grad():
        outs = torch.stack([_expert(moe, j, x1) for j in range(5)], 1)  # (N, E, out)
    expected = torch.zeros(5, 3, dtype=torch.float64)
    for j in range(5):
        rows = (idx1 == j).any(-1)
        if rows.any():
            expected[j] = outs[rows, j].mean(0)
    torch.testing.assert_close(moe.default_outputs, expected)
    assert torch.equal(moe.default_seen, (idx1[..., None] == torch.arange(5)).any(0).any(0))
    before = moe.default_outputs.clone()
    upstream = torch.randn(6, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    y2, idx2, _ = moe(x2)
    defaults = moe.default_outputs.clone()  # updated with this batch before use
    assert torch.equal(y2, sparse(x2)[0])  # the forward stays sparse
    calls.clear()
    (y2 * upstream).sum().backward()
    assert calls == []  # no expert evaluated in backward
    # reference: the dense-softmax gradient with the defaults for the unselected experts
    w_r = moe.router.weight.detach().clone().requires_grad_()
    p = torch.softmax(x2 @ w_r.T, -1)
    with torch.no_grad():
        outs = torch.stack([_expert(moe, j, x2) for j in range(5)], 1)
    picked = torch.zeros(6, 5, dtype=torch.bool).scatter(-1, idx2, True)
    values = torch.where(picked[..., None], outs, defaults.expand(6, 5, 3))
    (grad,) = torch.autograd.grad(((p[..., None] * values).sum(1) * upstream).sum(), w_r)
    torch.testing.assert_close(moe.router.weight.grad, grad, rtol=1e-10, atol=1e-12)
    # the EMA after the second batch
    assert not torch.equal(defaults, before)
    for j in range(5):
        rows = (idx2 == j).any(-1)
        if rows.any():
            mean = outs[rows, j].mean(0)
            want = mean if not (idx1 == j).any() else 0.5 * before[j] + 0.5 * mean
            torch.testing.assert_close(moe.default_outputs[j], want)


@pytest.mark.parametrize("estimator", ["dense", "default"])
@pytest.mark.compile
def test_dense_and_default_compile_to_the_eager_gradients(estimator):
    torch.manual_seed(0)
    compiled_module = hg.nn.MoE(4, num_experts=5, k=2, estimator=estimator)
    torch.manual_seed(0)
    eager = hg.nn.MoE(4, num_experts=5, k=2, estimator=estimator)
    torch._dynamo.reset()
    compiled = torch.compile(compiled_module, fullgraph=True, backend="aot_eager")
    for step in range(3):
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(step))
        outputs = []
        for module in (compiled, eager):
            y, _, loss = module(x)
            (y.square().sum() + loss).backward()
            outputs.append(y.detach())
        # eager groups the pairs by expert (addmm per expert), compiled gathers each
        # pair's weights (bmm): the same sums in another order
        torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(compiled_module.router.weight.grad, eager.router.weight.grad)
        compiled_module.zero_grad()
        eager.zero_grad()
    if estimator == "default":
        torch.testing.assert_close(compiled_module.default_outputs, eager.default_outputs)
    torch._dynamo.reset()


def test_expert_pairs_grouped_by_expert_match_each_pair_in_float64():
    """Eager expert_pairs runs each expert once on its group of tokens; values and every
    parameter's gradient match each pair's MLP written out in float64, with experts that
    get no token (zero gradient) and pairs in no particular order."""
    torch.manual_seed(0)
    moe = hg.nn.MoE(6, 5, num_experts=7, k=2, hidden_features=9)
    x = torch.randn(40, 6, requires_grad=True)
    experts = torch.tensor([3, 0, 3, 5, 1, 0, 3, 5] * 5)  # experts 2, 4 and 6 unused
    g = torch.randn(40, 5)
    out = moe.expert_pairs(x, experts)
    grads = torch.autograd.grad(out, [x, moe.w1, moe.b1, moe.w2, moe.b2], g)

    params64 = [p.detach().double().requires_grad_() for p in (moe.w1, moe.b1, moe.w2, moe.b2)]
    w1, b1, w2, b2 = params64
    x64 = x.detach().double().requires_grad_()
    rows = []
    for token, e in zip(x64, experts.tolist(), strict=True):
        h = torch.nn.functional.gelu(token @ w1[e] + b1[e])
        rows.append(h @ w2[e] + b2[e])
    ref = torch.stack(rows)
    ref_grads = torch.autograd.grad(ref, [x64, *params64], g.double())
    torch.testing.assert_close(out.double(), ref, rtol=1e-5, atol=1e-6)
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)
    for unused in (2, 4, 6):
        assert not grads[1][unused].any() and not grads[4][unused].any()


def test_dense_evaluation_matches_the_grouped_one():
    """_dense_at (every expert on every token, for compiled graphs) gives experts_at's
    eager values and parameter gradients, to rounding."""
    torch.manual_seed(1)
    moe = hg.nn.MoE(5, 4, num_experts=6, k=2, hidden_features=7)
    rows = torch.randn(11, 5, requires_grad=True)
    indices = torch.randint(0, 6, (11, 2), generator=torch.Generator().manual_seed(2))
    g = torch.randn(11, 2, 4)
    params = [rows, moe.w1, moe.b1, moe.w2, moe.b2]
    dense = moe._dense_at(rows, indices)
    grouped = moe.experts_at(rows, indices)
    torch.testing.assert_close(dense, grouped, rtol=1e-5, atol=1e-6)
    for a, b in zip(
        torch.autograd.grad(dense, params, g), torch.autograd.grad(grouped, params, g), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("num_experts", [4, 40])
@pytest.mark.compile
def test_compiled_forward_matches_eager_with_few_and_many_experts(num_experts):
    """k=1: 4 experts take the dense path under compile, 40 (> 32 per slot) the gather."""
    torch.manual_seed(3)
    module = hg.nn.MoE(4, num_experts=num_experts, k=1)
    x = torch.randn(9, 4)
    torch._dynamo.reset()
    compiled = torch.compile(module, fullgraph=True, backend="aot_eager")
    y_compiled, idx_compiled, _ = compiled(x)
    y, idx, _ = module(x)
    assert torch.equal(idx_compiled, idx)
    torch.testing.assert_close(y_compiled, y, rtol=1e-6, atol=1e-6)
    torch._dynamo.reset()
