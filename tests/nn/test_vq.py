"""hg.nn.VectorQuantize, FSQ and LFQ: losses, EMA with Laplace smoothing against a float64
reference, training vs eval, dead-code restarts, k-means, checkpoints, two gloo ranks."""

from __future__ import annotations

import datetime
import functools
import io
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import hardgrad as hg
from _spawn import run_ranks


def _batch(n: int = 32, d: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed))


def _ema_reference(codebook, cluster, embed, z, decay, eps):
    """One EMA step in float64, written out."""
    k = codebook.shape[0]
    d2 = ((z[:, None].double() - codebook[None].double()) ** 2).sum(-1)
    idx = d2.argmin(-1)
    onehot = F.one_hot(idx, k).double()
    n = onehot.sum(0)
    cluster = decay * cluster.double() + (1 - decay) * n
    embed = decay * embed.double() + (1 - decay) * onehot.T @ z.double()
    total = cluster.sum()
    smoothed = (cluster + eps) / (total + k * eps) * total
    return embed / smoothed[:, None], cluster, embed, idx


def test_loss_mode_losses_and_gradients():
    torch.manual_seed(0)
    vq = hg.nn.VectorQuantize(6, 4, commitment_weight=0.3)
    z = _batch().requires_grad_()
    _, idx, loss = vq(z)
    rows = vq.codebook.detach()[idx]
    expected = 0.3 * ((z.detach() - rows) ** 2).mean() + ((rows - z.detach()) ** 2).mean()
    torch.testing.assert_close(loss, expected)
    loss.backward()
    # codebook loss gradient: 2 (c_k - z) / numel summed per code; commitment to z
    g = torch.zeros_like(vq.codebook).index_add_(0, idx, 2 * (rows - z.detach()) / z.numel())
    torch.testing.assert_close(vq.codebook.grad, g)
    torch.testing.assert_close(z.grad, 0.3 * 2 * (z.detach() - rows) / z.numel())


def _general_st_forward(vq, z, *, d):
    """The straight-through VQ layer with the codebook loss written from the public pieces:
    hg.vector_quantize for (z_q, indices), then the commitment and codebook losses."""
    codebook = vq.codebook.to(z.dtype)
    z_q, indices = hg.vector_quantize(z, codebook, dim=d, estimator="st", distance=vq.distance)
    compute = torch.float32 if z.dtype in (torch.float16, torch.bfloat16) else z.dtype
    loss = vq.commitment_weight * F.mse_loss(z.to(compute), z_q.detach().to(compute))
    rows = F.embedding(indices.reshape(-1), codebook).reshape(*indices.shape, vq.dim)
    rows = rows.movedim(-1, d)
    return z_q, indices, loss + F.mse_loss(rows.to(compute), z.detach().to(compute))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize(
    ("shape", "channel_dim"), [((64, 16, 8), -1), ((4, 8, 6, 5), 1), ((3, 8), -1)]
)
@pytest.mark.parametrize("distance", ["l2", "cosine"])
def test_the_straight_through_layer_equals_its_public_pieces(dtype, shape, channel_dim, distance):
    """The layer's one-gather straight-through path (estimator "st", codebook loss): z_q,
    indices, loss, the usage counts and the gradients to z and the codebook equal those of
    hg.vector_quantize plus the written-out losses bit for bit, on the native copy route
    (small z) and the Function route (65,536 elements and more), channels last and not."""
    g = torch.Generator().manual_seed(3)
    for scale in (1, 128):  # 128: above NATIVE_VALUE_MAX_NUMEL for the larger shapes
        sizes = (shape[0] * scale, *shape[1:])
        torch.manual_seed(0)
        vq = hg.nn.VectorQuantize(12, 8, distance=distance, channel_dim=channel_dim)
        with torch.no_grad():
            vq.codebook.normal_(generator=g)
        z = torch.randn(sizes, generator=g).to(dtype).requires_grad_()
        weights = torch.randn(sizes, generator=g).to(dtype)
        d = channel_dim % z.dim()
        results = []
        for forward in (vq, functools.partial(_general_st_forward, vq, d=d)):
            z_q, indices, loss = forward(z)
            total = (z_q.float() * weights.float()).sum() + loss
            grads = torch.autograd.grad(total, (z, vq.codebook))
            results.append((z_q.detach(), indices, loss.detach(), *grads))
        counts = vq.batch_counts.clone()
        for a, b in zip(*results, strict=True):
            assert a.dtype == b.dtype and torch.equal(a, b)
        assert torch.equal(counts, torch.bincount(results[1][1].reshape(-1), minlength=12).float())


