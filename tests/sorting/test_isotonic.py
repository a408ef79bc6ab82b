"""Pool-adjacent-violators (hardgrad.sorting._isotonic) behind hg.soft_sort, hg.soft_rank and
isotonic_regression for long rows, against the float64 PAV reference of test_sorting and
against the min-max path it replaces there."""

from __future__ import annotations

import pytest
import torch

import hardgrad as hg
import hardgrad.sorting._isotonic as isotonic
import hardgrad.sorting._isotonic_function as isotonic_function
import hardgrad.sorting._soft as soft
from _sorting_references import pav_decreasing, ref_soft_rank_asc, ref_soft_sort_desc
from hardgrad.sorting import _native_pav as native_pav
from hardgrad.sorting import isotonic_regression

REGS = ("l2", "kl")


def long_rows(n=48, count=5, seed=0, dtype=torch.float64):
    """Random rows with runs of ties and one constant row (heavy pooling)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(count, n, generator=g, dtype=torch.float64) * 2
    x[0, ::3] = x[0, 1]
    x[1] = torch.round(x[1])  # many ties
    x[-1] = 0.5
    return x.to(dtype)


def composition_only(mp: pytest.MonkeyPatch, by_pav: bool) -> None:
    """The soft sorts through their differentiable composition in eager mode (not the
    Functions of _soft_function), its blocks by PAV (``by_pav``) or the min-max formula
    whatever the rows' length."""
    mp.setattr(soft, "use_functions", lambda x: False)
    mp.setattr(isotonic_function, "eager", lambda: False)
    mp.setattr(isotonic, "_by_pav", lambda s, w: by_pav)


def test_long_rows_take_pav():
    calls = []
    original = isotonic._pav_blocks

    def spy(*args):
        calls.append(args[0].shape)
        return original(*args)

    # The differentiable composition (what torch.func and torch.compile run; eager calls
    # go through the Functions of _soft_function, tested in test_soft_function.py).
    def composed(n):
        torch.func.grad(lambda t: hg.soft_rank(t).sum())(torch.randn(3, n))

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(isotonic, "_pav_blocks", spy)
        if native_pav.available(torch.zeros(1)):
            # With the compiled kernel every row takes PAV (the eager Functions' blocks,
            # ties included).
            composed(isotonic.PAV_MIN_LENGTH - 1)
            assert calls == [torch.Size([3, isotonic.PAV_MIN_LENGTH - 1])]
            calls.clear()
        mp.setattr(native_pav, "available", lambda *tensors: False)
        composed(isotonic.PAV_MIN_LENGTH)
        assert calls == [torch.Size([3, isotonic.PAV_MIN_LENGTH])]
        composed(isotonic.PAV_MIN_LENGTH - 1)
        assert len(calls) == 1  # shorter rows without the kernel: the min-max formula


@pytest.mark.parametrize("reg", REGS)
@pytest.mark.parametrize("eps", [0.05, 0.5, 3.0])
def test_pav_matches_the_reference(reg, eps):
    x = long_rows(n=40)
    if reg == "kl" and eps < 0.1:
        x = x[:, :12].repeat(1, 3)  # rho/eps = 720 would overflow the reference's exp
        eps = 0.1
    got_sort = hg.soft_sort(x, descending=True, strength=eps, regularization=reg)
    got_rank = hg.soft_rank(x, strength=eps, regularization=reg)
    for row, s, r in zip(x.tolist(), got_sort.tolist(), got_rank.tolist(), strict=True):
        assert s == pytest.approx(ref_soft_sort_desc(row, eps, reg), rel=1e-12, abs=1e-11)
        assert r == pytest.approx(ref_soft_rank_asc(row, eps, reg), rel=1e-12, abs=1e-11)


@pytest.mark.parametrize("increasing", [True, False])
def test_isotonic_regression_by_pav(increasing):
    y = long_rows(n=64)
    v = isotonic_regression(y, increasing=increasing)
    for row, out in zip(y.tolist(), v.tolist(), strict=True):
        if increasing:
            ref = [-t for t in pav_decreasing([-t for t in row], [0.0] * len(row))]
        else:
            ref = pav_decreasing(row, [0.0] * len(row))
        assert out == pytest.approx(ref, rel=1e-12, abs=1e-12)
        order = torch.tensor(out).diff()
        assert bool((order >= 0).all()) if increasing else bool((order <= 0).all())


