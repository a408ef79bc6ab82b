"""Inputs of hg.quantize and the low-bit ops beyond plain CPU tensors and Python numbers:
meta tensors (shapes and dtypes, no values read), NumPy numbers as settings, non-finite zero
points, sparse and nested tensors, and tensors saved for backward modified in place."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

import hardgrad as hg
from hardgrad.ops._quantize import quantize_step_size

# --------------------------------------------------------------------------------------
# Meta tensors: shape and dtype propagate; nothing is read (torch.export, deferred init).
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("numel", [24, 100_000])  # the small LSQ Function and the general one
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("scale_shape", [(), (4, 1)])
@pytest.mark.parametrize("learned_zero_point", [False, True])
def test_meta_tensors_with_a_tensor_scale(numel, dtype, scale_shape, learned_zero_point):
    x = torch.empty(4, numel // 4, device="meta", dtype=dtype, requires_grad=True)
    scale = torch.empty(scale_shape, device="meta", requires_grad=True)
    zero = torch.empty(scale_shape, device="meta", requires_grad=True)
    y = hg.quantize(x, scale, zero if learned_zero_point else 0, quant_min=-8, quant_max=7)
    assert (y.shape, y.dtype, y.device.type) == (x.shape, dtype, "meta")
    y.backward(torch.empty_like(y))
    assert x.grad is not None and x.grad.shape == x.shape
    assert scale.grad is not None and scale.grad.shape == scale.shape
    if learned_zero_point:
        assert zero.grad is not None and zero.grad.shape == zero.shape
    with torch.no_grad():
        assert hg.quantize(x, scale.detach(), quant_min=-8, quant_max=7).shape == x.shape


def test_meta_tensors_with_number_settings_and_lowbit_ops():
    x = torch.empty(3, 5, device="meta", requires_grad=True)
    for y in (
        hg.quantize(x, 0.1),
        hg.quantize(x, 0.1, 3, quant_min=0, quant_max=15),
        hg.ternarize(x, per_channel_dim=0),
        hg.stochastic_round(x),
    ):
        assert (y.shape, y.dtype, y.device.type) == (x.shape, x.dtype, "meta")


# --------------------------------------------------------------------------------------
# NumPy numbers as settings: the same result as the Python numbers.
# --------------------------------------------------------------------------------------

NUMPY_SCALES = [np.float32(0.1), np.float64(0.1), np.array(0.1), np.array(0.1, np.float32)]


@pytest.mark.parametrize("scale", NUMPY_SCALES, ids=lambda s: f"{type(s).__name__}-{s.dtype}")
def test_numpy_scale_is_the_python_number(scale):
    x = torch.linspace(-2.0, 2.0, 41)
    expected = hg.quantize(x, float(scale), quant_min=-8, quant_max=7)
    assert torch.equal(hg.quantize(x, scale, quant_min=-8, quant_max=7), expected)


@pytest.mark.parametrize(
    "zero_point", [np.int64(3), np.int32(3), np.float32(3.0), np.array(3), np.array(3.0)]
)
def test_numpy_zero_point_and_bounds_are_the_python_numbers(zero_point):
    x = torch.linspace(-2.0, 2.0, 41)
    expected = hg.quantize(x, 0.1, 3, quant_min=0, quant_max=15)
    got = hg.quantize(x, np.float32(0.1), zero_point, quant_min=np.int64(0), quant_max=np.int8(15))
    assert torch.equal(got, expected)


@pytest.mark.parametrize(
    "scale", [np.bool_(True), np.array([0.1]), np.array(0.1 + 0j)], ids=["bool", "1-d", "complex"]
)
def test_other_numpy_scales_are_type_errors_naming_scale(scale):
    with pytest.raises(TypeError, match="`scale`"):
        hg.quantize(torch.ones(3), scale)


def test_numpy_float_bounds_are_type_errors_naming_them():
    with pytest.raises(TypeError, match="`quant_min`"):
        hg.quantize(torch.ones(3), 0.1, quant_min=np.float32(-8.0))


# --------------------------------------------------------------------------------------
# Non-finite zero points and scales.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("form", ["number", "numpy", "tensor", "per-channel", "learned"])
def test_non_finite_zero_point_is_a_value_error_naming_it(value, form):
    x = torch.linspace(-1.0, 1.0, 12).reshape(3, 4)
    scale: float | torch.Tensor = 0.1
    zero_point: object = value
    if form == "numpy":
        zero_point = np.float64(value)
    elif form == "tensor":
        zero_point = torch.tensor(value)
    elif form == "per-channel":
        zero_point = torch.tensor([[0.0], [value], [1.0]])
        scale = torch.full((3, 1), 0.1)
    elif form == "learned":
        zero_point = torch.tensor(value, requires_grad=True)
        scale = torch.tensor(0.1, requires_grad=True)
    with pytest.raises(ValueError, match="`zero_point`"):
        hg.quantize(x, scale, zero_point, quant_min=-8, quant_max=7)


def test_tensor_zero_point_scan_is_skipped_without_validation():
    """DESIGN: value scans of tensors (a device sync) are off with set_validation(False)."""
    hg.set_validation(False)
    try:
        hg.quantize(torch.ones(4), 0.1, torch.tensor(math.inf))
    finally:
        hg.set_validation(True)
    with pytest.raises(ValueError, match="`zero_point`"):  # a number is always checked
        hg.set_validation(False)
        try:
            hg.quantize(torch.ones(4), 0.1, math.inf)
        finally:
            hg.set_validation(True)


@pytest.mark.parametrize("scale", [0.0, -0.1, math.inf, -math.inf, math.nan, np.float32("nan")])
def test_non_positive_or_non_finite_number_scale_is_a_value_error(scale):
    with pytest.raises(ValueError, match="`scale`"):
        hg.quantize(torch.ones(4), scale)


# --------------------------------------------------------------------------------------
# Sparse and nested tensors are refused with a TypeError naming the argument.
# --------------------------------------------------------------------------------------


def _sparse_or_nested(kind: str) -> torch.Tensor:
    dense = torch.tensor([[0.0, 0.3], [-0.7, 0.0]])
    if kind == "coo":
        return dense.to_sparse()
    if kind == "csr":
        return dense.to_sparse_csr()
    layout = torch.jagged if kind == "jagged" else torch.strided
    return torch.nested.as_nested_tensor([torch.ones(2), torch.ones(3)], layout=layout)


@pytest.mark.parametrize("kind", ["coo", "csr", "nested", "jagged"])
@pytest.mark.filterwarnings("ignore:.*(Sparse CSR tensor support|nested tensors? ).*:UserWarning")
def test_sparse_and_nested_inputs_are_type_errors_naming_them(kind):
    x = _sparse_or_nested(kind)
    hg.quantize(torch.ones(2, 2), 0.1)  # a checked plan for these settings exists
    hg.quantize(torch.ones(2, 2), torch.tensor(0.1))
    calls = {
        "x": [
            lambda: hg.quantize(x, 0.1),
            lambda: hg.quantize(x, torch.tensor(0.1)),
            lambda: hg.quantize(x, torch.tensor(0.1, requires_grad=True), torch.tensor(1.0)),
            lambda: hg.stochastic_round(x),
        ],
        "w": [lambda: hg.ternarize(x)],
    }
    for name, fns in calls.items():
        for fn in fns:
            with pytest.raises(TypeError, match=f"`{name}`.*(dense|strided)"):
                fn()


# --------------------------------------------------------------------------------------
# A tensor saved for backward and modified in place: torch's error, or (where forward kept
# only what it computed itself) the gradient of the values forward saw; never silently
# the gradient of the modified values.
# --------------------------------------------------------------------------------------


def _quantize_grads(numel, per_channel, learned_zero, bounded, dtype, modify):
    rows = 4
    g = torch.Generator().manual_seed(1)
    x = torch.randn(rows, numel // rows, generator=g, dtype=torch.float64).to(dtype)
    x.requires_grad_(True)
    scale = (torch.rand((rows, 1) if per_channel else (), generator=g) * 0.05 + 0.01).to(dtype)
    scale.requires_grad_(True)
    zero = torch.ones_like(scale, requires_grad=True) if learned_zero else 0
    if bounded:  # hg.nn.Quantize's form: the raw learned scale, bounded in the Function
        y = quantize_step_size(
            x, scale, quant_min=-8, quant_max=7, identity=False, grad_scale=0.5,
            unrounded=False, step_bounds=(1e-4, 1.0),
        )  # fmt: skip
    else:
        y = hg.quantize(x, scale, zero, quant_min=-8, quant_max=7)
    leaves = [t for t in (x, scale, zero) if isinstance(t, torch.Tensor)]
    if modify != "none":
        with torch.no_grad():  # (as an optimizer step before the backward would)
            {"x": x, "scale": scale, "zero": zero}[modify].mul_(-2)
    upstream = torch.linspace(-1.0, 2.0, y.numel(), dtype=y.dtype).reshape(y.shape)
    return torch.autograd.grad(y, leaves, upstream)


PATHS = [
    (numel, per_channel, learned_zero, bounded, dtype, modify)
    for numel, per_channel, learned_zero, bounded, dtype, modify in itertools.product(
        (24, 80_000),
        (False, True),
        (False, True),
        (False, True),
        (torch.float32, torch.float16),
        ("x", "scale", "zero"),
    )
    if not (bounded and learned_zero) and (learned_zero or modify != "zero")
]


@pytest.mark.parametrize(
    ("numel", "per_channel", "learned_zero", "bounded", "dtype", "modify"), PATHS
)
def test_saved_input_modified_in_place_is_detected_or_harmless(
    numel, per_channel, learned_zero, bounded, dtype, modify
):
    """Every route of a learned quantizer (the small LSQ Function, which saves the
    partials it computed rather than ``x``; the general one, which saves ``x`` and the
    scale with ``save_for_backward``; the bounded raw scale of hg.nn.Quantize; half
    inputs, whose scale is cast), an input modified after forward: torch's version-counter
    error, or exactly the gradients of the unmodified run."""
    args = (numel, per_channel, learned_zero, bounded, dtype)
    try:
        modified = _quantize_grads(*args, modify=modify)
    except RuntimeError as error:
        assert "modified by an inplace operation" in str(error)
        return
    for got, expected in zip(modified, _quantize_grads(*args, modify="none"), strict=True):
        assert torch.equal(got, expected)


def test_numpy_settings_of_grad_scale_and_ternarize():
    x = torch.linspace(-1.0, 1.0, 12).reshape(3, 4)
    scale = torch.tensor(0.1, requires_grad=True)
    hg.quantize(x, scale, grad_scale=np.array(0.5)).sum().backward()
    expected = torch.tensor(0.1, requires_grad=True)
    hg.quantize(x, expected, grad_scale=0.5).sum().backward()
    assert torch.equal(scale.grad, expected.grad)
    assert torch.equal(
        hg.ternarize(x, threshold=np.array(0.7), per_channel_dim=np.array(0)),
        hg.ternarize(x, threshold=0.7, per_channel_dim=0),
    )
