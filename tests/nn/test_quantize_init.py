"""``hg.nn.Quantize``'s data-driven initialisation (issue 38): a first batch without
information (all zeros), calibration under ``inference_mode``/``no_grad``, and a first
batch under ``torch.vmap``."""

from __future__ import annotations

import math

import pytest
import torch

import hardgrad as hg


def _batch(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _expected_scale(x: torch.Tensor, quant_max: int, dim: int | None = None) -> torch.Tensor:
    """2 mean|x| / sqrt(q+) in float64 (per channel along ``dim``)."""
    x = x.double().abs()
    if dim is None:
        return (2 * x.mean() / math.sqrt(quant_max)).reshape(1)  # compared as .reshape(-1)
    return 2 * x.movedim(dim, 0).reshape(x.shape[dim], -1).mean(1) / math.sqrt(quant_max)


# ------------------------------------------------------------- all-zero first batches


def test_an_all_zero_first_batch_leaves_the_scale_to_the_next_batch():
    """Before: the zero batch set the scale to eps (1.19e-7) for good, and every later
    value saturated at +-7 eps."""
    q = hg.nn.Quantize(bits=4)
    zeros = torch.zeros(8, 3, requires_grad=True)
    y = q(zeros)
    assert torch.equal(y, torch.zeros(8, 3)) and not q.initialized
    y.sum().backward()
    # Nothing to learn from zeros: x/s = 0 is in range and rounds to itself.
    assert torch.equal(zeros.grad, torch.ones(8, 3))
    assert torch.equal(q.scale.grad, torch.zeros_like(q.scale))
    x = _batch(8, 3)
    q(x)
    assert q.initialized
    torch.testing.assert_close(q.scale.detach().double().reshape(-1), _expected_scale(x, 7))


@pytest.mark.parametrize("learn_scale", [True, False], ids=["learned", "calibrated"])
def test_all_zero_channels_take_the_mean_scale_of_the_others(learn_scale):
    """Before: a channel whose first-batch values were all zero got the scale eps."""
    q = hg.nn.Quantize(bits=4, per_channel_dim=1, learn_scale=learn_scale)
    x = _batch(5, 4, 3)
    x[:, 2] = 0.0
    q(x)
    expected = _expected_scale(x, 7, dim=1)
    expected[2] = expected[[0, 1, 3]].mean()
    torch.testing.assert_close(q.scale.detach().double(), expected)
    # With every channel zero: no information at all, the scale waits.
    q = hg.nn.Quantize(bits=4, per_channel_dim=1, learn_scale=learn_scale)
    q(torch.zeros(5, 4, 3))
    assert not q.initialized
    q(x)
    torch.testing.assert_close(q.scale.detach().double(), expected)


def test_init_from_zeros_warns_and_keeps_the_scale():
    q = hg.nn.Quantize(bits=4, per_channel_dim=0)
    with pytest.warns(UserWarning, match=r"all zeros.*uninitialised"):
        q.init_from(torch.zeros(3, 4))
    assert not q.initialized
    q = hg.nn.Quantize(bits=4, init_scale=0.25)
    with pytest.warns(UserWarning, match=r"all zeros.*\(initialised"):
        q.init_from(torch.zeros(3))
    assert q.scale.item() == 0.25


# ------------------------------------------------- calibration without autograd


@pytest.mark.parametrize("mode", ["inference_mode", "no_grad"])
@pytest.mark.parametrize("per_channel_dim", [None, 1], ids=["per_tensor", "per_channel"])
def test_calibrated_without_autograd_then_trained_like_an_eager_calibration(mode, per_channel_dim):
    """Before: calibrating under inference_mode made the scale an inference tensor; per
    channel, the following forward passes recorded no gradient for it (and a loss of the
    quantized values alone raised 'does not require grad')."""
    context = torch.inference_mode if mode == "inference_mode" else torch.no_grad
    calibrated, eager = (hg.nn.Quantize(bits=4, per_channel_dim=per_channel_dim) for _ in "ce")
    first = _batch(6, 3)
    with context():
        calibrated(first)
    eager(first)
    assert not calibrated.scale.is_inference()
    assert torch.equal(calibrated.scale, eager.scale)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (calibrated, eager)]
    start = eager.scale.detach().clone()
    for step in range(3):
        x = _batch(6, 3, seed=step + 1)
        grads = []
        for module, optimizer in zip((calibrated, eager), optimizers, strict=True):
            optimizer.zero_grad()
            (module(x) - x).square().sum().backward()
            grads.append(module.scale.grad.clone())
            optimizer.step()
        assert torch.equal(grads[0], grads[1]), step
    assert torch.equal(calibrated.scale, eager.scale)
    assert not torch.equal(calibrated.scale.detach(), start)  # it trained


