"""Worst error, in ulps, of every registered surrogate's derivative and op backward, per dtype.

For each surrogate (the default instance, plus instances whose parameter is not a power of
two or sits between two numbers of a dtype) and each dtype, the script evaluates
``surrogate.derivative(x)`` and the backward of the op that uses it (``hg.heaviside`` for
step surrogates, ``hg.round`` for the staircase-only identity, ``hg.clamp`` for ``masked``,
with upstream gradients drawn from [-1, 1]; ``hg.clamp``, like ``torch.clamp``, compares
with its bounds rounded to the dtype, and so does the reference for it) and reports the largest error against the
exact value ``grad * s'(x)``:

* float16, bfloat16: every finite value of the dtype and +-inf;
* float32: every 251st positive bit pattern and its negative (8.6 M values spread over the
  whole range, subnormals included), every value within 3000 ulps of 0, of the kinks and of
  Swish's zero, and +-inf;
* float64: 6000 values per surrogate (log-spaced magnitudes from 1e-300 to the largest,
  dense grids on [-4, 4] and in the tails up to where s' underflows, values next to the
  kinks and to Swish's zero), the reference evaluated with 60-digit decimals.

The reference is written here from the docstrings' math, independently of hardgrad:
float64 torch in the stable forms (e^{-|kx|} / (1 + e^{-|kx|})^2, ...), and 60-digit
``decimal`` arithmetic for float64 results and wherever float64 itself cancels (within
0.01 of Swish's zero). An error is ``|y - r| / ulp(r)`` with the ulp of the result's dtype
at the reference (below the smallest normal number, the smallest subnormal), so that a
correctly rounded result scores at most 0.5. A flush to zero where the reference is a
representable number shows as the number of ulps the reference is away from 0.

Run: ``python docs/results/surrogate_ulps.py`` (about a minute on 2 CPU cores) prints a
Markdown table, committed with the state before and after issue 13 (part 2) in
``surrogate_ulps.md``. To measure another checkout, put its ``src`` first on
``PYTHONPATH``. ``--timing`` instead times the float32 backward of ``hg.heaviside`` (and
``surrogate.backward`` alone) for 4096 and 4M elements against faithful copies of the
kernels from before, interleaved in one process.
"""

from __future__ import annotations

import decimal
import math
import sys
from collections.abc import Callable
from decimal import Decimal

import torch

import hardgrad as hg
from hardgrad.surrogates import SURROGATES

PI = Decimal("3.14159265358979323846264338327950288419716939937510582097494")
SWISH_ROOT = 2.3993572805154676678  # zero of 2 - u tanh(u/2)
FORMATS = {
    torch.float64: (53, -1022, 1023),
    torch.float32: (24, -126, 127),
    torch.float16: (11, -14, 15),
    torch.bfloat16: (8, -126, 127),
}
DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


# ---------------------------------------------------------------------------------------
# References, written from the docstrings' math.
# ---------------------------------------------------------------------------------------


def bell64(u: torch.Tensor) -> torch.Tensor:
    """sigma(u) sigma(-u) = e^{-|u|} / (1 + e^{-|u|})^2, in float64."""
    e = torch.exp(-u.abs())
    return e / (1 + e) ** 2


