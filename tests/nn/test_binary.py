"""Binary and ternary layers and ops: forward and gradients against the op-level formulas
(sign weights, XNOR-Net scaling, TWN), latent-weight clipping, checkpoints, bad input; and
``hg.stochastic_round``."""

from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F

import hardgrad as hg


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _sign(w: torch.Tensor) -> torch.Tensor:
    return torch.where(w >= 0, 1.0, -1.0).to(w.dtype)


def _clip(w: torch.Tensor) -> torch.Tensor:
    return (w.abs() <= 1).to(w.dtype)


# --------------------------------------------------------------------------- BinaryLinear


@pytest.mark.parametrize("scale", [False, True])
@pytest.mark.parametrize("activations", [False, True])
def test_binary_linear_forward_and_gradients_equal_the_formulas(scale, activations):
    layer = hg.nn.BinaryLinear(6, 4, scale=scale, activations=activations).double()
    with torch.no_grad():
        layer.weight.copy_(torch.randn(4, 6, generator=_gen(0), dtype=torch.float64) * 0.9)
        layer.weight[0, 0] = 0.0  # binarize(0) = +1
        layer.weight[1, 1] = 1.0  # at the clipping edge: still gets gradient
        layer.weight[2, 2] = -1.5  # beyond: none
    x = (torch.randn(5, 6, generator=_gen(1), dtype=torch.float64) * 1.5).requires_grad_()
    g = torch.randn(5, 4, generator=_gen(2), dtype=torch.float64)
    y = layer(x)
    y.backward(g)
    w = layer.weight.detach()
    wb = _sign(w)
    alpha = w.abs().mean(1, keepdim=True) if scale else torch.ones(4, 1, dtype=w.dtype)
    xb = _sign(x.detach()) if activations else x.detach()
    torch.testing.assert_close(
        y.detach(), xb @ (alpha * wb).T + layer.bias.detach(), rtol=0, atol=1e-12
    )
    gw_b = g.T @ xb  # dL/dW_b (the weight the forward uses)
    expected_w = gw_b * alpha * _clip(w)
    if scale:  # XNOR-Net: plus the path through alpha = mean |W|
        expected_w = expected_w + (gw_b * wb).sum(1, keepdim=True) * torch.sign(w) / w.shape[1]
    torch.testing.assert_close(layer.weight.grad, expected_w, rtol=1e-12, atol=1e-12)
    expected_x = g @ (alpha * wb)
    if activations:
        expected_x = expected_x * _clip(x.detach())
    torch.testing.assert_close(x.grad, expected_x, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(layer.bias.grad, g.sum(0))


def test_xnor_scale_is_the_per_output_channel_mean_magnitude():
    layer = hg.nn.BinaryLinear(3, 2, bias=False, scale=True)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[0.5, -0.25, 0.0], [-2.0, 1.0, 0.5]]))
    expected = torch.tensor([[0.25, -0.25, 0.25], [-3.5 / 3, 3.5 / 3, 3.5 / 3]])
    torch.testing.assert_close(layer.quantized_weight().detach(), expected)


