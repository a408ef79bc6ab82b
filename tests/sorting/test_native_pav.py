"""The compiled PAV kernel (hardgrad.sorting._native_pav, _pav_kernel.c) through its
bindings, against references written here in float64: the blocks of the independent
sequential scan of test_pav (copied here; entry for entry), block statistics from those blocks
(``math.fsum`` means and log-sum-exps), and the gradients autograd gives through the
differentiable segment statistics of hardgrad.sorting._isotonic with the same blocks.
Also: the kl kernel's two forms (linear domain for rows spanning <= 300, log domain
beyond) at the threshold, row strides (shared rows, sliced and overlapping rows), the
permutation of the soft rank's output, float32 rounded once, empty batches and n = 1."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import hardgrad.sorting._native_pav as native_pav
from _sorting_references import reference_starts
from hardgrad.sorting._isotonic import _segment_log_sum_exp, _segment_mean

if not native_pav.available(torch.zeros(1)):
    pytest.skip(
        "the PAV kernel is not compiled here (no C compiler found, or HARDGRAD_NATIVE=0)",
        allow_module_level=True,
    )

F64, F32 = torch.float64, torch.float32
MODES = ("primal", "dual", "exp")
#: The kernel's kl linear-domain form takes rows whose s and w each span at most this.
LINEAR_SPAN = 300.0


# --------------------------------------------------------------------------- references


def _block_stat(seg: list[float], kl: bool) -> tuple[float, list[float], list[float]]:
    """A block's statistic (mean, or log-sum-exp), each entry's weight in it, and each
    entry's difference to it (kl: ``(x - max) - log(sum)``, with no cancellation of the
    log-sum-exp against a large ``x``)."""
    c = len(seg)
    if c == 1:
        return seg[0], [1.0], [0.0]
    if not kl:
        mean = math.fsum(seg) / c
        return mean, [1.0 / c] * c, [x - mean for x in seg]
    top = max(seg)
    terms = [math.exp(t - top) for t in seg]
    total = math.fsum(terms)
    log_total = math.log(total)
    gaps = [(x - top) - log_total for x in seg]
    return top + log_total, [t / total for t in terms], gaps


def reference(
    s: torch.Tensor, w: torch.Tensor, kl: bool, blocks: torch.Tensor | None = None
) -> dict[str, torch.Tensor]:
    """Blocks of the sequential scan (or ``blocks``, block starts as the kernel gives them)
    and, from them, every output of the kernel, in float64 (rows along the last dimension;
    any leading shape)."""
    shape = s.shape
    n = shape[-1]
    rows_s = s.double().reshape(-1, n).tolist()
    rows_w = w.double().expand(shape).reshape(-1, n).tolist()
    given = None if blocks is None else blocks.reshape(-1, n).tolist()
    keys = ("start", "ps", "pw", "stat_s", "stat_w", "gap_s")
    out: dict[str, list[list[float]]] = {k: [] for k in keys}
    for r, (rs, rw) in enumerate(zip(rows_s, rows_w, strict=True)):
        start = reference_starts(rs, rw, kl) if given is None else given[r]
        cuts = [i for i in range(n) if start[i] == i] + [n]
        row = {k: [0.0] * n for k in keys[1:]}
        for a, b in itertools.pairwise(cuts):
            for x, stat, weight in ((rs, "stat_s", "ps"), (rw, "stat_w", "pw")):
                value, p, gap = _block_stat(x[a:b], kl)
                row[stat][a:b] = [value] * (b - a)
                row[weight][a:b] = p
                if stat == "stat_s":
                    row["gap_s"][a:b] = gap
        out["start"].append(start)
        for k, v in row.items():
            out[k].append(v)
    ref = {k: torch.tensor(v, dtype=torch.int64 if k == "start" else F64) for k, v in out.items()}
    ref = {k: v.reshape(shape) for k, v in ref.items()}
    # s - stat_s as the gaps (kl: (s - max) - log(sum), no cancellation at large s)
    ref["primal"] = ref.pop("gap_s") + ref["stat_w"]
    ref["dual"] = ref["stat_s"] - ref["stat_w"]
    ref["exp"] = torch.exp(ref["primal"])
    return ref


def composed(s: torch.Tensor, w: torch.Tensor, kl: bool, mode: str, start: torch.Tensor):
    """The mode output as differentiable float64 tensor operations with the blocks ``start``
    (hardgrad.sorting._isotonic's segment statistics: block_statistics' PAV path)."""
    stat = _segment_log_sum_exp if kl else _segment_mean
    stat_s, stat_w = stat(s, start), stat(w, start)
    if mode == "dual":
        return stat_s - stat_w
    primal = (s - stat_s) + stat_w
    return torch.exp(primal) if mode == "exp" else primal


def soft_problems(x: torch.Tensor, eps: float) -> list[tuple[torch.Tensor, torch.Tensor, bool]]:
    """(s, w, kl) as the soft sorts pass them: soft_rank (s = x / eps sorted decreasingly,
    w = rho or log rho) and descending soft_sort (s = rho / eps, w = x sorted), rho
    expanded from one row (stride 0)."""
    n = x.shape[-1]
    rho = torch.arange(n, 0, -1, dtype=x.dtype).expand_as(x)
    s = torch.sort(x / eps, -1, descending=True).values
    w = torch.sort(x, -1, descending=True).values
    return [(s, rho, False), (s, rho.log(), True), (rho / eps, w, False), (rho / eps, w, True)]


def rows_for(n: int, seed: int, scale: float = 1.0) -> torch.Tensor:
    """Random rows, a row of exact ties (rounded), a row of repeated values, a constant row."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, n, generator=g, dtype=F64) * 3
    x[1] = torch.round(x[1])
    x[2, ::2] = x[2, 0]
    x[3] = 0.25
    return x * scale


