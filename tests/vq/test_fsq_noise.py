"""hg.vq.fsq(..., noise_dropout=p, generator=g) and hg.nn.FSQ(..., noise_dropout=p): the
noise substitution of Parker et al. 2024 against a float64 formula written here given the
same draws, forward and backward, both grids, training only in the module, seeded
repeats, dtypes, compile with a changing batch, bad input, empty batches."""

from __future__ import annotations

import pytest
import torch

import hardgrad as hg

LEVELS = (2, 3, 4, 7)


def _draws(shape, p, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    keep = torch.rand(shape, generator=g, dtype=dtype) < p
    eps = torch.rand(shape, generator=g, dtype=dtype) - 0.5
    return keep, eps.double()


def _reference(z, levels, keep, eps, symmetric):
    """Values and d z_q / d z in float64, channels last, given the draws."""
    z = z.double()
    lv = torch.tensor(levels, dtype=torch.float64)
    if symmetric:
        step = 2 / (lv - 1)
        t = torch.tanh(z)
        rounded = torch.floor((lv - 1) * (t + 1) / 2 + 0.5) * step - 1
        return torch.where(keep, t + eps * step, rounded), 1 - t**2
    half = (lv - 1) / 2 * (1 + 1e-3)
    offset = torch.where(lv % 2 == 0, 0.5, 0.0)
    shift = torch.atanh(offset / half)
    width = torch.floor(lv / 2)
    b = half * torch.tanh(z + shift) - offset
    rounded = torch.round(b) / width
    slope = half * (1 - torch.tanh(z + shift) ** 2) / width
    return torch.where(keep, (b + eps) / width, rounded), slope


@pytest.mark.parametrize("symmetric", [False, True])
def test_values_and_gradient_against_the_float64_formula(symmetric):
    z = torch.randn(300, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2
    z.requires_grad_()
    g = torch.Generator().manual_seed(5)
    z_q, indices = hg.vq.fsq(z, LEVELS, preserve_symmetry=symmetric, noise_dropout=0.4, generator=g)
    keep, eps = _draws(z.shape, 0.4, 5, torch.float64)
    assert 0.3 < float(keep.double().mean()) < 0.5
    values, slope = _reference(z.detach(), LEVELS, keep, eps, symmetric)
    torch.testing.assert_close(z_q.detach(), values, rtol=0, atol=1e-14)
    plain, plain_indices = hg.vq.fsq(z.detach(), LEVELS, preserve_symmetry=symmetric)
    assert torch.equal(indices, plain_indices)  # the rounded codes' indices
    assert torch.equal(z_q.detach()[~keep], plain[~keep])
    # the noise is within half a step of the unrounded value, so within a step of the code
    step = torch.tensor([2 / (v - 1) if symmetric else 1 / (v // 2) for v in LEVELS]).double()
    assert bool(((z_q.detach() - plain).abs() <= step + 1e-12).all())
    w = torch.randn(z.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    z_q.backward(w)
    torch.testing.assert_close(z.grad, slope * w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dtypes_compute_in_float32_and_round_once(dtype):
    z = torch.randn(64, 4, generator=torch.Generator().manual_seed(2)).to(dtype)
    z_q, _ = hg.vq.fsq(
        z,
        LEVELS,
        preserve_symmetry=True,
        noise_dropout=0.5,
        generator=torch.Generator().manual_seed(3),
    )
    keep, eps = _draws(z.shape, 0.5, 3, torch.float32)
    values, _ = _reference(z.float(), LEVELS, keep, eps, True)
    assert z_q.dtype == dtype
    torch.testing.assert_close(z_q, values.to(dtype), rtol=0, atol=2e-7)


def test_channel_dim_and_the_module_train_and_eval():
    z = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(4))
    fsq = hg.nn.FSQ(LEVELS, channel_dim=1, noise_dropout=0.5, seed=7)
    assert "noise_dropout=0.5" in repr(fsq)
    z_q, indices = fsq(z)
    keep, eps = _draws((3, 5, 4), 0.5, 7, torch.float32)
    values, _ = _reference(z.movedim(1, -1), LEVELS, keep, eps, False)
    torch.testing.assert_close(z_q, values.float().movedim(-1, 1), rtol=0, atol=2e-7)
    again = hg.nn.FSQ(LEVELS, channel_dim=1, noise_dropout=0.5, seed=7)
    assert torch.equal(again(z)[0], z_q)  # the same seed, the same draws
    assert not torch.equal(fsq(z)[0], z_q)  # the generator moved on
    fsq.eval()
    plain = hg.vq.fsq(z, LEVELS, dim=1)
    assert torch.equal(fsq(z)[0], plain[0]) and torch.equal(fsq(z)[1], indices)
    state = fsq.generator.get_state()
    fsq(z)
    assert torch.equal(fsq.generator.get_state(), state)  # eval draws nothing


def test_zero_and_one_and_empty():
    z = torch.randn(10, 4, generator=torch.Generator().manual_seed(6))
    g = torch.Generator().manual_seed(0)
    state = g.get_state()
    assert torch.equal(
        hg.vq.fsq(z, LEVELS, noise_dropout=0.0, generator=g)[0], hg.vq.fsq(z, LEVELS)[0]
    )
    assert torch.equal(g.get_state(), state)
    z_q, _ = hg.vq.fsq(
        z,
        LEVELS,
        preserve_symmetry=True,
        noise_dropout=1,
        generator=torch.Generator().manual_seed(1),
    )
    keep, eps = _draws(z.shape, 1.0, 1, torch.float32)
    assert bool(keep.all())
    torch.testing.assert_close(
        z_q, _reference(z, LEVELS, keep, eps, True)[0].float(), rtol=0, atol=2e-7
    )
    empty = torch.zeros(0, 4, requires_grad=True)
    z_q, indices = hg.nn.FSQ(LEVELS, noise_dropout=0.5)(empty)
    assert z_q.shape == (0, 4) and indices.shape == (0,)
    z_q.sum().backward()
    assert empty.grad.shape == (0, 4)


def test_bad_input():
    z = torch.zeros(2, 4)
    for bad in (-0.1, 1.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="noise_dropout"):
            hg.vq.fsq(z, LEVELS, noise_dropout=bad)
        with pytest.raises(ValueError, match="noise_dropout"):
            hg.nn.FSQ(LEVELS, noise_dropout=bad)
    with pytest.raises(TypeError, match="noise_dropout"):
        hg.nn.FSQ(LEVELS, noise_dropout="0.5")
    with pytest.raises(TypeError, match="generator"):
        hg.vq.fsq(z, LEVELS, noise_dropout=0.5, generator=0)
    with pytest.raises(TypeError, match="seed"):
        hg.nn.FSQ(LEVELS, seed=1.5)


@pytest.mark.compile
def test_compile_with_a_changing_batch_repeats_the_eager_draws():
    torch._dynamo.reset()
    eager = hg.nn.FSQ(LEVELS, preserve_symmetry=True, noise_dropout=0.5, seed=3)
    compiled_module = hg.nn.FSQ(LEVELS, preserve_symmetry=True, noise_dropout=0.5, seed=3)
    compiled = torch.compile(compiled_module, dynamic=True)
    for n in (5, 9, 13):
        z = torch.randn(n, 4, generator=torch.Generator().manual_seed(n), requires_grad=True)
        want, want_indices = eager(z)
        (want_grad,) = torch.autograd.grad(want.sum(), z)
        got, got_indices = compiled(z)
        (got_grad,) = torch.autograd.grad(got.sum(), z)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
        assert torch.equal(got_indices, want_indices)
        torch.testing.assert_close(got_grad, want_grad)
