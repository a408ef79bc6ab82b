"""hg.nn.L0Linear and hg.nn.L0Conv2d against an independent float64 reimplementation of the
reference code (AMLab-Amsterdam/L0_regularization, l0_layers.py: L0Dense, L0Conv2d), given
the same uniforms; penalties, expected FLOPs, a sparse regression, dtypes, state, bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import hardgrad as hg

A, B, T = -0.1, 1.1, 2 / 3  # limit_a, limit_b, temperature


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def uniforms(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """The uniforms a float64 layer with generator ``gen(seed)`` draws for its gates."""
    info = torch.finfo(torch.float64)
    return torch.rand(shape, generator=gen(seed), dtype=torch.float64).clamp(
        info.tiny, 1 - info.eps
    )


# -- the reference, in float64, written from l0_layers.py (weights as (in, out) there) ----


def ref_quantile(u, log_alpha, temperature=T, a=A, b=B):
    y = torch.sigmoid((torch.log(u) - torch.log(1 - u) + log_alpha) / temperature)
    return y * (b - a) + a


def ref_sample(u, log_alpha, temperature=T):
    return F.hardtanh(ref_quantile(u, log_alpha, temperature), min_val=0, max_val=1)


def ref_mode(log_alpha):
    return F.hardtanh(torch.sigmoid(log_alpha) * (B - A) + A, min_val=0, max_val=1)


def ref_cdf0(log_alpha, temperature=T):
    xn = (0 - A) / (B - A)
    logits = math.log(xn) - math.log(1 - xn)
    return torch.sigmoid(logits * temperature - log_alpha).clamp(1e-6, 1 - 1e-6)


def ref_dense(x, weights, bias, log_alpha, mode, u=None):
    """L0Dense.forward: 'shared' (training, local_rep=False), 'local', 'eval'."""
    if mode == "shared":
        out = x.mm(ref_sample(u, log_alpha).view(-1, 1) * weights)
    else:
        z = ref_sample(u, log_alpha) if mode == "local" else ref_mode(log_alpha).expand_as(x)
        out = (x * z).mm(weights)
    return out if bias is None else out + bias


def ref_dense_reg(weights, bias, log_alpha, wd, lamba):
    """L0Dense._reg_w (a log-prior)."""
    col = torch.sum(-(0.5 * wd * weights.pow(2)) - lamba, 1)
    logpw = torch.sum((1 - ref_cdf0(log_alpha)) * col)
    logpb = 0 if bias is None else -torch.sum(0.5 * wd * bias.pow(2))
    return logpw + logpb


def ref_dense_flops_l0(log_alpha, out_features, bias):
    ppos = torch.sum(1 - ref_cdf0(log_alpha))
    flops, l0 = (2 * ppos - 1) * out_features, ppos * out_features
    if bias:
        flops, l0 = flops + out_features, l0 + out_features
    return flops, l0


def ref_conv(x, weights, bias, log_alpha, mode, u=None, padding=0):
    """L0Conv2d.forward; in 'shared' mode the reference passes no bias (see the test)."""
    if mode == "shared":
        z = ref_sample(u, log_alpha).view(-1, 1, 1, 1)
        return F.conv2d(x, z * weights, None, 1, padding)
    out = F.conv2d(x, weights, bias, 1, padding)
    if mode == "local":
        return out * ref_sample(u, log_alpha).view(*u.shape, 1, 1)
    return out * ref_mode(log_alpha).view(1, -1, 1, 1)


def ref_conv_reg(weights, bias, log_alpha, wd, lamba, bias_sign=-1):
    """L0Conv2d._reg_w; ``bias_sign=-1`` is the reference (``- self.lamba`` in the bias
    term), ``+1`` what hardgrad uses (a gated bias costs ``lamba`` like a weight)."""
    q0 = ref_cdf0(log_alpha)
    col = torch.sum(-(0.5 * wd * weights.pow(2)) - lamba, 3).sum(2).sum(1)
    logpw = torch.sum((1 - q0) * col)
    logpb = (
        0 if bias is None else -torch.sum((1 - q0) * (0.5 * wd * bias.pow(2) + bias_sign * lamba))
    )
    return logpw + logpb


# -- values and gradients ----------------------------------------------------------------


def _grads(out, leaves, seed):
    w = torch.randn(out.shape, generator=gen(seed), dtype=out.dtype)
    return torch.autograd.grad((out * w).sum(), leaves)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("mode", ["shared", "local", "eval"])
def test_linear_matches_the_reference_values_and_gradients(mode, bias):
    torch.manual_seed(0)
    layer = hg.nn.L0Linear(6, 4, bias, generator=gen(1), dtype=torch.float64)
    with torch.no_grad():
        layer.log_alpha.copy_(torch.linspace(-3, 3, 6, dtype=torch.float64))
        if bias:
            layer.bias.normal_()
    layer.train(mode != "eval").local_rep = mode == "local"
    x = torch.randn(5, 6, generator=gen(2), dtype=torch.float64, requires_grad=True)
    y = layer(x)
    u = uniforms((6,) if mode == "shared" else (5, 6), 1) if mode != "eval" else None
    leaves = [layer.weight, layer.log_alpha] + ([layer.bias] if bias else [])
    ref = [p.detach().clone().requires_grad_(True) for p in leaves]
    x_ref = x.detach().clone().requires_grad_(True)
    want = ref_dense(x_ref, ref[0].t(), ref[2] if bias else None, ref[1], mode, u)
    torch.testing.assert_close(y, want, rtol=1e-13, atol=1e-13)
    got = _grads(y, [x, *leaves], 3)
    expected = _grads(want, [x_ref, *ref], 3)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-13)
    if mode == "eval":
        assert torch.equal(layer(x), y)  # deterministic


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("mode", ["shared", "local", "eval"])
def test_conv_matches_the_reference_values_and_gradients(mode, bias):
    """The reference convolves without its bias in 'shared' mode only (it passes None);
    hardgrad gates the bias there as in the other modes: compared with the reference's
    other modes' map, z * (W * x + b), which equals (z W) * x + z b."""
    torch.manual_seed(0)
    layer = hg.nn.L0Conv2d(2, 5, 3, padding=1, bias=bias, generator=gen(1), dtype=torch.float64)
    with torch.no_grad():
        layer.log_alpha.copy_(torch.linspace(-3, 3, 5, dtype=torch.float64))
        if bias:
            layer.bias.normal_()
    layer.train(mode != "eval").local_rep = mode == "local"
    x = torch.randn(3, 2, 4, 4, generator=gen(2), dtype=torch.float64, requires_grad=True)
    y = layer(x)
    u = uniforms((5,) if mode == "shared" else (3, 5), 1) if mode != "eval" else None
    leaves = [layer.weight, layer.log_alpha] + ([layer.bias] if bias else [])
    ref = [p.detach().clone().requires_grad_(True) for p in leaves]
    x_ref = x.detach().clone().requires_grad_(True)
    b_ref = ref[2] if bias else None
    if mode == "shared" and bias:
        z = ref_sample(u, ref[1]).view(1, -1, 1, 1)
        want = F.conv2d(x_ref, ref[0], b_ref, 1, 1) * z
    else:
        want = ref_conv(x_ref, ref[0], b_ref, ref[1], mode, u, padding=1)
    torch.testing.assert_close(y, want, rtol=1e-12, atol=1e-13)
    got = _grads(y, [x, *leaves], 3)
    expected = _grads(want, [x_ref, *ref], 3)
    for g, e in zip(got, expected, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-11, atol=1e-12)


