"""Forward mode (torch.func.jvp, jacfwd, forward_ad) for the structured ops: sort and rank,
k-subsets, the perturbed optimizer, its Fenchel-Young loss and the identity solver.

Each backward is a linear map of the incoming gradient (a relaxation's or an estimator's
Jacobian), so the JVP must be its transpose: <jvp(t), g> = <t, vjp(g)> for every tangent t
and cotangent g, on the same noise (the generator is re-seeded per call). I-MLE and
blackbox backwards are not linear in the gradient; forward mode explains that it cannot
exist.
"""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import hardgrad as hg
from _solver_references import argmax_solver, gen, top2_solver

N, D = 4, 6


def inputs(dtype=torch.float64, seed=0):
    g = gen(seed)
    return tuple(torch.randn(N, D, generator=g, dtype=dtype) for _ in range(3))


def assert_adjoint(fn, x, t, g, tolerance=1e-10):
    """fn's JVP at x is the transpose of its VJP: <J t, g> == <t, J^T g>."""
    value, tangent = torch.func.jvp(fn, (x,), (t,))
    out, pullback = torch.func.vjp(fn, x)
    assert torch.equal(value, out)
    (cotangent,) = pullback(g)
    lhs, rhs = (tangent * g).sum(), (t * cotangent).sum()
    torch.testing.assert_close(lhs, rhs, rtol=tolerance, atol=tolerance)
    return tangent


CASES = {
    "sort/soft": lambda v: hg.sort(v, strength=0.7),
    "sort/soft-kl-desc": lambda v: hg.sort(v, strength=0.7, regularization="kl", descending=True),
    "rank/soft": lambda v: hg.rank(v, strength=0.7),
    "sort/neuralsort": lambda v: hg.sort(v, backward="neuralsort", strength=0.7),
    "rank/softsort": lambda v: hg.rank(v, backward="softsort", strength=0.7),
    "rank/soft-pav": lambda v: hg.rank(v.repeat(1, 8), strength=0.7),  # 48 entries: PAV
    "subset/st": lambda v: hg.subset(v, 2, generator=gen(1)),
    "subset/simple": lambda v: hg.subset(v, 3, estimator="simple", generator=gen(1)),
    "perturbed/gumbel": lambda v: hg.perturbed(argmax_solver, num_samples=5, generator=gen(2))(v),
    "perturbed/normal-top2": lambda v: hg.perturbed(
        top2_solver, noise="normal", sigma=0.5, num_samples=5, generator=gen(2)
    )(v),
    "fenchel_young": lambda v: hg.perturbed(
        top2_solver, num_samples=5, generator=gen(3)
    ).fenchel_young_loss(v, top2_solver(torch.arange(float(D), dtype=v.dtype).expand(N, D))),
    "identity_solver": lambda v: hg.identity_solver(top2_solver)(v),
    "perturbed/multiplicative-loo": lambda v: hg.perturbed(
        top2_solver,
        noise="normal",
        perturbation="multiplicative",
        baseline="leave_one_out",
        num_samples=5,
        generator=gen(2),
    )(v),
    "fenchel_young/multiplicative-mean": lambda v: hg.perturbed(
        top2_solver, noise="normal", perturbation="multiplicative", num_samples=5, generator=gen(3)
    ).fenchel_young_loss(
        v, top2_solver(torch.arange(float(D), dtype=v.dtype).expand(N, D)), reduction="mean"
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_jvp_is_the_transpose_of_backward(name):
    fn = CASES[name]
    x, t, _ = inputs()
    out = fn(x)
    g = torch.randn(out.shape, generator=gen(9), dtype=out.dtype)
    assert_adjoint(fn, x, t, g)
    # the same through torch.autograd.forward_ad's dual tensors
    with fwAD.dual_level():
        primal, tangent = fwAD.unpack_dual(fn(fwAD.make_dual(x, t)))
    assert torch.equal(primal, out)
    torch.testing.assert_close(tangent, torch.func.jvp(fn, (x,), (t,))[1], rtol=0, atol=0)


@pytest.mark.parametrize("what", ["sort", "rank"])
@pytest.mark.parametrize("backward", ["soft", "neuralsort", "softsort"])
def test_sort_jvp_is_the_relaxations_jvp(what, backward):
    """The exact forward, and the tangent of the relaxation itself (computed here without
    hardgrad's Function, by forward-mode AD through the smooth map)."""
    x, t, _ = inputs()
    op = hg.sort if what == "sort" else hg.rank
    value, tangent = torch.func.jvp(lambda v: op(v, backward=backward, strength=0.7), (x,), (t,))
    assert torch.equal(value, op(x))
    if backward == "soft":
        smooth = hg.soft_sort if what == "sort" else hg.soft_rank
        relaxed = lambda v: smooth(v, strength=0.7)  # noqa: E731
    else:
        build = (
            hg.sorting.neural_sort_permutation
            if backward == "neuralsort"
            else hg.sorting.soft_sort_permutation
        )

        def relaxed(v):
            p = build(v, tau=0.7, descending=False)
            if what == "sort":
                return (p @ v.unsqueeze(-1)).squeeze(-1)
            positions = torch.arange(1, D + 1, dtype=v.dtype)
            return (positions.unsqueeze(-1) * p).sum(-2) / p.sum(-2)

    _, expected = torch.func.jvp(relaxed, (x,), (t,))
    torch.testing.assert_close(tangent, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        torch.func.jacfwd(lambda v: op(v, backward=backward, strength=0.7))(x[0]),
        torch.func.jacrev(lambda v: op(v, backward=backward, strength=0.7))(x[0]),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_jvp_keeps_the_dtype(dtype):
    """Half types compute in float32 (noise included) and round once: their tangents are
    the float32 ones rounded; float32's are float64's to float32 precision (sort only: the
    random ops draw their noise in the compute dtype)."""
    x, t = (v.to(dtype) for v in inputs()[:2])
    for name in ("sort/soft", "subset/st", "perturbed/gumbel"):
        fn = CASES[name]
        value, tangent = torch.func.jvp(fn, (x,), (t,))
        assert value.dtype == tangent.dtype == dtype
        if dtype == torch.float32:
            if name == "sort/soft":
                _, ref = torch.func.jvp(fn, (x.double(),), (t.double(),))
                torch.testing.assert_close(tangent.double(), ref, rtol=1e-5, atol=1e-5)
        else:
            _, ref = torch.func.jvp(fn, (x.float(),), (t.float(),))
            assert torch.equal(tangent, ref.to(dtype)), name


def test_imle_and_blackbox_say_why_forward_mode_is_undefined():
    x, t, _ = inputs()
    for layer, name in (
        (hg.imle(argmax_solver, generator=gen(0)), "hg.imle"),
        (hg.blackbox(argmax_solver, lam=2.0), "hg.blackbox"),
    ):
        with pytest.raises(NotImplementedError, match=f"{name}'s backward is not linear"):
            torch.func.jvp(layer, (x,), (t,))
        torch.func.grad(lambda v, layer=layer: layer(v).sum())(x)  # reverse mode still works
