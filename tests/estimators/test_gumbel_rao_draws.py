"""Gumbel-Rao's draws in blocks (hardgrad.estimators._gumbel_rao_draws): on CPU in eager mode
hg.categorical and hg.bernoulli never hold the k conditional draws, yet give the numbers
of the explicit noise (est.noise / est.bernoulli_noise) bit for bit, leave the generator
where the explicit draw leaves it, and save memory that does not grow with k."""

from __future__ import annotations

import math

import pytest
import torch

import hardgrad as hg
from hardgrad.bench._timing import saved_bytes_per_element
from hardgrad.estimators import GumbelRao, _gumbel_rao_draws
from hardgrad.estimators._gumbel_rao_draws import blocks, categorical_slopes, conditional_gumbel

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
#: Block sizes: everything at once; whole draws; rows of one draw; one row of one draw.
CHUNKS = [10**9, 5 * 6 * 7 * 2, 2 * 7 * 6, 1]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _grad(y: torch.Tensor, x: torch.Tensor, upstream: torch.Tensor) -> torch.Tensor:
    (g,) = torch.autograd.grad(y, x, upstream)
    return g


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_categorical_equals_the_explicit_noise_bit_for_bit(dtype, dim, chunk, monkeypatch):
    """hg.categorical (generator state saved, skipped, replayed in blocks by the backward)
    against est.categorical on est.noise: the same sample, the same gradient bit for bit,
    and the generator left in the same state, for every block size and dim."""
    monkeypatch.setattr(_gumbel_rao_draws, "GUMBEL_RAO_CHUNK", chunk)
    source = gen(1)
    logits = (torch.randn(5, 6, 7, generator=source, dtype=torch.float64) * 2).to(dtype)
    upstream = torch.randn(5, 6, 7, generator=source, dtype=torch.float64).to(dtype)
    est = GumbelRao(tau=0.7, k=4)
    fused_gen, explicit_gen = gen(5), gen(5)
    x1, x2 = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    y1 = hg.categorical(x1, dim=dim, estimator=est, generator=fused_gen)
    y2 = est.categorical(x2, est.noise(x2, explicit_gen), dim % 3)
    assert torch.equal(y1, y2)
    g1, g2 = _grad(y1, x1, upstream), _grad(y2, x2, upstream)
    assert g1.abs().sum() > 0
    assert torch.equal(g1, g2)
    assert torch.equal(fused_gen.get_state(), explicit_gen.get_state())


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_bernoulli_equals_the_explicit_noise_bit_for_bit(dtype, chunk, monkeypatch):
    """hg.bernoulli (draws taken block by block in the forward, only the slope kept)
    against est.bernoulli on est.bernoulli_noise: same sample, gradient and generator."""
    monkeypatch.setattr(_gumbel_rao_draws, "GUMBEL_RAO_CHUNK", chunk)
    source = gen(2)
    logits = (torch.randn(6, 7, generator=source, dtype=torch.float64) * 2).to(dtype)
    upstream = torch.randn(6, 7, generator=source, dtype=torch.float64).to(dtype)
    est = GumbelRao(tau=0.7, k=5)
    fused_gen, explicit_gen = gen(6), gen(6)
    x1, x2 = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    y1 = hg.bernoulli(x1, estimator=est, generator=fused_gen)
    y2 = est.bernoulli(x2, est.bernoulli_noise(x2, explicit_gen))
    assert torch.equal(y1, y2)
    g1, g2 = _grad(y1, x1, upstream), _grad(y2, x2, upstream)
    assert g1.abs().sum() > 0
    assert torch.equal(g1, g2)
    assert torch.equal(fused_gen.get_state(), explicit_gen.get_state())


