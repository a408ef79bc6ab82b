"""relaxed_topk against an independent float64 reference at any key spread and in every
dtype, and hg.subset at k = 0 and k = n."""

from __future__ import annotations

import pytest
import torch

import hardgrad as hg
from hardgrad.subsets import SUBSET_ESTIMATORS, relaxed_topk

DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def reference(keys: torch.Tensor, k: int, tau: float) -> torch.Tensor:
    """Xie & Ermon's rounds in float64 with log(1 - alpha_i) as a leave-one-out
    log-sum-exp, entry by entry: log sum_{j != i} e^{z_j} - log sum_j e^{z_j}."""
    w = keys.to(torch.float64)
    n = w.shape[-1]
    total = torch.zeros_like(w)
    for _ in range(k):
        z = w / tau
        lse = torch.logsumexp(z, -1, keepdim=True)
        total = total + torch.exp(z - lse)
        if n > 1:
            others = [torch.cat([z[..., :i], z[..., i + 1 :]], -1) for i in range(n)]
            loo = torch.stack([torch.logsumexp(o, -1) for o in others], -1)
            w = w + (loo - lse)
    return total


def _cases(dtype: torch.dtype) -> list[tuple[torch.Tensor, int, float]]:
    g = torch.Generator().manual_seed(0)
    cases = [
        (torch.tensor([[100.0, 0.0, -100.0]]), 2, 0.1),  # the issue's
        (torch.tensor([[100.0, 0.3, 0.0, -100.0]]), 2, 0.5),  # a far key, then two close ones
        (torch.randn(3, 6, generator=g) * 3, 3, 0.7),  # moderate: real gradients
        # (tau = 3, not 1: at tau = 1 the second round rebuilds the top key as the
        # log-sum-exp of the rest, a near tie that float32 keys of 1e4 (ulp 1e-3) blur.)
        (torch.randn(3, 6, generator=g) * 1e4, 3, 3.0),
        (torch.randn(3, 6, generator=g) * 1e4, 4, 0.1),
        (torch.randn(2, 5, generator=g) * 30, 5, 2.0),  # k = n
    ]
    if dtype in (torch.float32, torch.float64):
        cases.append((torch.randn(3, 6, generator=g) * 1e30, 3, 0.1))
        cases.append((torch.tensor([[1e30, 0.0, -1e30]]), 2, 1.0))
    return [(keys.to(dtype), k, tau) for keys, k, tau in cases]


def _tolerance(dtype: torch.dtype) -> dict[str, float]:
    eps = torch.finfo(dtype).eps
    return {"rtol": 8 * eps if dtype != torch.float64 else 1e-9, "atol": 8 * eps}


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_relaxed_topk_matches_a_float64_reference_at_any_spread(dtype):
    g = torch.Generator().manual_seed(1)
    for keys, k, tau in _cases(dtype):
        x = keys.clone().requires_grad_()
        got = relaxed_topk(x, k, tau=tau)
        assert got.dtype == dtype
        x64 = keys.to(torch.float64).requires_grad_()
        want = reference(x64, k, tau)
        # Half types: computed in float32 and rounded once.
        torch.testing.assert_close(got, want.to(dtype), **_tolerance(dtype), msg=str((keys, k)))
        torch.testing.assert_close(
            got.to(torch.float64).sum(-1),
            torch.full(keys.shape[:-1], float(k), dtype=torch.float64),
            **_tolerance(dtype),
        )
        c = torch.randn(keys.shape, generator=g, dtype=torch.float64)
        (got * c.to(dtype)).sum().backward()
        (want * c).sum().backward()
        scale = max(1.0, float(x64.grad.abs().max()))
        err = float((x.grad.to(torch.float64) - x64.grad).abs().max()) / scale
        assert err < 16 * torch.finfo(dtype).eps + 1e-12, (dtype, keys, k, x.grad, x64.grad)


