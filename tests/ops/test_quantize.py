"""hg.quantize: bit-exactness against torch's fake quantization, STE backward for x, and the
LSQ/LSQ+ gradients for scale and zero point (true gradients checked with gradcheck)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import hardgrad as hg
from hardgrad.ops._autograd import MASK_CONVERT_MIN_NUMEL
from hardgrad.surrogates import SURROGATES

# Every test here runs on both of a small op's autograd routes (see conftest.autograd_route).
pytestmark = pytest.mark.usefixtures("autograd_route")

#: Surrogates quantize accepts (from the registry: those serving "clamp" ops).
QUANTIZE_SURROGATES = [name for name, cls in SURROGATES.items() if "clamp" in cls.applies_to]
SCALES = [0.1, 1 / 3, 0.0123, 0.25, 7.0]
RANGES = [(-128, 127), (0, 255), (-8, 7)]


def halfway_points(scale: float, quant_min: int, quant_max: int) -> torch.Tensor:
    """float32 values x with x * (1/scale) exactly on a half-way point k + 1/2 (where one
    exists), and their float32 neighbours on both sides."""
    inverse = torch.tensor(1.0, dtype=torch.float32) / torch.tensor(scale, dtype=torch.float32)
    k = torch.arange(quant_min - 3, quant_max + 3, dtype=torch.float64) + 0.5
    x = (k / inverse.double()).float()
    exact = x[(x * inverse) == k.float()]
    inf = torch.full_like(x, math.inf)
    return torch.cat([exact, x, torch.nextafter(x, inf), torch.nextafter(x, -inf)])


def quantize_input(scale: float, quant_min: int, quant_max: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    span = scale * (quant_max - quant_min)
    return torch.cat(
        [
            (torch.rand(500, generator=g) - 0.5) * 1.5 * span,  # in range and saturated
            halfway_points(scale, quant_min, quant_max),
            torch.tensor([0.0, -0.0, 1e8, -1e8, math.inf, -math.inf]),
        ]
    )


def formula(x: torch.Tensor, scale, zero_point, quant_min: int, quant_max: int) -> torch.Tensor:
    """The documented forward, with x / scale computed as x * (1 / scale) like torch."""
    level = torch.round(x * (1.0 / scale)) + zero_point
    return (torch.clamp(level, quant_min, quant_max) - zero_point) * scale


# --------------------------------------------------------------------------------------
# Forward.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("surrogate", QUANTIZE_SURROGATES)
@pytest.mark.parametrize(
    ("quant_min", "quant_max", "zero_point"),
    [(lo, hi, z) for lo, hi in RANGES for z in (0, 3, -5 if lo < 0 else 128)],
    ids=str,
)
@pytest.mark.parametrize("scale", SCALES, ids=lambda s: f"{s:.4g}")
def test_matches_fake_quantize_per_tensor(scale, zero_point, quant_min, quant_max, surrogate):
    x = quantize_input(scale, quant_min, quant_max)
    expected = torch.fake_quantize_per_tensor_affine(x, scale, zero_point, quant_min, quant_max)
    bounds = {"quant_min": quant_min, "quant_max": quant_max, "surrogate": surrogate}
    as_number = hg.quantize(x, scale, zero_point, **bounds)
    as_tensor = hg.quantize(x, torch.tensor(scale), torch.tensor(zero_point), **bounds)
    learnable = hg.quantize(
        x.clone().requires_grad_(), torch.tensor(scale, requires_grad=True), zero_point, **bounds
    )
    for y in (as_number, as_tensor, learnable):
        assert y.dtype == torch.float32
        assert torch.equal(y.detach(), expected)


def test_default_range_and_zero_point():
    x = quantize_input(0.05, -128, 127)
    expected = torch.fake_quantize_per_tensor_affine(x, 0.05, 0, -128, 127)
    assert torch.equal(hg.quantize(x, 0.05), expected)


@pytest.mark.parametrize("scale", SCALES, ids=lambda s: f"{s:.4g}")
def test_float64_matches_documented_formula(scale):
    g = torch.Generator().manual_seed(1)
    x = torch.cat(
        [
            torch.randn(300, generator=g, dtype=torch.float64) * 50 * scale,
            halfway_points(scale, -8, 7).double(),
        ]
    )
    for zero_point in (0, 2, 0.5):
        y = hg.quantize(x, scale, zero_point, quant_min=-8, quant_max=7)
        expected = formula(x, torch.tensor(scale, dtype=torch.float64), zero_point, -8, 7)
        assert torch.equal(y, expected), zero_point


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("scale", SCALES, ids=lambda s: f"{s:.4g}")
def test_half_precision_is_quantized_in_float32(dtype, scale):
    x = quantize_input(scale, -128, 127).to(dtype)
    expected = torch.fake_quantize_per_tensor_affine(x.float(), scale, 0, -128, 127).to(dtype)
    for s in (scale, torch.tensor(scale), torch.tensor(scale).to(dtype)):
        y = hg.quantize(x, s)
        assert y.dtype == dtype
        if isinstance(s, torch.Tensor) and s.dtype == dtype:
            # A half-precision scale is used as it is (widened exactly to float32).
            ref = torch.fake_quantize_per_tensor_affine(x.float(), float(s), 0, -128, 127).to(dtype)
            assert torch.equal(y, ref)
        else:
            assert torch.equal(y, expected)


@pytest.mark.parametrize(
    "dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16], ids=str
)
def test_nan_propagates_and_infinities_saturate(dtype):
    # The documented formula clamps with torch.clamp, which propagates NaN (unlike
    # torch.fake_quantize_per_tensor_affine, which maps NaN to quant_min * scale).
    x = torch.tensor([math.nan, math.inf, -math.inf, 1.0], dtype=dtype)
    for scale in (0.25, torch.tensor(0.25)):
        for surrogate in QUANTIZE_SURROGATES:
            y = hg.quantize(x, scale, quant_min=-8, quant_max=7, surrogate=surrogate)
            assert y[0].isnan()
            assert y[1:].tolist() == [1.75, -2.0, 1.0]


def test_signed_zero_of_small_negative_values():
    # Documented here as found: zero point 0 gives -0.0 for small negative x (torch gives
    # +0.0); equal under torch.equal, and the same for number and tensor scales.
    x = torch.tensor([-0.1, -0.0, 0.0, 0.1])
    expected = torch.fake_quantize_per_tensor_affine(x, 0.25, 0, -8, 7)
    for scale in (0.25, torch.tensor(0.25)):
        y = hg.quantize(x, scale, quant_min=-8, quant_max=7)
        assert torch.equal(y, expected)


@pytest.mark.parametrize("surrogate", QUANTIZE_SURROGATES)
def test_matches_fake_quantize_per_channel_rows(surrogate):
    g = torch.Generator().manual_seed(2)
    scale = torch.tensor([0.1, 1 / 3, 0.0123, 0.25])
    zero_point = torch.tensor([0, 3, -5, 1], dtype=torch.int32)
    x = torch.randn(4, 200, generator=g) * 8 * scale[:, None]
    halves = (torch.arange(-12, 12) + 0.5)[None, :] * scale[:, None]
    x = torch.cat([x, halves, torch.nextafter(halves, torch.full_like(halves, math.inf))], 1)
    expected = torch.fake_quantize_per_channel_affine(x, scale, zero_point, 0, -8, 7)
    y = hg.quantize(
        x,
        scale[:, None],
        zero_point[:, None].float(),
        quant_min=-8,
        quant_max=7,
        surrogate=surrogate,
    )
    assert torch.equal(y, expected)
    y = hg.quantize(x, scale[:, None], zero_point[:, None], quant_min=-8, quant_max=7)  # int zp
    assert torch.equal(y, expected)


def test_matches_fake_quantize_per_channel_columns():
    g = torch.Generator().manual_seed(3)
    scale = torch.tensor([0.1, 0.05, 0.3])
    zero_point = torch.tensor([0, 2, 10], dtype=torch.int32)
    x = torch.randn(2, 100, 3, generator=g)
    expected = torch.fake_quantize_per_channel_affine(x, scale, zero_point, 2, 0, 255)
    y = hg.quantize(x, scale, zero_point.float(), quant_min=0, quant_max=255)
    assert torch.equal(y, expected)


def test_docstring_example():
    x = torch.tensor([-1.0, 0.26, 0.5, 3.0], requires_grad=True)
    scale = torch.tensor(0.1, requires_grad=True)
    y = hg.quantize(x, scale, quant_min=-8, quant_max=7)
    torch.testing.assert_close(y.detach(), torch.tensor([-0.8, 0.3, 0.5, 0.7]))
    y.sum().backward()
    assert x.grad is not None and scale.grad is not None
    assert x.grad.tolist() == [0.0, 1.0, 1.0, 0.0]
    # -8 + (3 - 2.6) + (5 - 5) + 7 = -0.6
    torch.testing.assert_close(scale.grad, torch.tensor(-0.6))


# --------------------------------------------------------------------------------------
# Backward for x.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("learnable", [False, True])
@pytest.mark.parametrize("surrogate", QUANTIZE_SURROGATES)
def test_x_gradient_is_the_in_range_mask(surrogate, learnable):
    x = quantize_input(0.1, -8, 7).requires_grad_()
    g = torch.randn(x.shape)
    scale = torch.tensor(0.1, requires_grad=learnable)
    y = hg.quantize(x, scale, 2, quant_min=-8, quant_max=7, surrogate=surrogate)
    y.backward(g)
    level = torch.round(x.detach() * (1 / scale.detach())) + 2
    in_range = (level >= -8) & (level <= 7)
    kind = SURROGATES.get(surrogate).kind
    expected = g if kind == "identity" else torch.where(in_range, g, 0)
    assert torch.equal(x.grad, expected)


# --------------------------------------------------------------------------------------
# LSQ gradients for scale and zero point.
# --------------------------------------------------------------------------------------


def lsq_closed_form(x, g, scale, zero_point, quant_min, quant_max, factor=1.0):
    """Per-element LSQ/LSQ+ gradients (Esser et al. 2020; Bhalgat et al. 2020)."""
    v = x / scale
    level = torch.round(v) + zero_point
    below, above = level < quant_min, level > quant_max
    dy_ds = torch.where(
        below,
        quant_min - zero_point,
        torch.where(above, quant_max - zero_point, torch.round(v) - v),
    )
    dy_dz = torch.where(below | above, -scale, torch.zeros_like(v))
    return g * dy_ds * factor, g * dy_dz * factor


@pytest.mark.parametrize("grad_scale", [None, 0.5, 1 / math.sqrt(300 * 7)])
def test_scale_and_zero_point_gradients_match_closed_form(grad_scale):
    g_ = torch.Generator().manual_seed(4)
    x = torch.randn(300, generator=g_, dtype=torch.float64) * 0.6
    g = torch.randn(300, generator=g_, dtype=torch.float64)
    scale = torch.tensor(0.07, dtype=torch.float64, requires_grad=True)
    zero_point = torch.tensor(1.0, dtype=torch.float64, requires_grad=True)
    y = hg.quantize(x, scale, zero_point, quant_min=-8, quant_max=7, grad_scale=grad_scale)
    y.backward(g)
    factor = 1.0 if grad_scale is None else grad_scale
    ds, dz = lsq_closed_form(x, g, 0.07, 1.0, -8, 7, factor)
    saturated = ((torch.round(x / 0.07) + 1 < -8) | (torch.round(x / 0.07) + 1 > 7)).sum()
    assert 0 < saturated < 300  # both regimes present
    torch.testing.assert_close(scale.grad, ds.sum(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(zero_point.grad, dz.sum(), rtol=1e-12, atol=1e-12)


def test_in_range_scale_gradient_is_round_minus_value():
    x = torch.tensor([0.26, -0.33, 0.05, 0.449, -0.1], dtype=torch.float64)
    scale = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
    hg.quantize(x, scale, grad_scale=0.25).sum().backward()
    v = x / 0.1
    torch.testing.assert_close(scale.grad, ((torch.round(v) - v) * 0.25).sum())


def test_per_channel_gradients_are_summed_per_channel():
    g_ = torch.Generator().manual_seed(5)
    x = torch.randn(3, 40, generator=g_, dtype=torch.float64)
    g = torch.randn(3, 40, generator=g_, dtype=torch.float64)
    s = torch.tensor([[0.05], [0.2], [0.11]], dtype=torch.float64)
    z = torch.tensor([[0.0], [2.0], [-1.0]], dtype=torch.float64)
    scale, zero_point = s.clone().requires_grad_(), z.clone().requires_grad_()
    hg.quantize(x, scale, zero_point, quant_min=-8, quant_max=7, grad_scale=0.5).backward(g)
    ds, dz = lsq_closed_form(x, g, s, z, -8, 7, 0.5)
    assert scale.grad.shape == (3, 1) and zero_point.grad.shape == (3, 1)
    torch.testing.assert_close(scale.grad, ds.sum(1, keepdim=True), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(zero_point.grad, dz.sum(1, keepdim=True), rtol=1e-12, atol=1e-12)


def test_zero_point_gradcheck():
    # Non-integral zero point: level = round(x/s) + z is never on the integer clamp bounds,
    # and x/s stays away from rounding ties, so the op is smooth in z (true gradient).
    x = torch.tensor([-1.3, -0.52, -0.1, 0.0, 0.21, 0.64, 0.97, 2.2], dtype=torch.float64)
    scale = torch.tensor(0.1, dtype=torch.float64)
    for z0 in (0.3, -2.6, 4.45):
        zero_point = torch.tensor(z0, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(
            lambda z: hg.quantize(x, scale, z, quant_min=-8, quant_max=7), (zero_point,)
        )
    per_channel = torch.tensor([[0.3], [-1.7]], dtype=torch.float64, requires_grad=True)
    x2 = torch.stack([x, -x * 0.7])
    assert torch.autograd.gradcheck(
        lambda z: hg.quantize(x2, scale, z, quant_min=-8, quant_max=7), (per_channel,)
    )


def test_saturated_scale_and_zero_point_gradcheck():
    # Every entry saturates: y = (bound - z) s, a true gradient in s and z.
    x = torch.tensor([-9.0, -5.5, -3.0, 2.5, 4.0, 11.0], dtype=torch.float64)
    scale = torch.tensor(0.2, dtype=torch.float64, requires_grad=True)
    zero_point = torch.tensor(0.4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda s, z: hg.quantize(x, s, z, quant_min=-8, quant_max=7), (scale, zero_point)
    )
    per_channel = torch.tensor([[0.2], [0.1]], dtype=torch.float64, requires_grad=True)
    x2 = torch.stack([x, x * 1.5])
    assert torch.autograd.gradcheck(
        lambda s: hg.quantize(x2, s, quant_min=-8, quant_max=7, grad_scale=1.0), (per_channel,)
    )


def test_qparam_gradients_keep_their_dtype():
    x = torch.randn(20).to(torch.bfloat16)
    scale = torch.tensor(0.1, requires_grad=True)
    zero_point = torch.tensor(0.0, dtype=torch.float64, requires_grad=True)
    y = hg.quantize(x, scale, zero_point)
    assert y.dtype == torch.bfloat16
    y.sum().backward()
    assert scale.grad is not None and scale.grad.dtype == torch.float32
    assert zero_point.grad is not None and zero_point.grad.dtype == torch.float64


def test_no_qparam_gradient_when_not_required():
    x = torch.randn(10, requires_grad=True)
    scale = torch.tensor(0.1)
    hg.quantize(x, scale).sum().backward()
    assert scale.grad is None and x.grad is not None


# --------------------------------------------------------------------------------------
# Memory saved for backward.
# --------------------------------------------------------------------------------------


def saved_nbytes(fn, *args) -> int:
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(*args)
    return total


@pytest.mark.parametrize("rows", [32, 1024], ids=["small", "large"])
@pytest.mark.parametrize("surrogate", QUANTIZE_SURROGATES)
def test_saved_bytes_with_fixed_quantization_parameters(surrogate, rows):
    """One mask: 1 byte per element, or, below MASK_CONVERT_MIN_NUMEL elements in eager
    mode, 0/1 in x's dtype (faster there)."""
    x = torch.randn(rows, 64, requires_grad=True)
    small = x.numel() < MASK_CONVERT_MIN_NUMEL
    mask_bytes = x.element_size() if small else 1
    budget = 0 if SURROGATES.get(surrogate).kind == "identity" else mask_bytes
    cases = [
        (0.1, 0),
        (torch.tensor(0.1), 0),
        (0.1, 3),
        (torch.full((rows, 1), 0.1), torch.zeros(rows, 1)),
    ]
    for scale, zero_point in cases:
        nbytes = saved_nbytes(
            lambda t, s=scale, z=zero_point: hg.quantize(t, s, z, surrogate=surrogate), x
        )
        assert nbytes <= budget * x.numel(), (scale, zero_point, nbytes)