def test_penalties_l0_and_flops_match_the_reference():
    torch.manual_seed(0)
    la = torch.linspace(-2, 2, 6, dtype=torch.float64)
    lin = hg.nn.L0Linear(6, 3, weight_decay=0.3, lamba=0.7, dtype=torch.float64)
    with torch.no_grad():
        lin.log_alpha.copy_(la)
        lin.bias.normal_()
    reg = ref_dense_reg(lin.weight.t(), lin.bias, la, 0.3, 0.7)
    torch.testing.assert_close(lin.regularization(), reg, rtol=1e-13, atol=0)
    torch.testing.assert_close(lin.penalty(), -reg, rtol=1e-13, atol=0)
    flops, l0 = ref_dense_flops_l0(la, 3, True)
    torch.testing.assert_close(lin.expected_flops(), flops, rtol=1e-13, atol=0)
    torch.testing.assert_close(lin.l0() * 3 + 3, l0, rtol=1e-13, atol=0)
    torch.testing.assert_close(lin.l0(), torch.sum(1 - ref_cdf0(la)), rtol=1e-13, atol=0)
    # the gradient of the penalty in every parameter
    params = [lin.weight, lin.bias, lin.log_alpha]
    got = torch.autograd.grad(lin.penalty(), params)
    ref = [p.detach().clone().requires_grad_(True) for p in params]
    want = torch.autograd.grad(-ref_dense_reg(ref[0].t(), ref[1], ref[2], 0.3, 0.7), ref)
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-12, atol=1e-15)

    la = torch.linspace(-2, 2, 4, dtype=torch.float64)
    for bias, sign in ((False, -1), (True, 1)):
        conv = hg.nn.L0Conv2d(3, 4, 3, bias=bias, weight_decay=0.3, lamba=0.7, dtype=torch.float64)
        with torch.no_grad():
            conv.log_alpha.copy_(la)
            if bias:
                conv.bias.normal_()
        reg = ref_conv_reg(conv.weight, conv.bias, la, 0.3, 0.7, bias_sign=sign)
        torch.testing.assert_close(conv.regularization(), reg, rtol=1e-13, atol=0)
    # The reference's FLOPs with its spatial size read right (H, W of an NCHW input),
    # where its unrounded output size is exact: stride 1.
    conv(torch.zeros(1, 3, 9, 7, dtype=torch.float64))
    ppos = torch.sum(1 - ref_cdf0(la))
    n = 3 * 3 * 3
    positions = ((9 - 3 + 0) / 1 + 1) * ((7 - 3 + 0) / 1 + 1)
    want = positions * (2 * n - 1) * ppos + positions * ppos
    torch.testing.assert_close(conv.expected_flops(), want, rtol=1e-13, atol=0)
    torch.testing.assert_close(conv.expected_flops((9, 7)), want, rtol=1e-13, atol=0)