@pytest.mark.parametrize("sampler", ["categorical", "bernoulli"])
def test_global_generator_gives_the_explicit_numbers_and_state(sampler):
    """generator=None draws from (and skips) the global CPU generator like the explicit
    noise does: the same values, and the global state advanced alike."""
    logits = torch.randn(9, 4, generator=gen(3))
    est = GumbelRao(k=3)
    results = []
    for fused in (True, False):
        torch.manual_seed(123)
        x = logits.clone().requires_grad_()
        if sampler == "categorical":
            y = (
                hg.categorical(x, estimator=est)
                if fused
                else est.categorical(x, est.noise(x, None), 1)
            )
        else:
            y = (
                hg.bernoulli(x, estimator=est)
                if fused
                else est.bernoulli(x, est.bernoulli_noise(x, None))
            )
        results.append((y.detach(), _grad(y, x, torch.ones_like(y)), torch.get_rng_state()))
    for a, b in zip(results[0], results[1], strict=True):
        assert torch.equal(a, b)


def test_categorical_backward_replays_the_same_draws_and_leaves_the_generator_alone():
    """A second backward (retain_graph) replays the same draws: the same gradient; the
    backward draws from a private generator, never from the caller's or the global one."""
    x = torch.randn(8, 5, generator=gen(4)).requires_grad_()
    generator = gen(7)
    y = hg.categorical(x, estimator=GumbelRao(k=6), generator=generator)
    after_forward, global_state = generator.get_state(), torch.get_rng_state()
    upstream = torch.randn(8, 5, generator=gen(8))
    (first,) = torch.autograd.grad(y, x, upstream, retain_graph=True)
    (second,) = torch.autograd.grad(y, x, upstream)
    assert torch.equal(first, second)
    assert torch.equal(generator.get_state(), after_forward)
    assert torch.equal(torch.get_rng_state(), global_state)


@pytest.mark.parametrize("k", [1, 10, 100])
def test_saved_memory_does_not_grow_with_k(k):
    """float32: the categorical unit saves its logits and sample (8 bytes per element),
    the Bernoulli unit its slope (4), whatever k (the explicit noise would be 4 k more)."""
    x = torch.randn(64, 16, requires_grad=True)
    est = GumbelRao(k=k)
    categorical = saved_bytes_per_element(
        lambda v: hg.categorical(v, estimator=est, generator=gen(0)), x
    )
    bernoulli = saved_bytes_per_element(
        lambda v: hg.bernoulli(v, estimator=est, generator=gen(0)), x
    )
    assert categorical == 8
    assert bernoulli == 4


@pytest.mark.parametrize(
    "lay", [(1, 1, 1, 1), (3, 4, 5, 1), (7, 2, 3, 4), (2, 0, 3, 1), (5, 9, 2, 1), (4, 1, 50, 1)]
)
@pytest.mark.parametrize("chunk", [1, 6, 10, 40, 10**6])
def test_blocks_cover_every_draw_once_in_stream_order(lay, chunk, monkeypatch):
    """The blocks tile the (k, A) grid of draws and rows exactly once, in the order
    torch.rand fills (k, A, C, B) (so drawing them one after another is one draw of the
    whole), each at most the chunk or a single row of a single draw."""
    monkeypatch.setattr(_gumbel_rao_draws, "GUMBEL_RAO_CHUNK", chunk)
    k, outer, classes, inner = lay
    row = classes * inner
    seen: list[tuple[int, int]] = []
    for d0, d1, a0, a1 in blocks(lay):
        assert 0 <= d0 < d1 <= k and 0 <= a0 <= a1 <= outer
        size = (d1 - d0) * (a1 - a0) * row
        assert size <= chunk or (d1 - d0 == 1 and a1 - a0 == 1)
        if d1 - d0 > 1:  # several draws: whole draws, contiguous in the stream
            assert (a0, a1) == (0, outer)
        seen += [(d, a) for d in range(d0, d1) for a in range(a0, a1)]
    assert seen == [(d, a) for d in range(k) for a in range(outer)]