def test_ema_update_matches_float64_reference_and_eval_freezes():
    torch.manual_seed(1)
    vq = hg.nn.VectorQuantize(5, 3, codebook_update="ema", decay=0.9, eps=1e-3)
    assert not any(True for _ in vq.parameters())
    c, cl, em = vq.codebook.clone(), vq.cluster_size.clone(), vq.embed_sum.clone()
    for step in range(3):
        z = _batch(20, 3, seed=step)
        _, idx, _ = vq(z)
        c, cl, em, ref_idx = _ema_reference(c, cl, em, z, 0.9, 1e-3)
        assert torch.equal(idx, ref_idx)
        torch.testing.assert_close(vq.codebook.double(), c, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(vq.cluster_size.double(), cl)
    vq.eval()
    before = {k: v.clone() for k, v in vq.state_dict().items() if isinstance(v, torch.Tensor)}
    vq(_batch(20, 3, seed=9))
    for key, value in before.items():
        assert torch.equal(vq.state_dict()[key], value), key


def test_metrics():
    vq = hg.nn.VectorQuantize(4, 2)
    with torch.no_grad():
        vq.codebook.copy_(torch.tensor([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [9.0, 9.0]]))
    vq(torch.tensor([[0.1, 0.0], [0.0, 0.2], [9.5, 0.0], [9.5, 0.5]]))
    assert float(vq.usage) == 0.5 and abs(float(vq.perplexity) - 2.0) < 1e-6
    assert vq.batch_counts.tolist() == [2.0, 2.0, 0.0, 0.0]


def test_metrics_follow_the_last_batch_in_both_modes_and_stay_out_of_checkpoints():
    """usage/perplexity are read from the last forward's counts (eval mode too), before
    any forward they are codebook_usage of no indices (0 and 1), and neither they nor the
    counts are saved."""
    vq = hg.nn.VectorQuantize(8, 3)
    assert float(vq.usage) == 0.0 and float(vq.perplexity) == 1.0
    for training in (True, False):
        vq.train(training)
        z = _batch(50, 3, seed=4 + training)
        _, indices, _ = vq(z)
        usage, perplexity = hg.vq.codebook_usage(indices, 8)
        assert torch.equal(vq.batch_counts, torch.bincount(indices, minlength=8).float())
        assert torch.equal(vq.usage, usage) and torch.equal(vq.perplexity, perplexity)
    assert not {"batch_counts", "usage", "perplexity"} & set(vq.state_dict())


def test_dead_code_restart_uses_the_module_generator():
    def run(seed):
        torch.manual_seed(0)
        vq = hg.nn.VectorQuantize(16, 2, dead_code_threshold=0.6, decay=0.5, seed=seed)
        z = _batch(8, 2, seed=3) + 100.0  # far from every initial code
        vq(z)
        return vq, z

    a, z = run(1)
    b, _ = run(1)
    c, _ = run(2)
    assert torch.equal(a.codebook, b.codebook) and not torch.equal(a.codebook, c.codebook)
    restarted = a.cluster_size >= 0.6
    assert int(restarted.sum()) > 8  # most codes were dead and now sit on batch vectors
    on_batch = (a.codebook.detach()[:, None] == z[None]).all(-1).any(-1)
    assert bool(on_batch[a.cluster_size == 0.6].all())
    # the generator state travels in checkpoints
    state = a.state_dict()
    d = hg.nn.VectorQuantize(16, 2, dead_code_threshold=0.6, decay=0.5, seed=7)
    d.load_state_dict(state)
    assert torch.equal(d.generator.get_state(), a.generator.get_state())


def test_kmeans_init():
    torch.manual_seed(0)
    centers = torch.tensor([[5.0, 5.0], [-5.0, 5.0], [0.0, -5.0]])
    z = (centers[None] + 0.1 * torch.randn(50, 3, 2)).reshape(-1, 2)
    vq = hg.nn.VectorQuantize(3, 2, kmeans_init=True, kmeans_iters=10, seed=0)
    assert not vq.initialized
    vq(z)
    assert vq.initialized
    found = sorted(map(tuple, vq.codebook.detach().round().tolist()))
    assert found == sorted(map(tuple, centers.tolist()))


def test_channel_dim_and_half_precision():
    torch.manual_seed(0)
    vq = hg.nn.VectorQuantize(8, 3, channel_dim=1, estimator="rotation")
    z = torch.randn(2, 3, 5).to(torch.bfloat16).requires_grad_()
    z_q, idx, loss = vq(z)
    assert z_q.shape == z.shape and z_q.dtype == torch.bfloat16 and idx.shape == (2, 5)
    assert torch.equal(z_q.detach(), vq.codebook.detach().to(torch.bfloat16)[idx].movedim(-1, 1))
    loss.backward()
    assert torch.isfinite(z.grad.float()).all()


def test_bad_arguments():
    with pytest.raises(ValueError, match="`num_codes` >= 2"):
        hg.nn.VectorQuantize(1, 4)
    with pytest.raises(ValueError, match="`codebook_update`"):
        hg.nn.VectorQuantize(4, 4, codebook_update="kmeans")
    with pytest.raises(ValueError, match="`decay` in"):
        hg.nn.VectorQuantize(4, 4, decay=1.0)
    with pytest.raises(ValueError, match=r"z.shape\[1\] == 4"):
        hg.nn.VectorQuantize(4, 4)(torch.randn(3, 5))
    with pytest.raises(ValueError, match="`estimator`"):
        hg.nn.VectorQuantize(4, 4, estimator="bogus")
    with pytest.raises(ValueError, match="`levels`"):
        hg.nn.FSQ([5, 1])
    with pytest.raises(ValueError, match=r"len\(levels\)"):
        hg.nn.FSQ([5, 5])(torch.randn(2, 3))


def test_checkpoint_round_trip_refuses_other_settings():
    torch.manual_seed(0)
    vq = hg.nn.VectorQuantize(8, 2, codebook_update="ema")
    vq(_batch(10, 2))
    buffer = io.BytesIO()
    torch.save(vq.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    other = hg.nn.VectorQuantize(8, 2, codebook_update="ema")
    other.load_state_dict(state)
    assert torch.equal(other.codebook, vq.codebook)
    with pytest.raises(RuntimeError, match="decay"):
        hg.nn.VectorQuantize(8, 2, codebook_update="ema", decay=0.5).load_state_dict(state)


def test_fsq_and_lfq_modules():
    fsq = hg.nn.FSQ([8, 5, 5], channel_dim=1)
    z = torch.randn(2, 3, 4, requires_grad=True)
    z_q, idx = fsq(z)
    assert idx.shape == (2, 4) and torch.equal(fsq.indices_to_codes(idx), z_q.detach())
    assert torch.equal(fsq.codes_to_indices(z_q), idx)
    lfq = hg.nn.LFQ(4, entropy_weight=0.1, diversity_gamma=1.0, commitment_weight=0.0)
    z = torch.randn(64, 4, requires_grad=True)
    z_q, idx, loss = lfq(z)
    per_sample, codebook = hg.vq.lfq_entropy(z)
    torch.testing.assert_close(loss, 0.1 * (per_sample - codebook))
    loss.backward()
    assert torch.isfinite(z.grad).all() and z.grad.abs().sum() > 0


# --------------------------------------------------------------------------- two gloo ranks

WORLD, STEPS = 2, 3


def _global_batch(step: int) -> torch.Tensor:
    return _batch(16, 3, seed=100 + step)


def _train(rank: int, world: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    vq = hg.nn.VectorQuantize(
        6, 3, codebook_update="ema", decay=0.8, dead_code_threshold=0.3, seed=3
    )
    for step in range(STEPS):
        z = _global_batch(step).chunk(world)[rank]
        vq(z)
    return {k: v.clone() for k, v in vq.state_dict().items() if isinstance(v, torch.Tensor)}


def _worker(rank: int, world: int, store: str, outdir: str) -> None:
    torch.set_num_threads(1)
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{store}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )  # fmt: skip
    try:
        torch.save(_train(rank, world), Path(outdir) / f"rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.distributed
def test_ema_under_two_gloo_ranks_matches_one_process(tmp_path):
    run_ranks(
        _worker,
        (WORLD, str(tmp_path / "store"), str(tmp_path)),
        WORLD,
        lambda: all((tmp_path / f"rank{r}.pt").exists() for r in range(WORLD)),
    )
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(WORLD)]
    single = _train(0, 1)
    for key in ("codebook", "cluster_size", "embed_sum"):
        assert torch.equal(ranks[0][key], ranks[1][key]), key  # identical across ranks
        torch.testing.assert_close(ranks[0][key], single[key]), key


def test_a_stochastic_estimator_samples_in_training_and_takes_the_nearest_code_in_eval():
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(64, 3, generator=gen)
    q = hg.nn.VectorQuantize(8, 3, estimator="gumbel", tau=5.0)
    nearest = torch.cdist(z, q.codebook.detach()).argmin(-1)
    _, sampled, _ = q(z)
    assert not torch.equal(sampled, nearest)  # a high temperature: many codes are not the nearest
    q.eval()
    z_q, chosen, _ = q(z)
    assert torch.equal(chosen, nearest) and torch.equal(z_q, q.codebook.detach()[nearest])
