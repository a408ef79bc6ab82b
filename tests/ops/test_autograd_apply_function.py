"""``hardgrad.ops._autograd.apply_function``: the eager fast path that skips
``Function.apply``'s per-call signature binding must behave exactly like ``Function.apply``,
and ``torch.func`` transforms and ``torch.compile`` must keep going through
``Function.apply`` (which they recognise)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import hardgrad as hg
from hardgrad.ops._autograd import (
    IdentityGradient,
    MaskedGradient,
    MaskedGradientJVP,
    apply_function,
    apply_masked,
)


def _round_and_mask(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.round(x), x.abs() <= 1


class _Counting(torch.autograd.Function):
    """Records whether ``Function.apply`` (the binding path) was used."""

    generate_vmap_rule = True
    bound = 0

    @staticmethod
    def forward(x: torch.Tensor, factor: float) -> torch.Tensor:
        return torch.round(x) * factor

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.factor = inputs[1]

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * ctx.factor, None

    @classmethod
    def apply(cls, *args: Any, **kwargs: Any) -> Any:
        cls.bound += 1
        return super().apply(*args, **kwargs)


def test_eager_matches_function_apply_in_value_gradient_and_saved_state():
    x = torch.linspace(-2, 2, 9, requires_grad=True)
    upstream = torch.arange(9.0)
    for function, args in (
        (IdentityGradient, (torch.round,)),
        (MaskedGradient, (_round_and_mask,)),
    ):
        fast_y = apply_function(function, x, *args)
        slow_y = function.apply(x, *args)
        assert torch.equal(fast_y, slow_y)
        assert type(fast_y.grad_fn) is type(slow_y.grad_fn)
        (g_fast,) = torch.autograd.grad(fast_y, x, upstream)
        (g_slow,) = torch.autograd.grad(slow_y, x, upstream)
        assert torch.equal(g_fast, g_slow)
    # The torch.func twin returns the mask too, non-differentiable (its setup_context ran),
    # and apply_masked takes y from either form.
    y, keep = MaskedGradientJVP.apply(x, _round_and_mask)
    assert not keep.requires_grad and torch.equal(y, apply_masked(x, _round_and_mask))
    (g_twin,) = torch.autograd.grad(y, x, upstream)
    (g_plain,) = torch.autograd.grad(apply_masked(x, _round_and_mask), x, upstream)
    assert torch.equal(g_twin, g_plain)


def test_eager_path_skips_function_apply():
    _Counting.bound = 0
    x = torch.tensor([0.4, 1.6], requires_grad=True)
    y = apply_function(_Counting, x, 3.0)
    assert _Counting.bound == 0
    (grad,) = torch.autograd.grad(y.sum(), x)
    assert torch.equal(y.detach(), torch.tensor([0.0, 6.0])) and torch.equal(
        grad, torch.full((2,), 3.0)
    )


@pytest.mark.parametrize("transform", ["grad", "vmap"])
def test_transforms_go_through_function_apply(transform):
    _Counting.bound = 0
    x = torch.tensor([0.4, 1.6])
    if transform == "grad":
        result = torch.func.grad(lambda t: apply_function(_Counting, t, 3.0).sum())(x)
        assert torch.equal(result, torch.full((2,), 3.0))
    else:
        result = torch.func.vmap(lambda t: apply_function(_Counting, t, 3.0))(x.reshape(2, 1))
        assert torch.equal(result, torch.tensor([[0.0], [6.0]]))
    assert _Counting.bound >= 1  # (functorch re-enters apply at its inner level)


def _st_loss(op: Any) -> Any:
    return lambda t: (op(t) * t).sum()


@pytest.mark.compile
@pytest.mark.parametrize(
    "op",
    [
        hg.round,
        hg.sign,
        lambda t: hg.clamp(t, -0.5, 0.5),
        lambda t: hg.quantize(t, 0.25, quant_min=-4, quant_max=3),
    ],
    ids=["round", "sign", "clamp", "quantize"],
)
def test_compiled_transforms_keep_the_custom_rules(op):
    """``torch.compile`` of a ``torch.func`` transform: torch 2.13's Dynamo drops a custom
    Function's backward and jvp there (pytorch/pytorch#193279); hardgrad's ops break the
    graph instead, so the compiled result equals the eager one (which a hard op's own zero
    derivative would not: round's would give ``round(t)`` alone)."""
    torch._dynamo.reset()
    x = torch.linspace(-1.3, 1.7, 7)
    eager = torch.func.grad(_st_loss(op))(x)
    compiled = torch.compile(torch.func.grad(_st_loss(op)))(x)
    assert torch.equal(compiled, eager)
    assert not torch.equal(eager, op(x))  # the custom rule matters here
    ones = torch.ones_like(x)
    _, tangent = torch.compile(lambda t: torch.func.jvp(op, (t,), (ones,)))(x)
    assert torch.equal(tangent, torch.func.jvp(op, (x,), (ones,))[1])
    rows = torch.compile(torch.func.vmap(op))(x.reshape(7, 1))
    assert torch.equal(rows, op(x).reshape(7, 1))
