"""hg.nn.ResidualVQ: stage by stage against a float64 loop of VectorQuantize calls and a
written-out reference, both gradients ("total", "per_stage" with st and rotation), the
residual shrinking stage by stage, quantizer dropout (seeded), masks, projections, compile
with a changing batch, dtypes, bad input."""

from __future__ import annotations

import copy
import itertools

import pytest
import torch
import torch.nn.functional as F

import hardgrad as hg


def _nearest(r, codebook):
    return ((r[:, None] - codebook[None]) ** 2).sum(-1).argmin(-1)


def _rotation_backward(r, q, g):
    """(|q|/|r|) R^T g, R the rotation taking r/|r| to q/|q| (Fifty et al. 2024)."""
    u = r / r.norm(dim=-1, keepdim=True)
    w = q / q.norm(dim=-1, keepdim=True)
    v = (u + w) / (u + w).norm(dim=-1, keepdim=True)
    rotated = g - 2 * v * (v * g).sum(-1, keepdim=True) + 2 * u * (w * g).sum(-1, keepdim=True)
    return q.norm(dim=-1, keepdim=True) / r.norm(dim=-1, keepdim=True) * rotated


def _structured(n=256, seed=0):
    """Points on a coarse grid plus finer offsets: structure at several scales."""
    g = torch.Generator().manual_seed(seed)
    coarse = torch.randint(-2, 3, (n, 3), generator=g).double() * 4
    fine = torch.randint(-1, 2, (n, 3), generator=g).double()
    return coarse + fine + 0.1 * torch.randn(n, 3, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("codebook_update", ["ema", "loss"])
def test_stages_equal_a_float64_loop_of_vector_quantize_calls(codebook_update):
    torch.manual_seed(0)
    rvq = hg.nn.ResidualVQ(
        3,
        8,
        3,
        estimator=["st", "rotation", "st"],
        codebook_update=codebook_update,
        commitment_weight=0.5,
        decay=0.7,
    ).double()
    loop = [copy.deepcopy(layer) for layer in rvq.layers]
    books = [layer.codebook.detach().clone() for layer in rvq.layers]
    z = _structured(40).requires_grad_()
    z_q, indices, loss = rvq(z)
    residual, total, ref_loss = z.detach(), 0, 0
    for i, vq in enumerate(loop):
        q, idx, stage_loss = vq(residual)
        assert torch.equal(idx, _nearest(residual, books[i]))  # written out
        assert torch.equal(indices[:, i], idx)
        assert torch.equal(rvq.layers[i].codebook, vq.codebook)  # the same EMA / no change
        assert torch.equal(rvq.layers[i].cluster_size, vq.cluster_size)
        total = total + q.detach()
        ref_loss = ref_loss + stage_loss
        residual = residual - q.detach()
    assert torch.equal(z_q.detach(), total)
    torch.testing.assert_close(loss.detach(), ref_loss.detach())
    g = torch.randn(z.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    (z_q * g).sum().backward()
    assert torch.equal(z.grad, g)  # "total": straight through the whole sum


def test_per_stage_gradient_is_the_sum_of_the_stages_estimators():
    torch.manual_seed(0)
    rvq = hg.nn.ResidualVQ(
        3,
        8,
        3,
        estimator=["rotation", "st", "rotation"],
        gradient="per_stage",
        commitment_weight=0.0,
        codebook_update="ema",
    ).double()
    books = [layer.codebook.detach().clone() for layer in rvq.layers]
    z = _structured(30, seed=2).requires_grad_()
    z_q, _, _ = rvq(z)
    g = torch.randn(z.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    (z_q * g).sum().backward()
    residual, expected = z.detach(), torch.zeros_like(z)
    for book, name in zip(books, ["rotation", "st", "rotation"], strict=True):
        q = book[_nearest(residual, book)]
        expected += _rotation_backward(residual, q, g) if name == "rotation" else g
        residual = residual - q
    torch.testing.assert_close(z.grad, expected)


def test_each_stage_reduces_the_residual_on_structured_data():
    torch.manual_seed(0)
    rvq = hg.nn.ResidualVQ(4, 16, 3, codebook_update="ema", kmeans_init=True, decay=0.8).double()
    data = _structured(512)
    for _step in range(5):
        rvq(data)
    rvq.eval()
    _, indices, _ = rvq(data)
    norms = [float((data - rvq.decode(indices[:, :n])).norm(dim=-1).mean()) for n in range(5)]
    assert all(
        a > 1.2 * b for a, b in itertools.pairwise(norms)
    )  # measured: 9.64, 3.71, 1.55, 0.70, 0.33


def test_quantize_dropout_is_per_batch_seeded_and_marks_dropped_stages():
    def draws(seed):
        torch.manual_seed(0)
        rvq = hg.nn.ResidualVQ(
            4, 8, 3, quantize_dropout=True, quantize_dropout_cutoff_index=1, seed=seed
        )
        z = torch.randn(6, 3, generator=torch.Generator().manual_seed(0))
        out = []
        for _ in range(40):
            _z_q, indices, _ = rvq(z)
            active = (indices >= 0).all(0)
            n = int(active.sum())
            assert bool(active[:n].all()) and bool((indices[:, n:] == -1).all())
            out.append(n)
        rvq.eval()
        assert bool((rvq(z)[1] >= 0).all())  # eval: every stage
        return out

    a, b, c = draws(3), draws(3), draws(4)
    assert a == b and a != c and set(a) == {2, 3, 4}


def test_mask_projection_and_bad_input():
    torch.manual_seed(0)
    rvq = hg.nn.ResidualVQ(2, 8, 6, codebook_dim=3, codebook_update="ema").double()
    assert rvq.project_in.out_features == 3
    z = torch.randn(2, 5, 6, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True] * 5, [True, True, False, False, False]])
    z_q, indices, _loss = rvq(z, mask)
    assert z_q.shape == z.shape and indices.shape == (2, 5, 2)
    z_q.sum().backward()
    assert bool((z.grad[~mask] == 0).all()) and bool((z.grad[mask] != 0).any())
    assert float(rvq.layers[0].batch_counts.sum()) == 7.0
    with pytest.raises(ValueError, match="`estimator`"):
        hg.nn.ResidualVQ(3, 8, 2, estimator=["st", "st"])
    with pytest.raises(ValueError, match="`gradient`"):
        hg.nn.ResidualVQ(3, 8, 2, gradient="sum")
    with pytest.raises(ValueError, match="`quantize_dropout_cutoff_index`"):
        hg.nn.ResidualVQ(3, 8, 2, quantize_dropout_cutoff_index=3)
    with pytest.raises(TypeError, match="heads"):
        hg.nn.ResidualVQ(3, 8, 2, heads=2)
    with pytest.raises(ValueError, match="`dim`"):
        rvq(torch.randn(4, 5))
    empty = rvq(torch.randn(0, 6, dtype=torch.float64))
    assert empty[0].shape == (0, 6) and empty[1].shape == (0, 2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_dtypes(dtype):
    rvq = hg.nn.ResidualVQ(3, 8, 4, estimator="rotation", gradient="per_stage")
    z = torch.randn(10, 4).to(dtype).requires_grad_()
    z_q, _indices, loss = rvq(z)
    assert z_q.dtype == dtype and loss.dtype == torch.float32
    (z_q.float().sum() + loss).backward()
    assert torch.isfinite(z.grad).all()


@pytest.mark.slow
@pytest.mark.compile
def test_compile_with_a_changing_batch():
    torch.manual_seed(0)
    rvq = hg.nn.ResidualVQ(3, 8, 4, codebook_update="ema", quantize_dropout=True)
    eager = copy.deepcopy(rvq)
    compiled = torch.compile(rvq, dynamic=True)
    for n in (3, 6, 11):
        z = torch.randn(n, 4, generator=torch.Generator().manual_seed(n))
        for a, b in zip(compiled(z), eager(z), strict=True):
            torch.testing.assert_close(a, b)
    for a, b in zip(rvq.layers, eager.layers, strict=True):
        torch.testing.assert_close(a.codebook, b.codebook)


def test_state_dict_round_trip_keeps_the_dropout_generator():
    a = hg.nn.ResidualVQ(3, 8, 2, quantize_dropout=True, seed=5)
    b = hg.nn.ResidualVQ(3, 8, 2, quantize_dropout=True, seed=9)
    b.load_state_dict(a.state_dict())
    z = torch.randn(4, 2)
    assert [int((a(z)[1] >= 0).all(0).sum()) for _ in range(8)] == [
        int((b(z)[1] >= 0).all(0).sum()) for _ in range(8)
    ]
    assert F.mse_loss(a.decode(a.eval()(z)[1]), b.decode(b.eval()(z)[1])) == 0
