"""hg.nn.LFQ's options (issue 42): several codebooks (num_codebooks) and the entropies from
a drawn fraction of the vectors (frac_per_sample_entropy), against a float64 reference
that enumerates each codebook's codes; seeded draws, compile, dtypes, bad input."""

from __future__ import annotations

import itertools

import pytest
import torch

import hardgrad as hg


def _entropies(rows, tau):
    """Per-sample and codebook entropy of one codebook's (N, d) rows, float64, by
    enumerating the 2^d codes: q(c | z) = softmax(-|z - c|^2 / tau)."""
    rows = rows.double()
    codes = torch.tensor(list(itertools.product([-1.0, 1.0], repeat=rows.shape[1])))
    q = torch.softmax(-((rows[:, None] - codes.double()[None]) ** 2).sum(-1) / tau, -1)
    per_sample = -(q * q.log()).sum(-1).mean()
    mean = q.mean(0)
    return per_sample, -(mean * mean.log()).sum()


def _reference_loss(z, groups, tau, gamma, w_h, beta):
    rows = z.detach().double().reshape(-1, groups, z.shape[-1] // groups)
    parts = [_entropies(rows[:, g], tau) for g in range(groups)]
    per_sample = sum(p[0] for p in parts) / groups
    codebook = sum(p[1] for p in parts) / groups
    commit = ((z.detach().double() - torch.where(z.detach() >= 0, 1.0, -1.0).double()) ** 2).mean()
    return w_h * (per_sample - gamma * codebook) + beta * commit


def test_several_codebooks_against_the_float64_reference():
    z = torch.randn(7, 3, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    z.requires_grad_()
    lfq = hg.nn.LFQ(6, num_codebooks=3, tau=0.7, diversity_gamma=0.5, entropy_weight=0.2)
    z_q, indices, loss = lfq(z)
    assert indices.shape == (7, 3, 3) and lfq.codebook_size == 4
    bits = (z.detach() >= 0).long().reshape(7, 3, 3, 2)
    assert torch.equal(indices, bits[..., 0] + 2 * bits[..., 1])
    assert torch.equal(z_q.detach(), torch.where(z.detach() >= 0, 1.0, -1.0).double())
    assert torch.equal(lfq.indices_to_codes(indices, dtype=torch.float64), z_q.detach())
    expected = _reference_loss(z, 3, 0.7, 0.5, 0.2, 0.25)
    torch.testing.assert_close(loss, expected)
    # the gradient of the loss: against the reference's, by autograd in float64
    (mine,) = torch.autograd.grad(loss, z)
    zr = z.detach().clone().requires_grad_()
    rows = zr.reshape(-1, 3, 2)
    parts = [_entropies(rows[:, g], 0.7) for g in range(3)]
    ref = 0.2 * (sum(p[0] - 0.5 * p[1] for p in parts) / 3)
    ref = ref + 0.25 * ((zr - torch.where(zr.detach() >= 0, 1.0, -1.0)) ** 2).mean()
    (theirs,) = torch.autograd.grad(ref, zr)
    torch.testing.assert_close(mine, theirs)
    assert "num_codebooks=3" in repr(lfq)


def test_frac_per_sample_entropy_uses_a_seeded_subset_in_training_only():
    z = torch.randn(40, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    lfq = hg.nn.LFQ(4, frac_per_sample_entropy=0.25, seed=3)
    _, _, loss = lfq(z)
    pick = torch.randperm(40, generator=torch.Generator().manual_seed(3))[:10]
    per_sample, codebook = _entropies(z[pick], 1.0)
    commit = ((z - torch.where(z >= 0, 1.0, -1.0)) ** 2).mean()
    torch.testing.assert_close(loss, 0.1 * (per_sample - codebook) + 0.25 * commit)
    again = hg.nn.LFQ(4, frac_per_sample_entropy=0.25, seed=3)(z)[2]
    assert torch.equal(loss, again)
    lfq.eval()  # evaluation: every vector
    torch.testing.assert_close(lfq(z)[2], _reference_loss(z, 1, 1.0, 1.0, 0.1, 0.25))
    tiny = hg.nn.LFQ(4, frac_per_sample_entropy=0.01)(z[:3])[2]  # at least one vector
    assert torch.isfinite(tiny)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_dtypes_and_empty(dtype):
    lfq = hg.nn.LFQ(8, num_codebooks=2, frac_per_sample_entropy=0.5, channel_dim=1)
    z = torch.randn(5, 8, 3).to(dtype).requires_grad_()
    z_q, indices, loss = lfq(z)
    assert z_q.dtype == dtype and indices.shape == (5, 3, 2) and loss.dtype == torch.float32
    assert torch.equal(lfq.indices_to_codes(indices, dtype=dtype), z_q.detach())
    (z_q.float().sum() + loss).backward()
    assert torch.isfinite(z.grad).all()
    empty = lfq(torch.zeros(0, 8, 3, dtype=dtype))
    assert empty[1].shape == (0, 3, 2) and float(empty[2]) == 0.0


@pytest.mark.slow
@pytest.mark.compile
def test_compile_with_a_changing_batch():
    lfq = hg.nn.LFQ(6, num_codebooks=2)
    compiled = torch.compile(lfq, dynamic=True)
    for n in (3, 5, 8):
        z = torch.randn(n, 6, generator=torch.Generator().manual_seed(n))
        for a, b in zip(compiled(z), lfq(z), strict=True):
            torch.testing.assert_close(a, b)


def test_bad_arguments():
    with pytest.raises(ValueError, match="`dim`"):
        hg.nn.LFQ(5, num_codebooks=2)
    with pytest.raises(ValueError, match="`frac_per_sample_entropy`"):
        hg.nn.LFQ(4, frac_per_sample_entropy=0.0)
    with pytest.raises(TypeError, match="`num_codebooks`"):
        hg.nn.LFQ(4, num_codebooks=2.0)
    assert hg.nn.LFQ(100, num_codebooks=2).codebook_size == 2**50


def test_codebook_scale_against_the_float64_formula():
    """Codes +-s: values, the unscaled straight-through gradient, the entropies of the
    assignment to the scaled codes and the commitment to them, all from float64 here."""
    s, tau = 0.5, 0.7
    z = torch.randn(40, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    z.requires_grad_()
    lfq = hg.nn.LFQ(4, num_codebooks=2, codebook_scale=s, tau=tau, diversity_gamma=0.8)
    z_q, indices, loss = lfq(z)
    signs = torch.where(z.detach() >= 0, 1.0, -1.0).double()
    assert torch.equal(z_q.detach(), s * signs)
    assert torch.equal(indices, hg.nn.LFQ(4, num_codebooks=2)(z.detach())[1])
    assert torch.equal(lfq.indices_to_codes(indices, torch.float64), z_q.detach())
    rows = z.detach().reshape(-1, 2, 2)
    codes = s * torch.tensor(list(itertools.product([-1.0, 1.0], repeat=2))).double()
    per, book = [], []
    for g in range(2):
        q = torch.softmax(-((rows[:, g, None] - codes[None]) ** 2).sum(-1) / tau, -1)
        per.append(-(q * q.log()).sum(-1).mean())
        mean = q.mean(0)
        book.append(-(mean * mean.log()).sum())
    entropy = torch.stack(per).mean() - 0.8 * torch.stack(book).mean()
    want = 0.1 * entropy + 0.25 * ((z.detach() - s * signs) ** 2).mean()
    torch.testing.assert_close(loss.detach(), want)
    (grad,) = torch.autograd.grad(z_q.sum(), z)
    assert torch.equal(grad, torch.ones_like(grad))  # the identity surrogate, unscaled
    (grad,) = torch.autograd.grad(loss, z)
    z64 = z.detach().clone().requires_grad_()
    rows = z64.reshape(-1, 2, 2)
    per, book = [], []
    for g in range(2):
        q = torch.softmax(-((rows[:, g, None] - codes[None]) ** 2).sum(-1) / tau, -1)
        per.append(-(q * q.log()).sum(-1).mean())
        mean = q.mean(0)
        book.append(-(mean * mean.log()).sum())
    ref = 0.1 * (torch.stack(per).mean() - 0.8 * torch.stack(book).mean())
    ref = ref + 0.25 * ((z64 - s * signs) ** 2).mean()
    ref.backward()
    torch.testing.assert_close(grad, z64.grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_codebook_scale_dtypes_and_empty(dtype):
    z = torch.randn(16, 3, generator=torch.Generator().manual_seed(4)).to(dtype)
    for s in (0.5, 0.3, 3.0):
        z_q, _, loss = hg.nn.LFQ(3, codebook_scale=s)(z)
        assert z_q.dtype == dtype and loss.dtype == torch.float32
        signs = torch.where(z >= 0, 1.0, -1.0).double()
        assert torch.equal(z_q, (s * signs).to(dtype))
    z_q, indices, loss = hg.nn.LFQ(3, codebook_scale=0.5)(torch.zeros(0, 3, dtype=dtype))
    assert z_q.shape == (0, 3) and indices.shape == (0,) and float(loss) == 0


def test_codebook_scale_bad_input_and_compile():
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="codebook_scale"):
            hg.nn.LFQ(4, codebook_scale=bad)
    with pytest.raises(TypeError, match="codebook_scale"):
        hg.nn.LFQ(4, codebook_scale="1")
    assert "codebook_scale=0.5" in repr(hg.nn.LFQ(4, codebook_scale=0.5))


@pytest.mark.compile
def test_codebook_scale_compile_with_a_changing_batch():
    lfq = hg.nn.LFQ(4, codebook_scale=0.25)
    compiled = torch.compile(lfq, dynamic=True)
    for n in (3, 6, 11):
        z = torch.randn(n, 4, generator=torch.Generator().manual_seed(n), requires_grad=True)
        want = lfq(z)
        got = compiled(z)
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a, b)
        torch.testing.assert_close(
            torch.autograd.grad(got[2], z)[0], torch.autograd.grad(want[2], z)[0]
        )