def test_conv_output_size_and_flops_follow_nn_conv2d():
    layer = hg.nn.L0Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 0), dilation=2, groups=2)
    x = torch.randn(2, 4, 11, 8)
    y = layer.eval()(x)
    assert layer.output_size((11, 8)) == tuple(y.shape[-2:])
    h, w = y.shape[-2:]
    n = 2 * 3 * 2  # in_channels / groups * kernel
    want = layer.l0() * h * w * (2 * n - 1) + layer.l0() * h * w
    torch.testing.assert_close(layer.expected_flops(), want)
    same = hg.nn.L0Conv2d(1, 1, 3, padding="same", bias=False)
    assert same.output_size((5, 4)) == (5, 4)
    assert torch.equal(same.expected_flops((5, 4)), same.l0() * 20 * 17)


# -- a sparse regression -------------------------------------------------------------------


def _fit(lamba: float, seed: int) -> hg.nn.L0Linear:
    g = gen(seed)
    x = torch.randn(128, 8, generator=g)
    y = x @ torch.tensor([2.0, -3.0, 1.5, 0, 0, 0, 0, 0]) + 0.1 * torch.randn(128, generator=g)
    torch.manual_seed(seed)
    layer = hg.nn.L0Linear(8, 1, lamba=lamba, weight_decay=0.0, generator=gen(seed + 1))
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.1)
    for _ in range(200):
        optimizer.zero_grad()
        loss = (layer(x).squeeze(-1) - y).square().mean() + 0.1 * layer.penalty()
        loss.backward()
        optimizer.step()
        layer.constrain_parameters()
    return layer.eval()


