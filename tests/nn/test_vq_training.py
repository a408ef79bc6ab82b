"""hg.nn.VectorQuantize trained for a few steps with every estimator it accepts, both codebook
updates and dead-code restarts firing on every step: the step's forward and backward use the
codebook as it was when the step began (the EMA or restart written during the forward is
the next step's codebook), and the gradient reaching the encoder is the independent formula's."""

from __future__ import annotations

import pytest
import torch

import hardgrad as hg
from hardgrad import estimators as E

ESTIMATORS = [
    "st",
    "rotation",
    "gumbel",
    E.STGumbel(tau=0.5),
    E.GumbelRao(tau=0.5, k=4),
    E.ReinMax(tau=1.0),
    E.GST(),
    E.ST(),
    E.STIdentity(),
]


def _rotation(z: torch.Tensor, q: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """lambda R^T g per row, R the matrix of Fifty et al.'s Eq. 4 (float64)."""
    rows = []
    for e, c, v in zip(z, q, g, strict=True):
        e_hat, q_hat = e / e.norm(), c / c.norm()
        r = (e_hat + q_hat) / (e_hat + q_hat).norm()
        rot = (
            torch.eye(len(e), dtype=e.dtype) - 2 * torch.outer(r, r) + 2 * torch.outer(q_hat, e_hat)
        )
        rows.append(c.norm() / e.norm() * rot.T @ v)
    return torch.stack(rows)


def _estimator_gradient(est, z, codebook, idx, w, tau, seed):
    """d<w, z_q>/dz in float64 with ``codebook`` the codebook of the step's forward: closed
    forms for "st", "rotation" and ST-Gumbel (the module's Gumbel noise replayed from the
    global seed), else hg.vector_quantize replayed on a separate copy of the codebook."""
    z64, c64, w64 = z.double(), codebook.double(), w.double()
    if est == "st":
        return w64
    if est == "rotation":
        return _rotation(z64, c64[idx], w64)
    if est == "gumbel" or isinstance(est, E.STGumbel):
        est_tau = 1.0 if est == "gumbel" else est.tau
        logits = -((z64[:, None] - c64[None]) ** 2).sum(-1) / tau
        torch.manual_seed(seed)
        noise = E.STGumbel().noise(torch.empty(logits.shape, dtype=z.dtype), None).double()
        assert torch.equal((logits + noise).argmax(-1), idx)  # the same draw
        y = torch.softmax((logits + noise) / est_tau, -1)
        upstream = w64 @ c64.T  # dL/dD_k
        dlogits = y * (upstream - (y * upstream).sum(-1, keepdim=True)) / est_tau
        return (dlogits[:, :, None] * (-2.0 / tau) * (z64[:, None] - c64[None])).sum(1)
    leaf = z.detach().clone().requires_grad_()
    torch.manual_seed(seed)
    z_q, again = hg.vector_quantize(leaf, codebook.clone(), estimator=est, tau=tau)
    assert torch.equal(again, idx)
    return torch.autograd.grad((z_q * w).sum(), leaf)[0].double()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("codebook_update", ["loss", "ema"])
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=str)
def test_training_steps_with_restarts_firing(estimator, codebook_update, dtype):
    """Before the fix every stochastic estimator failed its first backward with the EMA
    update, and with the codebook loss once a restart fired ("modified by an inplace
    operation"): its backward read the codebook that the forward had then updated."""
    torch.manual_seed(0)
    n, k, width, beta, tau = 16, 8, 3, 0.25, 0.5
    vq = hg.nn.VectorQuantize(
        k,
        width,
        estimator=estimator,
        codebook_update=codebook_update,
        commitment_weight=beta,
        dead_code_threshold=2.0,  # above every code's average count: restarts every step
        decay=0.9,
        tau=tau,
    ).to(dtype)
    encoder = torch.nn.Linear(5, width).to(dtype)
    opt = torch.optim.SGD([*encoder.parameters(), *vq.parameters()], lr=0.05)
    g = torch.Generator().manual_seed(1)
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    for step in range(3):
        x = torch.randn(n, 5, generator=g, dtype=torch.float64).to(dtype)
        w = torch.randn(n, width, generator=g, dtype=torch.float64).to(dtype)
        before = vq.codebook.detach().clone()
        cluster = vq.cluster_size.clone()
        z = encoder(x)
        z.retain_grad()
        torch.manual_seed(100 + step)  # the stochastic estimators' draw
        z_q, idx, loss = vq(z)
        # this step's forward used the codebook as it was; the update is already written
        assert torch.equal(z_q.detach(), before[idx])
        assert not torch.equal(vq.codebook.detach(), before)
        cluster = 0.9 * cluster + 0.1 * torch.bincount(idx, minlength=k).to(cluster.dtype)
        restarted = cluster < 2.0
        assert bool(restarted.any()) and bool((vq.cluster_size[restarted] == 2.0).all())
        on_batch = (vq.codebook.detach()[:, None] == z.detach()[None]).all(-1).any(-1)
        if codebook_update == "loss":  # (EMA codebooks move on from the restarted sums)
            assert bool(on_batch[restarted].all())
        opt.zero_grad()
        ((z_q * w).sum() + loss).backward()
        assert z.grad is not None and bool(z.grad.isfinite().all())
        assert all(bool(p.grad.isfinite().all()) for p in encoder.parameters())
        q64 = before.double()[idx]
        commitment = 2 * beta * (z.detach().double() - q64) / z.numel()
        expected = _estimator_gradient(estimator, z.detach(), before, idx, w, tau, 100 + step)
        torch.testing.assert_close(z.grad.double(), expected + commitment, rtol=tol, atol=tol)
        if codebook_update == "loss":  # the codebook loss's gradient, of the step's rows
            rows = 2 * (q64 - z.detach().double()) / z.numel()
            codebook_grad = torch.zeros(k, width, dtype=torch.float64).index_add_(0, idx, rows)
            torch.testing.assert_close(vq.codebook.grad.double(), codebook_grad, rtol=tol, atol=tol)
        opt.step()


def test_float64_restarts_and_kmeans_seeds_are_batch_vectors_exactly():
    """Before: both went through float32 (a float64 codebook got rounded batch vectors)."""
    z = torch.randn(16, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    z = z + 1e-9  # not representable in float32
    seeded = hg.nn.VectorQuantize(4, 2, kmeans_init=True, kmeans_iters=0).double()
    seeded(z)  # k-means++ seeding only: every code is a batch vector
    restarted = hg.nn.VectorQuantize(4, 2, dead_code_threshold=5.0).double()
    restarted(z + 100.0)  # every code dead: each restarted on a batch vector
    for vq, batch in ((seeded, z), (restarted, z + 100.0)):
        on_batch = (vq.codebook.detach()[:, None] == batch[None]).all(-1).any(-1)
        assert bool(on_batch.all())
