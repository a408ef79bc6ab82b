"""Every registered surrogate's derivative and backward, in ulps of the dtype, against
``grad * s'(x)`` evaluated exactly (issue 13, part 2).

The references are written here from the docstrings' math, independently of hardgrad: float64
torch in stable forms (``e^{-|kx|} / (1 + e^{-|kx|})^2`` rather than ``s (1 - s)``) for
float32 and the half types, and 60-digit ``decimal`` arithmetic for float64 results and
wherever float64 itself cancels (next to Swish's zero). An error is ``|y - r| / ulp(r)``,
the ulp of the result's dtype at the reference, the smallest subnormal below the smallest
normal number; a correctly rounded result scores at most 1/2.

Inputs: every finite float16 and bfloat16 value and +-inf; a float32 sweep over the whole
range (every 4099th bit pattern, both signs, subnormals included) plus every value within
300 ulps of 0, of the kinks and of Swish's zero; for float64, a few hundred values from
1e-300 to the largest, dense grids, the tails up to where s' underflows and the neighbours
of the kinks. Upstream gradients are drawn from [-1, 1].

The bounds (``BOUNDS``) are what the docstrings state, a little above what was measured
(``docs/results/surrogate_ulps.md``): within 1 ulp for the half types (computed in
float32, rounded once), a few ulps for float32 and float64, plus, in float32 only, the
rounding of ``k * x`` for sigmoid and tanh slopes that are not powers of two (``1.25|kx|``
ulps for sigmoid, ``2.5|kx|`` for tanh: the conditioning of ``e^{-|kx|}``, with headroom),
and, for sigmoid, ``(1 + |gk|)/2`` smallest subnormals where ``e^{-|kx|}`` is subnormal.
"""

from __future__ import annotations

import dataclasses
import decimal
import functools
import math
from decimal import Decimal

import pytest
import torch

import hardgrad as hg
from hardgrad.surrogates import SURROGATES, Surrogate

HALF = (torch.float16, torch.bfloat16)
FORMATS = {
    torch.float64: (53, -1022, 1023),
    torch.float32: (24, -126, 127),
    torch.float16: (11, -14, 15),
    torch.bfloat16: (8, -126, 127),
}
PI = Decimal("3.14159265358979323846264338327950288419716939937510582097494")
#: The zero of 2 - u tanh(u/2), to 40 digits (checked below).
SWISH_ZERO = Decimal("2.399357280515467667832739697282283888523")


# --------------------------------------------------------------------------------------
# References, from the docstrings' math.
# --------------------------------------------------------------------------------------


def _bell(u: torch.Tensor) -> torch.Tensor:
    e = torch.exp(-u.abs())
    return e / (1 + e) ** 2


def _swish64(s, x):
    v = (s.beta * x).abs()
    e = torch.exp(-v)
    value = 2 * s.beta * (e / (1 + e) ** 2) * (2 - v * (1 - e) / (1 + e))
    return torch.where(torch.isinf(x), 0.0, value)


#: s'(x) in float64 for float64 x, in forms that neither cancel nor overflow.
REFERENCE64 = {
    "identity": lambda s, x: torch.ones_like(x),
    "clipped": lambda s, x: (x.abs() <= s.width).double(),
    "masked": lambda s, x: ((x >= s.min) & (x <= s.max)).double(),
    "sigmoid": lambda s, x: s.slope * _bell(s.slope * x),
    "tanh": lambda s, x: 4 * s.slope * _bell(2 * s.slope * x),
    "fast_sigmoid": lambda s, x: (1 / (1 + s.slope * x.abs())) ** 2,
    "atan": lambda s, x: (
        (s.alpha / 2) / torch.hypot(math.pi / 2 * s.alpha * x, torch.ones_like(x)) ** 2
    ),
    "triangle": lambda s, x: torch.clamp(s.width - x.abs(), min=0) / s.width**2,
    "approx_sign": lambda s, x: 2 * torch.clamp(1 - x.abs(), min=0),
    "swish": _swish64,
}


