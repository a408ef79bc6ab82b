"""Compiled against eager gradients of hg.quantize and the low-bit ops.

torch 2.11's Dynamo drops the backward of an autograd.Function whose output comes from an
in-place or ``out=`` kernel, or from a method that returns its receiver (a ``.to`` of the
same dtype): the compiled gradient of ``hg.quantize`` was 0 for ``x``, the scale and the
zero point alike, silently. The eager gradients are themselves checked against closed forms
in test_quantize.py; here the compiled ones must equal them, and be nonzero where they are.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch

import hardgrad as hg

pytestmark = pytest.mark.compile


@pytest.fixture
def fresh_dynamo() -> Iterator[None]:
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x`` over the range and beyond it (saturated both sides), a per-tensor scale and a
    per-row scale (4 rows), and an upstream gradient with no symmetry."""
    x = torch.linspace(-1.7, 1.3, 24, dtype=torch.float64).reshape(4, 6).to(dtype)
    rows = torch.tensor([[0.1], [0.2], [0.05], [0.15]], dtype=dtype)
    upstream = torch.linspace(0.5, 2.0, 24, dtype=dtype).reshape(4, 6)
    return x, rows, upstream


def _grads(
    fn: Callable[..., torch.Tensor], dtype: torch.dtype, compiled: bool
) -> list[torch.Tensor | None]:
    x0, rows, upstream = _inputs(dtype)
    x = x0.clone().requires_grad_(True)
    scale = torch.tensor(0.1, dtype=dtype, requires_grad=True)
    per_row = rows.clone().requires_grad_(True)
    zero = torch.tensor(1.0, dtype=dtype, requires_grad=True)
    call = torch.compile(fn, backend="aot_eager", fullgraph=True) if compiled else fn
    y = call(x, scale, per_row, zero)
    y.backward(upstream)
    return [y.detach(), x.grad, scale.grad, per_row.grad, zero.grad]


CASES: dict[str, Callable[..., torch.Tensor]] = {
    "number-scale": lambda x, s, r, z: hg.quantize(x, 0.1, quant_min=-8, quant_max=7),
    "number-scale-identity": lambda x, s, r, z: hg.quantize(
        x, 0.1, quant_min=-8, quant_max=7, surrogate="identity"
    ),
    "number-scale-unrounded": lambda x, s, r, z: hg.quantize(
        x, 0.1, quant_min=-8, quant_max=7, in_range="unrounded"
    ),
    "fixed-tensor-scale": lambda x, s, r, z: hg.quantize(x, s.detach(), quant_min=-8, quant_max=7),
    "lsq-scale": lambda x, s, r, z: hg.quantize(x, s, quant_min=-8, quant_max=7, grad_scale=0.5),
    "lsq-scale-zero-point": lambda x, s, r, z: hg.quantize(x, s, z, quant_min=-8, quant_max=7),
    "per-channel-lsq": lambda x, s, r, z: hg.quantize(x, r, quant_min=-8, quant_max=7),
    "per-channel-zero-point-unrounded": lambda x, s, r, z: hg.quantize(
        x, r, z, quant_min=0, quant_max=15, in_range="unrounded"
    ),
}


#: Every case in float32; the other dtypes (float64: no cast; float16: quantized in float32
#: and cast back) on two of them, to keep the compile time down.
PARAMS = [(case, torch.float32) for case in CASES] + [
    (case, dtype)
    for case in ("number-scale", "lsq-scale-zero-point")
    for dtype in (torch.float64, torch.float16)
]


@pytest.mark.parametrize(("case", "dtype"), PARAMS)
def test_compiled_quantize_gradients_equal_eager(case: str, dtype: torch.dtype, fresh_dynamo):
    fn = CASES[case]
    eager = _grads(fn, dtype, compiled=False)
    compiled = _grads(fn, dtype, compiled=True)
    names = ["y", "x.grad", "scale.grad", "per_row.grad", "zero_point.grad"]
    for name, e, c in zip(names, eager, compiled, strict=True):
        assert (e is None) == (c is None), name
        if e is not None:
            assert c is not None
            # (not bit for bit: the scale's gradient is a sum, whose order may differ)
            torch.testing.assert_close(c, e, msg=lambda m, name=name: f"{name}: {m}")
            assert c.abs().sum() > 0 or e.abs().sum() == 0, name
    # the input gradient is the in-range mask (or all ones): never zero on this input
    assert eager[1] is not None and eager[1].abs().sum() > 0


@pytest.mark.parametrize(
    ("op", "factor"),
    [
        (lambda w: hg.ternarize(w), 1.0),
        (lambda w: hg.ternarize(w, per_channel_dim=0), 1.0),
        (lambda w: hg.stochastic_round(w * 4), 4.0),
    ],
    ids=["ternarize", "ternarize-per-channel", "stochastic_round"],
)
def test_compiled_lowbit_gradient_is_straight_through(op, factor, fresh_dynamo):
    """The low-bit ops are straight-through: the gradient is the upstream one (times the
    input's factor), compiled as in eager mode."""
    w = torch.linspace(-1.0, 1.3, 20).reshape(4, 5).requires_grad_(True)
    upstream = torch.arange(1.0, 21.0).reshape(4, 5)
    torch.compile(op, backend="aot_eager", fullgraph=True)(w).backward(upstream)
    torch.testing.assert_close(w.grad, upstream * factor)
