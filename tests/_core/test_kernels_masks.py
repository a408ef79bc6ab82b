"""Masks saved for backward under ``torch.compile``, and graphs that stay whole.

Inductor's CPU code (torch 2.13) stores and reloads bool tensors through slow paths, so the
ops that save an in-range mask save it as 0/1 uint8 when compiled
(:func:`hardgrad._core.kernels.storable_mask`); these tests pin that down, check that the
gradients do not change, and that a compiled call stays one graph from a fresh process (the
default surrogates are made at import: made on first use, their constructors broke it).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import Any

import pytest
import torch

import hardgrad as hg
from hardgrad._core.kernels import mask_condition, storable_mask
from hardgrad.surrogates import _SURROGATES


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_storable_mask_is_the_bool_mask_in_eager_mode() -> None:
    mask = torch.tensor([True, False, True])
    assert storable_mask(mask) is mask
    assert mask_condition(mask) is mask


@pytest.mark.compile
def test_storable_mask_is_uint8_under_compile_and_reads_back(fresh_dynamo) -> None:
    def round_trip(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        stored = storable_mask(x > 0)
        return stored, mask_condition(stored)

    x = torch.tensor([-1.0, 0.0, 2.0, float("nan"), float("inf")])
    stored, condition = torch.compile(round_trip, fullgraph=True)(x)
    assert stored.dtype == torch.uint8
    assert stored.tolist() == [0, 0, 1, 0, 1]
    assert condition.dtype == torch.bool
    assert torch.equal(condition, x > 0)


#: Ops whose backward is a saved in-range mask, with an input that has every case.
MASKED_OPS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "clamp": lambda x: hg.clamp(x, -1.0, 1.0),
    "clamp-tensor-bounds": lambda x: hg.clamp(x, torch.tensor(-1.0), torch.tensor(1.0)),
    "sign": hg.sign,
    "binarize": hg.binarize,
    "quantize": lambda x: hg.quantize(x, 0.25, quant_min=-8, quant_max=7),
    "quantize-unrounded": lambda x: hg.quantize(
        x, 0.25, quant_min=-8, quant_max=7, in_range="unrounded"
    ),
    "straight_through-indicator": hg.straight_through(torch.sign, hg.surrogates.get("clipped")),
}


def _saved_dtypes(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> list[Any]:
    dtypes: list[Any] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        dtypes.append(t.dtype)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(x)
    return dtypes


@pytest.mark.compile
@pytest.mark.parametrize("name", sorted(MASKED_OPS))
def test_compiled_masked_ops_save_uint8_and_keep_their_gradients(name, fresh_dynamo) -> None:
    op = MASKED_OPS[name]
    x = torch.tensor([-3.0, -1.0, -0.5, 0.0, 0.3, 1.0, 1.9, 2.1, float("nan")] * 3)
    g = torch.linspace(-2.0, 2.0, x.numel())
    eager_x = x.clone().requires_grad_(True)
    (eager_grad,) = torch.autograd.grad(op(eager_x), eager_x, g)
    compiled = torch.compile(op, fullgraph=True)
    compiled_x = x.clone().requires_grad_(True)
    y = compiled(compiled_x)
    (compiled_grad,) = torch.autograd.grad(y, compiled_x, g)
    torch.testing.assert_close(y, op(x), equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(compiled_grad, eager_grad, equal_nan=True, rtol=0, atol=0)
    dtypes = _saved_dtypes(compiled, x.clone().requires_grad_(True))
    assert torch.bool not in dtypes, dtypes
    assert torch.uint8 in dtypes, dtypes


@pytest.mark.compile
def test_compiled_learned_scale_reads_its_uint8_mask_back(fresh_dynamo) -> None:
    """The LSQ scale gradient takes ``torch.where`` of the saved mask: as uint8 it must be
    read back as a condition, giving eager's gradients (saturated, in range and NaN)."""
    x = torch.tensor([-5.0, -1.1, -0.2, 0.0, 0.37, 0.9, 3.0, float("nan")])
    g = torch.linspace(-1.0, 1.0, x.numel())

    def lsq(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return hg.quantize(x, scale, quant_min=-4, quant_max=3, grad_scale=0.5)

    results = []
    for fn in (lsq, torch.compile(lsq, fullgraph=True)):
        xs = x.clone().requires_grad_(True)
        scale = torch.tensor(0.25, requires_grad=True)
        results.append(torch.autograd.grad(fn(xs, scale), (xs, scale), g))
    for eager, compiled in zip(*results, strict=True):
        torch.testing.assert_close(compiled, eager, equal_nan=True)


def test_default_surrogates_exist_after_import() -> None:
    code = textwrap.dedent(
        """
        import hardgrad.surrogates as s
        missing = set(s._SURROGATES.names()) - set(s._SURROGATES._defaults)
        assert not missing, missing
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


@pytest.mark.slow
@pytest.mark.compile
def test_first_compiled_call_in_a_fresh_process_is_one_graph() -> None:
    """Made on first use, a default surrogate's constructor (``float(tensor)``) broke the
    graph of the first compiled call, and that split graph was kept."""
    code = textwrap.dedent(
        """
        import torch, hardgrad as hg
        x = torch.randn(64, requires_grad=True)
        for fn in (lambda x: hg.quantize(x, 0.25, quant_min=-8, quant_max=7),
                   hg.sign, lambda x: hg.heaviside(x, surrogate="sigmoid")):
            torch.compile(fn, fullgraph=True, backend="aot_eager")(x).sum().backward()
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)


def test_every_surrogate_default_is_cached() -> None:
    for name in _SURROGATES.names():
        assert hg.surrogates.get(name) is hg.surrogates.get(name)


def test_argmax_helper_is_first_argmax_on_ties_zeros_infinities_and_nan() -> None:
    """hardgrad._core.kernels.argmax takes torch.max(dim).indices in eager mode on CPU (a faster
    kernel); it must give torch.argmax's index: the first largest value, NaN largest."""
    from hardgrad._core.kernels import argmax

    values = torch.tensor([0.0, -0.0, 1.0, float("nan"), float("inf"), -float("inf"), 2.0])
    gen = torch.Generator().manual_seed(0)
    for _ in range(300):
        n = int(torch.randint(1, 9, (1,), generator=gen))
        x = values[torch.randint(0, values.numel(), (16, n), generator=gen)]
        for dim in (0, 1, -1):
            assert torch.equal(argmax(x, dim), x.argmax(dim, keepdim=True))


_SPECIAL_VALUES = (0.0, -0.0, 1.0, float("nan"), float("inf"), -float("inf"), 2.0)


@pytest.mark.compile
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_compiled_argmax_form_is_first_argmax_on_ties_zeros_infinities_and_nan(dtype) -> None:
    """Under compile, hardgrad._core.kernels.argmax is two vectorizable reductions (the row's
    maximum, then the first index equal to it or NaN); called directly here, it must give
    torch.argmax's index along every dim of 3-D tensors, 300 random tables."""
    from hardgrad._core.kernels import _first_max_index

    values = torch.tensor(_SPECIAL_VALUES, dtype=dtype)
    gen = torch.Generator().manual_seed(1)
    for _ in range(300):
        shape = [int(n) for n in torch.randint(1, 7, (3,), generator=gen)]
        x = values[torch.randint(0, values.numel(), shape, generator=gen)]
        for dim in (0, 1, 2, -1):
            assert torch.equal(_first_max_index(x, dim), x.argmax(dim, keepdim=True))


@pytest.mark.compile
def test_compiled_one_hot_argmax_matches_eager_on_special_values_and_saves_only_logits(
    fresh_dynamo,
) -> None:
    """Compiled one_hot_argmax: the same one-hot and gradient as eager on rows with ties,
    signed zeros, infinities and NaN (the compiled forward picks its index with the
    two-reduction form), and only the logits
    saved: the forward's NaN test must not become a saved bool mask shared with the
    backward's guard (inductor reloads bool masks slowly; it cost 4x)."""
    from hardgrad.bench._timing import saved_bytes_per_element

    gen = torch.Generator().manual_seed(2)
    values = torch.tensor(_SPECIAL_VALUES)
    logits = values[torch.randint(0, values.numel(), (64, 5), generator=gen)]
    logits = torch.cat([logits, torch.randn(64, 5, generator=gen)])
    grad = torch.randn(logits.shape, generator=gen)

    def select(x: torch.Tensor) -> torch.Tensor:
        return hg.one_hot_argmax(x, dim=-1, tau=0.5)

    def step(fn: Callable[..., torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        x = logits.clone().requires_grad_()
        y = fn(x)  # compiled: the forward and (AOT) the backward graph
        return y, torch.autograd.grad(y, x, grad)[0]

    eager = step(select)
    compiled = step(torch.compile(select, dynamic=False, fullgraph=True))
    assert torch.equal(compiled[0], eager[0])
    assert torch.isfinite(compiled[1]).all()
    torch.testing.assert_close(compiled[1], eager[1], rtol=1e-5, atol=1e-6)

    forward = torch.compile(hg.one_hot_argmax, dynamic=False)
    x = torch.randn(256, 64, requires_grad=True)
    assert saved_bytes_per_element(forward, x) == 4.0