def reference_decimal(s: Surrogate, value: float) -> Decimal:
    """s'(x) with 60 significant digits, x exact."""
    if math.isnan(value):
        return Decimal("NaN")
    if math.isinf(value):
        return Decimal(1 if s.name == "identity" else 0)
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        x = Decimal(value)
        ax = abs(x)

        def bell(u: Decimal) -> Decimal:
            e = (-abs(u)).exp()
            return e / (1 + e) ** 2

        name = s.name
        if name == "identity":
            return Decimal(1)
        if name == "clipped":
            return Decimal(int(ax <= Decimal(s.width)))
        if name == "masked":
            return Decimal(int(Decimal(s.min) <= x <= Decimal(s.max)))
        if name == "sigmoid":
            return Decimal(s.slope) * bell(Decimal(s.slope) * x)
        if name == "tanh":
            return 4 * Decimal(s.slope) * bell(2 * Decimal(s.slope) * x)
        if name == "fast_sigmoid":
            return 1 / (1 + Decimal(s.slope) * ax) ** 2
        if name == "atan":
            u = PI * Decimal(s.alpha) / 2 * x
            return Decimal(s.alpha) / 2 / (1 + u * u)
        if name == "triangle":
            w = Decimal(s.width)
            return max(Decimal(0), w - ax) / (w * w)
        if name == "approx_sign":
            return 2 * max(Decimal(0), 1 - ax)
        if name == "swish":
            v = Decimal(s.beta) * ax
            e = (-v).exp()
            return 2 * Decimal(s.beta) * e / (1 + e) ** 2 * (2 - v * (1 - e) / (1 + e))
    raise KeyError(s.name)


# --------------------------------------------------------------------------------------
# The measure (independent of hardgrad._core.ulp, which is checked against it below).
# --------------------------------------------------------------------------------------