@pytest.mark.parametrize("seed", [0, 1])
def test_the_l0_penalty_prunes_the_irrelevant_inputs(seed):
    """y depends on 3 of 8 inputs: with the penalty the 5 others' test-time gates are 0
    and the 3 are open; without it, no gate closes."""
    pruned, unpenalised = _fit(1.0, seed), _fit(0.0, seed)
    with torch.no_grad():
        assert pruned.gates()[3:].eq(0).all() and pruned.gates()[:3].gt(0.9).all()
        assert pruned.sparsity() == 5 / 8
        assert unpenalised.gates().gt(0).all()


# -- the rest of the standard ----------------------------------------------------------------


def _layers(**kwargs):
    torch.manual_seed(0)
    return [hg.nn.L0Linear(4, 3, **kwargs), hg.nn.L0Conv2d(4, 3, 2, padding=1, **kwargs)]


def _input(layer, batch, dtype=torch.float32):
    shape = (batch, 4) if isinstance(layer, hg.nn.L0Linear) else (batch, 4, 3, 3)
    return torch.randn(shape, generator=gen(batch)).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("local_rep", [False, True])
def test_dtypes_compute_in_float32_for_half_types_and_round_once(dtype, local_rep):
    for layer in _layers(local_rep=local_rep):
        wide = layer.to(torch.float64 if dtype == torch.float64 else torch.float32)
        narrow = [p.detach().to(dtype) for p in wide.parameters()]
        with torch.no_grad():
            for p, q in zip(wide.parameters(), narrow, strict=True):
                p.copy_(q)  # the wide layer holds the narrow layer's values
        layer_n = type(layer)(*_args(layer), local_rep=local_rep).to(dtype)
        layer_n.load_state_dict(wide.state_dict())
        for training in (True, False):
            x = _input(layer, 3, dtype)
            wide.generator = layer_n.generator = None
            wide.train(training)
            layer_n.train(training)
            torch.manual_seed(5)
            y = layer_n(x.requires_grad_(True))
            torch.manual_seed(5)
            want = wide(x.detach().to(wide.weight.dtype)).to(dtype)
            assert y.dtype == dtype
            assert torch.equal(y, want)
            y.float().square().sum().backward()
            assert all(torch.isfinite(p.grad).all() for p in layer_n.parameters())
            assert layer_n.penalty().dtype == wide.weight.dtype
            layer_n.zero_grad()


def _args(layer):
    if isinstance(layer, hg.nn.L0Linear):
        return (layer.in_features, layer.out_features)
    return (layer.in_channels, layer.out_channels, layer.kernel_size, 1, layer.padding)


@pytest.mark.parametrize("local_rep", [False, True])
def test_seeded_generator_empty_batch_and_torch_func(local_rep):
    for make in (
        lambda g: _layers(local_rep=local_rep, generator=g)[0],
        lambda g: _layers(local_rep=local_rep, generator=g)[1],
    ):
        a, b = make(gen(9)), make(gen(9))
        x = _input(a, 4)
        assert torch.equal(a(x), b(x)) and torch.equal(a(x), b(x))  # same draws, in step
        assert a(_input(a, 0)).shape[0] == 0
        a.eval()
        params = {k: v.detach() for k, v in a.named_parameters()}

        def loss(p, a=a, x=x):
            return torch.func.functional_call(a, p, (x,)).square().sum()

        grads = torch.func.grad(loss)(params)
        a(x).square().sum().backward()
        for name, p in a.named_parameters():
            torch.testing.assert_close(grads[name], p.grad)