@pytest.mark.parametrize("scale", [False, True])
def test_binary_conv_forward_and_gradients_equal_the_formulas(scale):
    conv = hg.nn.BinaryConv2d(2, 3, 3, padding=1, scale=scale, activations=True).double()
    x = (torch.randn(2, 2, 5, 5, generator=_gen(3), dtype=torch.float64) * 1.5).requires_grad_()
    g = torch.randn(2, 3, 5, 5, generator=_gen(4), dtype=torch.float64)
    conv(x).backward(g)
    w = conv.weight.detach()
    alpha = w.abs().mean((1, 2, 3), keepdim=True) if scale else torch.ones(3, 1, 1, 1).double()
    wq = (alpha * _sign(w)).requires_grad_()
    xb = _sign(x.detach()).requires_grad_()
    y = F.conv2d(xb, wq, conv.bias.detach(), padding=1)
    y.backward(g)
    expected_w = wq.grad * alpha * _clip(w)
    if scale:
        n = w[0].numel()
        expected_w = (
            expected_w + (wq.grad * _sign(w)).sum((1, 2, 3), keepdim=True) * torch.sign(w) / n
        )
    torch.testing.assert_close(conv.weight.grad, expected_w, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(x.grad, xb.grad * _clip(x.detach()), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(conv(x).detach(), y.detach(), rtol=0, atol=1e-12)


# --------------------------------------------------------------------------- ternary


def _twn(w: torch.Tensor, dims) -> torch.Tensor:
    a = w.abs()
    delta = 0.7 * a.mean(dims, keepdim=True)
    keep = (a > delta).to(w.dtype)
    alpha = (a * keep).sum(dims, keepdim=True) / keep.sum(dims, keepdim=True).clamp_min(1)
    return alpha * torch.sign(w) * keep


@pytest.mark.parametrize("per_channel_dim", [None, 0, 1])
def test_ternarize_equals_twn_and_passes_gradient_straight_through(per_channel_dim):
    w = torch.randn(4, 7, generator=_gen(5), dtype=torch.float64).requires_grad_()
    y = hg.ternarize(w, per_channel_dim=per_channel_dim)
    dims = (0, 1) if per_channel_dim is None else (1 - per_channel_dim,)
    torch.testing.assert_close(y.detach(), _twn(w.detach(), dims), rtol=1e-15, atol=0)
    slices = [y] if per_channel_dim is None else y.unbind(per_channel_dim)
    for s in slices:
        assert len(torch.unique(s)) <= 3
    g = torch.randn(4, 7, generator=_gen(6), dtype=torch.float64)
    y.backward(g)
    assert torch.equal(w.grad, g)


def test_ternarize_edge_cases_and_dtypes():
    assert torch.equal(hg.ternarize(torch.zeros(3, 4), per_channel_dim=0), torch.zeros(3, 4))
    assert hg.ternarize(torch.zeros(0, 4)).shape == (0, 4)
    w = torch.randn(16, 9, generator=_gen(7))
    for dtype in (torch.float16, torch.bfloat16):
        y = hg.ternarize(w.to(dtype), per_channel_dim=0)
        assert y.dtype == dtype
        torch.testing.assert_close(y.float(), _twn(w.to(dtype).float(), (1,)).to(dtype).float())
    with pytest.raises(ValueError, match="`threshold`"):
        hg.ternarize(w, threshold=0.0)
    with pytest.raises(ValueError, match="`per_channel_dim`"):
        hg.ternarize(w, per_channel_dim=2)
    with pytest.raises(TypeError, match="`w`"):
        hg.ternarize(torch.ones(3, dtype=torch.long))


def test_ternarize_zeros_are_positive_and_non_finite_slices_are_nan():
    w = torch.tensor([[0.9, -0.05, 0.3, -0.6], [1.0, -2.0, 0.1, -0.2]])
    y = hg.ternarize(w, per_channel_dim=0)
    assert not y[y == 0].signbit().any()  # dropped negatives give 0, not -0
    for bad in (float("nan"), float("inf"), -float("inf")):
        broken = w.clone()
        broken[1, 2] = bad
        out = hg.ternarize(broken, per_channel_dim=0)
        assert torch.equal(out[0], y[0]) and out[1].isnan().all()
        assert hg.ternarize(broken).isnan().all()


@pytest.mark.parametrize("per_channel_dim", [None, 1])
def test_ternarize_counts_large_slices_exactly(monkeypatch, per_channel_dim):
    """Slices past float32's exact integers (2**24) are counted in float64; lowering the
    cut-off to 2 runs that path here, and it must give the same weights."""
    from hardgrad.ops import _lowbit

    w = torch.randn(8, 33, generator=_gen(11))
    expected = hg.ternarize(w, per_channel_dim=per_channel_dim)
    monkeypatch.setattr(_lowbit, "_EXACT_FLOAT32_COUNT", 2)
    assert torch.equal(hg.ternarize(w, per_channel_dim=per_channel_dim), expected)


def test_ternary_layer_uses_per_channel_twn():
    layer = hg.nn.BinaryLinear(8, 5, weights="ternary")
    x = torch.randn(3, 8, generator=_gen(8))
    expected = F.linear(x, _twn(layer.weight.detach(), (1,)), layer.bias)
    torch.testing.assert_close(layer(x), expected)
    layer(x).sum().backward()
    torch.testing.assert_close(layer.weight.grad, torch.ones(3, 5).T @ x)  # straight through
    conv = hg.nn.BinaryConv2d(2, 4, 3, weights="ternary")
    for w in conv.quantized_weight():
        assert len(torch.unique(w)) <= 3


# --------------------------------------------------------------------------- clipping, state


def test_clip_helpers_clip_only_binary_latent_weights():
    binary, ternary = hg.nn.BinaryLinear(4, 4), hg.nn.BinaryConv2d(1, 2, 3, weights="ternary")
    plain = torch.nn.Linear(4, 4)
    model = torch.nn.ModuleList([binary, ternary, plain])
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(10)
    before = [ternary.weight.clone(), plain.weight.clone()]
    assert hg.nn.clip_latent_weights_(model, bound=0.5) is model
    assert binary.weight.abs().max() <= 0.5 and binary.weight.abs().max() == 0.5
    assert torch.equal(ternary.weight, before[0]) and torch.equal(plain.weight, before[1])
    layer = hg.nn.BinaryLinear(4, 4)
    optimizer = torch.optim.SGD(layer.parameters(), lr=100.0)
    handle = hg.nn.clip_latent_weights_after_step(optimizer, layer)
    layer(torch.randn(8, 4)).square().sum().backward()
    optimizer.step()
    assert layer.weight.abs().max() <= 1
    handle.remove()
    with pytest.raises(TypeError, match="`optimizer`"):
        hg.nn.clip_latent_weights_after_step(layer, layer)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`bound`"):
        hg.nn.clip_latent_weights_(layer, bound=-1.0)


def test_state_dict_holds_the_latent_weights_and_round_trips():
    layer = hg.nn.BinaryConv2d(2, 3, 3, scale=True)
    state = layer.state_dict()
    assert set(state) == {"weight", "bias"} and torch.equal(state["weight"], layer.weight)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    other = hg.nn.BinaryConv2d(2, 3, 3, scale=True)
    other.load_state_dict(torch.load(buffer, weights_only=True))
    x = torch.randn(1, 2, 6, 6)
    assert torch.equal(other(x), layer(x))
    with pytest.raises(RuntimeError, match="scale"):
        hg.nn.BinaryConv2d(2, 3, 3).load_state_dict(state)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="`weights`"):
        hg.nn.BinaryLinear(2, 2, weights="quaternary")
    with pytest.raises(ValueError, match="`scale=False`"):
        hg.nn.BinaryLinear(2, 2, weights="ternary", scale=True)
    with pytest.raises(TypeError, match="`activations`"):
        hg.nn.BinaryConv2d(1, 1, 1, activations="yes")
    with pytest.raises(ValueError, match="`surrogate`"):
        hg.nn.BinaryLinear(2, 2, surrogate="masked")
    with pytest.raises(ValueError, match="`x`"):
        hg.nn.BinaryLinear(3, 2)(torch.zeros(4, 2))
    with pytest.raises(ValueError, match="`x`"):
        hg.nn.BinaryConv2d(3, 2, 1)(torch.zeros(4, 2, 5, 5))
    with pytest.raises(TypeError, match="`x`"):
        hg.nn.BinaryLinear(3, 2)(torch.zeros(4, 3, dtype=torch.long))


# --------------------------------------------------------------------------- stochastic_round


@pytest.mark.statistical
def test_stochastic_round_is_unbiased():
    """z-test of the mean of 200000 roundings per value against x; |z| < 5.3 fails with
    probability about 1e-7 per value (seeded, so deterministic)."""
    values = torch.tensor([-2.75, -0.3, 0.0, 0.1, 0.5, 1.999, 7.25], dtype=torch.float64)
    n = 200_000
    x = values.repeat(n, 1)
    y = hg.stochastic_round(x, generator=_gen(9))
    frac = values - values.floor()
    std = (frac * (1 - frac)).sqrt() / n**0.5
    z = (y.mean(0) - values) / std.clamp_min(1e-12)
    assert bool((z.abs() < 5.3).all()), z
    assert bool(((y == x.floor()) | (y == x.ceil())).all())


def test_stochastic_round_is_exact_on_integers_reproducible_and_straight_through():
    x = torch.tensor([3.0, -5.0, 2.0**24, 1e30, float("inf")])
    assert torch.equal(hg.stochastic_round(x, generator=_gen(0)), x)
    for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        v = (torch.randn(1000, generator=_gen(1)) * 10).to(dtype).requires_grad_()
        a = hg.stochastic_round(v, generator=_gen(2))
        b = hg.stochastic_round(v, generator=_gen(2))
        assert a.dtype == dtype and torch.equal(a, b)
        assert bool(((a == v.detach().floor()) | (a == v.detach().ceil())).all())
        a.backward(torch.full_like(a, 3.0))
        assert torch.equal(v.grad, torch.full_like(v, 3.0))
    v = torch.rand(10)
    state = torch.get_rng_state()
    hg.stochastic_round(v, generator=_gen(3))
    assert torch.equal(torch.get_rng_state(), state)
    with pytest.raises(TypeError, match="`generator`"):
        hg.stochastic_round(torch.rand(3), generator=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`x`"):
        hg.stochastic_round(torch.ones(3, dtype=torch.long))


@pytest.mark.compile
def test_stochastic_round_compiles_and_has_forward_mode():
    torch._dynamo.reset()
    x = torch.randn(64, generator=_gen(4)) * 3
    compiled = torch.compile(hg.stochastic_round, fullgraph=True, backend="aot_eager")
    torch.manual_seed(5)
    got = compiled(x)
    torch.manual_seed(5)
    assert torch.equal(got, hg.stochastic_round(x))
    torch._dynamo.reset()
    _, tangent = torch.func.jvp(
        lambda v: hg.stochastic_round(v, generator=_gen(6)), (x,), (torch.ones_like(x),)
    )
    assert torch.equal(tangent, torch.ones_like(x))


@pytest.mark.compile
def test_ternarize_under_vmap_grad_and_compile():
    w = torch.randn(3, 4, 5, generator=_gen(10))
    batched = torch.vmap(hg.ternarize)(w)
    assert torch.equal(batched, torch.stack([hg.ternarize(t) for t in w]))
    grad = torch.func.grad(lambda t: (hg.ternarize(t) * 2).sum())(w[0])
    assert torch.equal(grad, torch.full_like(w[0], 2.0))
    torch._dynamo.reset()
    compiled = torch.compile(
        lambda t: hg.ternarize(t, per_channel_dim=0), fullgraph=True, backend="aot_eager"
    )
    assert torch.equal(compiled(w[0]), hg.ternarize(w[0], per_channel_dim=0))
    torch._dynamo.reset()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_stochastic_round_paths_agree_bit_for_bit(dtype):
    """The same uniforms give the same rounding on every path: autograd's own copy written
    over (small CPU tensors that need a gradient), the Function (larger tensors, no
    gradient, half types), and the compiled form's out-of-place arithmetic; -0.0, the
    infinities and NaN included."""
    special = torch.tensor([-0.0, 0.0, -0.3, 2.5, float("inf"), -float("inf"), float("nan")])
    for n in (100, 70_000):
        x = torch.cat([special, torch.randn(n, generator=_gen(11)) * 40]).to(dtype)
        results = []
        for requires_grad in (True, False):
            v = x.clone().requires_grad_(requires_grad)
            results.append(hg.stochastic_round(v, generator=_gen(12)).detach())
        wide = x.to(torch.float64 if dtype == torch.float64 else torch.float32)
        noise = torch.rand(x.shape, generator=_gen(12), dtype=wide.dtype)
        low = torch.floor(wide)
        expected = (low + (noise < wide - low).to(wide.dtype)).to(dtype)
        for got in results:
            assert torch.equal(got.isnan(), expected.isnan())
            keep = ~expected.isnan()
            assert torch.equal(got[keep], expected[keep])
            assert torch.equal(got[keep].signbit(), expected[keep].signbit())