def ulp_of(reference: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    bits, emin, emax = FORMATS[dtype]
    exponent = torch.where(reference == 0, emin, torch.frexp(reference).exponent - 1)
    exponent = torch.clamp(exponent, emin, emax) - (bits - 1)
    return torch.ldexp(torch.ones_like(reference), exponent)


def ulps(got: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """Error of ``got`` in ulps of its dtype against a float64 reference."""
    g, r = got.double(), reference.double()
    overflow = torch.isinf(g) & (r.to(got.dtype).double() == g)
    same = (g == r) | (g.isnan() & r.isnan()) | overflow
    err = ((g - r).abs() / ulp_of(r, got.dtype)).nan_to_num(nan=math.inf)
    return torch.where(same, 0.0, err)


def _unit64(magnitude: Decimal) -> Decimal:
    """The float64 ulp at a decimal magnitude."""
    if magnitude < Decimal(2) ** -1022:
        return Decimal(2) ** -1074
    e = min(math.frexp(float(magnitude))[1] - 1, 1023)
    if Decimal(2) ** e > magnitude:  # float() rounded up to a power of two
        e -= 1
    return Decimal(2) ** (e - 52)


def ulps_decimal(got: torch.Tensor, references: list[Decimal]) -> torch.Tensor:
    """Error of float64 results in float64 ulps against decimal references."""
    out = []
    for y, r in zip(got.tolist(), references, strict=True):
        if r.is_nan() or math.isnan(y):
            out.append(0.0 if r.is_nan() and math.isnan(y) else math.inf)
        elif math.isinf(y):
            out.append(0.0 if abs(r) > Decimal(torch.finfo(torch.float64).max) else math.inf)
        else:
            out.append(float(abs(Decimal(y) - r) / _unit64(abs(r))))
    return torch.tensor(out, dtype=torch.float64)


# --------------------------------------------------------------------------------------
# What is tested: every registered surrogate, with its parameters across their range.
# --------------------------------------------------------------------------------------

#: Worst error allowed, in ulps, for float32 and float64 results (half types: 1).
BOUNDS = {
    "identity": 0.0,
    "clipped": 0.0,
    "masked": 0.0,
    "sigmoid": 5.0,
    "tanh": 4.0,
    "fast_sigmoid": 6.0,
    "atan": 7.0,
    "triangle": 3.0,
    "approx_sign": 2.0,
    "swish": 7.0,
}

#: Parameter values tried for every positive parameter (0.5 .. 100; 2.5, 25 and 0.1 are
#: not powers of two and do not fit exactly in any dtype but float64).
PARAMETER_VALUES = (0.1, 0.5, 2.5, 4.0, 25.0, 100.0)


def instances(name: str) -> list[Surrogate]:
    cls = SURROGATES.get(name)
    default = cls()
    found = [default]
    if name == "masked":
        return [*found, cls(min=-0.3, max=0.7), cls(min=0.0, max=0.1), cls(min=-2.5, max=-0.5)]
    for field in dataclasses.fields(default) if dataclasses.is_dataclass(default) else []:
        found += [cls(**{field.name: v}) for v in PARAMETER_VALUES]
    return found


CASES = [
    pytest.param(s, id=f"{name}-{i}")
    for name in SURROGATES.names()
    for i, s in enumerate(instances(name))
]


def special_points(s: Surrogate) -> list[float]:
    """|x| where s' has a kink, and Swish's zero."""
    points = [0.0, 1.0]
    if dataclasses.is_dataclass(s):
        points += [abs(float(getattr(s, f.name))) for f in dataclasses.fields(s)]
    if s.name == "swish":
        points.append(float(SWISH_ZERO) / s.beta)
    return points


def neighbours(points: list[float], dtype: torch.dtype, reach: int) -> torch.Tensor:
    """Every value of ``dtype`` within ``reach`` ulps of each point, both signs."""
    ints = {torch.float32: torch.int32, torch.float64: torch.int64}[dtype]
    top = torch.tensor(math.inf, dtype=dtype).view(ints).item()
    centres = torch.tensor(points, dtype=dtype).view(ints).long()
    bits = (centres[:, None] + torch.arange(-reach, reach + 1)).flatten()
    x = bits[(bits >= 0) & (bits < top)].to(ints).view(dtype)
    return torch.cat([x, -x])


def inputs(s: Surrogate, dtype: torch.dtype) -> torch.Tensor:
    infinities = torch.tensor([math.inf, -math.inf], dtype=dtype)
    if dtype in HALF:
        every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
        return torch.cat([every[torch.isfinite(every)], infinities])
    if dtype == torch.float32:
        sweep = torch.arange(0, 0x7F800000, 4099, dtype=torch.int64).to(torch.int32)
        sweep = sweep.view(torch.float32)
        near = neighbours(special_points(s), dtype, 300)
        return torch.cat([sweep, -sweep, near, infinities])
    fields = dataclasses.fields(s) if dataclasses.is_dataclass(s) else ()
    scale = max([abs(float(getattr(s, f.name))) for f in fields] + [1.0])
    logs = torch.logspace(-300, 308, 121, dtype=torch.float64)
    dense = torch.linspace(-4, 4, 161, dtype=torch.float64)
    tails = torch.linspace(0, 1500 / max(scale, 1e-3), 121, dtype=torch.float64)
    near = neighbours(special_points(s), dtype, 12)
    return torch.cat([logs, -logs, dense, tails, -tails, near, infinities])


def argument_term(s: Surrogate, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Ulps the float32 rounding of k x may add: sigmoid and tanh with a slope that is not a
    power of two (1.25 |kx| and 2.5 |kx|: e^{-|w|} for w = kx or 2kx rounded, relative
    error up to 2^-24 |w|, and a little headroom)."""
    slope = getattr(s, "slope", 1.0)
    if dtype != torch.float32 or s.name not in ("sigmoid", "tanh"):
        return torch.zeros_like(x, dtype=torch.float64)
    if math.frexp(slope)[0] == 0.5:
        return torch.zeros_like(x, dtype=torch.float64)
    reach = 1.25 if s.name == "sigmoid" else 2.5
    return (reach * slope * x.double().abs()).nan_to_num(posinf=0.0)


def allowed(s: Surrogate, x, reference, grad, dtype) -> torch.Tensor:
    """The bound, in ulps at each reference value."""
    if dtype in HALF:
        return torch.ones_like(reference)
    bound = BOUNDS[s.name] + argument_term(s, x, dtype)
    if s.name == "sigmoid":
        bound = bound + subnormal_allowance(s, grad, dtype) / ulp_of(reference, dtype)
    return bound


def subnormal_allowance(s: Surrogate, grad: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Sigmoid rounds e^{-|kx|} to a subnormal before it scales it by g k: (1 + |gk|)/2
    of the smallest subnormal, absolute (a fraction of an ulp unless the result is tiny)."""
    smallest = torch.finfo(dtype).smallest_normal * 2.0 ** -(FORMATS[dtype][0] - 1)
    return (1 + s.slope * grad.double().abs()) / 2 * smallest


def measure(s: Surrogate, dtype: torch.dtype, *, through_op: bool, compiled: bool = False):
    """(x, grad, result, error in ulps, reference) for the derivative or the op backward
    (``compiled``: the op and its backward through ``torch.compile``, inductor)."""
    x = inputs(s, dtype)
    gen = torch.Generator().manual_seed(0)
    grad = (torch.rand(x.shape, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype)
    if through_op:
        leaf = x.clone().requires_grad_()
        if "step" in s.applies_to:
            op = functools.partial(hg.heaviside, surrogate=s)
        elif "staircase" in s.applies_to:
            op = functools.partial(hg.round, surrogate=s)
        else:
            op = functools.partial(hg.clamp, min=s.min, max=s.max, surrogate=s)
        y = (torch.compile(op, fullgraph=True, dynamic=False) if compiled else op)(leaf)
        if op.func is hg.clamp:
            # hg.clamp, like torch.clamp, compares with its bounds rounded to the dtype
            low, high = (
                float(torch.tensor(v, dtype=torch.float64).to(dtype)) for v in (s.min, s.max)
            )
            s = dataclasses.replace(s, min=low, max=high)
        (got,) = torch.autograd.grad(y, leaf, grad)
    else:
        grad = torch.ones_like(x)
        got = s.derivative(x)
    assert got.dtype == dtype and got.shape == x.shape
    if dtype == torch.float64:
        with decimal.localcontext() as ctx:
            ctx.prec = 60
            exact = [reference_decimal(s, v) for v in x.tolist()]
            scaled = [
                Decimal(g) * r if r.is_finite() else r
                for g, r in zip(grad.tolist(), exact, strict=True)
            ]
            reference = torch.tensor([float(r) for r in scaled], dtype=torch.float64)
            return x, grad, got, ulps_decimal(got, scaled), reference
    x64 = x.double()
    reference = REFERENCE64[s.name](s, x64) * grad.double()
    if s.name == "swish":  # float64 cancels next to the zero: decimals there
        near = ((s.beta * x64).abs() - float(SWISH_ZERO)).abs() < 0.01
        index = near.nonzero().flatten()
        exact = [
            Decimal(g) * reference_decimal(s, v)
            for v, g in zip(x64[index].tolist(), grad[index].double().tolist(), strict=True)
        ]
        reference[index] = torch.tensor([float(r) for r in exact], dtype=torch.float64)
    return x, grad, got, ulps(got, reference), reference


def _report(s, dtype, x, got, reference, err, bound) -> str:
    bad = (err > bound).nonzero().flatten()[:5]
    rows = [
        f"x={x[i].item()!r}: got {got[i].item()!r}, expected {reference[i].item()!r} "
        f"({err[i].item():.3g} ulps > {bound[i].item():.3g})"
        for i in bad.tolist()
    ]
    return f"{s!r} in {dtype}: " + "; ".join(rows)


# --------------------------------------------------------------------------------------
# The conformance test.
# --------------------------------------------------------------------------------------


def test_every_registered_surrogate_has_a_reference_and_a_bound():
    """A newly registered surrogate must get a reference here (and so the tests below)."""
    assert set(SURROGATES.names()) <= set(REFERENCE64) & set(BOUNDS)


@pytest.mark.parametrize("through_op", [False, True], ids=["derivative", "op-backward"])
@pytest.mark.parametrize(
    "dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16], ids=str
)
@pytest.mark.parametrize("surrogate", CASES)
def test_error_in_ulps_over_the_whole_line(surrogate, dtype, through_op):
    x, grad, got, err, reference = measure(surrogate, dtype, through_op=through_op)
    bound = allowed(surrogate, x, reference, grad, dtype)
    assert bool((err <= bound).all()), _report(surrogate, dtype, x, got, reference, err, bound)


@pytest.mark.parametrize("surrogate", CASES)
def test_error_in_ulps_compiled_float32(surrogate):
    """The same bounds for the op's backward compiled by inductor (its own exp and
    fusions), float32: the dtype models are compiled in."""
    torch._dynamo.reset()
    x, grad, got, err, reference = measure(surrogate, torch.float32, through_op=True, compiled=True)
    bound = allowed(surrogate, x, reference, grad, torch.float32)
    assert bool((err <= bound).all()), _report(
        surrogate, torch.float32, x, got, reference, err, bound
    )


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("surrogate", [c for c in CASES if c.values[0].name == "sigmoid"])
def test_compiled_sigmoid_error_in_ulps(surrogate, dtype):
    """Sigmoid, the surrogate whose tails depend most on how exp is evaluated, compiled in
    the other dtypes."""
    torch._dynamo.reset()
    x, grad, got, err, reference = measure(surrogate, dtype, through_op=True, compiled=True)
    bound = allowed(surrogate, x, reference, grad, dtype)
    assert bool((err <= bound).all()), _report(surrogate, dtype, x, got, reference, err, bound)


@pytest.mark.parametrize(
    "dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16], ids=str
)
@pytest.mark.parametrize("surrogate", CASES)
def test_zero_only_where_the_exact_value_rounds_to_zero(surrogate, dtype):
    """No flush to zero: a result is 0 only where the reference is below half the smallest
    subnormal (exactly where it rounds to 0, for the half types, computed in float32)."""
    x, _, got, _, reference = measure(surrogate, dtype, through_op=False)
    smallest = torch.finfo(dtype).smallest_normal * 2.0 ** -(FORMATS[dtype][0] - 1)
    # (a reference within float64's own rounding of the halfway point may go either way)
    limit = smallest / 2 * (1 + 1e-12) if dtype in HALF else smallest
    if surrogate.name == "sigmoid" and dtype not in HALF:  # see subnormal_allowance
        limit = torch.maximum(
            torch.tensor(limit), subnormal_allowance(surrogate, torch.ones_like(x), dtype)
        )
    false_zero = (got == 0) & (reference.abs() > limit)
    assert not bool(false_zero.any()), (surrogate, x[false_zero][:5], reference[false_zero][:5])
    assert not bool(got[~x.isnan()].isnan().any())


# --------------------------------------------------------------------------------------
# The traps of the issue, as it states them.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("surrogate", [hg.surrogates.Sigmoid(), hg.surrogates.Tanh()], ids=repr)
def test_float32_tails_are_not_flushed_to_zero(surrogate):
    """sigma(1 - sigma) and 1 - tanh^2 cancelled to 0 for |kx| >~ 17 (tanh: >~ 9)."""
    x = torch.tensor([17.0, 20.0, 30.0, 50.0, 80.0, 88.0, 100.0, 103.0], dtype=torch.float32)
    x = torch.cat([x, -x])
    got = surrogate.derivative(x)
    reference = REFERENCE64[surrogate.name](surrogate, x.double())
    representable = reference.abs() >= 2.0**-149
    assert bool((got[representable] > 0).all()), got
    assert float(ulps(got, reference).max()) <= BOUNDS[surrogate.name]


def test_bfloat16_sigmoid_slope_4_at_1_5():
    """4 sigma'(6) = 0.00987; computed in bfloat16 it came out 0.0156 (58 % off)."""
    s = hg.surrogates.Sigmoid(slope=4.0)
    x = torch.tensor([1.5, -1.5], dtype=torch.bfloat16, requires_grad=True)
    exact = 4 * _bell(torch.tensor([6.0, -6.0], dtype=torch.float64))
    assert float(ulps(s.derivative(x.detach()), exact).max()) <= 0.5
    hg.heaviside(x, surrogate=s).sum().backward()
    assert float(ulps(x.grad, exact).max()) <= 0.5
    torch.testing.assert_close(x.grad.double(), exact, rtol=2**-8, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("beta", [1.0, 5.0, 25.0])
def test_swish_near_its_zero_crossing_in_half_precision(dtype, beta):
    """Swish reached 58 % error in bfloat16 next to the zero of s'."""
    s = hg.surrogates.Swish(beta=beta)
    x = inputs(s, dtype)
    zero = float(SWISH_ZERO) / beta
    x = x[(x.abs() > zero / 2) & (x.abs() < 2 * zero)]
    leaf = x.clone().requires_grad_()
    (got,) = torch.autograd.grad(hg.sign(leaf, surrogate=s), leaf, torch.ones_like(x))
    reference = torch.tensor(
        [float(reference_decimal(s, v)) for v in x.tolist()], dtype=torch.float64
    )
    assert float(ulps(got, reference).max()) <= 0.5
    assert float(ulps(s.derivative(x), reference).max()) <= 0.5


def test_nonfinite_inputs():
    """+-inf gives 0 (1 for the identity), NaN gives NaN, in every dtype; never NaN else."""
    for name in SURROGATES.names():
        s = hg.surrogates.get(name)
        for dtype in FORMATS:
            x = torch.tensor([math.inf, -math.inf, math.nan], dtype=dtype)
            for got in (s.derivative(x), s.backward(torch.ones_like(x), x)):
                expected = 1.0 if name == "identity" else 0.0
                assert got[:2].tolist() == [expected, expected], (name, dtype, got)
                if s.kind == "smooth":
                    assert math.isnan(got[2].item()), (name, dtype, got)


def test_mixed_dtypes_follow_promotion():
    s = hg.surrogates.Sigmoid(slope=4.0)
    x = torch.tensor([1.5, -20.0], dtype=torch.float16)
    got = s.backward(torch.ones(2, dtype=torch.float32), x)
    assert got.dtype == torch.float32
    reference = 4 * _bell(4 * x.double())
    assert float(ulps(got, reference).max()) <= BOUNDS["sigmoid"]


# --------------------------------------------------------------------------------------
# The helpers the surrogates and docs/results rely on.
# --------------------------------------------------------------------------------------


def test_swish_zero_and_taylor_coefficients():
    """The constants in hardgrad.surrogates, checked with 60-digit decimals."""
    from hardgrad.surrogates._swish import _SWISH_ROOT, _SWISH_TAYLOR

    with decimal.localcontext() as ctx:
        ctx.prec = 60

        def f(u: Decimal) -> Decimal:  # (2 - u tanh(u/2)) / 2
            e = (-u).exp()
            return (2 - u * (1 - e) / (1 + e)) / 2

        root = Decimal(_SWISH_ROOT[0]) + Decimal(_SWISH_ROOT[1])
        assert abs(root - SWISH_ZERO) < Decimal("1e-31")
        assert abs(f(SWISH_ZERO)) < Decimal("1e-38")
        for delta in (1e-3, -1e-3, 0.1, -0.1, 0.25, -0.25, 0.5, -0.5):
            d = Decimal(delta)
            series = sum(Decimal(c) * d ** (n + 1) for n, c in enumerate(_SWISH_TAYLOR))
            exact = f(SWISH_ZERO + d)
            assert abs(series - exact) <= abs(exact) * Decimal("1e-15"), delta


def test_library_ulp_measure_agrees():
    from hardgrad._core.ulp import round_toward, ulp, ulp_error

    one = torch.tensor(1.0, dtype=torch.float32)
    up = torch.nextafter(one, torch.tensor(2.0))
    assert float(ulp(torch.tensor(1.0, dtype=torch.float64), torch.float32)) == 2.0**-23
    assert float(ulp(torch.tensor(0.0, dtype=torch.float64), torch.float32)) == 2.0**-149
    assert float(ulp(torch.tensor(1e-310, dtype=torch.float64), torch.float64)) == 2.0**-1074
    assert float(ulp(torch.tensor(1e-300, dtype=torch.float64), torch.float64)) == 2.0**-1049
    assert float(ulp(torch.tensor(3e-5, dtype=torch.float64), torch.float16)) == 2.0**-24
    assert float(ulp_error(up, one.double())) == 1.0
    assert float(ulp_error(torch.tensor(math.inf), torch.tensor(1e39, dtype=torch.float64))) == 0
    assert (
        float(ulp_error(torch.tensor(math.inf), torch.tensor(1e38, dtype=torch.float64)))
        == math.inf
    )
    assert float(ulp_error(torch.tensor(math.nan), torch.tensor(math.nan))) == 0
    assert float(ulp_error(torch.tensor(0.0), torch.tensor(2.0**-149, dtype=torch.float64))) == 1
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = inputs(hg.surrogates.Sigmoid(), dtype)[:5000]
        reference = x.double() * (1 + 2.0**-30)
        assert torch.equal(ulp_error(x, reference), ulps(x, reference))
    assert (
        round_toward(0.3, torch.float32, down=True)
        < 0.3
        < round_toward(0.3, torch.float32, down=False)
    )
    assert round_toward(1e300, torch.float16, down=True) == 65504.0
