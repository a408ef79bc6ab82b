"""QAT layers: ``QuantLinear``/``QuantConv2d`` against ``hg.quantize`` with the same scales,
``quantize_``, freezing to integers, ``torch.export``, compile, checkpoints, bad input."""

from __future__ import annotations

import io
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import hardgrad as hg


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _reference(layer, x):
    """The layer's forward written with hg.quantize and leaf copies of its scales."""
    wq, aq = layer.weight_quantizer, layer.act_quantizer
    s_w = wq.scale.detach().clone().requires_grad_()
    s_x = aq.scale.detach().clone().requires_grad_()
    w = layer.weight.detach().clone().requires_grad_()
    shape = (-1,) + (1,) * (w.dim() - 1)
    per_channel = w[0].numel()
    xq = hg.quantize(
        x,
        s_x,
        quant_min=aq.quant_min,
        quant_max=aq.quant_max,
        grad_scale=1 / math.sqrt(x.numel() * aq.quant_max),
    )
    weight = hg.quantize(
        w,
        s_w.view(shape),
        quant_min=wq.quant_min,
        quant_max=wq.quant_max,
        grad_scale=1 / math.sqrt(per_channel * wq.quant_max),
    )
    return xq, weight, (w, s_w, s_x)


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_forward_and_gradients_equal_hg_quantize_with_the_same_scales(kind):
    torch.manual_seed(0)
    if kind == "linear":
        layer = hg.nn.QuantLinear(6, 4, weight_bits=4, act_bits=3).double()
        x = torch.randn(5, 6, generator=_gen(1), dtype=torch.float64)
    else:
        layer = hg.nn.QuantConv2d(2, 3, 3, padding=1, weight_bits=3, act_bits=4).double()
        x = torch.randn(2, 2, 5, 5, generator=_gen(1), dtype=torch.float64)
    layer(x)  # initialises the activation scale from this batch
    assert layer.act_quantizer.initialized
    x = x.clone().requires_grad_()
    y = layer(x)
    g = torch.randn(y.shape, generator=_gen(2), dtype=torch.float64)
    y.backward(g)
    x_ref = x.detach().clone().requires_grad_()
    xq, wq, (w, s_w, s_x) = _reference(layer, x_ref)
    if kind == "linear":
        y_ref = F.linear(xq, wq, layer.bias.detach())
    else:
        y_ref = F.conv2d(xq, wq, layer.bias.detach(), padding=1)
    y_ref.backward(g)
    assert torch.equal(y.detach(), y_ref.detach())
    for got, want in (
        (x.grad, x_ref.grad),
        (layer.weight.grad, w.grad),
        (layer.weight_quantizer.scale.grad, s_w.grad),
        (layer.act_quantizer.scale.grad, s_x.grad),
    ):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert layer.act_quantizer.scale.grad.abs() > 0
    # The weights take at most 2^bits values per output channel.
    for row in layer.quantized_weight().detach():
        assert len(torch.unique(row)) <= 2**layer.weight_bits


def test_bits_none_leave_that_side_in_float_and_unsigned_activations():
    layer = hg.nn.QuantLinear(4, 2, weight_bits=None, act_bits=2, act_signed=False)
    assert layer.weight_quantizer is None and layer.act_quantizer.quant_min == 0
    x = torch.rand(3, 4)
    expected = F.linear(layer.act_quantizer(x), layer.weight, layer.bias)
    assert torch.equal(layer(x), expected)
    assert layer.act_quantizer.quant_max == 3
    plain = hg.nn.QuantLinear(4, 2, weight_bits=None, act_bits=None)
    assert torch.equal(plain(x), F.linear(x, plain.weight, plain.bias))


# --------------------------------------------------------------------------- quantize_


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.body = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU())
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        h = F.relu(F.max_pool2d(self.conv(x), 2)).flatten(1)
        return self.head(self.body(h))