def ulps(got: torch.Tensor, ref: torch.Tensor) -> float:
    """The largest distance of ``got`` from ``ref`` (float64) in units of the last place of
    ``got``'s dtype at ``ref`` (the gap to the next representable number up)."""
    dtype = got.dtype
    r = ref.to(dtype)
    gap = (torch.nextafter(r.abs(), torch.tensor(math.inf, dtype=dtype)) - r.abs()).double()
    return float(((got.double() - ref).abs() / gap).max()) if got.numel() else 0.0


def assert_close_to(got: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor, tol: float):
    """|got - ref| <= tol * (|ref| + scale of the row) entry by entry."""
    err = (got.double() - ref).abs()
    bound = tol * (ref.abs() + scale)
    bad = ~(err <= bound)
    assert not bool(bad.any()), (got[bad], ref[bad])


def row_scale(*xs: torch.Tensor) -> torch.Tensor:
    return sum(x.double().abs().amax(-1, keepdim=True) for x in xs)  # type: ignore[return-value]


# --------------------------------------------------------------------------- l2 blocks


def test_l2_blocks_equal_the_sequential_scan():
    """Entry for entry on the soft sorts' problems (strengths 0.01 to 300) and on generic
    rows, at n = 1, 2, 3, 100, 1000, with ties, at 1e30 and 1e-30, in float32 and float64;
    the values (primal, dual) within a few ulps of float64 from the same blocks."""
    cases = []
    for n in (1, 2, 3, 100, 1000):
        for eps in (0.01, 1.0, 300.0) if n < 1000 else (1.0,):
            cases += soft_problems(rows_for(n, seed=n), eps)
        g = torch.Generator().manual_seed(7 + n)
        s, w = torch.randn(2, 3, n, generator=g, dtype=F64)
        cases.append((s, w, False))  # unsorted rows: any problem
    for scale in (1e30, 1e-30):
        cases += soft_problems(rows_for(50, seed=3, scale=scale), 1.0)
        g = torch.Generator().manual_seed(11)
        s, w = torch.randn(2, 3, 50, generator=g, dtype=F64) * scale
        cases.append((s, w, False))
    for s, w, kl in cases:
        if kl:
            continue
        for dtype in (F64, F32):
            sd, wd = s.to(dtype), w.to(dtype)
            ref = reference(sd, wd, False)
            start, weight_s, weight_w, out = native_pav.forward(sd, wd, False, "primal")
            assert start.dtype == torch.int64 and start.shape == sd.shape
            assert weight_s is None and weight_w is None
            assert torch.equal(start, ref["start"]), (dtype, s.shape)
            assert torch.equal(native_pav.forward(sd, wd, False, None)[0], start)
            assert out.dtype == dtype
            _, _, _, dual = native_pav.forward(sd, wd, False, "dual")
            scale = row_scale(sd, wd)
            tol = 4 * torch.finfo(dtype).eps
            assert_close_to(out, ref["primal"], scale, tol)
            assert_close_to(dual, ref["dual"], scale, tol)


