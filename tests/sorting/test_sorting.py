"""hg.soft_sort, hg.soft_rank, hg.sort, hg.rank and the relaxed permutation matrices.

References written here in float64 Python: pool-adjacent-violators for both isotonic
problems, and a brute-force optimality check of the projection onto the permutahedron
(the variational inequality against every vertex, i.e. every permutation).
"""

from __future__ import annotations

import itertools

import pytest
import torch

import hardgrad as hg
from _sorting_references import pav_decreasing, ref_soft_rank_asc, ref_soft_sort_desc
from hardgrad.sorting import isotonic_regression, neural_sort_permutation, soft_sort_permutation

DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def assert_projection_onto_permutahedron(mu, z, w, tol=1e-9):
    """mu = argmin_{m in conv(perm(w))} ||m - z||: mu in the hull (majorised by w) and
    <z - mu, pi - mu> <= 0 for every permutation pi of w."""
    n = len(w)
    a, b = sorted(mu, reverse=True), sorted(w, reverse=True)
    assert abs(sum(a) - sum(b)) < tol
    for k in range(1, n):
        assert sum(a[:k]) <= sum(b[:k]) + tol
    worst = max(
        sum((z[i] - mu[i]) * (p[i] - mu[i]) for i in range(n)) for p in itertools.permutations(w)
    )
    assert worst <= tol


def rows(n=6, count=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(count, n, generator=g, dtype=torch.float64) * 2
    ties = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0, -1.0][:n], [0.5] * n], dtype=torch.float64)
    return torch.cat([x, ties])


# --------------------------------------------------------------------------- relaxations


@pytest.mark.parametrize("increasing", [True, False])
def test_isotonic_regression_matches_pav(increasing):
    y = torch.cat([rows(6), torch.tensor([[3.0, 1, 2, 2, 5, 0]], dtype=torch.float64)])
    v = isotonic_regression(y, increasing=increasing)
    for row, out in zip(y.tolist(), v.tolist(), strict=True):
        if increasing:
            ref = [-t for t in pav_decreasing([-t for t in row], [0.0] * len(row))]
        else:
            ref = pav_decreasing(row, [0.0] * len(row))
        assert out == pytest.approx(ref, abs=1e-12)


@pytest.mark.parametrize("reg", ["l2", "kl"])
@pytest.mark.parametrize("eps", [0.05, 0.5, 1.0, 3.0])
def test_soft_sort_and_rank_match_pav(reg, eps):
    x = rows()
    got_sort = hg.soft_sort(x, descending=True, strength=eps, regularization=reg)
    got_rank = hg.soft_rank(x, strength=eps, regularization=reg)
    for row, s, r in zip(x.tolist(), got_sort.tolist(), got_rank.tolist(), strict=True):
        assert s == pytest.approx(ref_soft_sort_desc(row, eps, reg), abs=1e-10)
        assert r == pytest.approx(ref_soft_rank_asc(row, eps, reg), abs=1e-10)


@pytest.mark.parametrize("eps", [0.3, 1.0, 4.0])
def test_l2_soft_sort_and_rank_are_the_projections(eps):
    x = rows(5, count=4)
    for row in x.tolist():
        n = len(row)
        rho = [float(n - i) for i in range(n)]
        mu = hg.soft_sort(torch.tensor(row, dtype=torch.float64), descending=True, strength=eps)
        assert_projection_onto_permutahedron(mu.tolist(), [r / eps for r in rho], row)
        r = hg.soft_rank(torch.tensor(row, dtype=torch.float64), strength=eps)
        assert_projection_onto_permutahedron(r.tolist(), [t / eps for t in row], rho)


def test_limits():
    x = rows()
    gaps = (x.sort(-1).values.diff(dim=-1)).abs()
    small = 0.5 / (x.abs().max().item() * 4 + 1)  # 1/strength beyond every gap
    assert gaps.max() < 1 / small
    for descending in (False, True):  # exactly: blocks of one are computed without cancellation
        expected = torch.sort(x, descending=descending).values
        assert torch.equal(hg.soft_sort(x, strength=small, descending=descending), expected)
        kl = hg.soft_sort(x, strength=small, descending=descending, regularization="kl")
        torch.testing.assert_close(kl, expected, rtol=0, atol=1e-12)
    distinct = x[:-2]  # the rows without ties
    assert torch.equal(hg.soft_rank(distinct, strength=1e-4), hg.rank(distinct))
    big = hg.soft_sort(x, strength=1e6)
    torch.testing.assert_close(big, x.mean(-1, keepdim=True).expand_as(x), rtol=0, atol=1e-4)
    torch.testing.assert_close(
        hg.soft_rank(x, strength=1e6), torch.full_like(x, 3.5), rtol=0, atol=1e-4
    )