@pytest.mark.compile
@pytest.mark.parametrize("local_rep", [False, True])
def test_compile_with_a_changing_batch(local_rep):
    for layer in _layers(local_rep=local_rep):
        compiled_layer = type(layer)(*_args(layer), local_rep=local_rep)
        compiled_layer.load_state_dict(layer.state_dict())
        torch._dynamo.reset()
        compiled = torch.compile(compiled_layer, fullgraph=True, dynamic=True, backend="aot_eager")
        for batch in (3, 5, 2):
            x = _input(layer, batch)
            out = []
            for run in (compiled, layer):
                torch.manual_seed(batch)
                out.append(run(x))
            assert torch.equal(out[0], out[1])
        torch._dynamo.reset()


def test_state_dict_round_trip_settings_repr_and_helpers():
    for layer in _layers(temperature=0.5, limit_a=-0.2, limit_b=1.2):
        state = layer.state_dict()
        assert set(state) == {"weight", "bias", "log_alpha"}
        other = type(layer)(*_args(layer), temperature=0.5, limit_a=-0.2, limit_b=1.2)
        other.load_state_dict(state)
        assert all(torch.equal(state[k], v) for k, v in other.state_dict().items())
        with pytest.raises(RuntimeError, match="temperature"):
            type(layer)(*_args(layer), limit_a=-0.2, limit_b=1.2).load_state_dict(state)
        assert "temperature=0.5" in repr(layer) and "limit_a=-0.2" in repr(layer)
        n = layer.log_alpha.numel()
        with torch.no_grad():
            layer.log_alpha.copy_(torch.tensor([-9.0, 0.0, 9.0, 1.0])[:n])
        layer.constrain_parameters()
        want = [math.log(0.01), 0.0, math.log(100), 1.0][:n]
        assert layer.log_alpha.tolist() == pytest.approx(want)
        assert layer.sparsity() == pytest.approx(1 / n)
    torch.manual_seed(0)
    log_alpha = hg.nn.L0Linear(2000, 2, droprate_init=0.2).log_alpha
    assert log_alpha.mean().item() == pytest.approx(math.log(4), abs=2e-3)
    assert log_alpha.std().item() == pytest.approx(0.01, rel=0.1)
    meta = hg.nn.L0Conv2d(2, 3, 1, device="meta")
    meta.to_empty(device="cpu").reset_parameters()
    assert torch.isfinite(meta.log_alpha).all() and meta.bias.eq(0).all()


def test_bad_input_names_the_argument():
    cases = [
        ({"droprate_init": 0.0}, ValueError, "droprate_init"),
        ({"droprate_init": 1.0}, ValueError, "droprate_init"),
        ({"temperature": 0.0}, ValueError, "beta"),
        ({"limit_a": 0.1}, ValueError, "gamma"),
        ({"limit_b": 1.0}, ValueError, "zeta"),
        ({"weight_decay": -1.0}, ValueError, "weight_decay"),
        ({"lamba": float("inf")}, ValueError, "lamba"),
        ({"local_rep": 1}, TypeError, "local_rep"),
        ({"generator": 3}, TypeError, "generator"),
    ]
    for kwargs, error, name in cases:
        for cls, args in ((hg.nn.L0Linear, (2, 3)), (hg.nn.L0Conv2d, (2, 3, 1))):
            with pytest.raises(error, match=f"`{name}`"):
                cls(*args, **kwargs)
    lin, conv = _layers()
    for layer in (lin, conv):
        for training in (True, False):
            layer.train(training)
            with pytest.raises(TypeError, match="`x`"):
                layer(_input(layer, 2).long())
    with pytest.raises(ValueError, match="4 features"):
        lin(torch.zeros(2, 5))
    with pytest.raises(ValueError, match=r"\(N, 4, H, W\)"):
        conv(torch.zeros(2, 3, 4, 4))
    fresh = hg.nn.L0Conv2d(1, 1, 1)
    with pytest.raises(ValueError, match="`input_size`"):
        fresh.expected_flops()
    for bad in ((3,), (0, 2), (2.0, 2), "ab"):
        with pytest.raises(ValueError, match="`input_size`"):
            fresh.expected_flops(bad)