def test_l2_values_of_a_block_of_one_are_exact():
    """Entries alone in their block: primal gives w and dual s - w, bit for bit."""
    n = 6
    s = torch.arange(n, 0, -1, dtype=F64) * 1e30  # decreasing by far: nothing pools
    w = torch.randn(n, generator=torch.Generator().manual_seed(12), dtype=F64)
    start, _, _, primal = native_pav.forward(s, w, False, "primal")
    assert torch.equal(start, torch.arange(n))
    assert torch.equal(primal, w)
    assert torch.equal(native_pav.forward(s, w, False, "dual")[3], s - w)


# --------------------------------------------------------------------------- kl


def _kl_rows(
    n: int, seed: int, spread: float, count: int = 4
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """kl problems whose rows span about ``spread`` times their typical size: the soft
    sorts' (with ties below 1e8; see test_kl_primal_of_tied_entries_at_large_magnitudes)
    and generic ones."""
    out = []
    x = rows_for(n, seed)[: 1 if spread > 1e8 else count] * spread
    for s, w, kl in soft_problems(x, 1.0) + soft_problems(x / spread, 1.0 / spread):
        if kl:
            out.append((s, w))
    g = torch.Generator().manual_seed(seed)
    s, w = torch.randn(2, min(count, 2), n, generator=g, dtype=F64) * spread
    out.append((s, w))
    return out


def check_kl(s: torch.Tensor, w: torch.Tensor, dtype: torch.dtype) -> bool:
    """The kernel's kl outputs on ``s``, ``w`` cast to ``dtype``: weights and values are the
    float64 statistics of its own blocks (float64: 1e-14 of the row's scale; float32: the
    float64 values rounded once, 1 ulp), and its values those of the sequential scan's
    blocks, which it may split differently only where adjacent blocks' values tie.
    Returns whether the blocks are the scan's."""
    s, w = s.to(dtype), w.to(dtype)
    scan = reference(s, w, True)
    start = native_pav.forward(s, w, True, None)[0]
    mine = reference(s, w, True, start)
    scale = row_scale(s, w.expand_as(s))
    for mode in MODES:
        got_start, weight_s, weight_w, out = native_pav.forward(s, w, True, mode)
        assert torch.equal(got_start, start)
        assert out.dtype == dtype and weight_s.dtype == F64
        torch.testing.assert_close(weight_s, mine["ps"], rtol=1e-13, atol=1e-15)
        torch.testing.assert_close(weight_w, mine["pw"], rtol=1e-13, atol=1e-15)
        for ref in (mine, scan):
            if dtype == F32:
                finite = ref[mode].abs() < 1e30
                assert ulps(out[finite], ref[mode][finite]) <= 1.0, mode
            elif mode == "exp":
                torch.testing.assert_close(out, ref["exp"], rtol=1e-12, atol=0)
            else:
                assert_close_to(out, ref[mode], scale, 1e-14)
    return torch.equal(start, scan["start"])


def test_kl_values_and_weights_in_both_forms():
    """Blocks, values (primal, dual, exp) and weights against the float64 reference, on
    rows in the linear form (span <= 300), the log form (span > 300, up to 1e30) and
    batches mixing both; the blocks are the scan's on rows without ties."""
    spans_seen = set()
    for n in (1, 2, 5, 100, 1000):
        for spread in (0.5, 30.0, 1e4, 1e30) if n < 1000 else (0.5, 1e4):
            for s, w in _kl_rows(n, seed=n, spread=spread, count=4 if n < 1000 else 2):
                wide = w.expand_as(s)
                span = torch.maximum(s.amax(-1) - s.amin(-1), wide.amax(-1) - wide.amin(-1))
                spans_seen |= {bool(v <= LINEAR_SPAN) for v in span.flatten()}
                check_kl(s, w, F64)
            g = torch.Generator().manual_seed(n)
            s, w = torch.randn(2, 3 if n < 1000 else 1, n, generator=g, dtype=F64) * spread
            assert check_kl(s, w, F64), (n, spread)  # no ties: the scan's blocks
    assert spans_seen == {True, False}


def test_kl_float32_is_rounded_once():
    """float32 rows are read exactly and every operation is in double: the outputs are the
    float64 reference (from the same float32 inputs) rounded once, up to 1 ulp."""
    for n in (3, 40, 400):
        for spread in (1.0, 1e3):
            for s, w in _kl_rows(n, seed=n + 1, spread=spread):
                check_kl(s, w, F32)
                s32, w32 = s.float(), w.float()
                ref = reference(s32, w32, False)
                start, _, _, out = native_pav.forward(s32, w32, False, "primal")
                assert torch.equal(start, ref["start"])
                assert ulps(out, ref["primal"]) <= 1.0


def test_kl_primal_of_tied_entries_at_large_magnitudes():
    """Two equal entries of s (the soft rank's problem, w = log rho) pool into one block:
    primal = (s - (s + log 2)) + log 3 = log 1.5, however large s is (the kernel computes
    s - lse as (s - max) - log(sum): at 1e16 the plain form gave [3, 3])."""
    for c in (1.0, 1e16, 1e30):
        s = torch.tensor([c, c], dtype=F64)
        w = torch.tensor([2.0, 1.0], dtype=F64).log()
        start, _, _, out = native_pav.forward(s, w, True, "exp")
        assert torch.equal(start, torch.zeros(2, dtype=torch.int64))
        torch.testing.assert_close(out, torch.full((2,), 1.5, dtype=F64), rtol=1e-12, atol=0)


def _shifted_terms(original, factor: float):
    """A stand-in for the bindings' e^(x - max) terms, s's (the first asked for) multiplied
    by ``factor``: the linear form's blocks and weights are unchanged, its log-sum-exps of
    s move by log(factor); the log form does not read the terms."""
    calls = []

    def terms(rows, stride):
        t, step = original(rows, stride)
        calls.append(None)
        return (t * factor if len(calls) == 1 else t), step

    return terms


def test_kl_forms_meet_at_the_threshold(monkeypatch):
    """A row of s (or of w) spanning exactly 300 takes the linear form, one ulp more the log
    form (seen by scaling the terms the bindings hand the kernel, which only the linear
    form reads); the two give the same values (1e-14 of the row's span), and rows spanning
    299 and 301 match the reference."""
    cluster = [0.5, 0.42, 0.3, 0.22, 0.1, 0.0]  # gaps below log((k+1)/k) of log rho: pooled
    monkeypatch.setattr(native_pav, "VECTORISED_TERMS_MIN_ENTRIES", 0)  # rows this small too
    for which in ("s", "w"):
        dual = {}
        for top in (LINEAR_SPAN, math.nextafter(LINEAR_SPAN, math.inf), 299.0, 301.0):
            x = torch.tensor([top, *cluster], dtype=F64)
            n = x.numel()
            rho = torch.arange(n, 0, -1, dtype=F64)
            # the soft rank's problem (s = x, w = log rho) or the soft sort's (w = x - top)
            s, w = (x, rho.log()) if which == "s" else (rho * 0.05, x - top)
            ref = reference(s, w, True)
            assert ref["start"].unique().numel() < n  # a pooled block
            outs = {}
            for factor in (1.0, 2.0):
                with monkeypatch.context() as m:
                    m.setattr(native_pav, "_terms", _shifted_terms(native_pav._terms, factor))
                    outs[factor] = native_pav.forward(s, w, True, "dual")
            start, _, _, out = outs[1.0]
            assert torch.equal(start, ref["start"])
            assert_close_to(out, ref["dual"], row_scale(s, w), 1e-15)
            linear = not torch.equal(outs[2.0][3], out)
            assert linear == (top <= LINEAR_SPAN), (which, top)
            dual[top] = out
        at, above = dual[LINEAR_SPAN], dual[math.nextafter(LINEAR_SPAN, math.inf)]
        assert_close_to(above, at, torch.tensor(LINEAR_SPAN), 1e-14)


def test_kl_terms_computed_in_the_kernel(monkeypatch):
    """Without the bindings' vectorised terms (NULL) the kernel computes them itself, once
    for a row shared by all rows: the same outputs."""
    x = rows_for(30, seed=5)
    cases = [(s, w) for s, w, kl in soft_problems(x, 0.5) if kl]
    expected = [[native_pav.forward(s, w, True, m) for m in MODES] for s, w in cases]
    monkeypatch.setattr(native_pav, "_terms", lambda rows, stride: (None, 0))
    for (s, w), want in zip(cases, expected, strict=True):
        for mode, e in zip(MODES, want, strict=True):
            got = native_pav.forward(s, w, True, mode)
            for a, b in zip(got, e, strict=True):
                torch.testing.assert_close(a, b, rtol=1e-15, atol=1e-300)


# --------------------------------------------------------------------------- strides


def test_shared_sliced_and_overlapping_rows_read_in_place():
    """One row expanded over all rows (stride 0, for s and for w, 2-D and 3-D), rows sliced
    out of wider ones, overlapping windows and transposed (copied) rows: the same outputs
    as the materialised .contiguous() tensors, bit for bit."""
    n = 12
    g = torch.Generator().manual_seed(8)
    row = torch.sort(torch.randn(n, generator=g, dtype=F64) * 4, descending=True).values
    rho = torch.arange(n, 0, -1, dtype=F64)
    batch = torch.sort(torch.randn(6, n, generator=g, dtype=F64) * 4, -1, True).values
    wide = torch.randn(6, 2 * n, generator=g, dtype=F64)
    base = torch.randn(n + 5, generator=g, dtype=F64)
    cases = [
        (row.expand(6, n), rho.log().expand(6, n)),  # both shared
        (batch, rho.expand(6, n)),  # w shared (the soft rank)
        ((rho / 0.3).expand(2, 3, n), batch.reshape(2, 3, n)),  # s shared (the soft sort)
        (wide[:, :n], wide[:, n:]),  # rows 2n apart
        (base.as_strided((6, n), (1, 1)), batch),  # overlapping windows
        (torch.randn(n, 6, generator=g, dtype=F64).t(), batch),  # last stride 6: copied
    ]
    for s, w in cases:
        for dtype in (F64, F32):
            sd, wd = s.to(dtype), w.to(dtype)
            for kl in (False, True):
                for mode in (None, *MODES):
                    got = native_pav.forward(sd, wd, kl, mode)
                    want = native_pav.forward(sd.contiguous(), wd.contiguous(), kl, mode)
                    for a, b in zip(got, want, strict=True):
                        assert (a is None and b is None) or torch.equal(a, b), (kl, mode)


def test_perm_scatters_the_output_and_the_backward_reads_through_it():
    """Forward with perm: out[perm[i]] = entry i's (= empty_like(v).scatter_(-1, perm, v));
    backward with perm: the incoming gradient gathered, the gradients scattered."""
    g = torch.Generator().manual_seed(9)
    x = torch.randn(5, 9, generator=g, dtype=F64) * 2
    for dtype in (F64, F32):
        for s, w, kl in soft_problems(x.to(dtype), 0.7):
            perm = torch.argsort(torch.rand(s.shape, generator=g), -1)
            grad = torch.randn(s.shape, generator=g, dtype=F64).to(dtype)
            for mode in MODES:
                if mode == "exp" and not kl:
                    continue
                start, ps, pw, plain = native_pav.forward(s, w, kl, mode)
                start2, ps2, _, out = native_pav.forward(s, w, kl, mode, perm)
                assert torch.equal(start2, start) and (ps is None or torch.equal(ps2, ps))
                assert torch.equal(out, torch.empty_like(plain).scatter_(-1, perm, plain))
                gs, gw = native_pav.backward(kl, mode, start, ps, pw, grad, True, True, perm, out)
                hs, hw = native_pav.backward(
                    kl, mode, start, ps, pw, grad.gather(-1, perm), True, True, out=plain
                )
                assert torch.equal(gs, torch.empty_like(hs).scatter_(-1, perm, hs))
                assert torch.equal(gw, torch.empty_like(hw).scatter_(-1, perm, hw))


# --------------------------------------------------------------------------- backward


def _backward_cases():
    for n in (1, 4, 40):
        x = rows_for(n, seed=20 + n)
        for eps in (0.3, 3.0):
            yield from soft_problems(x, eps)
    g = torch.Generator().manual_seed(21)
    s, w = torch.randn(2, 3, 17, generator=g, dtype=F64) * 2
    yield s, w, False
    yield s, w, True
    yield s * 200, w, True  # log form


def test_backward_equals_autograd_through_the_composition():
    """Every mode, every need_s/need_w combination, float64: the kernel's gradients equal
    autograd's through the segment statistics with the kernel's blocks (1e-13); float32
    (inputs, weights and incoming gradient rounded as the Functions have them) within
    2 ulps of that float64 result."""
    g = torch.Generator().manual_seed(22)
    for s, w, kl in _backward_cases():
        w = w.expand_as(s)
        grad = torch.randn(s.shape, generator=g, dtype=F64)
        for mode in MODES if kl else ("primal", "dual"):
            start, ps, pw, out = native_pav.forward(s, w, kl, mode)
            ts, tw = s.clone().requires_grad_(), w.clone().requires_grad_()
            want = torch.autograd.grad(composed(ts, tw, kl, mode, start), (ts, tw), grad)
            scale = row_scale(grad * (out if mode == "exp" else 1))
            for need in ((True, True), (True, False), (False, True)):
                got = native_pav.backward(kl, mode, start, ps, pw, grad, *need, out=out)
                for flag, a, b in zip(need, got, want, strict=True):
                    if not flag:
                        assert a is None
                        continue
                    assert a.dtype == F64
                    assert_close_to(a, b, scale, 1e-13)
            # float32: the kernel reads the float32 inputs exactly; its output rounded once
            s32, w32, g32 = s.float(), w.float(), grad.float()
            start, ps, pw, out = native_pav.forward(s32, w32, kl, mode)
            ts, tw = s32.double().requires_grad_(), w32.double().requires_grad_()
            incoming = g32.double()
            if mode == "exp":  # exp's derivative: the (rounded) output the Functions keep
                incoming = incoming * out.double()
            inner = "primal" if mode == "exp" else mode
            want = torch.autograd.grad(composed(ts, tw, kl, inner, start), (ts, tw), incoming)
            got = native_pav.backward(kl, mode, start, ps, pw, g32, True, True, out=out)
            # 2 ulps of the value, or of the row's largest term where it cancels
            cancel = 1e-15 * row_scale(incoming)
            for a, b in zip(got, want, strict=True):
                assert a.dtype == F32
                err = (a.double() - b).abs()
                gap = torch.finfo(F32).eps * b.abs()
                assert bool((err <= 2 * gap + cancel).all()), (kl, mode, (err / gap).max())


# --------------------------------------------------------------------------- shapes


def test_empty_batch_and_rows_of_one():
    for dtype in (F64, F32):
        for kl in (False, True):
            empty = torch.zeros(0, 5, dtype=dtype)
            start, ps, pw, out = native_pav.forward(empty, empty, kl, "primal")
            assert start.shape == out.shape == (0, 5) and out.dtype == dtype
            assert (ps is None) == (not kl)
            gs, gw = native_pav.backward(kl, "primal", start, ps, pw, empty, True, True)
            assert gs.shape == gw.shape == (0, 5)
            empty3 = torch.zeros(2, 0, 3, dtype=dtype)
            assert native_pav.forward(empty3, empty3, kl, "dual")[3].shape == (2, 0, 3)

            s = torch.tensor([[3.0], [-2.0], [1e30]], dtype=dtype)
            w = torch.tensor([[0.5], [7.0], [-1e30]], dtype=dtype)
            g = torch.tensor([[1.5], [-2.0], [0.25]], dtype=dtype)
            expected = {"primal": w, "dual": s - w, "exp": torch.exp(w.double()).to(dtype)}
            for mode in MODES if kl else ("primal", "dual"):
                start, ps, pw, out = native_pav.forward(s, w, kl, mode)
                assert torch.equal(start, torch.zeros_like(start))
                assert torch.equal(out, expected[mode]), mode
                if kl:
                    assert torch.equal(ps, torch.ones(3, 1, dtype=F64))
                gs, gw = native_pav.backward(kl, mode, start, ps, pw, g, True, True, out=out)
                if mode == "dual":
                    assert torch.equal(gs, g) and torch.equal(gw, -g)
                else:  # primal: d(w)/ds = 0, d(w)/dw = 1 (exp: times the output)
                    gg = g if mode == "primal" else (g.double() * out.double()).to(dtype)
                    assert torch.equal(gs, torch.zeros_like(g)) and torch.equal(gw, gg)


def test_available_only_for_cpu_float32_and_float64_of_one_dtype():
    assert native_pav.available(torch.zeros(2), torch.zeros(2))
    assert native_pav.available(torch.zeros(2, dtype=F64))
    assert not native_pav.available(torch.zeros(2), torch.zeros(2, dtype=F64))
    assert not native_pav.available(torch.zeros(2, dtype=torch.float16))
    assert not native_pav.available(torch.zeros(2, dtype=torch.bfloat16))
    assert not native_pav.available(torch.zeros(2, device="meta"))


def test_kl_terms_from_torch_or_from_the_kernel_agree(monkeypatch):
    """The kl linear form's terms e^(x - max): computed by torch (vectorised, from
    VECTORISED_TERMS_MIN_ENTRIES entries) or by the kernel's own exp (below): the same
    blocks, values within 1e-15 of the row's scale and weights within 1e-15."""
    for s, w in _kl_rows(40, seed=7, spread=3.0):
        outs = []
        for threshold in (0, 10**9):
            monkeypatch.setattr(native_pav, "VECTORISED_TERMS_MIN_ENTRIES", threshold)
            outs.append(native_pav.forward(s, w, True, "primal"))
        (start, ps, pw, out), (start2, ps2, pw2, out2) = outs
        assert torch.equal(start, start2)
        assert_close_to(out2, out, row_scale(s, w.expand_as(s)), 1e-15)
        torch.testing.assert_close(ps2, ps, rtol=0, atol=1e-15)
        torch.testing.assert_close(pw2, pw, rtol=0, atol=1e-15)


def test_the_radix_sort_leaves_large_calls_to_torch_sort_on_many_threads(monkeypatch):
    """torch.sort splits rows over its threads from TORCH_PARALLEL_ENTRIES entries; the
    radix sort, on one thread, is kept only where it still wins (fewer threads than its
    one-thread advantage: 2 for rows under 256 entries, 4 from there)."""
    short, long_ = torch.randn(512, 100), torch.randn(64, 1024)
    small = torch.randn(64, 100)  # under TORCH_PARALLEL_ENTRIES: always the radix sort
    for threads, expect_short, expect_long in (
        (1, True, True),
        (2, False, True),
        (4, False, False),
    ):
        monkeypatch.setattr(torch, "get_num_threads", lambda t=threads: t)
        assert (native_pav.sort_descending(short) is not None) == expect_short, threads
        assert (native_pav.sort_descending(long_) is not None) == expect_long, threads
        assert native_pav.sort_descending(small) is not None
    values, indices = torch.sort(long_, stable=True, dim=-1, descending=True)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    got = native_pav.sort_descending(long_)
    assert got is not None and torch.equal(got[0], values) and torch.equal(got[1], indices)