def test_soft_sort_rank_gradcheck_and_dims():
    x = rows(5, count=3)[:3].clone().requires_grad_(True)
    for reg in ("l2", "kl"):
        assert torch.autograd.gradcheck(
            lambda t, reg=reg: hg.soft_sort(t, strength=0.7, regularization=reg), (x,)
        )
        assert torch.autograd.gradcheck(
            lambda t, reg=reg: hg.soft_rank(t, strength=0.7, regularization=reg), (x,)
        )
    y = torch.randn(4, 3, 5, dtype=torch.float64)
    torch.testing.assert_close(
        hg.soft_rank(y, dim=1, strength=0.5),
        hg.soft_rank(y.movedim(1, -1), strength=0.5).movedim(-1, 1),
    )


def test_neural_and_soft_sort_permutations():
    x = rows(5, count=3)
    tau = 0.7
    p = neural_sort_permutation(x, tau=tau)
    q = soft_sort_permutation(x, tau=tau)
    for row, prow, qrow in zip(x.tolist(), p, q, strict=True):
        n = len(row)
        for i in range(n):  # i is 0-based: the scale is n + 1 - 2(i + 1)
            logits = [
                ((n - 1 - 2 * i) * row[j] - sum(abs(row[j] - t) for t in row)) / tau
                for j in range(n)
            ]
            expected = torch.softmax(torch.tensor(logits, dtype=torch.float64), 0)
            torch.testing.assert_close(prow[i], expected)
            target = sorted(row, reverse=True)[i]
            expected = torch.softmax(
                torch.tensor([-abs(target - t) / tau for t in row], dtype=torch.float64), 0
            )
            torch.testing.assert_close(qrow[i], expected)
    # near tau = 0 both are the permutation matrix of the sort
    hard = torch.nn.functional.one_hot(x[:-2].argsort(-1, descending=True), 5).to(x.dtype)
    torch.testing.assert_close(neural_sort_permutation(x[:-2], tau=1e-4), hard)
    torch.testing.assert_close(soft_sort_permutation(x[:-2], tau=1e-4, descending=True), hard)


# --------------------------------------------------------------------------- exact sort / rank


@pytest.mark.parametrize("dtype", DTYPES)
def test_sort_and_rank_forward_exact(dtype):
    x = (torch.randn(6, 7) * 3).round().to(dtype)  # ties
    x[0, 0] = 1e4
    for dim in (0, 1, -1):
        for descending in (False, True):
            values, perm = torch.sort(x, dim=dim, descending=descending, stable=True)
            assert torch.equal(hg.sort(x, dim, descending=descending), values)
            r = hg.rank(x, dim, descending=descending)
            expected = torch.empty_like(x).scatter(
                dim,
                perm,
                torch.arange(1, x.shape[dim] + 1, dtype=dtype)
                .reshape([-1 if i == dim % 2 else 1 for i in range(2)])
                .expand_as(x),
            )
            assert torch.equal(r, expected) and r.dtype == dtype


