"""hg.vq.fsq and hg.vq.lfq: levels, indices and codes round trip, the backward of the bound,
dtypes, FSQ against its written-out formula bit for bit, LFQ's sign, index and entropies."""

from __future__ import annotations

import math

import pytest
import torch
from torch.func import grad, vmap

import hardgrad as hg

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("levels", [(8, 5, 5, 5), (7, 5, 5, 5, 5), (2, 3), (4, 4, 4)])
def test_fsq_levels_indices_and_codes_round_trip(levels):
    z = torch.randn(4000, len(levels), generator=_gen(0)) * 3
    z_q, idx = hg.vq.fsq(z, levels)
    size = math.prod(levels)
    assert int(idx.min()) >= 0 and int(idx.max()) < size
    for i, level in enumerate(levels):  # exactly L_i distinct values, in [-1, 1]
        assert len(torch.unique(z_q[:, i])) == level
    assert float(z_q.abs().max()) <= 1.0
    all_idx = torch.arange(size)
    codes = hg.vq.fsq_indices_to_codes(all_idx, levels)
    assert len(torch.unique(codes, dim=0)) == size
    assert torch.equal(hg.vq.fsq_codes_to_indices(codes, levels), all_idx)
    assert torch.equal(hg.vq.fsq_indices_to_codes(idx, levels), z_q)  # bit for bit


def test_fsq_backward_is_the_bound_derivative():
    levels = (8, 5, 3)
    z = torch.randn(10, 3, generator=_gen(1), dtype=torch.float64, requires_grad=True)
    z_q, _ = hg.vq.fsq(z, levels)
    z_q.sum().backward()
    expected = []
    for i, level in enumerate(levels):
        half = (level - 1) / 2 * (1 + 1e-3)
        offset = 0.5 if level % 2 == 0 else 0.0
        shift = math.atanh(offset / half)
        t = torch.tanh(z.detach()[:, i] + shift)
        expected.append(half * (1 - t**2) / (level // 2))
    torch.testing.assert_close(z.grad, torch.stack(expected, -1))


@pytest.mark.parametrize("dtype", DTYPES)
def test_fsq_and_lfq_dtypes(dtype):
    z = (torch.randn(50, 4, generator=_gen(2)) * 2).to(dtype)
    z_q, idx = hg.vq.fsq(z, (5, 5, 4, 3))
    assert z_q.dtype == dtype
    assert torch.equal(z_q, hg.vq.fsq_indices_to_codes(idx, (5, 5, 4, 3), dtype=dtype))
    b, bidx = hg.vq.lfq(z)
    assert b.dtype == dtype and torch.equal(b, hg.vq.lfq_indices_to_codes(bidx, 4, dtype=dtype))


def _fsq_reference(z, levels, dim):
    """FSQ written out with torch's own ops (the channels moved last, the STE round as
    the detach trick, + 0.0 for the codes of -0.0), in the compute dtype."""
    compute = torch.float64 if z.dtype == torch.float64 else torch.float32
    half = torch.tensor([(v - 1) / 2 for v in levels], dtype=torch.float64)
    offset = torch.tensor([0.5 if v % 2 == 0 else 0.0 for v in levels], dtype=torch.float64)
    bound = half * (1 + 1e-3)
    shift = torch.atanh(offset / bound)
    width = torch.tensor([v // 2 for v in levels], dtype=torch.float64)
    bound, offset, shift, width = (t.to(compute) for t in (bound, offset, shift, width))
    b = bound * torch.tanh(z.movedim(dim, -1).to(compute) + shift) - offset
    r = b + (torch.round(b) - b).detach()
    return (r / width + 0.0).to(z.dtype).movedim(-1, dim)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_fsq_matches_the_written_out_formula_bit_for_bit(dtype, dim):
    """Values and gradients equal the formula done with torch's ops, for the channels in
    every position (the lean path moves nothing when they are last), and no code is -0.0
    (channels whose b rounds to -0.0: b in (-0.5, 0))."""
    levels = (8, 5, 3)
    shape = [6, 7, 5]
    shape[dim] = 3
    z = (torch.randn(shape, generator=_gen(11)) * 2).to(dtype)
    z.view(-1)[:20] = -0.05  # tanh(-0.05 + s) scaled: b in (-0.5, 0) for the odd levels
    z_q, idx = hg.vq.fsq(z.requires_grad_(), levels, dim=dim)
    zr = z.detach().clone().requires_grad_()
    expected = _fsq_reference(zr, levels, dim)
    assert torch.equal(z_q, expected)
    assert not torch.signbit(z_q[z_q == 0]).any()
    g = torch.randn(z_q.shape, generator=_gen(12)).to(dtype)
    (mine,) = torch.autograd.grad(z_q, z, g)
    (theirs,) = torch.autograd.grad(expected, zr, g)
    assert torch.equal(mine, theirs)
    assert torch.equal(hg.vq.fsq_indices_to_codes(idx, levels, dim=dim, dtype=dtype), z_q)


def test_fsq_module_no_grad_inference_and_transforms_agree():
    """The in-place + 0 of eager mode and the functional one elsewhere give the same codes:
    grad mode on and off, inference mode, vmap, torch.func.grad, the module with the
    channels first."""
    levels = (7, 4)
    z = torch.full((5, 2), -0.05)
    z[:, 1] = torch.linspace(-2, 2, 5)
    with_grad, idx = hg.vq.fsq(z.clone().requires_grad_(), levels)
    with torch.no_grad():
        no_grad, _ = hg.vq.fsq(z, levels)
    with torch.inference_mode():
        inference, _ = hg.vq.fsq(z, levels)
    batched = vmap(lambda row: hg.vq.fsq(row, levels)[0])(z)
    for other in (no_grad, inference, batched):
        assert torch.equal(other, with_grad.detach())
        assert torch.equal(torch.signbit(other), torch.signbit(with_grad.detach()))
    assert not torch.signbit(with_grad[:, 0]).any()  # round(b) = -0.0 there
    g = grad(lambda t: hg.vq.fsq(t, levels)[0].sum())(z)
    t = z.clone().requires_grad_()
    hg.vq.fsq(t, levels)[0].sum().backward()
    assert torch.equal(g, t.grad)
    module = hg.nn.FSQ(levels, channel_dim=0)
    first, idx_first = module(z.T.contiguous())
    assert torch.equal(first, with_grad.detach().T) and torch.equal(idx_first, idx)


def test_lfq_sign_index_and_straight_through():
    z = torch.tensor([[0.3, -1.2, 0.0, -0.0]], requires_grad=True)
    z_q, idx = hg.vq.lfq(z)
    assert z_q.tolist() == [[1.0, -1.0, 1.0, 1.0]] and idx.tolist() == [1 + 4 + 8]
    z_q.sum().backward()
    assert z.grad.tolist() == [[1.0, 1.0, 1.0, 1.0]]


def test_lfq_entropy_against_enumeration():
    z = torch.randn(16, 3, generator=_gen(5), dtype=torch.float64) * 0.7
    tau = 0.8
    per_sample, codebook = hg.vq.lfq_entropy(z, tau=tau)
    codes = torch.tensor(
        [[1.0 if (k >> i) & 1 else -1.0 for i in range(3)] for k in range(8)], dtype=torch.float64
    )
    q = torch.softmax(-((z[:, None] - codes[None]) ** 2).sum(-1) / tau, -1)  # (N, 8)
    ent = -(q * q.log()).sum(-1).mean()
    mean_q = q.mean(0)
    torch.testing.assert_close(per_sample, ent)
    torch.testing.assert_close(codebook, -(mean_q * mean_q.log()).sum())