def reference64(s: hg.surrogates.Surrogate, x: torch.Tensor) -> torch.Tensor:
    """s'(x) in float64 (x float64)."""
    name = s.name
    one, zero = torch.ones_like(x), torch.zeros_like(x)
    if name == "identity":
        return one
    if name == "clipped":
        return torch.where(x.abs() <= s.width, one, zero)
    if name == "masked":
        return torch.where((x >= s.min) & (x <= s.max), one, zero)
    if name == "sigmoid":
        return s.slope * bell64(s.slope * x)
    if name == "tanh":  # k sech^2(kx) = 4k e^{-2|kx|} / (1 + e^{-2|kx|})^2
        return 4 * s.slope * bell64(2 * s.slope * x)
    if name == "fast_sigmoid":
        r = 1 / (1 + s.slope * x.abs())
        return r * r
    if name == "atan":
        u = (math.pi / 2 * s.alpha) * x
        h = torch.hypot(u, one)
        return (s.alpha / 2) / h / h
    if name == "triangle":
        return torch.clamp(s.width - x.abs(), min=0) / s.width**2
    if name == "approx_sign":
        return 2 * torch.clamp(1 - x.abs(), min=0)
    if name == "swish":
        v = (s.beta * x).abs()
        e = torch.exp(-v)
        tanh_half = (1 - e) / (1 + e)
        value = 2 * s.beta * (e / (1 + e) ** 2) * (2 - v * tanh_half)
        return torch.where(torch.isinf(x), 0.0, value)  # e = 0 times -inf
    raise KeyError(name)


def reference_decimal(s: hg.surrogates.Surrogate, value: float) -> Decimal:
    """s'(x) with 60-digit decimals (x exact)."""
    name = s.name
    if math.isnan(value):
        return Decimal("NaN")
    if math.isinf(value):
        return Decimal(1) if name == "identity" else Decimal(0)
    with decimal.localcontext() as ctx:
        ctx.prec = 60
        x = Decimal(value)
        ax = abs(x)

        def bell(u: Decimal) -> Decimal:
            e = (-abs(u)).exp()
            return e / (1 + e) ** 2

        if name == "identity":
            return Decimal(1)
        if name == "clipped":
            return Decimal(1 if ax <= Decimal(s.width) else 0)
        if name == "masked":
            return Decimal(1 if Decimal(s.min) <= x <= Decimal(s.max) else 0)
        if name == "sigmoid":
            k = Decimal(s.slope)
            return k * bell(k * x)
        if name == "tanh":
            k = Decimal(s.slope)
            return 4 * k * bell(2 * k * x)
        if name == "fast_sigmoid":
            return 1 / (1 + Decimal(s.slope) * ax) ** 2
        if name == "atan":
            a = Decimal(s.alpha)
            u = PI * a / 2 * x
            return (a / 2) / (1 + u * u)
        if name == "triangle":
            w = Decimal(s.width)
            return max(Decimal(0), w - ax) / (w * w)
        if name == "approx_sign":
            return 2 * max(Decimal(0), 1 - ax)
        if name == "swish":
            b = Decimal(s.beta)
            v = b * ax
            e = (-v).exp()
            return 2 * b * e / (1 + e) ** 2 * (2 - v * (1 - e) / (1 + e))
    raise KeyError(name)


# ---------------------------------------------------------------------------------------
# The measure.
# ---------------------------------------------------------------------------------------


