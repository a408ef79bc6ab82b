"""hg.nn.VectorQuantize's options (issue 42): padding masks against a float64 reference that
drops the masked rows, init_codebook and init_cluster_size, multi-head codebooks (shared
and separate) and the in/out projections, each against a float64 reference written here;
compile with a changing batch, dtypes, bad input, empty batches."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import hardgrad as hg


def _nearest(z, codebook):
    return ((z[:, None] - codebook[None]) ** 2).sum(-1).argmin(-1)


def _ema_step(codebook, cluster, embed, z, decay, eps):
    """One EMA step over the rows of z (float64, written out)."""
    k = codebook.shape[0]
    idx = _nearest(z, codebook)
    onehot = F.one_hot(idx, k).double()
    cluster = decay * cluster + (1 - decay) * onehot.sum(0)
    embed = decay * embed + (1 - decay) * onehot.T @ z
    total = cluster.sum()
    smoothed = (cluster + eps) / (total + k * eps) * total
    return embed / smoothed[:, None], cluster, embed, idx


def _masked_batch(seed=0, b=4, t=6, d=3):
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(b, t, d, generator=g, dtype=torch.float64)
    lengths = torch.tensor([6, 3, 1, 0])[:b]
    mask = torch.arange(t)[None] < lengths[:, None]
    z[~mask] = 100.0  # padding far from everything: it would win codes and restarts
    return z, mask


@pytest.mark.parametrize("estimator", ["st", "rotation"])
@pytest.mark.parametrize("codebook_update", ["loss", "ema"])
def test_mask_equals_a_reference_that_drops_the_masked_rows(estimator, codebook_update):
    z, mask = _masked_batch()
    torch.manual_seed(0)
    vq = hg.nn.VectorQuantize(
        5,
        3,
        estimator=estimator,
        codebook_update=codebook_update,
        decay=0.8,
        commitment_weight=0.3,
    ).double()
    codebook = vq.codebook.detach().clone()
    z = z.requires_grad_()
    z_q, indices, loss = vq(z, mask)
    kept = z.detach()[mask]
    idx = _nearest(z.detach().reshape(-1, 3), codebook).reshape(4, 6)
    assert torch.equal(indices, idx)  # masked positions still quantized
    assert torch.equal(z_q.detach(), codebook[idx])
    rows = codebook[idx[mask]]
    commit = ((kept - rows) ** 2).mean()
    expected = 0.3 * commit + (commit if codebook_update == "loss" else 0.0)
    torch.testing.assert_close(loss, expected)
    weights = torch.randn(z.shape, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    (z_q * weights).sum().add(loss).backward()
    assert torch.equal(z.grad[~mask], torch.zeros_like(z.grad[~mask]))
    commit_grad = 0.3 * 2 * (kept - rows) / kept.numel()
    if estimator == "st":
        torch.testing.assert_close(z.grad[mask], weights[mask] + commit_grad)
    counts = torch.bincount(idx[mask], minlength=5).double()
    assert torch.equal(vq.batch_counts, counts)
    if codebook_update == "ema":
        c, cl, _, _ = _ema_step(
            codebook, torch.ones(5, dtype=torch.float64), codebook.clone(), kept, 0.8, 1e-5
        )
        torch.testing.assert_close(vq.codebook, c)
        torch.testing.assert_close(vq.cluster_size, cl)
    else:
        grad = torch.zeros_like(codebook).index_add_(0, idx[mask], 2 * (rows - kept) / kept.numel())
        torch.testing.assert_close(vq.codebook.grad, grad)


def test_mask_keeps_padding_out_of_restarts_and_kmeans():
    z, mask = _masked_batch(1)
    vq = hg.nn.VectorQuantize(4, 3, kmeans_init=True, dead_code_threshold=2.0).double()
    vq(z, mask)
    assert vq.initialized and bool((vq.codebook.abs() < 50).all())
    vq2 = hg.nn.VectorQuantize(4, 3, dead_code_threshold=5.0, codebook_update="ema").double()
    vq2(z, mask)  # every code below 5: restarted from the 10 unmasked rows only
    assert bool((vq2.codebook.abs() < 50).all())
    nothing = torch.zeros_like(mask)
    vq3 = hg.nn.VectorQuantize(4, 3, kmeans_init=True, dead_code_threshold=5.0).double()
    _, _, loss = vq3(z, nothing)
    assert (
        not vq3.initialized and float(loss.detach()) == 0.0 and float(vq3.batch_counts.sum()) == 0.0
    )


def test_mask_bad_input():
    vq = hg.nn.VectorQuantize(4, 3)
    z = torch.randn(2, 5, 3)
    with pytest.raises(TypeError, match="`mask`"):
        vq(z, torch.ones(2, 5))
    with pytest.raises(ValueError, match="`mask`"):
        vq(z, torch.ones(2, 5, 3, dtype=torch.bool))
    empty = vq(torch.randn(0, 5, 3), torch.ones(0, 5, dtype=torch.bool))
    assert empty[1].shape == (0, 5) and float(empty[2].detach()) == 0.0


def test_init_codebook_is_checked_cast_and_copied_and_cluster_size_can_start_at_zero():
    init = torch.randn(6, 2, dtype=torch.float64)
    vq = hg.nn.VectorQuantize(
        6, 2, init_codebook=init, codebook_update="ema", init_cluster_size=0.0
    )
    assert vq.codebook.dtype == torch.float32 and torch.equal(vq.codebook, init.float())
    init.zero_()
    assert not torch.equal(vq.codebook, init.float())  # a copy
    assert torch.equal(vq.cluster_size, torch.zeros(6)) and torch.equal(
        vq.embed_sum, torch.zeros(6, 2)
    )
    start = vq.codebook.clone()
    with torch.no_grad():
        vq.codebook.zero_()
    vq.reset_parameters()
    assert torch.equal(vq.codebook, start)
    # zero start: a used code jumps to its batch mean, an unused one to the origin
    z = torch.randn(40, 2, generator=torch.Generator().manual_seed(0))
    _, idx, _ = vq(z)
    c, _, _, ref = _ema_step(
        start.double(), torch.zeros(6).double(), torch.zeros(6, 2).double(), z.double(), 0.99, 1e-5
    )
    assert torch.equal(idx, ref)
    torch.testing.assert_close(vq.codebook.double(), c, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="`init_codebook`"):
        hg.nn.VectorQuantize(6, 2, init_codebook=torch.randn(5, 2))
    with pytest.raises(TypeError, match="`init_codebook`"):
        hg.nn.VectorQuantize(6, 2, init_codebook=torch.ones(6, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="`init_codebook`"):
        hg.nn.VectorQuantize(6, 2, init_codebook=torch.full((6, 2), float("nan")))
    with pytest.raises(ValueError, match="`init_cluster_size`"):
        hg.nn.VectorQuantize(6, 2, init_cluster_size=-1.0)


@pytest.mark.parametrize("separate", [False, True])
def test_heads_against_a_float64_reference(separate):
    g = torch.Generator().manual_seed(0)
    shape = (3, 7, 4) if separate else (7, 4)
    init = torch.randn(shape, generator=g, dtype=torch.float64)
    vq = hg.nn.VectorQuantize(
        7,
        8,
        heads=3,
        codebook_dim=4,
        separate_codebook_per_head=separate,
        init_codebook=init,
        codebook_update="ema",
        decay=0.5,
    ).double()
    assert vq.project_in is not None and vq.project_in.out_features == 12
    z = torch.randn(5, 2, 8, generator=g, dtype=torch.float64, requires_grad=True)
    z_q, indices, loss = vq(z)
    assert indices.shape == (5, 2, 3)
    x = F.linear(z.detach(), vq.project_in.weight, vq.project_in.bias).reshape(10, 3, 4)
    books = init if separate else init.expand(3, 7, 4)
    idx = torch.stack([_nearest(x[:, h], books[h]) for h in range(3)], -1)
    assert torch.equal(indices.reshape(10, 3), idx)
    codes = torch.stack([books[h][idx[:, h]] for h in range(3)], 1)
    out = F.linear(codes.reshape(10, 12), vq.project_out.weight, vq.project_out.bias)
    torch.testing.assert_close(z_q.detach(), out.reshape(5, 2, 8))
    torch.testing.assert_close(loss, 0.25 * ((x - codes) ** 2).mean())
    # the EMA statistics: per head (separate) or of all heads' rows (shared)
    if separate:
        for h in range(3):
            c, cl, _, _ = _ema_step(
                init[h], torch.ones(7).double(), init[h].clone(), x[:, h], 0.5, 1e-5
            )
            torch.testing.assert_close(vq.codebook[h], c)
            torch.testing.assert_close(vq.cluster_size[h], cl)
    else:
        c, cl, _, _ = _ema_step(
            init, torch.ones(7).double(), init.clone(), x.reshape(30, 4), 0.5, 1e-5
        )
        torch.testing.assert_close(vq.codebook, c)
    # straight through the heads and the projections: dz = W_in^T W_out^T w + commitment
    w = torch.randn(z.shape, generator=g, dtype=torch.float64)
    (z_q * w).sum().add(loss).backward()
    upstream = (
        w.reshape(10, 8) @ vq.project_out.weight
        + 0.25 * 2 * (x - codes).reshape(10, 12) / x.numel()
    )
    torch.testing.assert_close(z.grad.reshape(10, 8), upstream @ vq.project_in.weight)


def test_heads_split_without_projection_and_masks():
    vq = hg.nn.VectorQuantize(5, 6, heads=2, separate_codebook_per_head=True).double()
    assert vq.project_in is None and vq.codebook.shape == (2, 5, 3)
    z, mask = _masked_batch(2, d=6)
    _, indices, _ = vq(z, mask)
    assert indices.shape == (4, 6, 2)
    for h in range(2):
        part = z[..., 3 * h : 3 * h + 3].reshape(-1, 3)
        assert torch.equal(indices[..., h].reshape(-1), _nearest(part, vq.codebook[h].detach()))
        counts = torch.bincount(indices[..., h][mask], minlength=5).double()
        assert torch.equal(vq.batch_counts[h], counts)
    assert "heads=2" in repr(vq)
    with pytest.raises(ValueError, match="`dim`"):
        hg.nn.VectorQuantize(5, 7, heads=2)
    with pytest.raises(TypeError, match="separate_codebook_per_head"):
        hg.nn.VectorQuantize(5, 6, heads=2, separate_codebook_per_head=1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_options_in_half_and_single_precision(dtype):
    vq = hg.nn.VectorQuantize(6, 8, heads=2, codebook_dim=3, estimator="rotation")
    z = torch.randn(4, 5, 8).to(dtype).requires_grad_()
    mask = torch.rand(4, 5, generator=torch.Generator().manual_seed(0)) > 0.3
    z_q, indices, loss = vq(z, mask)
    assert z_q.dtype == dtype and loss.dtype == torch.float32 and indices.shape == (4, 5, 2)
    (z_q.float().sum() + loss).backward()
    assert torch.isfinite(z.grad).all()


@pytest.mark.slow
@pytest.mark.compile
def test_options_compile_with_a_changing_batch():
    torch.manual_seed(0)
    vq = hg.nn.VectorQuantize(
        6, 8, heads=2, separate_codebook_per_head=True, codebook_dim=3, codebook_update="ema"
    )
    eager = hg.nn.VectorQuantize(
        6, 8, heads=2, separate_codebook_per_head=True, codebook_dim=3, codebook_update="ema"
    )
    eager.load_state_dict(vq.state_dict())
    compiled = torch.compile(vq, dynamic=True, fullgraph=False)
    for n in (3, 5, 9):
        z = torch.randn(n, 4, 8, generator=torch.Generator().manual_seed(n))
        mask = torch.arange(4)[None].expand(n, 4) < 3
        a, b = compiled(z, mask), eager(z, mask)
        for x, y in zip(a, b, strict=True):
            torch.testing.assert_close(x, y)
        torch.testing.assert_close(vq.codebook, eager.codebook)


def test_torch_func_grad_through_masked_heads_and_residual_stages_in_eval():
    """torch.func.grad of a loss of z_q in eval mode, the module's buffers passed in with
    functional_call (a forward writes the usage counts): the masked positions get 0, the
    rest the straight-through gradient (the heads split and merge)."""
    torch.manual_seed(0)
    vq = hg.nn.VectorQuantize(6, 4, heads=2).double().eval()
    rvq = hg.nn.ResidualVQ(2, 6, 4).double().eval()
    z = torch.randn(3, 5, 4, dtype=torch.float64)
    mask = torch.arange(5)[None].expand(3, 5) < 4
    for module in (vq, rvq):
        state = {k: v.clone() for k, v in module.named_buffers()}

        def loss(x, buffers, m=module):
            return torch.func.functional_call(m, buffers, (x, mask))[0].square().sum()

        grad = torch.func.grad(loss)(z, state)
        z_q = module(z, mask)[0]
        assert torch.equal(grad[~mask], torch.zeros_like(grad[~mask]))
        torch.testing.assert_close(grad[mask], 2 * z_q[mask])
