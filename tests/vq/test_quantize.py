"""hg.vector_quantize and hg.vq: forward exactness, each backward against an independent
float64 formula, safe values, torch.compile and torch.func, bad input (FSQ and LFQ are in
test_fsq_lfq.py)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.func import grad, jvp, vmap

import hardgrad as hg

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _data(n: int = 6, k: int = 5, d: int = 3, dtype=torch.float32, seed: int = 0):
    g = _gen(seed)
    z = torch.randn(n, d, generator=g, dtype=torch.float64).to(dtype)
    codebook = torch.randn(k, d, generator=g, dtype=torch.float64).to(dtype)
    return z, codebook


def _argmin64(z: torch.Tensor, codebook: torch.Tensor, distance: str = "l2") -> torch.Tensor:
    """Brute force in float64, one pair at a time."""
    out = []
    for row in z.double():
        best, best_k = math.inf, -1
        for k, code in enumerate(codebook.double()):
            if distance == "l2":
                value = float(((row - code) ** 2).sum())
            else:
                value = 1 - float(row @ code) / (float(row.norm()) * float(code.norm()))
            if value < best:
                best, best_k = value, k
        out.append(best_k)
    return torch.tensor(out)


def _rotation_reference(z: torch.Tensor, q: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """lambda R^T g per row, R built as a matrix from Fifty et al.'s Eq. 4, in float64."""
    rows = []
    for e, c, v in zip(z.double(), q.double(), g.double(), strict=True):
        e_hat, q_hat = e / e.norm(), c / c.norm()
        r = (e_hat + q_hat) / (e_hat + q_hat).norm()
        eye = torch.eye(len(e), dtype=torch.float64)
        rot = eye - 2 * torch.outer(r, r) + 2 * torch.outer(q_hat, e_hat)
        assert torch.allclose(rot @ e_hat, q_hat)  # it is the rotation taking e to q
        assert torch.allclose(rot.T @ rot, eye) and math.isclose(float(torch.det(rot)), 1.0)
        rows.append(c.norm() / e.norm() * rot.T @ v)
    return torch.stack(rows)


# --------------------------------------------------------------------------- forward


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("estimator", ["st", "rotation", "gumbel"])
def test_forward_is_the_codebook_row_bit_for_bit(dtype, estimator):
    z, codebook = _data(40, 7, 4, dtype)
    z = (z * 300).requires_grad_()  # large magnitudes
    z_q, idx = hg.vector_quantize(z, codebook, estimator=estimator, generator=_gen(1))
    assert z_q.dtype == dtype and idx.dtype == torch.int64 and idx.shape == (40,)
    assert torch.equal(z_q.detach(), codebook[idx])
    if estimator != "gumbel":
        assert torch.equal(idx, _argmin64(z.detach(), codebook.float().to(dtype)))


@pytest.mark.parametrize("distance", ["l2", "cosine"])
def test_indices_are_the_argmin_of_a_float64_brute_force(distance):
    z, codebook = _data(50, 9, 5, torch.float64, seed=3)
    _, idx = hg.vector_quantize(z, codebook, distance=distance)
    assert torch.equal(idx, _argmin64(z, codebook, distance))