def ulp64(reference: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    bits, emin, emax = FORMATS[dtype]
    exponent = torch.where(reference == 0, emin, torch.frexp(reference).exponent - 1)
    exponent = torch.clamp(exponent, emin, emax) - (bits - 1)
    return torch.ldexp(torch.ones_like(reference), exponent)


def ulp_errors(got: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """Errors in ulps of got.dtype against a float64 reference (float32 and narrower)."""
    g, r = got.double(), ref.double()
    overflow = torch.isinf(g) & (r.to(got.dtype).double() == g)
    same = (g == r) | (g.isnan() & r.isnan()) | overflow
    err = ((g - r).abs() / ulp64(r, got.dtype)).nan_to_num(nan=math.inf)
    return torch.where(same, 0.0, err)


def ulp_errors_decimal(got: torch.Tensor, refs: list[Decimal]) -> list[float]:
    """Errors of float64 results in float64 ulps against decimal references."""
    out = []
    for y, r in zip(got.tolist(), refs, strict=True):
        if r.is_nan() or math.isnan(y):
            out.append(0.0 if (r.is_nan() and math.isnan(y)) else math.inf)
            continue
        if math.isinf(y):
            out.append(0.0 if abs(r) > Decimal(sys.float_info.max) else math.inf)
            continue
        if r == 0:
            out.append(0.0 if y == 0 else abs(y) / 5e-324)
            continue
        magnitude = r.copy_abs()
        if magnitude < Decimal(2) ** -1022:
            unit = Decimal(2) ** -1074
        else:
            e = min(math.frexp(float(magnitude))[1] - 1, 1023)
            if Decimal(2) ** e > magnitude:  # float() rounded up to a power of two
                e -= 1
            unit = Decimal(2) ** (e - 52)
        out.append(float(abs(Decimal(y) - r) / unit))
    return out


# ---------------------------------------------------------------------------------------
# Inputs.
# ---------------------------------------------------------------------------------------


def around(values: list[float], dtype: torch.dtype, reach: int) -> torch.Tensor:
    """Every value of dtype within `reach` ulps of each of `values` (and their negatives)."""
    int_type = {torch.float32: torch.int32, torch.float64: torch.int64}[dtype]
    centres = torch.tensor([abs(v) for v in values], dtype=dtype).view(int_type).to(torch.int64)
    offsets = torch.arange(-reach, reach + 1, dtype=torch.int64)
    bits = (centres[:, None] + offsets).flatten()
    bits = bits[
        (bits >= 0) & (bits < (0x7F800000 if dtype == torch.float32 else 0x7FF0000000000000))
    ]
    x = bits.to(int_type).view(dtype)
    return torch.cat([x, -x])


def special_points(s: hg.surrogates.Surrogate) -> list[float]:
    """Kinks, and Swish's zero, where the derivative needs care."""
    points = [0.0, 1.0]
    for value in vars(s).values() if hasattr(s, "__dataclass_fields__") else []:
        if isinstance(value, float):
            points.append(abs(value))
    if s.name == "swish":
        points.append(SWISH_ROOT / s.beta)
    return points


def inputs(s: hg.surrogates.Surrogate, dtype: torch.dtype) -> torch.Tensor:
    inf = torch.tensor([math.inf, -math.inf], dtype=dtype)
    if dtype in (torch.float16, torch.bfloat16):
        bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
        x = bits.view(dtype)
        return torch.cat([x[torch.isfinite(x)], inf])
    if dtype == torch.float32:
        positive = torch.arange(0, 0x7F800000, 251, dtype=torch.int64).to(torch.int32)
        x = positive.view(torch.float32)
        return torch.cat([x, -x, around(special_points(s), dtype, 3000), inf])
    # float64: a few thousand values, references in decimal.
    g = torch.Generator().manual_seed(0)
    logs = torch.logspace(-300, 308, 600, dtype=torch.float64)
    dense = torch.linspace(-4, 4, 2001, dtype=torch.float64)
    scale = {"sigmoid": getattr(s, "slope", 1), "tanh": 2 * getattr(s, "slope", 1)}.get(
        s.name, getattr(s, "beta", 1)
    )
    tail = torch.linspace(0, 760 / scale, 1201, dtype=torch.float64)
    rand = torch.randn(800, generator=g, dtype=torch.float64) * 3
    near = around(special_points(s), dtype, 40)
    return torch.cat([logs, -logs, dense, tail, -tail, rand, near, inf])


# ---------------------------------------------------------------------------------------
# What is measured.
# ---------------------------------------------------------------------------------------


def op_for(s: hg.surrogates.Surrogate) -> tuple[str, Callable[[torch.Tensor], torch.Tensor]]:
    if "step" in s.applies_to:
        return "heaviside", lambda x: hg.heaviside(x, surrogate=s)
    if "staircase" in s.applies_to:
        return "round", lambda x: hg.round(x, surrogate=s)
    return "clamp", lambda x: hg.clamp(x, s.min, s.max, surrogate=s)  # type: ignore[attr-defined]


def worst(s: hg.surrogates.Surrogate, dtype: torch.dtype) -> tuple[float, float, float]:
    """(worst derivative error, worst op-backward error, x of the worse of the two)."""
    x = inputs(s, dtype)
    gen = torch.Generator().manual_seed(1)
    grad = (torch.rand(x.shape, generator=gen, dtype=torch.float64) * 2 - 1).to(dtype)
    _, op = op_for(s)
    with torch.no_grad():
        d = s.derivative(x)
    leaf = x.clone().requires_grad_()
    (b,) = torch.autograd.grad(op(leaf), leaf, grad)
    if dtype == torch.float64:
        with decimal.localcontext() as ctx:
            ctx.prec = 60
            refs = [reference_decimal(s, v) for v in x.tolist()]
            g = [Decimal(v) for v in grad.tolist()]
            e_d = torch.tensor(ulp_errors_decimal(d, refs), dtype=torch.float64)
            refb = [gi * r if r.is_finite() else r for gi, r in zip(g, refs, strict=True)]
            e_b = torch.tensor(ulp_errors_decimal(b, refb), dtype=torch.float64)
    else:
        x64 = x.double()
        ref = reference64(s, x64)
        if s.name == "swish":  # float64 cancels next to the zero: decimals there
            near = ((s.beta * x64).abs() - SWISH_ROOT).abs() < 0.01
            idx = near.nonzero().flatten()
            exact = [reference_decimal(s, v) for v in x64[idx].tolist()]
            ref[idx] = torch.tensor([float(r) for r in exact], dtype=torch.float64)
            g64 = grad.double()
            refb = g64 * ref
            refb[idx] = torch.tensor(
                [float(Decimal(gv) * r) for gv, r in zip(g64[idx].tolist(), exact, strict=True)],
                dtype=torch.float64,
            )
        elif s.name == "masked":  # hg.clamp compares with its bounds rounded to the dtype
            lo, hi = (float(torch.tensor(v, dtype=torch.float64).to(dtype)) for v in (s.min, s.max))
            refb = grad.double() * ((x64 >= lo) & (x64 <= hi)).double()
        else:
            refb = grad.double() * ref
        e_d, e_b = ulp_errors(d, ref), ulp_errors(b, refb)
    i = int(torch.maximum(e_d, e_b).argmax())
    return float(e_d.max()), float(e_b.max()), float(x[i])


def instances() -> list[hg.surrogates.Surrogate]:
    s = hg.surrogates
    extra = {
        "clipped": [s.Clipped(width=0.3)],
        "masked": [s.Masked(min=-0.3, max=0.7)],
        "sigmoid": [s.Sigmoid(slope=4.0), s.Sigmoid(slope=5.0)],
        "tanh": [s.Tanh(slope=2.5)],
        "fast_sigmoid": [s.FastSigmoid(slope=1.0)],
        "atan": [s.ATan(alpha=3.0)],
        "triangle": [s.Triangle(width=0.3)],
        "swish": [s.Swish(beta=4.0), s.Swish(beta=1.0)],
    }
    out = []
    for name in SURROGATES.names():
        out.append(hg.surrogates.get(name))
        out.extend(extra.get(name, []))
    return out


def fmt(value: float) -> str:
    if math.isinf(value):
        return "inf"
    if value >= 1e4:
        return f"{value:.1e}"
    return f"{value:.2f}"


def main() -> None:
    print(f"torch {torch.__version__}, hardgrad {hg.__version__}")
    print()
    print("| surrogate | op | " + " | ".join(str(d).removeprefix("torch.") for d in DTYPES) + " |")
    print("|---|---|" + "---:|" * len(DTYPES))
    for s in instances():
        op, _ = op_for(s)
        cells = []
        for dtype in DTYPES:
            e_d, e_b, _ = worst(s, dtype)
            cells.append(f"{fmt(e_d)} / {fmt(e_b)}")
        print(f"| `{s!r}` | {op} | " + " | ".join(cells) + " |", flush=True)


# ---------------------------------------------------------------------------------------
# Timing (--timing): the backward of hg.heaviside against the forms before issue 13 part 2.
# ---------------------------------------------------------------------------------------


class Before(hg.surrogates.Surrogate):
    """The surrogate's backward as it was before (same op machinery, same saved input)."""

    def __init__(self, name: str, param: float) -> None:
        self.label, self.param = name, param

    def function(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def derivative(self, x: torch.Tensor) -> torch.Tensor:
        k = self.param
        if self.label == "fast_sigmoid":
            d = 1 + k * x.abs()
            return 1 / (d * d)
        if self.label == "atan":
            u = (0.5 * math.pi * k) * x
            return (0.5 * k) / (1 + u * u)
        if self.label == "swish":
            u = torch.clamp(k * x, -1000.0, 1000.0)
            bell = torch.sigmoid(u) * torch.sigmoid(-u)
            return (2 * k) * bell * (2 - u * torch.tanh(0.5 * u))
        raise KeyError(self.label)

    def backward(self, grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        k = self.param
        if self.label == "sigmoid":
            s = torch.sigmoid(x if k == 1 else k * x)
            result = torch.ops.aten.sigmoid_backward(grad, s)
            return result if k == 1 else result * k
        if self.label == "tanh":
            t = torch.tanh(x if k == 1 else k * x)
            result = torch.ops.aten.tanh_backward(grad, t)
            return result if k == 1 else result * k
        return grad * self.derivative(x)


def timing(reps_small: int = 2000, reps_large: int = 40) -> None:
    import random
    import statistics
    import time

    s = hg.surrogates
    cases = [
        ("sigmoid", 1.0, s.Sigmoid()),
        ("sigmoid", 4.0, s.Sigmoid(slope=4.0)),
        ("sigmoid", 5.0, s.Sigmoid(slope=5.0)),
        ("tanh", 1.0, s.Tanh()),
        ("tanh", 2.5, s.Tanh(slope=2.5)),
        ("fast_sigmoid", 25.0, s.FastSigmoid()),
        ("atan", 2.0, s.ATan()),
        ("swish", 5.0, s.Swish()),
    ]
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads; float32; medians of "
        f"{reps_small} (4096) and {reps_large} (4M) interleaved rounds, in microseconds"
    )
    print()
    print(
        "| surrogate | n | backward before | after | ratio | surrogate.backward before | after | ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for n, reps in ((4096, reps_small), (4 * 1024 * 1024, reps_large)):
        gen = torch.Generator().manual_seed(0)
        x = (torch.randn(n, generator=gen) * 3).requires_grad_()
        g = torch.randn(n, generator=gen)
        runs: dict[tuple[str, str], Callable[[], object]] = {}
        for name, param, new in cases:
            for label, sur in (("before", Before(name, param)), ("after", new)):
                y = hg.heaviside(x, surrogate=sur)
                key = f"{name}({param:g})"
                runs[(key, label + "-op")] = lambda y=y, x=x, g=g: torch.autograd.grad(
                    y, x, g, retain_graph=True
                )
                runs[(key, label + "-s")] = lambda sur=sur, x=x, g=g: sur.backward(g, x.detach())
        times: dict[tuple[str, str], list[float]] = {k: [] for k in runs}
        for _ in range(reps):
            order = list(runs.items())
            random.shuffle(order)
            for key, fn in order:
                t0 = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - t0)
        med = {k: statistics.median(v) * 1e6 for k, v in times.items()}
        for name, param, _ in cases:
            key = f"{name}({param:g})"
            b, a = med[(key, "before-op")], med[(key, "after-op")]
            bs, as_ = med[(key, "before-s")], med[(key, "after-s")]
            print(
                f"| {key} | {n} | {b:.1f} | {a:.1f} | {a / b:.2f} | {bs:.1f} | {as_:.1f} | "
                f"{as_ / bs:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    timing() if "--timing" in sys.argv[1:] else main()
