"""hardgrad.nn.Quantize: LSQ initialisation from the first batch (also averaged across
ranks), state, compile; a learned scale driven to 0 or below, and first batches at the
dtype's limits."""

from __future__ import annotations

import math
import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

import hardgrad as hg
from _spawn import run_ranks


@pytest.mark.parametrize(
    ("bits", "signed", "low", "high"), [(8, True, -128, 127), (4, False, 0, 15), (2, True, -2, 1)]
)
def test_quantize_range_and_first_batch_init(bits, signed, low, high):
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(1))
    if not signed:
        x = x.abs()
    q = hg.nn.Quantize(bits=bits, signed=signed)
    assert not q.initialized
    y = q(x)
    expected_scale = 2 * x.abs().mean() / math.sqrt(high)
    torch.testing.assert_close(q.scale.detach(), expected_scale.reshape(1))  # stored as (1,)
    assert q.initialized
    assert torch.equal(y, hg.quantize(x, expected_scale, quant_min=low, quant_max=high))
    levels = torch.round(y / expected_scale)
    assert levels.min() >= low and levels.max() <= high
    # The scale is set once: a second batch does not move it.
    q(x * 100)
    torch.testing.assert_close(q.scale.detach(), expected_scale.reshape(1))


def test_quantize_per_channel_init_and_lsq_gradient():
    g = torch.Generator().manual_seed(2)
    w = torch.randn(3, 5, 4, generator=g) * torch.tensor([0.1, 1.0, 10.0]).view(3, 1, 1)
    q = hg.nn.Quantize(bits=4, per_channel_dim=0)
    scale_object = q.scale
    w = w.requires_grad_(True)
    y = q(w)
    expected = 2 * w.detach().abs().mean(dim=(1, 2)) / math.sqrt(7)
    torch.testing.assert_close(q.scale.detach(), expected)
    assert q.scale is scale_object  # an optimizer made before the first batch still holds it
    upstream = torch.randn(y.shape, generator=g)
    y.backward(upstream)
    # Reference: the functional op with LSQ's 1/sqrt(N * Qp) gradient scale, N = 20 per channel.
    scale = expected.clone().view(3, 1, 1).requires_grad_(True)
    reference = hg.quantize(
        w.detach(), scale, quant_min=-8, quant_max=7, grad_scale=1 / math.sqrt(20 * 7)
    )
    reference.backward(upstream)
    torch.testing.assert_close(q.scale.grad, scale.grad.view(3))


def test_quantize_channel_dim_negative_and_half_input():
    q = hg.nn.Quantize(per_channel_dim=-1)
    x = torch.randn(6, 3).to(torch.bfloat16)
    y = q(x)
    assert y.dtype == torch.bfloat16
    assert q.scale.shape == (3,)
    assert q.scale.dtype == torch.float32


def test_quantize_fixed_scale_is_a_buffer():
    q = hg.nn.Quantize(learn_scale=False)
    assert list(q.parameters()) == []
    x = torch.randn(10, requires_grad=True)
    q(x).sum().backward()
    assert "scale" in dict(q.named_buffers())
    assert x.grad is not None


def test_quantize_state_dict_round_trip_per_channel():
    q = hg.nn.Quantize(bits=6, per_channel_dim=1)
    x = torch.randn(8, 4)
    y = q(x)
    fresh = hg.nn.Quantize(bits=6, per_channel_dim=1)
    fresh.load_state_dict(q.state_dict())
    assert fresh.initialized
    assert torch.equal(fresh.scale, q.scale)
    # It does not re-initialise from the next batch.
    assert torch.equal(fresh(x), y)
    assert torch.equal(fresh.scale, q.scale)


