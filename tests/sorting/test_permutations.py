"""hg.sorting.neural_sort_permutation and soft_sort_permutation with ``hard=True``.

References written here: the hard matrix from a Python stable sort (keys ``(-x_j, j)``),
the reference code's hard matrix (ermongroup/neuralsort ``pytorch/neuralsort.py``: the
one-hot of each row's argmax of the relaxed matrix), and the relaxed matrices from their
published formulas in float64 (NeuralSort's ``(n + 1 - 2i) x - A_x 1``, SoftSort's
``-|sorted_i - x|``), differentiated by autograd.
"""

from __future__ import annotations

import pytest
import torch

import hardgrad as hg
from hardgrad.sorting import neural_sort_permutation, soft_sort_permutation

BUILDERS = {"neuralsort": neural_sort_permutation, "softsort": soft_sort_permutation}
DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def gen(seed=0):
    return torch.Generator().manual_seed(seed)


def python_hard(x, descending):
    """The permutation matrix of a stable sort, row by row (rows of a 2-D ``x``), in Python."""
    out = torch.zeros((*x.shape, x.shape[-1]), dtype=torch.float64)
    for r, row in enumerate(x.tolist()):
        order = sorted(range(len(row)), key=lambda j: (-row[j] if descending else row[j], j))
        for i, j in enumerate(order):
            out[r, i, j] = 1.0
    return out


def relaxed_reference(name, x, tau, descending):
    """The relaxed matrix from its published formula (float64, differentiable)."""
    n = x.shape[-1]
    if name == "neuralsort":
        a = (x.unsqueeze(-1) - x.unsqueeze(-2)).abs()
        b = a @ torch.ones(n, n, dtype=x.dtype)  # A_x 1 1^T, as the reference code builds it
        scaling = (n + 1 - 2 * (torch.arange(n, dtype=x.dtype) + 1)).unsqueeze(0)
        c = x.unsqueeze(-1) @ scaling
        p = torch.softmax(((c - b).transpose(-1, -2)) / tau, -1)
        return p if descending else p.flip(-2)
    s = x.sort(-1, descending=descending).values
    return torch.softmax(-(s.unsqueeze(-1) - x.unsqueeze(-2)).abs() / tau, -1)


def data(shape=(4, 6), seed=0, dtype=torch.float64):
    x = torch.randn(shape, generator=gen(seed), dtype=torch.float64) * 3
    x[0, 2] = x[0, 4]  # a tie
    x[1] *= 1000.0  # large magnitudes
    return x.to(dtype)


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("descending", [True, False])
def test_forward_is_the_exact_permutation(name, dtype, descending):
    x = data(dtype=dtype)
    p = BUILDERS[name](x, tau=0.5, descending=descending, hard=True)
    assert p.dtype == dtype and p.shape == (4, 6, 6)
    assert torch.equal(p, python_hard(x.double(), descending).to(dtype))
    # ties in index order (row 0: entries 2 and 4 are equal)
    tied = p[0].argmax(-1).tolist()
    assert tied.index(2) < tied.index(4)


@pytest.mark.parametrize("name", list(BUILDERS))
def test_is_the_reference_codes_hard_matrix_for_distinct_entries(name):
    x = torch.randn(5, 7, generator=gen(1), dtype=torch.float64)
    p_hat = relaxed_reference(name, x, 1.0, True)
    ref = torch.zeros_like(p_hat).scatter_(-1, p_hat.argmax(-1, keepdim=True), 1.0)
    assert torch.equal(BUILDERS[name](x, tau=1.0, hard=True), ref)
    # with ties the reference's argmax is no permutation: two rows on one column
    tie = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    p_tie = relaxed_reference("neuralsort", tie, 1.0, True)
    ref_tie = torch.zeros_like(p_tie).scatter_(-1, p_tie.argmax(-1, keepdim=True), 1.0)
    assert ref_tie.sum(-2).max() == 2
    assert torch.equal(
        neural_sort_permutation(tie, tau=1.0, hard=True).sum(-2),
        torch.ones(1, 3, dtype=torch.float64),
    )


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize("descending", [True, False])
def test_backward_is_the_relaxed_matrixs(name, descending):
    x = data()
    x[0, 2] += 0.1  # no tie: SoftSort's reference sort would pick another tied order
    w = torch.randn(4, 6, 6, generator=gen(2), dtype=torch.float64)
    tau = 2.0
    grad = torch.func.grad(
        lambda v: (BUILDERS[name](v, tau=tau, descending=descending, hard=True) * w).sum()
    )(x)
    expected = torch.func.grad(lambda v: (relaxed_reference(name, v, tau, descending) * w).sum())(x)
    torch.testing.assert_close(grad, expected, rtol=1e-10, atol=1e-12)
    # the relaxed matrix itself is unchanged by the option
    torch.testing.assert_close(
        BUILDERS[name](x, tau=tau, descending=descending),
        relaxed_reference(name, x, tau, descending),
    )


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_types_compute_in_float32(name, dtype):
    x = data(dtype=dtype).requires_grad_(True)
    xf = x.detach().float().requires_grad_(True)
    w = torch.randn(4, 6, 6, generator=gen(3))
    (BUILDERS[name](x, tau=3.0, hard=True) * w.to(dtype)).sum().backward()
    (BUILDERS[name](xf, tau=3.0, hard=True) * w.to(dtype).float()).sum().backward()
    assert x.grad.dtype == dtype and torch.isfinite(x.grad).all()
    assert torch.equal(x.grad, xf.grad.to(dtype))


@pytest.mark.compile
@pytest.mark.parametrize("name", list(BUILDERS))
def test_compile_vmap_and_empty(name):
    build = BUILDERS[name]

    def fn(v):
        return build(v, tau=0.7, hard=True, descending=False)

    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    for batch in (8, 5, 3):
        x = torch.randn(batch, 5, generator=gen(batch))
        w = torch.randn(batch, 5, 5, generator=gen(batch + 1))
        outs = []
        for f in (compiled, fn):
            leaf = x.clone().requires_grad_(True)
            y = f(leaf)
            (y * w).sum().backward()
            outs.append((y.detach(), leaf.grad))
        assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    torch._dynamo.reset()
    x = torch.randn(3, 5, generator=gen(4))
    assert torch.equal(torch.vmap(fn)(x), fn(x))
    jac = torch.func.jacrev(lambda v: fn(v).sum(-2))(x[0])
    assert jac.shape == (5, 5) and torch.isfinite(jac).all()
    empty = build(torch.zeros(0, 4), tau=1.0, hard=True)
    assert empty.shape == (0, 4, 4)


def test_bad_input():
    x = torch.randn(2, 3)
    for build in BUILDERS.values():
        with pytest.raises(TypeError, match="`hard` to be a bool"):
            build(x, tau=1.0, hard=1)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="`tau` > 0"):
            build(x, tau=0.0, hard=True)
        with pytest.raises(TypeError, match="`x`"):
            build(torch.ones(2, 3, dtype=torch.long), hard=True)
    assert hg.sorting.neural_sort_permutation is neural_sort_permutation