def test_a_quant_layer_calibrated_under_inference_mode_trains():
    torch.manual_seed(0)
    layer = hg.nn.QuantLinear(4, 2, weight_bits=4, act_bits=4)
    with torch.inference_mode():
        layer(_batch(8, 4))
    before = layer.act_quantizer.scale.detach().clone()
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.5)
    layer(_batch(8, 4, seed=1)).square().sum().backward()
    optimizer.step()
    assert not layer.act_quantizer.scale.is_inference()
    assert not torch.equal(layer.act_quantizer.scale.detach(), before)


# ------------------------------------------------------------------- torch.vmap


def test_a_fresh_quantize_under_vmap_initialises_from_the_whole_batch():
    """Before: vmap refused the initialisation's data-dependent branch."""
    x = _batch(5, 8)
    mapped, eager = hg.nn.Quantize(bits=4), hg.nn.Quantize(bits=4)
    y = torch.vmap(mapped)(x)
    assert mapped.initialized and torch.equal(mapped.scale, eager.init_from(x).scale)
    assert torch.equal(y, eager(x))


def test_functional_call_under_vmap_and_nested_vmap_per_channel():
    # Each example is (channels=3, features=4); vmapped along dim 1 of (3, 5, 4), and
    # per example along its dim 0 (channels): eagerly, per_channel_dim=1 of (5, 3, 4).
    x = _batch(3, 5, 4)
    mapped = hg.nn.Quantize(bits=3, per_channel_dim=0)
    params = dict(mapped.named_parameters())

    def call(example):
        return torch.func.functional_call(mapped, params, (example,))

    y = torch.vmap(call, in_dims=1, out_dims=1)(x)
    eager = hg.nn.Quantize(bits=3, per_channel_dim=1)
    expected = eager(x.movedim(1, 0)).movedim(0, 1)
    assert torch.equal(mapped.scale, eager.scale) and torch.equal(y, expected)
    # Two vmap levels, over dims 0 and 2 of (5, 3, 4): each example a (channels=3,) vector.
    batch = x.permute(1, 0, 2)
    nested = hg.nn.Quantize(bits=3, per_channel_dim=-1)
    z = torch.vmap(torch.vmap(nested, in_dims=1), in_dims=0)(batch)  # (5, 4, 3)
    eager = hg.nn.Quantize(bits=3, per_channel_dim=1)
    assert torch.equal(z, eager(batch).mT)
    assert torch.equal(nested.scale, eager.scale)


def test_functional_call_with_a_stand_in_scale_refuses_to_initialise():
    """A stand-in tensor (e.g. detached copies, as torch.func code makes them) would be
    set while the module, marked initialised, kept its own placeholder scale of 1."""
    q = hg.nn.Quantize(bits=4)
    copies = {name: p.detach().clone() for name, p in q.named_parameters()}
    with pytest.raises(RuntimeError, match=r"functional_call.*stand-in.*one batch"):
        torch.func.functional_call(q, copies, (_batch(6),))
    assert not q.initialized
    q(_batch(6))  # initialised: the stand-ins are then used as given
    y = torch.func.functional_call(q, {"scale": torch.tensor([0.5])}, (torch.tensor([0.3]),))
    assert torch.equal(y, torch.tensor([0.5]))


@pytest.mark.parametrize("per_channel_dim", [None, 0], ids=["per_tensor", "per_channel"])
def test_a_fresh_quantize_under_torch_func_grad_and_jvp(per_channel_dim):
    """Before: the scale computed under torch.func.grad was a wrapper of that transform,
    stored in the parameter, and the next use failed an internal assert (per channel)."""
    x = _batch(3, 5)
    reference = hg.nn.Quantize(bits=4, per_channel_dim=per_channel_dim)
    leaf = x.clone().requires_grad_()
    reference(leaf).square().sum().backward()
    q = hg.nn.Quantize(bits=4, per_channel_dim=per_channel_dim)
    grad = torch.func.grad(lambda v: q(v).square().sum())(x)
    assert type(q.scale.data) is torch.Tensor and torch.equal(q.scale, reference.scale)
    assert torch.equal(grad, leaf.grad)
    assert torch.equal(q(x), reference(x))  # usable afterwards
    q = hg.nn.Quantize(bits=4, per_channel_dim=per_channel_dim)
    torch.func.jvp(q, (x,), (torch.ones_like(x),))
    assert torch.equal(q.scale, reference.scale)