# --------------------------------------------------------------------------------------
# Property test: any float32 input, any scale, any zero point.
# --------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(
    values=st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=8),
    scale=st.floats(min_value=2**-20, max_value=1024.0, width=32),
    zero_point=st.integers(-128, 127),
)
def test_property_matches_fake_quantize(values, scale, zero_point):
    x = torch.tensor(values, dtype=torch.float32)
    expected = torch.fake_quantize_per_tensor_affine(x, scale, zero_point, -128, 127)
    for s in (scale, torch.tensor(scale)):
        assert torch.equal(hg.quantize(x, s, zero_point), expected)


# --------------------------------------------------------------------------------------
# Regressions found by tests/test_properties_ops.py: settings outside the compute dtype.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scale",
    [
        1e-300,  # was ZeroDivisionError (it rounds to 0 in float32)
        1e300,  # was a NaN output (inf in float32)
        1e-40,  # was NaN at x = 0 (a float32 subnormal: 1 / scale = inf)
        torch.tensor(1e-300, dtype=torch.float64),  # was NaN (0 in float32)
        torch.tensor(1e300, dtype=torch.float64),  # was NaN (inf in float32)
        torch.tensor(1e-40),  # was NaN at x = 0
    ],
    ids=repr,
)
def test_scale_outside_the_compute_dtype_is_a_value_error(scale):
    with pytest.raises(ValueError, match="`scale`"):
        hg.quantize(torch.tensor([0.0, 1.0, -3.0]), scale)


