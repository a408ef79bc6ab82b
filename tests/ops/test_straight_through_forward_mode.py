"""Forward-mode AD (``torch.autograd.forward_ad``, ``torch.func.jvp``, ``jacfwd``) through
``hg.straight_through(hard, soft)``: the tangent is the soft function's, the value hard's."""

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import hardgrad as hg

SOFTS = [
    None,
    "sigmoid",
    "clipped",
    "tanh",
    hg.surrogates.Sigmoid(slope=4.0),
    torch.sin,
    torch.tanh,
]


def _soft_function(soft):
    """The soft function whose derivative the op must use, as an ordinary torch function."""
    if soft is None:
        return lambda x: x
    if isinstance(soft, str):
        soft = hg.surrogates.get(soft)
    if isinstance(soft, hg.surrogates.Surrogate):
        return soft.function
    return soft


def _inputs():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(5, 7, dtype=torch.float64, generator=generator) * 2
    x[0, :4] = torch.tensor([0.0, 1.0, -1.0, 0.5], dtype=torch.float64)
    tangent = torch.randn(5, 7, dtype=torch.float64, generator=generator)
    return x, tangent


@pytest.mark.parametrize("hard", [torch.round, torch.sign])
@pytest.mark.parametrize("soft", SOFTS, ids=repr)
def test_forward_ad_tangent_is_the_soft_functions(hard, soft):
    # (failed before the fix for every surrogate and soft=None: autograd's "forward is
    # returning a view ... but the jvp is not returning a view")
    x, tangent = _inputs()
    op = hg.straight_through(hard, soft)
    _, expected = torch.func.jvp(_soft_function(soft), (x,), (tangent,))
    for requires_grad in (False, True):
        with fwAD.dual_level():
            dual = fwAD.make_dual(x.clone().requires_grad_(requires_grad), tangent)
            primal, out_tangent = fwAD.unpack_dual(op(dual))
        assert torch.equal(primal.detach(), hard(x))
        torch.testing.assert_close(out_tangent.detach(), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("soft", SOFTS, ids=repr)
def test_func_jvp_and_jacfwd_match_the_soft_function(soft):
    x, tangent = _inputs()
    op = hg.straight_through(torch.round, soft)
    value, out_tangent = torch.func.jvp(op, (x,), (tangent,))
    _, expected = torch.func.jvp(_soft_function(soft), (x,), (tangent,))
    assert torch.equal(value, torch.round(x))
    torch.testing.assert_close(out_tangent, expected, rtol=1e-12, atol=1e-12)
    row = x[1]
    jacobian = torch.func.jacfwd(op)(row)
    torch.testing.assert_close(
        jacobian, torch.func.jacfwd(_soft_function(soft))(row), rtol=1e-12, atol=1e-12
    )


@pytest.mark.parametrize("soft", [None, "sigmoid", torch.sin], ids=repr)
def test_forward_ad_with_a_hard_tensor(soft):
    x, tangent = _inputs()
    hard_value = torch.round(x) * 3
    op = hg.straight_through(hard_value, soft)
    _, expected = torch.func.jvp(_soft_function(soft), (x,), (tangent,))
    with fwAD.dual_level():
        primal, out_tangent = fwAD.unpack_dual(op(fwAD.make_dual(x, tangent)))
    assert torch.equal(primal, hard_value)
    torch.testing.assert_close(out_tangent, expected, rtol=1e-12, atol=1e-12)
    # the hard tensor is left alone: no tangent, unchanged
    assert torch.equal(hard_value, torch.round(x) * 3)


def test_forward_ad_then_reverse_mode_still_agree():
    x, tangent = _inputs()
    op = hg.straight_through(torch.round, "sigmoid")
    leaf = x.clone().requires_grad_()
    with fwAD.dual_level():
        y = op(fwAD.make_dual(leaf, tangent))
        fwAD.unpack_dual(y).primal.sum().backward()
    expected = hg.surrogates.get("sigmoid").derivative(x)
    torch.testing.assert_close(leaf.grad, expected, rtol=1e-12, atol=1e-12)