def _reference_vjp_sum(
    ell: torch.Tensor, chosen: torch.Tensor, grad: torch.Tensor, e: torch.Tensor, tau: float
) -> torch.Tensor:
    """Sum over draws of J(softmax(z / tau))^T grad at z = conditional_gumbel, written
    from the definitions (float64)."""
    z = conditional_gumbel(ell, chosen, e.log(), -1)
    p = torch.softmax(z / tau, -1)
    return (p * (grad - (grad * p).sum(-1, keepdim=True))).sum(0)


@pytest.mark.parametrize("by_index", [False, True], ids=["mask", "index"])
@pytest.mark.parametrize("tau", [0.1, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_categorical_slopes_against_the_softmax_of_the_conditional_gumbels(tau, dtype, by_index):
    """The softplus form (z_D - z_i = softplus(b_i - a), weights in [0, 1]) against the
    softmax of the conditional Gumbels in float64, with the sample as a mask (compiled
    and transformed code) or as an index (eager, in place): float64 to 1e-12, float32 to
    its rounding."""
    source = gen(9)
    ell64 = torch.randn(200, 6, generator=source, dtype=torch.float64) * 3
    index = torch.randint(6, (200,), generator=source)
    chosen = torch.nn.functional.one_hot(index, 6).to(torch.bool)
    grad64 = torch.randn(200, 6, generator=source, dtype=torch.float64)
    e64 = -torch.rand(4, 200, 6, generator=source, dtype=torch.float64).clamp_min(1e-300).log()
    expected = _reference_vjp_sum(ell64, chosen, grad64, e64, tau)
    ell, grad, e = ell64.to(dtype), grad64.to(dtype), e64.to(dtype)
    total = torch.logsumexp(ell, -1, keepdim=True)
    sample = index.unsqueeze(-1) if by_index else chosen
    got = categorical_slopes(ell, total, sample, grad, e.log(), tau, -1)
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    torch.testing.assert_close(got.double(), expected, rtol=tol, atol=tol)


def test_categorical_slopes_saturate_at_tiny_tau_without_overflow():
    """At tau = 1e-4 the weights of the other classes underflow to 0 (no z / tau to
    overflow): the VJP is 0 wherever the sample's margin is not within tau of a tie."""
    ell = torch.tensor([[3.0, 0.0, -2.0], [0.0, 0.0, 0.0], [1e30, -1e30, 0.0]])
    chosen = torch.tensor([[True, False, False], [False, True, False], [True, False, False]])
    e = torch.full((2, 3, 3), 1.0)
    total = torch.logsumexp(ell, -1, keepdim=True)
    upstream = torch.randn(3, 3, generator=gen(1))
    for sample in (chosen, chosen.to(torch.int64).argmax(-1, keepdim=True)):
        got = categorical_slopes(ell, total, sample, upstream, e.log(), 1e-4, -1)
        assert torch.isfinite(got).all()
        assert torch.equal(got, torch.zeros_like(got))


def _logistic_ks(x: torch.Tensor) -> float:
    x, _ = x.double().flatten().sort()
    n = x.numel()
    f = torch.sigmoid(x)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return math.sqrt(n) * float(torch.maximum(i / n - f, f - (i - 1) / n).max())


@pytest.mark.statistical
def test_bernoulli_noise_ratio_is_standard_logistic():
    """Gumbel-Rao's Bernoulli draws are (e^R, 1) with R standard logistic, the law of
    log(E0 / E1) for two exponentials, and so is the sample's L. Kolmogorov-Smirnov with
    n = 10^6 draws and 250,000 L, threshold 2.7: asymptotic false-failure rate
    2 exp(-2 * 2.7^2) = 9.4e-7 per statistic, 2 here. (Scaled by 1.02, sqrt(n) D is 4.8
    for the draws and 3.1 for L.)"""
    pair, exponentials = GumbelRao(k=4).bernoulli_noise(torch.zeros(250_000), gen(13))
    assert torch.equal(exponentials[..., 1], torch.ones(4, 250_000))
    assert _logistic_ks(exponentials[..., 0].log()) < 2.7
    assert _logistic_ks(pair[..., 1] - pair[..., 0]) < 2.7