def test_float64_input_accepts_float64_scales():
    x = torch.tensor([0.0, 3e-300, -1e-299], dtype=torch.float64)
    y = hg.quantize(x, 1e-300)
    assert torch.equal(y, formula(x, 1e-300, 0, -128, 127))


@pytest.mark.parametrize("bound", [10**40, 2**70, 2**24 + 1])
def test_quant_range_beyond_exact_levels_is_a_value_error(bound):
    """Was OverflowError ("int too big to convert") past int64, and levels that float32
    cannot hold exactly past 2**24."""
    x = torch.tensor([0.0, 1.0])
    with pytest.raises(ValueError, match="`quant_min`"):
        hg.quantize(x, 0.5, quant_min=-bound, quant_max=0)
    with pytest.raises(ValueError, match="`quant_max`"):
        hg.quantize(x, 0.5, quant_min=0, quant_max=bound)
    if bound <= 2**53:  # float64 holds these levels exactly
        x64 = x.double()
        assert torch.equal(hg.quantize(x64, 0.5, quant_min=0, quant_max=bound), x64)


def test_repeated_number_scale_calls_reuse_a_checked_plan_without_skipping_checks():
    """The second call with the same settings takes the cached plan (no argument checks):
    same values and gradients; settings equal to a cached key but of another type (True
    for 1, a bool zero point) are still checked, and bad values never enter the cache."""
    from hardgrad.ops import _quantize

    _quantize._NUMBER_PLANS.clear()
    x = torch.linspace(-3, 3, 50, requires_grad=True)
    outs = []
    for _ in range(2):
        x.grad = None
        y = hg.quantize(x, 1, quant_min=-2, quant_max=2)
        y.sum().backward()
        outs.append((y.detach(), x.grad.clone()))
    assert len(_quantize._NUMBER_PLANS) == 1
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][1], outs[1][1])
    with pytest.raises(TypeError, match="`scale`"):
        hg.quantize(x, True, quant_min=-2, quant_max=2)
    with pytest.raises(TypeError, match="`quant_min`"):
        hg.quantize(x, 1, quant_min=True, quant_max=2)
    with pytest.raises(TypeError, match="`zero_point`"):
        hg.quantize(x, 1, False, quant_min=-2, quant_max=2)
    with pytest.raises(TypeError, match="floating-point"):
        hg.quantize(torch.ones(3, dtype=torch.long), 1, quant_min=-2, quant_max=2)
    for bad in (float("nan"), -1.0, 0.0):
        for _ in range(2):
            with pytest.raises(ValueError, match="`scale`"):
                hg.quantize(x, bad, quant_min=-2, quant_max=2)
    with pytest.raises(ValueError, match="`in_range`"):
        hg.quantize(x, 1, quant_min=-2, quant_max=2, in_range="nearest")
    identity = hg.quantize(x, 1, quant_min=-2, quant_max=2, surrogate="identity")
    assert torch.equal(identity, outs[0][0])
    assert len(_quantize._NUMBER_PLANS) == 2
    for i in range(_quantize._MAX_PLANS + 5):  # bounded: cleared when full
        hg.quantize(x, 1.0 + i / 1024, quant_min=-2, quant_max=2)
    assert len(_quantize._NUMBER_PLANS) <= _quantize._MAX_PLANS