def test_ties_and_duplicates_go_to_the_lowest_index():
    codebook = torch.tensor([[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [0.3, 0.7], [0.3, 0.7]])
    z = torch.tensor([[0.0, -1.0], [0.9, 0.1], [0.3, 0.7], [0.0, 5.0], [0.29, 0.71]])
    for estimator in ("st", "rotation"):
        _, idx = hg.vector_quantize(z, codebook, estimator=estimator)
        assert idx.tolist() == [0, 0, 3, 3, 3]
    # many duplicates across a large codebook (blocked computation)
    big = torch.randn(300, 8, generator=_gen(0)).repeat(3, 1)
    zz = torch.randn(2000, 8, generator=_gen(1))
    idx = hg.vq.nearest_code(zz, big)
    assert int(idx.max()) < 300


@pytest.mark.parametrize("direct", ["every code", "candidates"])
@pytest.mark.parametrize("distance", ["l2", "cosine"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_screened_search_is_the_direct_argmin(distance, dtype, direct, monkeypatch):
    """The matrix-product screen of the nearest-code search keeps every code that can be
    the direct form's argmin: the same indices as the direct distances of every pair, on
    data made to defeat it (a common offset a thousand times the spread, rows midway
    between two codes, duplicated codes, codes of very different norms), across blocks,
    and on NaN rows (validation off); the rows it leaves unsure decided over every code
    and over their candidates only."""
    from hardgrad.vq import _search as vq

    limit = 1 << 40 if direct == "every code" else 0
    gen = torch.Generator().manual_seed(5)
    codes = torch.randn(64, 16, generator=gen, dtype=torch.float64)
    codes = torch.cat([codes, codes[:8], 1e-3 * codes[8:16], 30 * codes[16:24]]).to(dtype)
    rows = [
        1e3 + torch.randn(100, 16, generator=gen, dtype=torch.float64) * 1e-1,
        0.5 * (codes[:40] + codes[1:41]).double(),  # midway: a tie up to rounding
        codes[:40].double() + 1e-9 * torch.randn(40, 16, generator=gen, dtype=torch.float64),
        torch.randn(300, 16, generator=gen, dtype=torch.float64) * 3,
    ]
    offset_codes = codes.double() * 1e-1 + 1e3
    unsure = []
    real_direct = vq._direct

    def counting_direct(rows, codes, candidate, count, which, distance):
        unsure.append(which.numel())
        return real_direct(rows, codes, candidate, count, which, distance)

    monkeypatch.setattr(vq, "_direct", counting_direct)
    monkeypatch.setattr(vq, "_DIRECT_ALL_MAX_TERMS", limit)
    for book in (codes, offset_codes.to(dtype)):
        z = torch.cat(rows).to(dtype)
        expected = vq._distances(z, book, distance).argmin(-1)
        assert torch.equal(vq._nearest_rows(z, book, distance), expected)
        with monkeypatch.context() as blocks:
            blocks.setattr(vq, "_BLOCK", 7 * book.shape[0])  # 7 rows per block
            assert torch.equal(vq._nearest_rows(z, book, distance), expected)
    z = torch.randn(6, 16, generator=gen, dtype=torch.float64).to(dtype)
    z[2] = math.nan
    z[4, 3] = math.inf
    expected = vq._distances(z, codes, distance).argmin(-1)
    assert torch.equal(vq._nearest_rows(z, codes, distance), expected)
    assert sum(unsure) > 40  # the data did leave rows to the direct form


def test_dim_moves_the_code_axis():
    z, codebook = _data(6, 5, 3)
    image = z.reshape(2, 3, 3).permute(0, 2, 1)  # (B, D, T)
    z_q, idx = hg.vector_quantize(image, codebook, dim=1)
    z_q2, idx2 = hg.vector_quantize(image.permute(0, 2, 1), codebook)
    assert torch.equal(z_q, z_q2.permute(0, 2, 1)) and torch.equal(idx, idx2)


def test_empty_batch():
    codebook = torch.randn(4, 3)
    z_q, idx = hg.vector_quantize(torch.empty(0, 3, requires_grad=True), codebook)
    assert z_q.shape == (0, 3) and idx.shape == (0,)


# --------------------------------------------------------------------------- backward


@pytest.mark.parametrize("dtype", DTYPES)
def test_st_backward_is_the_identity(dtype):
    z, codebook = _data(10, 4, 3, dtype)
    z.requires_grad_()
    codebook.requires_grad_()
    z_q, _ = hg.vector_quantize(z, codebook)
    g = torch.randn(z.shape, generator=_gen(2)).to(dtype)
    z_q.backward(g)
    assert torch.equal(z.grad, g)
    assert codebook.grad is None  # no gradient to the codebook through z_q


@pytest.mark.parametrize("dtype", DTYPES)
def test_rotation_backward_matches_the_float64_matrix_formula(dtype):
    z, codebook = _data(30, 6, 4, torch.float64, seed=5)
    zl = z.to(dtype).requires_grad_()
    cb = codebook.to(dtype).requires_grad_()
    z_q, idx = hg.vector_quantize(zl, cb, estimator="rotation")
    g = torch.randn(z.shape, generator=_gen(6), dtype=torch.float64)
    z_q.backward(g.to(dtype))
    expected = _rotation_reference(zl.detach(), cb.detach()[idx], g.to(dtype))
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
    torch.testing.assert_close(zl.grad.double(), expected, rtol=tol[dtype], atol=tol[dtype])
    assert cb.grad is None


def test_rotation_is_norm_preserving_up_to_lambda():
    z, codebook = _data(20, 6, 5, torch.float64, seed=7)
    z.requires_grad_()
    z_q, _ = hg.vector_quantize(z, codebook, estimator="rotation")
    g = torch.randn(z.shape, generator=_gen(8), dtype=torch.float64)
    z_q.backward(g)
    lam = z_q.detach().norm(dim=-1) / z.detach().norm(dim=-1)
    torch.testing.assert_close(z.grad.norm(dim=-1), lam * g.norm(dim=-1))


def test_rotation_safe_values():
    # z = 0: straight through; z_q = 0: zero gradient; antipodal: the reflection
    z = torch.tensor([[0.0, 0.0, 0.0], [1.0, 2.0, 0.0], [2.0, -1.0, 0.5], [1e-30, 0.0, 0.0]])
    q = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [-4.0, 2.0, -1.0], [0.0, 1.0, 0.0]])
    for dtype in DTYPES:
        zl = z.clone().to(dtype).requires_grad_()
        y = hg.vq.rotation_gradient(zl, q.to(dtype))
        g = torch.tensor([[0.3, -0.2, 1.0], [1.0, 1.0, 1.0], [0.5, 1.0, 2.0], [0.0, 1.0, 0.0]])
        y.backward(g.to(dtype))
        out = zl.grad.double()
        assert torch.equal(out[0], g[0].to(dtype).double())
        assert torch.equal(out[1], torch.zeros(3, dtype=torch.float64))
        e = z[2].double() / z[2].double().norm()
        reflect = 2.0 * (g[2].double() - 2 * e * (e @ g[2].double()))  # lambda = 2
        torch.testing.assert_close(out[2], reflect, rtol=2e-2, atol=2e-2)
        assert torch.isfinite(out[:3]).all()
    # a tiny z (norm underflows when squared) still rotates: e_y back to e_x, times 1e30
    zl = z[3:].clone().detach().requires_grad_()
    hg.vq.rotation_gradient(zl, q[3:]).backward(g[3:])
    torch.testing.assert_close(zl.grad / 1e30, torch.tensor([[1.0, 0.0, 0.0]]), atol=1e-6, rtol=0)


def test_near_antipodal_stays_finite_and_norm_preserving():
    z = torch.tensor([[1.0, 1e-5, 0.0]]).requires_grad_()
    q = torch.tensor([[-2.0, 0.0, 0.0]])
    hg.vq.rotation_gradient(z, q).backward(torch.tensor([[1.0, 2.0, 3.0]]))
    assert torch.isfinite(z.grad).all()
    torch.testing.assert_close(
        z.grad.norm(), 2 * torch.tensor([1.0, 2.0, 3.0]).norm(), rtol=1e-3, atol=0
    )


def test_gumbel_backward_matches_the_float64_formula():
    """ST-Gumbel through logits -|z - c|^2/tau: the same draw replayed in float64."""
    z, codebook = _data(8, 5, 3, torch.float64, seed=9)
    tau, est_tau = 0.7, 0.5
    z.requires_grad_()
    est = hg.estimators.STGumbel(tau=est_tau)
    z_q, idx = hg.vector_quantize(z, codebook, estimator=est, tau=tau, generator=_gen(3))
    g = torch.randn(z.shape, generator=_gen(4), dtype=torch.float64)
    z_q.backward(g)
    # reference: the same Gumbel noise (hg.categorical's draw on the same generator)
    logits = -((z.detach()[:, None] - codebook[None]) ** 2).sum(-1) / tau
    sample = hg.categorical(logits, estimator=est, generator=_gen(3))
    assert torch.equal(sample.argmax(-1), idx)
    noise = est.noise(logits, _gen(3))  # the Gumbel draw hg.categorical made
    assert isinstance(noise, torch.Tensor)
    gumbel_logits = logits + noise
    y = torch.softmax(gumbel_logits / est_tau, -1)  # (N, K)
    upstream = g @ codebook.T  # dL/dD_k
    dlogits = y * (upstream - (y * upstream).sum(-1, keepdim=True)) / est_tau
    dz = (dlogits[:, :, None] * (-2.0 / tau) * (z.detach()[:, None] - codebook[None])).sum(1)
    torch.testing.assert_close(z.grad, dz)


# --------------------------------------------------------------------------- transforms


@pytest.mark.parametrize("estimator", ["st", "rotation"])
def test_torch_func_grad_and_vmap(estimator):
    z, codebook = _data(6, 5, 3, torch.float64)
    w = torch.randn(z.shape, generator=_gen(1), dtype=torch.float64)

    def loss(t, v):
        return (hg.vector_quantize(t, codebook, estimator=estimator)[0] * v).sum()

    per_row = vmap(grad(loss))(z, w)
    zl = z.clone().requires_grad_()
    loss(zl, w).backward()
    torch.testing.assert_close(per_row, zl.grad)
    batched = vmap(lambda t: hg.vector_quantize(t, codebook, estimator=estimator)[0])(z)
    assert torch.equal(batched, hg.vector_quantize(z, codebook)[0])


def test_rotation_forward_mode_is_the_transpose():
    z, codebook = _data(4, 5, 3, torch.float64)
    q = codebook[hg.vq.nearest_code(z, codebook)]
    t = torch.randn(z.shape, generator=_gen(2), dtype=torch.float64)
    g = torch.randn(z.shape, generator=_gen(3), dtype=torch.float64)
    _, tangent = jvp(lambda x: hg.vq.rotation_gradient(x, q), (z,), (t,))
    zl = z.clone().requires_grad_()
    hg.vq.rotation_gradient(zl, q).backward(g)
    # <J t, g> == <t, J^T g> per row
    torch.testing.assert_close((tangent * g).sum(-1), (t * zl.grad).sum(-1))


@pytest.mark.compile
@pytest.mark.parametrize("estimator", ["st", "rotation", "gumbel"])
def test_compile_fullgraph_changing_batch(estimator):
    codebook = torch.randn(5, 3, generator=_gen(0))

    def fn(t):
        return hg.vector_quantize(t, codebook, estimator=estimator)[0]

    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    for batch in (8, 5, 3):
        x = torch.randn(batch, 3, generator=_gen(batch))
        a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
        torch.manual_seed(batch)
        ya = compiled(a)
        torch.manual_seed(batch)
        yb = fn(b)
        assert torch.equal(ya, yb)
        ya.sum().backward()
        yb.sum().backward()
        torch.testing.assert_close(a.grad, b.grad)
    torch._dynamo.reset()


# --------------------------------------------------------------------------- bad input


def test_bad_input_names_the_argument():
    z, codebook = _data()
    with pytest.raises(ValueError, match=r"codebook.*D = z.shape\[1\] = 3.*D=4"):
        hg.vector_quantize(z, torch.randn(5, 4))
    with pytest.raises(TypeError, match="`z` to be a floating-point"):
        hg.vector_quantize(z.long(), codebook)
    with pytest.raises(TypeError, match="`codebook` to be a floating-point"):
        hg.vector_quantize(z, codebook.long())
    with pytest.raises(ValueError, match="K=0"):
        hg.vector_quantize(z, torch.empty(0, 3))
    with pytest.raises(ValueError, match=r"K >= 2.*K=1"):
        hg.vector_quantize(z, torch.randn(1, 3))
    with pytest.raises(ValueError, match=r"shape \(K, D\)"):
        hg.vector_quantize(z, torch.randn(5))
    with pytest.raises(TypeError, match="dtype of `z`"):
        hg.vector_quantize(z, codebook.double())
    with pytest.raises(ValueError, match=r"`estimator`.*'st', 'rotation', 'gumbel'.*'nope'"):
        hg.vector_quantize(z, codebook, estimator="nope")
    with pytest.raises(ValueError, match="exact one-hot"):
        hg.vector_quantize(z, codebook, estimator=hg.estimators.GumbelSoftmax())
    with pytest.raises(ValueError, match="`distance`"):
        hg.vector_quantize(z, codebook, distance="l1")
    with pytest.raises(ValueError, match="`tau` > 0"):
        hg.vector_quantize(z, codebook, estimator="gumbel", tau=0.0)
    with pytest.raises(ValueError, match="`dim`"):
        hg.vector_quantize(z, codebook, dim=2)
    with pytest.raises(ValueError, match="finite `z`"):
        hg.vector_quantize(torch.tensor([[math.nan, 0.0, 0.0]]), codebook)


@pytest.mark.parametrize("distance", ["l2", "cosine"])
@pytest.mark.parametrize("estimator", ["st", "rotation", "gumbel"])
@pytest.mark.parametrize("where", ["z", "codebook"])
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_inf_or_nan_anywhere_is_refused_and_huge_finite_values_are_not(
    bad, where, estimator, distance
):
    """The nearest-code search reads its finiteness checks from the norms it computes
    anyway: a non-finite value in any row or code is still refused, naming the argument
    (``z`` first when both hold one), on either distance, one block or several, half
    types included; finite values whose norms overflow are not refused; an empty ``z``
    still has its codebook checked."""
    z = torch.randn(300, 4, generator=_gen(0))
    codebook = torch.randn(6, 4, generator=_gen(1))
    target = z if where == "z" else codebook
    target[-1, 2] = bad  # the last row: the last block when blocked
    with pytest.raises(ValueError, match=f"finite `{where}`"):
        hg.vector_quantize(z, codebook, estimator=estimator, distance=distance)
    with pytest.raises(ValueError, match=f"finite `{where}`"):
        hg.vector_quantize(z.half(), codebook.half(), estimator=estimator, distance=distance)
    both = codebook.clone()
    both[0, 0] = math.nan
    with pytest.raises(ValueError, match="finite `z`" if where == "z" else "finite `codebook`"):
        hg.vector_quantize(z, both, estimator=estimator, distance=distance)
    if where == "codebook":
        with pytest.raises(ValueError, match="finite `codebook`"):
            hg.vector_quantize(z[:0], codebook, estimator=estimator, distance=distance)
    hg.set_validation(False)  # refused only while validation is on
    try:
        hg.vector_quantize(z, codebook, estimator=estimator, distance=distance)
    finally:
        hg.set_validation(True)
    # finite, with norms that overflow float32: accepted, and the nearest code is right
    huge_z = torch.tensor([[3e38, 3e38, 0.0, 0.0], [0.1, 0.2, 0.3, 0.4]])
    huge_codes = torch.tensor([[3e38, 3e38, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    if estimator != "gumbel":  # (the Gumbel logits of such distances are inf)
        _, idx = hg.vector_quantize(huge_z, huge_codes, estimator=estimator, distance=distance)
        assert idx.tolist() == [0, 1 if distance == "l2" else 0]


def test_blocked_search_checks_every_block(monkeypatch):
    from hardgrad.vq import _search as vq

    monkeypatch.setattr(vq, "_BLOCK", 7 * 6)  # 7 rows per block
    z = torch.randn(50, 4, generator=_gen(0))
    z[45, 1] = math.inf
    with pytest.raises(ValueError, match="finite `z`"):
        hg.vector_quantize(z, torch.randn(6, 4, generator=_gen(1)))


def test_codebook_usage():
    usage, perplexity = hg.vq.codebook_usage(torch.tensor([0, 1, 2, 3]), 8)
    assert float(usage) == 0.5 and math.isclose(float(perplexity), 4.0, rel_tol=1e-6)
    usage, perplexity = hg.vq.codebook_usage(torch.zeros(0, dtype=torch.long), 8)
    assert float(usage) == 0.0 and float(perplexity) == 1.0