@pytest.mark.parametrize("backward", ["soft", "neuralsort", "softsort"])
def test_sort_and_rank_backward_is_the_relaxations_vjp(backward):
    x = rows(5, count=4)
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for what in ("sort", "rank"):
        for descending in (False, True):
            xa = x.clone().requires_grad_(True)
            fn = hg.sort if what == "sort" else hg.rank
            (fn(xa, descending=descending, backward=backward, strength=0.8) * g).sum().backward()
            xb = x.clone().requires_grad_(True)
            if backward == "soft":
                soft_fn = hg.soft_sort if what == "sort" else hg.soft_rank
                relaxed = soft_fn(xb, descending=descending, strength=0.8)
            else:
                build = (
                    neural_sort_permutation if backward == "neuralsort" else soft_sort_permutation
                )
                p = build(xb, tau=0.8, descending=descending)
                if what == "sort":
                    relaxed = (p @ xb.unsqueeze(-1)).squeeze(-1)
                else:
                    positions = torch.arange(1.0, 6.0, dtype=x.dtype)[:, None]
                    relaxed = (positions * p).sum(-2) / p.sum(-2)
            (relaxed * g).sum().backward()
            torch.testing.assert_close(xa.grad, xb.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_half_types_finite(dtype):
    x = torch.randn(3, 8).to(dtype).requires_grad_(True)
    for fn in (hg.soft_sort, hg.soft_rank, hg.sort, hg.rank):
        for reg in ("l2", "kl"):
            x.grad = None
            y = fn(x, strength=0.1, regularization=reg)
            assert y.dtype == dtype and y.shape == x.shape and torch.isfinite(y).all()
            y.pow(2).sum().backward()
            assert torch.isfinite(x.grad).all()


def test_extreme_strengths_stay_finite():
    x = torch.tensor([[1e30, -1e30, 0.0, 5.0]], dtype=torch.float64, requires_grad=True)
    for strength in (1e-30, 1e30):
        for reg in ("l2", "kl"):
            y = hg.soft_rank(x, strength=strength, regularization=reg)
            y.sum().backward()
            assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()


@pytest.mark.compile
def test_compile_vmap_grad():
    x = rows(6, count=3).float()
    g = torch.randn(x.shape)

    def loss(t):
        return (hg.soft_rank(t, strength=0.5) * g).sum() + (hg.sort(t, strength=0.5) * g).sum()

    eager = torch.func.grad(loss)(x)
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    xc = x.clone().requires_grad_(True)
    compiled(xc).backward()
    torch.testing.assert_close(xc.grad, eager)
    batched = torch.vmap(lambda t: hg.soft_sort(t, strength=0.5))(x)
    torch.testing.assert_close(batched, hg.soft_sort(x, strength=0.5))


def test_bad_input():
    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match="`strength` > 0"):
        hg.soft_sort(x, strength=0.0)
    with pytest.raises(ValueError, match="`regularization`"):
        hg.soft_rank(x, regularization="entropy")
    with pytest.raises(ValueError, match="`backward`"):
        hg.sort(x, backward="sinkhorn")
    with pytest.raises(TypeError, match="floating-point"):
        hg.rank(torch.ones(3, dtype=torch.long))
    with pytest.raises(ValueError, match="`dim`"):
        hg.sort(x, 2)
    with pytest.raises(ValueError, match="at least one entry"):
        hg.soft_sort(torch.ones(3, 0))
    with pytest.raises(TypeError, match="`descending`"):
        hg.rank(x, descending=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`tau` > 0"):
        neural_sort_permutation(x, tau=-1.0)


def test_compare_layers_and_audit_suggestions():
    x = rows(5, count=2)
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    result = hg.diagnostics.compare_layers(
        lambda r: (r * g).sum(), x,
        layers={"soft": lambda t: hg.rank(t, strength=0.5), "neuralsort": lambda t: hg.rank(t, backward="neuralsort", strength=0.5)},
        reference=lambda t: hg.soft_rank(t, strength=0.5), num_draws=2,
    )  # fmt: skip
    soft, neural = result.rows
    assert soft.bias == pytest.approx(0.0, abs=1e-12) and soft.std == 0.0
    assert neural.bias > 0
    lin = torch.nn.Linear(3, 1)
    with hg.diagnostics.audit() as report:  # ranks by a double argsort: no gradient
        r = lin(torch.randn(6, 3)).squeeze(-1).argsort().argsort().float()
        (r - torch.arange(6.0)).pow(2).mean().requires_grad_(True).backward()
    (finding,) = [f for f in report.findings if "argsort" in f.op]
    assert "hg.rank" in finding.suggestion and "hg.soft_rank" in finding.suggestion


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
def test_any_finite_input_and_strength_gives_finite_results(dtype):
    info = torch.finfo(dtype)
    x = torch.tensor([[info.max, -info.max, 0.0, 1.0, info.max / 2]], dtype=dtype)
    x = x.requires_grad_(True)
    for strength in (info.tiny, 1.0, info.max):
        for fn in (hg.soft_sort, hg.soft_rank):
            for reg in ("l2", "kl"):
                x.grad = None
                y = fn(x, strength=strength, regularization=reg)
                y.sum().backward()
                assert torch.isfinite(y).all() and torch.isfinite(x.grad).all(), (fn, reg, strength)
        for backward in ("soft", "neuralsort", "softsort"):
            x.grad = None
            hg.rank(x, backward=backward, strength=strength).pow(2).sum().backward()
            assert torch.isfinite(x.grad).all(), (backward, strength)
    # Entries capped alike tie; below the cap, a small strength gives the exact ranks even
    # for huge values (a block of one is computed without cancellation).
    huge = torch.tensor([[1e300, -1e300, 0.0, 1.0, 5e299]], dtype=torch.float64)
    assert torch.equal(hg.soft_rank(huge, strength=1e-3), hg.rank(huge))
    # (soft sort needs 1/strength beyond the gaps: at 1e-3 these are pooled into the mean)
    torch.testing.assert_close(
        hg.soft_sort(huge, strength=1e-3), huge.mean(-1, keepdim=True).expand(1, 5)
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_quantile_forward_is_torch_quantile_and_backward_the_soft_sorts(dtype):
    from hardgrad.sorting import quantile, soft_quantile

    x = torch.randn(4, 7, 3, generator=torch.Generator().manual_seed(5), dtype=dtype)
    for q in (0.0, 0.1, 0.25, 0.5, 0.9, 1.0, 1 / 3):
        for dim in (1, -1):
            for keepdim in (False, True):
                expected = torch.quantile(x, q, dim=dim, keepdim=keepdim)
                assert torch.equal(quantile(x, q, dim, keepdim=keepdim), expected)
                small = soft_quantile(x, q, dim=dim, keepdim=keepdim, strength=1e-3)
                torch.testing.assert_close(small, expected, rtol=0, atol=1e-5)
    a = x.clone().requires_grad_(True)
    quantile(a, 0.3, 1, strength=0.7).sum().backward()
    b = x.clone().requires_grad_(True)
    values = hg.soft_sort(b, dim=1, strength=0.7).movedim(1, -1)
    pos = 0.3 * 6
    lo = int(pos)
    ((1 - (pos - lo)) * values[..., lo] + (pos - lo) * values[..., lo + 1]).sum().backward()
    torch.testing.assert_close(a.grad, b.grad)
    with pytest.raises(ValueError, match="`q` in"):
        quantile(x, 1.5)
    half = quantile(x.half(), 0.5)
    assert half.dtype == torch.float16