def test_quantize_swaps_in_place_keeping_the_trained_parameters():
    torch.manual_seed(0)
    model = Net()
    x = torch.randn(8, 1, 8, 8, generator=_gen(3))
    float_out = model(x).detach()
    params = {name: p for name, p in model.named_parameters()}
    assert hg.nn.quantize_(model, weight_bits=16, act_bits=16, optimizer=None) is model
    assert isinstance(model.conv, hg.nn.QuantConv2d) and isinstance(model.head, hg.nn.QuantLinear)
    assert isinstance(model.body[0], hg.nn.QuantLinear) and isinstance(model.body[1], nn.ReLU)
    for name, p in params.items():  # the very same Parameter objects
        assert model.get_parameter(name) is p
    # 16-bit quantization changes the trained network's outputs very little.
    torch.testing.assert_close(model(x), float_out, rtol=0, atol=2e-3)
    assert model.conv.padding == (1, 1) and model.conv.kernel_size == (3, 3)
    # Swapping twice changes nothing (already quantized layers are not plain Linear).
    hg.nn.quantize_(model, weight_bits=4)
    assert model.head.weight_bits == 16


def test_quantize_skips_first_last_and_named_layers():
    model = Net()
    hg.nn.quantize_(model, weight_bits=4, act_bits=8, skip=["first", "last"], optimizer=None)
    assert type(model.conv) is nn.Conv2d and type(model.head) is nn.Linear
    assert isinstance(model.body[0], hg.nn.QuantLinear) and model.body[0].weight_bits == 4
    model = Net()
    hg.nn.quantize_(model, weight_bits=2, act_bits=None, skip=["body"], optimizer=None)
    assert type(model.body[0]) is nn.Linear and type(model.body[2]) is nn.Linear
    assert isinstance(model.conv, hg.nn.QuantConv2d) and model.conv.act_quantizer is None
    with pytest.raises(ValueError, match=r"`skip`.*'bdy'.*'body.0'"):
        hg.nn.quantize_(Net(), skip=["bdy"])
    with pytest.raises(TypeError, match="`skip`"):
        hg.nn.quantize_(Net(), skip="first")


