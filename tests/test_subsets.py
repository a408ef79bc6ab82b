"""hg.subset (Gumbel top-k with ST / relaxed backwards, SIMPLE) and the exact k-subset marginals."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import hardgrad as hg
from hardgrad.subsets import k_subset_marginals, relaxed_topk


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def brute_marginals(logits: list[float], k: int) -> list[float]:
    n = len(logits)
    total, marg = 0.0, [0.0] * n
    for subset in itertools.combinations(range(n), k):
        w = math.exp(sum(logits[i] for i in subset))
        total += w
        for i in subset:
            marg[i] += w
    return [m / total for m in marg]


def plackett_luce_inclusion(logits: list[float], k: int) -> list[float]:
    """P(i among the first k draws without replacement from softmax(logits)), by enumeration."""
    p = [math.exp(t) for t in logits]
    out = [0.0] * len(p)
    for order in itertools.permutations(range(len(p)), k):
        prob, left = 1.0, sum(p)
        for i in order:
            prob *= p[i] / left
            left -= p[i]
        for i in order:
            out[i] += prob
    return out


def test_k_subset_marginals_against_enumeration():
    logits = torch.randn(3, 6, generator=gen(1), dtype=torch.float64) * 2
    for k in range(7):
        m = k_subset_marginals(logits, k)
        for row, got in zip(logits.tolist(), m.tolist(), strict=True):
            assert got == pytest.approx(brute_marginals(row, k), abs=1e-12)
    x = logits.clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: k_subset_marginals(t, 3), (x,))
    assert torch.isfinite(k_subset_marginals(torch.tensor([[1e4, -1e4, 0.0, 3.0]]), 2)).all()


def test_relaxed_topk_formula_and_limit():
    keys = torch.randn(4, 7, generator=gen(2), dtype=torch.float64)
    tau, k = 0.6, 3
    w, expected = keys.clone(), torch.zeros_like(keys)
    for _ in range(k):
        alpha = torch.exp(w / tau - torch.logsumexp(w / tau, -1, keepdim=True))
        expected += alpha
        w = w + torch.log(1 - alpha)
    got = relaxed_topk(keys, k, tau=tau)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got.sum(-1), torch.full((4,), 3.0, dtype=torch.float64))
    hard = torch.zeros_like(keys).scatter(-1, keys.topk(k, -1).indices, 1.0)
    torch.testing.assert_close(relaxed_topk(keys, k, tau=1e-4), hard)


def test_st_forward_is_the_relaxations_limit_and_backward_its_vjp():
    logits = torch.randn(5, 6, generator=gen(3), dtype=torch.float64)
    g = torch.randn(5, 6, generator=gen(4), dtype=torch.float64)
    a = logits.clone().requires_grad_(True)
    z = hg.subset(a, 2, tau=0.5, generator=gen(5))
    assert set(z.detach().unique().tolist()) <= {0.0, 1.0}
    assert torch.equal(z.detach().sum(-1), torch.full((5,), 2.0, dtype=torch.float64))
    limit = hg.subset(logits, 2, estimator="relaxed", tau=1e-5, generator=gen(5))
    torch.testing.assert_close(z.detach(), limit)  # same keys: the top-2 of logits + gumbel
    (z * g).sum().backward()
    b = logits.clone().requires_grad_(True)
    (hg.subset(b, 2, estimator="relaxed", tau=0.5, generator=gen(5)) * g).sum().backward()
    torch.testing.assert_close(a.grad, b.grad)


def test_simple_backward_is_the_marginals_vjp():
    logits = torch.randn(4, 6, generator=gen(6), dtype=torch.float64)
    g = torch.randn(4, 6, generator=gen(7), dtype=torch.float64)
    a = logits.clone().requires_grad_(True)
    z = hg.subset(a, 3, estimator="simple", generator=gen(8))
    assert torch.equal(z.detach().sum(-1), torch.full((4,), 3.0, dtype=torch.float64))
    (z * g).sum().backward()
    b = logits.clone().requires_grad_(True)
    (k_subset_marginals(b, 3) * g).sum().backward()
    torch.testing.assert_close(a.grad, b.grad)


@pytest.mark.statistical
def test_samples_follow_their_distributions():
    """Inclusion frequencies of 40000 samples against Plackett-Luce (st) and the conditional
    Bernoulli (simple); z-tests at |z| < 5.5 over 10 coordinates: false-failure rate below
    4e-7. Also every subset's frequency under SIMPLE (10 subsets, same bound)."""
    row = [1.0, 0.0, -0.5, 0.7, 0.2]
    n, k, draws = 5, 2, 40000
    logits = torch.tensor(row, dtype=torch.float64).expand(draws, n)
    for estimator, expected in (
        ("st", plackett_luce_inclusion(row, k)),
        ("simple", brute_marginals(row, k)),
    ):
        z = hg.subset(logits, k, estimator=estimator, generator=gen(9))
        p = torch.tensor(expected, dtype=torch.float64)
        zscore = (z.mean(0) - p) / torch.sqrt(p * (1 - p) / draws)
        assert zscore.abs().max() < 5.5, (estimator, zscore)
        if estimator == "simple":
            codes = (z * (2 ** torch.arange(n, dtype=torch.float64))).sum(-1)
            total = sum(
                math.exp(sum(row[i] for i in s)) for s in itertools.combinations(range(n), k)
            )
            for s in itertools.combinations(range(n), k):
                q = math.exp(sum(row[i] for i in s)) / total
                freq = (codes == sum(2**i for i in s)).double().mean().item()
                assert abs(freq - q) / math.sqrt(q * (1 - q) / draws) < 5.5


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_dtypes_dims_and_edges(dtype):
    logits = torch.randn(3, 5, 4).to(dtype).requires_grad_(True)
    for estimator in ("st", "relaxed", "simple"):
        z = hg.subset(logits, 2, dim=1, estimator=estimator, generator=gen(10))
        assert z.dtype == dtype and z.shape == logits.shape
        torch.testing.assert_close(z.sum(1).float(), torch.full((3, 4), 2.0), rtol=0, atol=2e-2)
        logits.grad = None
        z.pow(2).sum().backward()
        assert torch.isfinite(logits.grad).all()
    for k in (0, 5):
        z = hg.subset(logits, k, dim=1, estimator="simple", generator=gen(11))
        assert torch.equal(z.sum(1), torch.full((3, 4), float(k), dtype=dtype))


