"""The torch-version work-arounds of hardgrad._core.compat, checked on every torch."""

from __future__ import annotations

import pytest
import torch

from hardgrad._core.compat import fresh_output, truncated_significand

# (dtype, integer view, mask clearing the low fraction bits, bits kept): _ulp's split.
SPLITS = [
    (torch.float64, torch.int64, -(1 << 27), 26),
    (torch.float32, torch.int32, -(1 << 12), 12),
]


@pytest.mark.parametrize(("dtype", "int_type", "mask", "bits"), SPLITS)
def test_truncated_significand_is_the_bit_mask(dtype, int_type, mask, bits) -> None:
    """Bit for bit the masked pattern, over the whole range (normals, subnormals, signed
    zeros, the largest finite, infinities), in eager mode and under vmap."""
    info = torch.finfo(dtype)
    gen = torch.Generator().manual_seed(0)
    top = 308 if dtype == torch.float64 else 38
    scale = torch.logspace(-top - 16, top, 4000, dtype=torch.float64)
    x = (torch.randn(4000, generator=gen, dtype=torch.float64) * scale).to(dtype)
    edges = torch.tensor(
        [0.0, -0.0, info.tiny, -info.tiny, info.tiny / 3, info.max, -info.max, 1 / 3],
        dtype=dtype,
    )
    edges = torch.cat([edges, torch.nextafter(edges, torch.zeros_like(edges))])
    x = torch.cat([x, edges, torch.tensor([float("inf"), -float("inf")], dtype=dtype)])
    expected = x.view(int_type).bitwise_and(mask)
    assert torch.equal(truncated_significand(x, bits).view(int_type), expected)
    batched = torch.func.vmap(lambda v: truncated_significand(v, bits))(x.reshape(-1, 2))
    assert torch.equal(batched.reshape(-1).view(int_type), expected)
    assert truncated_significand(torch.tensor([float("nan")], dtype=dtype), bits).isnan().all()


def test_fresh_output_is_the_tensor_itself_in_eager_mode() -> None:
    y = torch.ones(3)
    assert fresh_output(y) is y


class _Aliased(torch.autograd.Function):
    """Forward: ``2x`` from an in-place op (the case torch 2.11's Dynamo got wrong);
    backward: 5 times the gradient (not the forward's derivative)."""

    @staticmethod
    def forward(ctx, x):
        return fresh_output((x * 1.0).mul_(2.0))

    @staticmethod
    def backward(ctx, grad):
        return grad * 5.0


@pytest.mark.compile
def test_compiled_function_keeps_its_backward_for_an_in_place_output() -> None:
    """Without fresh_output, torch 2.11 compiles this Function's gradient as 0 (or 2, the
    forward's own derivative) instead of its backward's 5."""
    x = torch.randn(4, requires_grad=True)
    torch._dynamo.reset()
    compiled = torch.compile(lambda v: _Aliased.apply(v).sum(), fullgraph=True, backend="aot_eager")
    compiled(x).backward()
    torch._dynamo.reset()
    assert torch.equal(x.grad, torch.full((4,), 5.0))