def test_quantize_lsq_training_lowers_quantization_error():
    """Learning the step size reduces the quantization MSE below the LSQ initial guess."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4096, generator=g) ** 3  # heavy tails: the initial scale is not optimal
    q = hg.nn.Quantize(bits=3)
    initial = (q(x) - x).pow(2).mean().item()
    opt = torch.optim.Adam(q.parameters(), lr=0.01)
    for _ in range(300):
        opt.zero_grad()
        (q(x) - x).pow(2).mean().backward()
        opt.step()
    final = (q(x) - x).pow(2).mean().item()
    assert final < 0.8 * initial


@pytest.mark.compile
def test_quantize_module_compiles():
    q = hg.nn.Quantize(bits=4, per_channel_dim=0)
    x = torch.randn(4, 8, requires_grad=True)
    eager = q(x)
    compiled = torch.compile(q, fullgraph=True)
    out = compiled(x)
    assert torch.equal(out, eager)
    out.sum().backward()
    assert q.scale.grad is not None and torch.isfinite(q.scale.grad).all()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _init_worker(rank: int, world: int, port: int, out: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    try:
        q = hg.nn.Quantize(bits=4)
        q(torch.full((16,), float(rank + 1)))  # ranks see different first batches
        out[rank] = q.scale.detach().clone()
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
@pytest.mark.distributed
def test_quantize_init_is_averaged_across_ranks():
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        out = manager.dict()
        run_ranks(_init_worker, (2, _free_port(), out), 2, lambda: len(out) == 2)
        scales = dict(out)
    expected = torch.tensor([2 * 1.5 / math.sqrt(7)])  # one scale, stored as (1,)
    torch.testing.assert_close(scales[0], expected)
    torch.testing.assert_close(scales[1], expected)


# --------------------------------------------------------------------------------------
# Quantize: a learned scale driven to 0 or below, and first batches at the dtype's limits
# (regressions found by tests/test_properties_modules.py).
# --------------------------------------------------------------------------------------


def test_quantize_scale_pushed_negative_by_an_optimizer_step_stays_sound():
    """SGD with lr=10 on a loss that wants a smaller scale drives it below 0 in one step.
    The forward then quantizes with |s| (it used to raise "Expected every `scale` > 0", or
    with validation off, quantize on a mirrored grid), and the mirrored gradient keeps
    shrinking |s|, as the loss asks (a small step moves s towards 0 from below)."""
    x = torch.randn(64, generator=torch.Generator().manual_seed(0))
    q = hg.nn.Quantize(bits=4)
    q(x)
    opt = torch.optim.SGD(q.parameters(), lr=10.0)
    q(x).square().sum().backward()
    opt.step()
    s = float(q.scale.detach())
    assert s < 0  # the scenario under test
    for validation in (True, False):
        hg.set_validation(validation)
        try:
            y = q(x)
        finally:
            hg.set_validation(True)
        assert torch.isfinite(y).all()
        assert torch.equal(y, hg.quantize(x, abs(s), quant_min=-8, quant_max=7))
    opt.zero_grad()
    q(x).square().sum().backward()
    assert q.scale.grad < 0  # d/ds of the loss at s < 0 mirrors d/d|s| > 0
    torch.optim.SGD(q.parameters(), lr=0.1).step()  # a small step: |s| shrinks, sign kept
    assert s < float(q.scale.detach()) < 0


@pytest.mark.parametrize(
    ("stored", "expected_step", "expected_grad"),
    [
        (0.5, 0.5, 1.0),
        (-0.5, 0.5, -1.0),  # mirrored
        (0.0, torch.finfo(torch.float32).tiny, 1.0),  # sign(0) = 1, floored at s_min
        (1e38, 65504.0 / 128 * (1 - torch.finfo(torch.float32).eps), 1.0),  # through s_max
    ],
)
def test_quantize_step_size_value_and_gradient(stored, expected_step, expected_grad):
    """step_size(dtype) = clamp(|s|, s_min, s_max) with gradient sign(s), sign(0) = 1,
    straight through the bounds (s_max for float16 inputs and 8 bits: 65504 / 128)."""
    q = hg.nn.Quantize(bits=8)
    q(torch.ones(4))
    with torch.no_grad():
        q.scale.fill_(stored)
    step = q.step_size(torch.float16)
    assert float(step.detach()) == pytest.approx(expected_step, rel=1e-6)
    (grad,) = torch.autograd.grad(3.0 * step, q.scale)
    assert float(grad) == 3.0 * expected_grad


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_quantize_zero_scale_gives_a_finite_forward(dtype):
    """s = 0 used to give 1/0 = inf and NaN at x = 0; the step is floored at the smallest
    normal number, so the forward is finite (every entry saturates at +-s_min * q)."""
    q = hg.nn.Quantize(bits=8)
    x = torch.tensor([-2.0, 0.0, -0.0, 1e-3, 5.0], dtype=dtype, requires_grad=True)
    q(x)
    with torch.no_grad():
        q.scale.zero_()
    y = q(x)
    assert torch.isfinite(y).all()
    assert (y.abs() <= 128 * torch.finfo(torch.float32).tiny).all()
    y.sum().backward()
    assert torch.isfinite(q.scale.grad).all() and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("per_channel_dim", [None, 0])
def test_quantize_first_batch_at_the_dtype_maximum(dtype, per_channel_dim):
    """A finite first batch with magnitudes up to finfo.max used to raise "Expected a finite
    first batch" (the mean overflowed; float64 also overflowed the float32 scale), and in
    float16 the initial grid's levels overflowed to inf. Now the scale is finite and every
    grid level fits the dtype."""
    big = torch.finfo(dtype).max
    x = torch.tensor([[big, -big, 0.0], [big, big, big]], dtype=dtype, requires_grad=True)
    q = hg.nn.Quantize(bits=8, per_channel_dim=per_channel_dim)
    y = q(x)
    assert q.initialized and torch.isfinite(q.scale).all() and (q.scale > 0).all()
    assert torch.isfinite(y).all() and y.dtype == dtype
    assert (y.double().abs() <= big).all()
    y.backward(torch.ones_like(y))
    assert torch.isfinite(q.scale.grad).all() and torch.isfinite(x.grad).all()


def test_quantize_first_batch_with_inf_or_nan_is_rejected():
    for bad in (math.inf, math.nan):
        q = hg.nn.Quantize()
        with pytest.raises(ValueError, match="`x`"):
            q(torch.tensor([1.0, bad]))
        assert not q.initialized


@pytest.mark.parametrize(("shape", "per_channel_dim"), [((0,), None), ((0, 3), 1), ((3, 0), 0)])
def test_quantize_empty_batch_passes_through_uninitialised(shape, per_channel_dim):
    """An empty first batch used to raise (a misleading "finite first batch" ValueError,
    or a RuntimeError from reshape per channel); now it passes through and the next
    non-empty batch initialises the scale."""
    q = hg.nn.Quantize(bits=4, per_channel_dim=per_channel_dim)
    y = q(torch.empty(shape))
    assert y.shape == shape and not q.initialized
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(1))
    q(x)
    assert q.initialized and (q.scale > 0).all()


def test_quantize_rejects_non_floating_input():
    with pytest.raises(TypeError, match="`x`"):
        hg.nn.Quantize()(torch.tensor([1, 2]))