@pytest.mark.compile
def test_reproducible_and_compiles():
    logits = torch.randn(4, 6)
    a = hg.subset(logits, 2, generator=gen(12))
    b = hg.subset(logits, 2, generator=gen(12))
    assert torch.equal(a, b)
    g = torch.randn(4, 6)

    def loss(t):
        return (hg.subset(t, 2, tau=0.5) * g).sum()

    grads = []
    for fn in (loss, torch.compile(loss, fullgraph=True, backend="aot_eager")):
        x = logits.clone().requires_grad_(True)
        torch.manual_seed(0)
        fn(x).backward()
        grads.append(x.grad)
    torch.testing.assert_close(grads[0], grads[1])


def test_bad_input():
    x = torch.randn(2, 4)
    with pytest.raises(ValueError, match="`k` <= 4"):
        hg.subset(x, 5)
    with pytest.raises(ValueError, match="`estimator`"):
        hg.subset(x, 2, estimator="reinforce")
    with pytest.raises(ValueError, match="`tau` > 0"):
        hg.subset(x, 2, tau=0.0)
    with pytest.raises(TypeError, match="`generator`"):
        hg.subset(x, 2, generator=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="floating-point"):
        k_subset_marginals(torch.ones(3, dtype=torch.long), 1)


def test_extreme_logits_stay_finite():
    logits = torch.tensor([[1e30, -1e30, 0.0, 5.0, 5.0]], requires_grad=True)
    for estimator in ("st", "relaxed", "simple"):
        logits.grad = None
        z = hg.subset(logits, 2, estimator=estimator, tau=1e-3, generator=gen(13))
        assert torch.isfinite(z).all()
        (z * torch.arange(5.0)).sum().backward()
        assert torch.isfinite(logits.grad).all()
        if estimator != "relaxed":
            assert z[0, 0] == 1 and z[0, 1] == 0
    la = torch.tensor([1e30, -1e30, 0.0], requires_grad=True)
    z = hg.hard_concrete(la, generator=gen(14))
    z.sum().backward()
    assert z[0] == 1 and z[1] == 0 and torch.isfinite(la.grad).all()


def test_torch_func():
    x = torch.randn(4, 3, 5)
    out = torch.vmap(lambda t: hg.subset(t, 2), randomness="different")(x)
    assert torch.equal(out.sum(-1), torch.full((4, 3), 2.0))
    for estimator in ("st", "simple"):
        grad = torch.func.grad(
            lambda t, e=estimator: (hg.subset(t, 2, estimator=e) * t.detach()).sum()
        )(x[0])
        assert grad.shape == (3, 5) and torch.isfinite(grad).all()