@pytest.mark.parametrize("numel", [4096, 70_000], ids=["small", "large"])
@pytest.mark.parametrize("surrogate", ["masked", "identity"])
@pytest.mark.parametrize("in_range", ["rounded", "unrounded"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_number_scale_eager_path_matches_the_general_path(numel, surrogate, in_range, dtype):
    """The eager forward of a number-scale call (0-d tensor constants, ``0 + scale * level``)
    against the general one that ``torch.func`` transforms take, bit for bit: values with
    the signs of their zeros, NaN, the bounds' half-step bands, and the input gradients."""
    gen = torch.Generator().manual_seed(int(numel) + len(in_range))
    scale = 0.1 if dtype == torch.float64 else 0.25
    x = torch.randn(numel, generator=gen, dtype=torch.float64) * 3
    edges = torch.tensor([-0.0, 0.0, -0.01, 0.04, 0.7499, 0.75, 0.76, -0.85, -0.8])
    x[: edges.numel()] = edges.double()
    x[edges.numel()] = float("nan")
    x = x.to(dtype)

    def op(t: torch.Tensor) -> torch.Tensor:
        return hg.quantize(
            t, scale, quant_min=-8, quant_max=7, surrogate=surrogate, in_range=in_range
        )

    g = torch.randn(numel, generator=gen).to(dtype)
    leaf = x.clone().requires_grad_(True)
    for _ in range(2):  # the second call takes the cached plan
        leaf.grad = None
        eager = op(leaf)
        eager.backward(g)
    rows = x.reshape(2, -1)
    general = torch.func.vmap(op)(rows).reshape(-1)
    (general_grad,) = torch.func.vjp(torch.func.vmap(op), rows)[1](g.reshape(2, -1))
    assert eager.dtype == dtype
    assert torch.equal(eager.isnan(), general.isnan())
    finite = ~general.isnan()
    assert torch.equal(eager.detach()[finite], general[finite])
    assert torch.equal(eager.detach()[finite].signbit(), general[finite].signbit())
    zeros = eager.detach() == 0
    assert zeros[:4].all() and not eager.detach()[zeros].signbit().any()  # never -0.0
    assert torch.equal(leaf.grad, general_grad.reshape(-1))


@pytest.mark.parametrize("per_channel_dim", [None, 0])
def test_learned_scale_gradient_equals_the_two_node_form_bit_for_bit(per_channel_dim, dtype):
    """``nn.Quantize`` runs LSQ as one node, with the step size's sign folded into the
    factor ``+-g`` it saves in forward; its gradients are those of the two-node form
    (``hg.quantize`` with the module's ``step_size`` as a tensor scale) bit for bit, with
    negative raw scales among the channels too."""
    g = torch.Generator().manual_seed(5)
    x = (2 * torch.randn(6, 3, 4, 4, generator=g, dtype=torch.float64)).to(dtype)
    q = hg.nn.Quantize(4, signed=True, per_channel_dim=per_channel_dim, learn_scale=True)
    if dtype == torch.float64:
        q = q.double()  # (a float64 scale: the factor is then made in float64 too)
    q.init_from(x.to(q.scale.dtype))
    with torch.no_grad():
        flip = torch.where(torch.arange(q.scale.numel()) % 3 == 1, -1.0, 1.0)
        q.scale.mul_(flip.reshape(q.scale.shape) if per_channel_dim is not None else -1.0)
    x.requires_grad_()
    upstream = torch.randn(x.shape, generator=g, dtype=torch.float64).to(dtype)
    y = q(x)
    one_node = torch.autograd.grad(y, (x, q.scale), upstream)

    step = q.step_size(x.dtype)
    per_scale = x.numel() // (step.numel() if per_channel_dim is not None else 1)
    shape = (-1, 1, 1, 1) if per_channel_dim is not None else ()
    y_ref = hg.quantize(
        x,
        step.reshape(shape),
        quant_min=q.quant_min,
        quant_max=q.quant_max,
        grad_scale=1.0 / math.sqrt(per_scale * q.quant_max),
    )
    two_node = torch.autograd.grad(y_ref, (x, q.scale), upstream)
    assert torch.equal(y.detach(), y_ref.detach())
    for got, want in zip(one_node, two_node, strict=True):
        assert got.dtype == want.dtype and torch.equal(got, want)
    flipped = q.scale.detach().flatten() < 0
    assert flipped.any() and (one_node[1].flatten()[flipped] != 0).any()  # they learn too