def test_the_reference_is_the_plain_formula_where_that_is_accurate():
    keys = torch.randn(4, 7, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    w, plain = keys.clone(), torch.zeros_like(keys)
    for _ in range(3):
        alpha = torch.softmax(w / 0.6, -1)
        plain += alpha
        w = w + torch.log(1 - alpha)
    torch.testing.assert_close(reference(keys, 3, 0.6), plain)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_relaxed_topk_infinite_keys(dtype):
    # -inf keys: weight 0 and gradient 0; the rest as without them.
    keys = torch.tensor([[1.0, -torch.inf, 0.5, -2.0, -torch.inf]], dtype=dtype)
    x = keys.clone().requires_grad_()
    got = relaxed_topk(x, 3, tau=0.7)
    finite = keys[:, [0, 2, 3]]
    torch.testing.assert_close(got[:, [1, 4]], torch.zeros(1, 2, dtype=dtype))
    torch.testing.assert_close(
        got[:, [0, 2, 3]], reference(finite, 3, 0.7).to(dtype), **_tolerance(dtype)
    )
    got.sum().backward()
    assert torch.isfinite(x.grad).all() and (x.grad[:, [1, 4]] == 0).all()
    # +inf key, tau < 1: weight 1 in the first round and none after; the rest do k - 1 rounds.
    keys = torch.tensor([[0.3, torch.inf, -0.4, 1.0]], dtype=dtype)
    x = keys.clone().requires_grad_()
    got = relaxed_topk(x, 3, tau=0.5)
    torch.testing.assert_close(got[:, 1], torch.ones(1, dtype=dtype))
    torch.testing.assert_close(
        got[:, [0, 2, 3]], reference(keys[:, [0, 2, 3]], 2, 0.5).to(dtype), **_tolerance(dtype)
    )
    (got * torch.arange(4.0, dtype=dtype)).sum().backward()
    assert torch.isfinite(x.grad).all()


def test_st_and_relaxed_subsets_in_float32_with_a_far_key():
    """Logits [100, 0.3, 0, -100], k = 2: whatever the Gumbel noise (far below 100), the
    first item takes one round and items 1 and 2 share the second, a = [1, p, 1 - p, 0];
    d a_1 / d l_1 = p (1 - p) / tau. (Flooring 1 - alpha at float32's tiny gave
    a = [2, 0, 0, 0] and no gradient.)"""
    tau = 0.5
    for seed in range(5):
        logits = torch.tensor([100.0, 0.3, 0.0, -100.0], requires_grad=True)
        a = hg.subset(
            logits, 2, estimator="relaxed", tau=tau, generator=torch.Generator().manual_seed(seed)
        )
        p = float(a[1].detach())
        torch.testing.assert_close(a.detach(), torch.tensor([1.0, p, 1 - p, 0.0]))
        a[1].backward()
        want = torch.tensor([0.0, p * (1 - p) / tau, -p * (1 - p) / tau, 0.0])
        torch.testing.assert_close(logits.grad, want, atol=1e-6, rtol=1e-5)
        assert want[1] > 1e-3
        st = logits.detach().clone().requires_grad_()
        z = hg.subset(st, 2, estimator="st", tau=tau, generator=torch.Generator().manual_seed(seed))
        z[1].backward()
        torch.testing.assert_close(st.grad, want, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("estimator", SUBSET_ESTIMATORS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
def test_subset_k_zero_and_k_n_stay_on_the_graph(estimator, dtype):
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(3, 5, generator=g).to(dtype)
    c = torch.randn(3, 5, generator=g).to(dtype)
    for k in (0, 5):
        x = logits.clone().requires_grad_()
        z = hg.subset(x, k, estimator=estimator, generator=torch.Generator().manual_seed(4))
        assert z.requires_grad and z.dtype == dtype
        if k == 0:
            assert (z == 0).all()
        elif estimator != "relaxed":
            assert (z == 1).all()
        torch.testing.assert_close(
            z.detach().to(torch.float64).sum(-1),
            torch.full((3,), float(k), dtype=torch.float64),
            **_tolerance(dtype),
        )
        (z * c).sum().backward()
        assert torch.isfinite(x.grad).all()
        if k == 0:
            assert (x.grad == 0).all()
        # The relaxations' totals are k whatever the logits: the gradient of the sum is 0.
        x.grad = None
        hg.subset(
            x, k, estimator=estimator, generator=torch.Generator().manual_seed(4)
        ).sum().backward()
        torch.testing.assert_close(
            x.grad, torch.zeros_like(x.grad), atol=8 * torch.finfo(dtype).eps, rtol=0
        )


def test_relaxed_topk_checks_its_arguments():
    with pytest.raises(ValueError, match="`k`"):
        relaxed_topk(torch.zeros(3), 4)
    with pytest.raises(ValueError, match="`k`"):
        relaxed_topk(torch.zeros(3), -1)
    with pytest.raises(ValueError, match="`keys`"):
        relaxed_topk(torch.zeros(2, 0), 0)
    with pytest.raises(TypeError, match="`keys`"):
        relaxed_topk(torch.zeros(3, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="`tau`"):
        relaxed_topk(torch.zeros(3), 1, tau=0.0)