def test_trained_quantized_model_trains_and_optimizer_made_before_still_works():
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    x = torch.randn(64, 8, generator=_gen(4))
    y = (x[:, :3] * 2).argmax(1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    hg.nn.quantize_(
        model, weight_bits=4, act_bits=4, optimizer=optimizer, optimizer_options={"lr": 1e-3}
    )
    model(x)  # activation scales from the first batch
    first = F.cross_entropy(model(x), y).item()
    for _ in range(60):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    assert F.cross_entropy(model(x), y).item() < 0.5 * first


# --------------------------------------------------------------------------- deployment


def _trained_model() -> nn.Module:
    torch.manual_seed(2)
    model = Net()
    hg.nn.quantize_(model, weight_bits=4, act_bits=8, optimizer=None)
    x = torch.randn(16, 1, 8, 8, generator=_gen(5))
    model(x)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    for _ in range(3):
        optimizer.zero_grad()
        model(x).square().mean().backward()
        optimizer.step()
    return model


def test_freeze_to_integers_gives_identical_outputs():
    model = _trained_model()
    x = torch.randn(4, 1, 8, 8, generator=_gen(6))
    before = model(x).detach()
    integer = {
        name: m.integer_weight() for name, m in model.named_modules() if hasattr(m, "freeze")
    }
    for m in model.modules():
        if isinstance(m, (hg.nn.QuantLinear, hg.nn.QuantConv2d)):
            m.freeze()
    assert torch.equal(model(x).detach(), before)
    for name, (q, s) in integer.items():
        layer = model.get_submodule(name)
        assert layer.weight is None and layer.weight_int.dtype == torch.int8
        assert torch.equal(layer.weight_int, q) and torch.equal(layer.weight_scale, s)
        assert int(q.min()) >= -8 and int(q.max()) <= 7
    state = model.state_dict()
    assert "head.weight_int" in state and "head.weight" not in state
    assert not any(k.endswith("weight_quantizer.scale") for k in state)
    with pytest.raises(RuntimeError, match="frozen"):
        _trained_model().load_state_dict(state)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_freeze_is_exact_in_every_dtype(dtype):
    torch.manual_seed(0)
    conv = hg.nn.QuantConv2d(4, 5, 1, weight_bits=4, act_bits=6).to(dtype)
    x = torch.randn(3, 4, 2, 2, generator=_gen(11)).to(dtype)
    before, weight = conv(x).detach(), conv.quantized_weight().detach()
    conv.freeze()
    assert torch.equal(conv(x), before) and torch.equal(conv.quantized_weight(), weight)


def test_a_trained_quantized_model_runs_under_torch_export():
    model = _trained_model().eval()
    x = torch.randn(4, 1, 8, 8, generator=_gen(7))
    exported = torch.export.export(model, (x,))
    assert torch.equal(exported.module()(x), model(x))
    for m in model.modules():
        if isinstance(m, (hg.nn.QuantLinear, hg.nn.QuantConv2d)):
            m.freeze()
    frozen = torch.export.export(model, (x,))
    assert torch.equal(frozen.module()(x), model(x))


@pytest.mark.compile
def test_compiles_fullgraph_once_initialised():
    torch._dynamo.reset()
    layer = hg.nn.QuantLinear(6, 4, weight_bits=4, act_bits=4)
    x = torch.randn(5, 6, generator=_gen(8))
    layer(x)
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    assert torch.equal(compiled(x), layer(x))
    torch._dynamo.reset()


def test_torch_func_grad_equals_backward():
    layer = hg.nn.QuantLinear(4, 2, weight_bits=3, act_bits=3)
    x = torch.randn(6, 4, generator=_gen(10))
    layer(x)
    params = dict(layer.named_parameters())
    grads = torch.func.grad(lambda p: torch.func.functional_call(layer, p, (x,)).square().sum())(
        params
    )
    layer(x).square().sum().backward()
    for name, p in layer.named_parameters():
        torch.testing.assert_close(grads[name], p.grad)


def test_state_dict_round_trip():
    layer = hg.nn.QuantConv2d(2, 3, 3, weight_bits=4, act_bits=6)
    x = torch.randn(2, 2, 6, 6, generator=_gen(9))
    layer(x)
    buffer = io.BytesIO()
    torch.save(layer.state_dict(), buffer)
    buffer.seek(0)
    other = hg.nn.QuantConv2d(2, 3, 3, weight_bits=4, act_bits=6)
    other.load_state_dict(torch.load(buffer, weights_only=True))
    assert other.act_quantizer.initialized
    assert torch.equal(other(x), layer(x))
    with pytest.raises(RuntimeError, match="weight_bits"):
        hg.nn.QuantConv2d(2, 3, 3, weight_bits=8, act_bits=6).load_state_dict(layer.state_dict())


@pytest.mark.parametrize(
    "kwargs, error, name",
    [
        ({"weight_bits": 1}, ValueError, "weight_bits"),
        ({"weight_bits": 17}, ValueError, "weight_bits"),
        ({"act_bits": 0, "act_signed": False}, ValueError, "act_bits"),
        ({"act_bits": 1}, ValueError, "act_bits"),
        ({"weight_bits": 4.0}, TypeError, "weight_bits"),
        ({"act_signed": 1}, TypeError, "act_signed"),
    ],
)
def test_bad_settings_name_the_argument(kwargs, error, name):
    with pytest.raises(error, match=f"`{name}`"):
        hg.nn.QuantLinear(3, 2, **kwargs)
    with pytest.raises(error, match=f"`{name}`"):
        hg.nn.quantize_(nn.Sequential(nn.Linear(3, 2)), **kwargs)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="`x`"):
        hg.nn.QuantLinear(3, 2)(torch.zeros(4, 2))
    with pytest.raises(ValueError, match="`x`"):
        hg.nn.QuantConv2d(3, 2, 1)(torch.zeros(4, 2, 5, 5))
    with pytest.raises(TypeError, match="`model`"):
        hg.nn.quantize_("model")  # type: ignore[arg-type]