@pytest.mark.parametrize("reg", REGS)
def test_pav_and_min_max_agree_in_values_and_gradients(reg, monkeypatch):
    x = long_rows(n=50)
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=x.dtype)

    def run():
        out = []
        for fn in (hg.soft_sort, hg.soft_rank):
            t = x.clone().requires_grad_(True)
            y = fn(t, strength=0.7, regularization=reg)
            (y * g).sum().backward()
            out += [y, t.grad]
        return out

    with monkeypatch.context() as mp:
        composition_only(mp, by_pav=True)
        pav = run()
    with monkeypatch.context() as mp:
        composition_only(mp, by_pav=False)
        minmax = run()
    for a, b in zip(pav, minmax, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("reg", REGS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_pav_in_low_precision_is_within_ulps_of_float64(reg, dtype):
    """Half types compute in float32 and round once; float32 stays within 4 ulps of the
    float64 result relative to max(|value|, 1) (the min-max path's suffix log-sum-exps
    drift to 30 ulps on these rows: PAV sums each block directly)."""
    x = long_rows(n=50).to(dtype)
    for fn in (hg.soft_sort, hg.soft_rank):
        got = fn(x, strength=0.7, regularization=reg)
        ref = fn(x.double(), strength=0.7, regularization=reg)
        if dtype == torch.float32:
            err = ((got.double() - ref).abs() / ref.abs().clamp_min(1)).max().item()
            assert err <= 4 * torch.finfo(torch.float32).eps, (fn, err)
        else:
            assert torch.equal(got, ref.float().to(dtype)), fn


def test_pav_gradcheck():
    x = long_rows(n=36)[2:4].clone().requires_grad_(True)  # no ties: differentiable there
    for reg in REGS:
        for fn in (hg.soft_sort, hg.soft_rank):
            assert torch.autograd.gradcheck(
                lambda t, fn=fn, reg=reg: fn(t, strength=0.7, regularization=reg), (x,)
            )
    assert torch.autograd.gradcheck(lambda t: isotonic_regression(t), (x,))


@pytest.mark.compile
def test_pav_under_compile_vmap_and_grad():
    x = long_rows(n=40, count=3).float()
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(2))

    def loss(t):
        return (hg.soft_rank(t, strength=0.5) * g).sum() + (
            hg.soft_sort(t, strength=0.5, regularization="kl") * g
        ).sum()

    eager = torch.func.grad(loss)(x)
    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    xc = x.clone().requires_grad_(True)
    compiled(xc).backward()
    torch.testing.assert_close(xc.grad, eager)
    for reg in REGS:
        batched = torch.vmap(lambda t, reg=reg: hg.soft_sort(t, strength=0.5, regularization=reg))(
            x
        )
        torch.testing.assert_close(batched, hg.soft_sort(x, strength=0.5, regularization=reg))
    # float64: the eager Function (computed in double) and the composition (in the input's
    # dtype) agree to float64 rounding, not to float32's.
    x = x.double()
    per_sample = torch.vmap(torch.func.grad(lambda t: (hg.soft_rank(t, strength=0.5) ** 2).sum()))(
        x
    )
    t = x.clone().requires_grad_(True)
    (hg.soft_rank(t, strength=0.5) ** 2).sum().backward()
    torch.testing.assert_close(per_sample, t.grad)


def test_block_operator_passes_opcheck():
    s = long_rows(n=33, count=3)
    w = torch.arange(33.0, 0.0, -1.0, dtype=torch.float64).expand_as(s).contiguous()
    for kl in (False, True):
        torch.library.opcheck(isotonic._pav_blocks, (s, w, kl))
    starts = isotonic._pav_blocks(s, w, False)
    assert starts.dtype == torch.int64 and starts.shape == s.shape
    assert bool((starts <= torch.arange(33)).all()) and bool((starts.diff(dim=-1) >= 0).all())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_pav_any_finite_input_stays_finite(dtype):
    info = torch.finfo(dtype)
    x = torch.randn(2, 40, dtype=torch.float64).to(dtype)
    x[0, :4] = torch.tensor([info.max, -info.max, info.max / 2, info.tiny], dtype=dtype)
    x = x.requires_grad_(True)
    for strength in (info.tiny, 1.0, info.max):
        for fn in (hg.soft_sort, hg.soft_rank):
            for reg in REGS:
                x.grad = None
                y = fn(x, strength=strength, regularization=reg)
                y.sum().backward()
                assert y.dtype == dtype
                assert torch.isfinite(y).all() and torch.isfinite(x.grad).all(), (fn, reg, strength)
    huge = torch.full((1, 40), 1e300, dtype=torch.float64).cumsum(-1) / 40
    torch.testing.assert_close(isotonic_regression(huge.flip(-1)), huge.mean().expand(1, 40))


def test_long_rows_in_linear_memory():
    """A row of 200,000 entries (the min-max tables would need 40 G entries): small
    strengths give the exact sort and ranks, a huge one the mean."""
    x = torch.randn(2, 200_000, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert torch.equal(hg.soft_sort(x, strength=1e-7), torch.sort(x).values)
    smallest_gap = torch.sort(x).values.diff(dim=-1).min().item()
    assert smallest_gap > 0
    assert torch.equal(hg.soft_rank(x, strength=smallest_gap / 2), hg.rank(x))
    mean = hg.soft_sort(x, strength=1e9)
    torch.testing.assert_close(mean, x.mean(-1, keepdim=True).expand_as(x), rtol=0, atol=1e-3)
    t = x.clone().requires_grad_(True)
    hg.soft_rank(t, strength=1.0, regularization="kl").sum().backward()
    assert torch.isfinite(t.grad).all()
