"""Conformance suite over :data:`hardgrad.ops.OPS`: every op x every surrogate it accepts x
every dtype (DESIGN.md, "Tests every estimator and op must pass").

Nothing here lists ops or surrogates by hand: the parametrisations come from ``OPS`` and
``SURROGATES``, so a newly registered op or surrogate is tested (or fails loudly for want of
a closed form) without editing this file.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.func import grad, vmap

import hardgrad as hg
from hardgrad.ops import OPS, OpSpec
from hardgrad.ops._autograd import MASK_CONVERT_MIN_NUMEL, NATIVE_CLAMP_MAX_NUMEL
from hardgrad.ops._autograd import NATIVE_NODE_MAX_NUMEL as NATIVE_MAX
from hardgrad.surrogates import SURROGATES

# Every test here runs on both of a small op's autograd routes (see conftest.autograd_route).
pytestmark = pytest.mark.usefixtures("autograd_route")

INF, NAN = math.inf, math.nan

#: Points on the discontinuities of every elementwise op, besides each spec's own.
DISCONTINUITIES = (0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 1.0, -1.0, 2.5, -2.5)


def _surrogate_pairs(*, variants: bool = False) -> list[Any]:
    """(op name, surrogate name[, variant]) for every op and every surrogate it accepts;
    ops without a surrogate (selections) appear once with ``None``. ``variant`` 1 is the
    surrogate with every parameter changed (or, for selections, ``tau=0.5``)."""
    pairs = []
    for name, spec in OPS.items():
        if spec.family is None:
            choices: list[tuple[str | None, int]] = [(None, 0)]
            if variants:
                choices.append((None, 1))
        else:
            choices = []
            for surrogate, cls in SURROGATES.items():
                if spec.family not in cls.applies_to:
                    continue
                choices.append((surrogate, 0))
                if variants and dataclasses.fields(cls):
                    choices.append((surrogate, 1))
        for surrogate, variant in choices:
            ident = name if surrogate is None else f"{name}-{surrogate}"
            if variants:
                pairs.append(pytest.param(name, surrogate, variant, id=f"{ident}-v{variant}"))
            else:
                pairs.append(pytest.param(name, surrogate, id=ident))
    return pairs


PAIRS = _surrogate_pairs()
PAIRS_WITH_VARIANTS = _surrogate_pairs(variants=True)
ELEMENTWISE = [name for name, spec in OPS.items() if spec.family is not None]
SELECTIONS = [name for name, spec in OPS.items() if spec.family is None]
#: Ops whose hard forward is a torch function of the same name (the API's table).
TORCH_NAMED = [n for n in ("round", "floor", "ceil", "trunc", "sign", "clamp") if n in OPS]


def _variant(surrogate: str, variant: int) -> hg.surrogates.Surrogate:
    cls = SURROGATES.get(surrogate)
    default = cls()
    if variant == 0:
        return default
    changed = {
        f.name: getattr(default, f.name) * (2.5 if getattr(default, f.name) > 0 else 0.5)
        for f in dataclasses.fields(default)  # type: ignore[arg-type]
    }
    return cls(**changed)


def call(spec: OpSpec, x: torch.Tensor, surrogate: Any = None, variant: int = 0) -> torch.Tensor:
    """Apply ``spec`` with its test kwargs and the chosen surrogate (or temperature)."""
    if spec.family is None:
        return spec(x) if variant == 0 else spec(x, tau=0.5)
    if surrogate is None:
        return spec(x)
    if isinstance(surrogate, str) and variant:
        surrogate = _variant(surrogate, variant)
    return spec(x, surrogate=surrogate)


def elementwise_input(
    spec: OpSpec, dtype: torch.dtype, large: float, device: str = "cpu", *, finite: bool = False
) -> torch.Tensor:
    """Random values, every discontinuity, large magnitudes, the dtype's extremes and
    (unless ``finite``) +-inf and NaN. Random values are drawn in float32 so that they are
    exact in float64 too."""
    g = torch.Generator().manual_seed(1234)
    base = torch.cat(
        [
            torch.randn(48, generator=g) * 3,
            torch.tensor(spec.special_points, dtype=torch.float32),
            torch.tensor(DISCONTINUITIES),
        ]
    ).to(dtype)
    fmax = torch.finfo(dtype).max
    extremes = [large, -large, large / 3, -large / 3, fmax, -fmax]
    if not finite:
        extremes += [INF, -INF, NAN]
    return torch.cat([base, torch.tensor(extremes, dtype=dtype)]).to(device)


def selection_input(
    dtype: torch.dtype, large: float, device: str = "cpu", *, finite: bool = False
) -> torch.Tensor:
    """Rows (selection along the last dim) with ties, large magnitudes and, unless
    ``finite``, infinities and NaN."""
    g = torch.Generator().manual_seed(4321)
    rows = [
        *(torch.randn(5, 6, generator=g) * 3).tolist(),
        [1.0, 3.0, 3.0, 0.0, 3.0, -1.0],
        [0.0, 0.0, -0.0, 0.0, 0.0, 0.0],
        [2.0, 2.0, 1.0, 1.0, -5.0, 2.0],
        [large, -large, large / 2, 0.0, -large / 2, large],
    ]
    if not finite:
        rows += [
            [INF, 1.0, -INF, 0.0, INF, 2.0],
            [NAN, 1.0, 2.0, 3.0, NAN, 0.0],
            [-INF] * 6,
        ]
    return torch.tensor(rows, dtype=torch.float64).to(dtype).to(device)


def make_input(
    spec: OpSpec, dtype: torch.dtype, large: float, device: str = "cpu", *, finite: bool = False
) -> torch.Tensor:
    if spec.family is None:
        return selection_input(dtype, large, device, finite=finite)
    return elementwise_input(spec, dtype, large, device, finite=finite)


# --------------------------------------------------------------------------------------
# Independent oracles for the backward of ops whose mask is their own range, and of the
# selections (computed in float64 from the math in the docstrings).
# --------------------------------------------------------------------------------------


def _clamp_range(x: torch.Tensor, kwargs: dict[str, Any]) -> torch.Tensor:
    return (kwargs["min"] <= x) & (x <= kwargs["max"])


def _quantize_range(x: torch.Tensor, kwargs: dict[str, Any]) -> torch.Tensor:
    level = torch.round(x / kwargs["scale"]) + kwargs.get("zero_point", 0)
    return (kwargs["quant_min"] <= level) & (level <= kwargs["quant_max"])


#: In-range masks of the "clamp"-family ops (what "masked" means for each).
RANGE_MASKS: dict[str, Callable[[torch.Tensor, dict[str, Any]], torch.Tensor]] = {
    "clamp": _clamp_range,
    "quantize": _quantize_range,
}


def softmax_vjp(x: torch.Tensor, g: torch.Tensor, tau: float) -> torch.Tensor:
    """VJP of ``softmax(x / tau)`` along the last dim: ``p (g - <g, p>) / tau``."""
    p = torch.softmax(x / tau, -1)
    return p * (g - (g * p).sum(-1, keepdim=True)) / tau


def soft_topk_threshold(x: torch.Tensor, k: int, tau: float) -> torch.Tensor:
    """The ``t`` with ``sum sigmoid((x - t) / tau) = k`` per row, by plain bisection."""
    lo = x.amin(-1, keepdim=True) - 60 * tau
    hi = x.amax(-1, keepdim=True) + 60 * tau
    for _ in range(1100):
        t = 0.5 * (lo + hi)
        excess = torch.sigmoid((x - t) / tau).sum(-1, keepdim=True) - k
        lo, hi = torch.where(excess > 0, t, lo), torch.where(excess > 0, hi, t)
    return 0.5 * (lo + hi)


def soft_topk_bisection(x: torch.Tensor, k: int, tau: float) -> torch.Tensor:
    """``sigmoid((x - t) / tau)`` with ``t`` found by plain bisection so the rows sum to k."""
    return torch.sigmoid((x - soft_topk_threshold(x, k, tau)) / tau)


def soft_topk_vjp(x: torch.Tensor, g: torch.Tensor, k: int, tau: float) -> torch.Tensor:
    """Implicit-function VJP of the sigmoid-threshold relaxation (LML, Amos et al. 2019)."""
    m = soft_topk_bisection(x, k, tau)
    a = m * (1 - m) / tau
    return a * (g - (g * a).sum(-1, keepdim=True) / a.sum(-1, keepdim=True))


def selection_backward(
    name: str, spec: OpSpec, x: torch.Tensor, g: torch.Tensor, variant: int
) -> torch.Tensor:
    tau = 0.5 if variant else 1.0
    if name == "one_hot_argmax":
        return softmax_vjp(x, g, tau)
    if name == "topk_mask":
        return soft_topk_vjp(x, g, spec.kwargs["k"], tau)
    raise AssertionError(f"no backward oracle for selection op {name!r}; add one")


def expected_gradient(
    name: str,
    surrogate: str | None,
    variant: int,
    x: torch.Tensor,
    g: torch.Tensor,
    closed_form: Callable[[Any, torch.Tensor], torch.Tensor],
) -> torch.Tensor:
    """The gradient the op must produce, in float64."""
    spec = OPS.get(name)
    xd, gd = x.double(), g.double()
    if spec.family is None:
        return selection_backward(name, spec, xd, gd, variant)
    assert surrogate is not None
    instance = _variant(surrogate, variant)
    if spec.family == "clamp" and instance.kind == "indicator":
        assert name in RANGE_MASKS, f"no range mask for clamp-family op {name!r}; add one"
        return gd * RANGE_MASKS[name](xd, spec.kwargs).double()
    return gd * closed_form(instance, xd)


# --------------------------------------------------------------------------------------
# Checks shared by the CPU tests and the CUDA class.
# --------------------------------------------------------------------------------------


def _check_forward(
    name: str,
    surrogate: str | None,
    dtype: torch.dtype,
    large: float,
    device: str,
    assert_same: Any,
) -> None:
    spec = OPS.get(name)
    x = make_input(spec, dtype, large, device)
    y = call(spec, x, surrogate)
    expected = spec.reference(x)
    if name == "quantize":
        # Documented formula and torch.fake_quantize_per_tensor_affine agree except on NaN
        # (torch maps NaN to quant_min * scale; the op propagates NaN like torch.clamp) and
        # on the sign of zero for small negative x (-0.0 here, +0.0 in torch; equal under
        # torch.equal). Both are checked separately in test_quantize.py.
        nan = x.isnan()
        assert y[nan].isnan().all()
        assert_same(y[~nan], expected[~nan], signed_zeros=False)
    else:
        assert_same(y, expected)


def _check_backward(
    name: str,
    surrogate: str | None,
    variant: int,
    dtype: torch.dtype,
    large: float,
    device: str,
    tol: dict[str, float],
    closed_form: Any,
    assert_close_to: Any,
) -> None:
    spec = OPS.get(name)
    x = make_input(spec, dtype, large, device, finite=True).requires_grad_()
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(7)).to(dtype).to(device)
    y = call(spec, x, surrogate, variant)
    (grad_x,) = torch.autograd.grad(y, x, g)
    assert grad_x.dtype == dtype and grad_x.device == x.device
    assert_close_to(
        grad_x, expected_gradient(name, surrogate, variant, x.detach(), g, closed_form), tol
    )


# --------------------------------------------------------------------------------------
# 1. Forward exactness.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "surrogate"), PAIRS)
def test_forward_matches_reference(name, surrogate, dtype, large, assert_same):
    _check_forward(name, surrogate, dtype, large, "cpu", assert_same)


@pytest.mark.parametrize("name", TORCH_NAMED)
def test_forward_matches_plain_torch_op(name, dtype, large, assert_same):
    spec = OPS.get(name)
    x = make_input(spec, dtype, large)
    reference = getattr(torch, name)(x, **spec.kwargs)
    for surrogate, cls in SURROGATES.items():
        if spec.family in cls.applies_to:
            assert_same(call(spec, x, surrogate), reference)


@pytest.mark.parametrize(("name", "surrogate"), PAIRS)
def test_forward_does_not_depend_on_requires_grad(name, surrogate, dtype, large, assert_same):
    spec = OPS.get(name)
    x = make_input(spec, dtype, large)
    assert_same(
        call(spec, x.clone().requires_grad_(), surrogate).detach(), call(spec, x, surrogate)
    )


# --------------------------------------------------------------------------------------
# 2. Backward equals an independent closed form.
# --------------------------------------------------------------------------------------


def test_every_surrogate_has_a_closed_form(closed_form_names):
    assert set(SURROGATES) <= closed_form_names


@pytest.mark.parametrize(("name", "surrogate", "variant"), PAIRS_WITH_VARIANTS)
def test_backward_matches_closed_form(
    name, surrogate, variant, dtype, large, tol, closed_form, assert_close_to
):
    _check_backward(
        name, surrogate, variant, dtype, large, "cpu", tol, closed_form, assert_close_to
    )


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_default_surrogate_is_the_documented_one(name):
    spec = OPS.get(name)
    default = inspect.signature(spec.op).parameters["surrogate"].default
    assert default == spec.default_surrogate
    assert spec.family in SURROGATES.get(default).applies_to


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_surrogate_name_and_instance_give_the_same_gradient(name):
    spec = OPS.get(name)
    x = elementwise_input(spec, torch.float32, 1e8, finite=True)
    for surrogate, cls in SURROGATES.items():
        if spec.family not in cls.applies_to:
            continue
        gradients = []
        for given in (surrogate, cls()):
            xr = x.clone().requires_grad_()
            call(spec, xr, given).sum().backward()
            gradients.append(xr.grad)
        assert torch.equal(*gradients), surrogate


# --------------------------------------------------------------------------------------
# 2b. The same contract through the public helper hardgrad.testing.assert_straight_through:
#     autograd through the surrogate's smooth function s (an oracle independent of the
#     derivative the op's backward uses), over its default inputs in every dtype.
# --------------------------------------------------------------------------------------


def surrogate_function(name: str, surrogate: str | None, variant: int) -> Callable[..., Any]:
    """The smooth function whose autograd VJP is the op's declared backward."""
    spec = OPS.get(name)
    if spec.family is None:
        tau = 0.5 if variant else 1.0
        if name == "one_hot_argmax":
            return lambda x: torch.softmax(x / tau, -1)
        if name == "topk_mask":
            return lambda x: implicit_soft_topk(x, spec.kwargs["k"], tau)
        raise AssertionError(f"no surrogate function for selection op {name!r}; add one")
    assert surrogate is not None
    instance = _variant(surrogate, variant)
    if spec.family == "clamp" and instance.kind == "indicator":
        mask = RANGE_MASKS[name]
        # identity where the op is in range, a constant outside: the masked STE
        return lambda x: torch.where(mask(x.detach(), spec.kwargs), x, x.detach())
    return instance.function


def implicit_soft_topk(x: torch.Tensor, k: int, tau: float) -> torch.Tensor:
    """``sigmoid((x - t(x)) / tau)`` with the threshold ``t`` found by bisection and its
    derivative given by the implicit function theorem (``dt/dx_j = a_j / sum a``,
    ``a = m (1 - m) / tau``), written so that autograd differentiates it."""
    with torch.no_grad():
        t0 = soft_topk_threshold(x, k, tau)
        m = torch.sigmoid((x - t0) / tau)
        a = m * (1 - m) / tau
        total = a.sum(-1, keepdim=True)
        total = torch.where(total > 0, total, 1)  # a saturated row: no gradient at all
    t = t0 + (a * (x - x.detach())).sum(-1, keepdim=True) / total
    return torch.sigmoid((x - t) / tau)


@pytest.mark.parametrize(("name", "surrogate", "variant"), PAIRS_WITH_VARIANTS)
def test_assert_straight_through_holds_for_every_op(name, surrogate, variant):
    """Elementwise staircase/step ops on the helper's default inputs (every dtype); the
    clamp family and the selections on this suite's own inputs, dtype by dtype."""
    spec = OPS.get(name)

    def op(x: torch.Tensor) -> torch.Tensor:
        return call(spec, x, surrogate, variant)

    op.__name__ = name
    soft = surrogate_function(name, surrogate, variant)
    if spec.family in ("staircase", "step"):
        hg.testing.assert_straight_through(op, spec.reference, soft)
        return
    for dtype in DTYPES:
        x = make_input(spec, dtype, LARGE_FOR_HELPER[dtype], finite=True)
        hg.testing.assert_straight_through(op, spec.reference, soft, inputs=x)


DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
LARGE_FOR_HELPER = {
    torch.float64: 1e300,
    torch.float32: 1e8,
    torch.float16: 1e4,
    torch.bfloat16: 1e4,
}


# --------------------------------------------------------------------------------------
# 3. Memory saved for backward.
# --------------------------------------------------------------------------------------


def saved_tensors(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor
) -> list[torch.Tensor]:
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn(x)
    return saved


@pytest.mark.parametrize("shape", [(16, 64), (256, 256)], ids=["small", "large"])
@pytest.mark.parametrize(("name", "surrogate"), PAIRS)
def test_saved_bytes_per_element(name, surrogate, shape, autograd_route):
    """Indicator masks: bool (1 byte) from MASK_CONVERT_MIN_NUMEL elements on, 0/1 in the
    input's dtype below it (faster there, at most 256 KiB). A small one_hot_argmax on the
    native route saves its softmax (torch's softmax node), at most 64 KiB."""
    spec = OPS.get(name)
    x = torch.randn(*shape, requires_grad=True)
    saved = saved_tensors(lambda t: call(spec, t, surrogate), x)
    nbytes = sum(t.numel() * t.element_size() for t in saved)
    kind = None if surrogate is None else SURROGATES.get(surrogate).kind
    if kind == "identity":
        assert nbytes == 0, [(t.dtype, t.shape) for t in saved]
    elif kind == "indicator":
        small = x.numel() < MASK_CONVERT_MIN_NUMEL
        assert len(saved) == 1 and saved[0].shape == x.shape
        assert saved[0].dtype == (x.dtype if small else torch.bool)
        assert nbytes / x.numel() <= (x.element_size() if small else 1)
    elif name == "one_hot_argmax" and autograd_route == "native" and x.numel() <= NATIVE_MAX:
        assert len(saved) == 1 and saved[0].data_ptr() != x.data_ptr()
        assert saved[0].shape == x.shape and saved[0].dtype == x.dtype
        assert torch.equal(saved[0], torch.softmax(x.detach(), -1))
    else:
        # Smooth surrogates and selections keep the input itself, never a copy.
        assert len(saved) == 1 and saved[0].data_ptr() == x.data_ptr()


@pytest.mark.parametrize("rows", [16, 1024], ids=["small", "large"])
@pytest.mark.parametrize("surrogate", ["masked", "identity"])
def test_clamp_fixed_tensor_bounds_saved_bytes(surrogate, rows, autograd_route):
    """One mask, as the number-bound clamp saves it: 0/1 in x's dtype below
    MASK_CONVERT_MIN_NUMEL elements, else bool; nothing for the identity. On the native
    route (torch's own clamp, small CPU tensors) nothing new: the input and the bounds."""
    x = torch.randn(rows, 64, requires_grad=True)
    lo, hi = torch.full((64,), -0.5), torch.full((rows, 1), 0.5)
    saved = saved_tensors(lambda t: hg.clamp(t, lo, hi, surrogate=surrogate), x)
    if surrogate == "identity":
        assert saved == []
        return
    if autograd_route == "native" and x.numel() <= NATIVE_CLAMP_MAX_NUMEL:
        assert {t.data_ptr() for t in saved} <= {x.data_ptr(), lo.data_ptr(), hi.data_ptr()}
        return
    small = x.numel() < MASK_CONVERT_MIN_NUMEL
    assert [(t.dtype, t.shape) for t in saved] == [(x.dtype if small else torch.bool, x.shape)]


@pytest.mark.parametrize("rows", [16, 1024], ids=["small", "large"])
def test_clamp_learnable_tensor_bound_saves_two_masks(rows, autograd_route):
    x = torch.randn(rows, 64, requires_grad=True)
    lo = torch.full((64,), -0.5, requires_grad=True)
    saved = saved_tensors(lambda t: hg.clamp(t, lo, 0.5), x)
    if autograd_route == "native" and x.numel() <= NATIVE_CLAMP_MAX_NUMEL:
        # torch's own clamp: the input and the bounds, nothing new
        assert {t.data_ptr() for t in saved} <= {x.data_ptr(), lo.data_ptr()} | {
            t.data_ptr() for t in saved if t.dim() == 0
        }
        return
    small = x.numel() < MASK_CONVERT_MIN_NUMEL
    masks = [(t.dtype, t.shape) for t in saved if t.numel()]  # (the unused upper mask: empty)
    assert masks == [(x.dtype if small else torch.bool, x.shape)] * 2  # x's and lo's


# --------------------------------------------------------------------------------------
# 5. torch.func, vmap, double backward; torch.compile (marked "compile").
# --------------------------------------------------------------------------------------


def _func_data(spec: OpSpec) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(11)
    x = torch.randn(4, 6, generator=g, dtype=torch.float64) * 2
    x[0, :3] = torch.tensor([0.5, -1.0, 0.0], dtype=torch.float64)  # on discontinuities
    w = torch.randn(4, 6, generator=g, dtype=torch.float64)
    return x, w


def _eager_grad(spec: OpSpec, surrogate: Any, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    xr = x.clone().requires_grad_()
    (call(spec, xr, surrogate) * w).sum().backward()
    assert xr.grad is not None
    return xr.grad


@pytest.mark.parametrize(("name", "surrogate"), PAIRS)
def test_func_grad_matches_eager(name, surrogate):
    spec = OPS.get(name)
    x, w = _func_data(spec)
    got = grad(lambda t: (call(spec, t, surrogate) * w).sum())(x)
    torch.testing.assert_close(got, _eager_grad(spec, surrogate, x, w), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(("name", "surrogate"), PAIRS)
def test_vmap_matches_eager(name, surrogate, assert_same):
    spec = OPS.get(name)
    x, _ = _func_data(spec)
    assert_same(vmap(lambda t: call(spec, t, surrogate))(x), call(spec, x, surrogate))
    # Mapping over the other dimension: each sample is a column.
    assert_same(
        vmap(lambda t: call(spec, t, surrogate), in_dims=1)(x),
        call(spec, x.T.contiguous(), surrogate),
    )


@pytest.mark.parametrize(("name", "surrogate"), PAIRS)
def test_vmap_of_grad_matches_eager(name, surrogate):
    spec = OPS.get(name)
    x, w = _func_data(spec)
    per_row = vmap(grad(lambda t, v: (call(spec, t, surrogate) * v).sum()))(x, w)
    torch.testing.assert_close(per_row, _eager_grad(spec, surrogate, x, w), rtol=1e-12, atol=1e-14)


SMOOTH_STEP_PAIRS = [
    pytest.param(name, surrogate, id=f"{name}-{surrogate}")
    for name, surrogate in ((p.values[0], p.values[1]) for p in PAIRS)
    if surrogate is not None and SURROGATES.get(surrogate).kind == "smooth"
]


def _second_derivative_closed_forms() -> dict[str, Callable[[Any, torch.Tensor], torch.Tensor]]:
    def sigmoid(s: Any, x: torch.Tensor) -> torch.Tensor:
        k, p = s.slope, torch.sigmoid(s.slope * x)
        return k * k * p * (1 - p) * (1 - 2 * p)

    def tanh(s: Any, x: torch.Tensor) -> torch.Tensor:
        k, t = s.slope, torch.tanh(s.slope * x)
        return -2 * k * k * t * (1 - t * t)

    return {"sigmoid": sigmoid, "tanh": tanh}


@pytest.mark.parametrize(("name", "surrogate"), SMOOTH_STEP_PAIRS)
def test_double_backward_smooth_surrogates(name, surrogate):
    spec = OPS.get(name)
    instance = SURROGATES.get(surrogate)()
    # Away from the kinks of the piecewise surrogates (0 and +-width).
    x = torch.tensor([-2.3, -1.7, -0.8, -0.3, 0.2, 0.6, 1.3, 2.9], dtype=torch.float64)
    xr = x.clone().requires_grad_()
    w = torch.linspace(-1.0, 2.0, 8, dtype=torch.float64)
    (first,) = torch.autograd.grad((call(spec, xr, surrogate) * w).sum(), xr, create_graph=True)
    (second,) = torch.autograd.grad(first.sum(), xr)
    # Independent of the surrogate's own derivative: autograd twice through function().
    d2 = vmap(grad(grad(lambda t: instance.function(t))))(x)
    torch.testing.assert_close(second, w * d2, rtol=1e-9, atol=1e-12)
    closed = _second_derivative_closed_forms()
    if surrogate in closed:
        torch.testing.assert_close(
            second, w * closed[surrogate](instance, x), rtol=1e-9, atol=1e-12
        )
        assert second.abs().max() > 1e-3  # really nonzero, not vacuous


def test_double_backward_sign_tanh_matches_closed_form():
    x = torch.tensor([-1.0, -0.25, 0.4, 1.2], dtype=torch.float64, requires_grad=True)
    (first,) = torch.autograd.grad(hg.sign(x, surrogate="tanh").sum(), x, create_graph=True)
    (second,) = torch.autograd.grad(first.sum(), x)
    t = torch.tanh(x.detach())
    torch.testing.assert_close(second, -2 * t * (1 - t**2))


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _compile_check(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, assert_same: Any
) -> None:
    """One graph (fullgraph, inductor) with eager's values and gradients, through the public
    helper; then the forward bit for bit (the graph compiled by the helper is reused)."""
    # reset=False: the fresh_dynamo fixture resets; the helper's graph is reused below
    hg.testing.assert_compiles(fn, x.clone().requires_grad_(), rtol=1e-6, atol=1e-7, reset=False)
    compiled = torch.compile(fn, fullgraph=True)
    assert_same(compiled(x).detach(), fn(x).detach())


@pytest.mark.compile
@pytest.mark.parametrize("name", list(OPS))
def test_compile_fullgraph_matches_eager(name, fresh_dynamo, assert_same):
    spec = OPS.get(name)
    x = make_input(spec, torch.float32, 1e8, finite=True)

    def fn(t: torch.Tensor) -> torch.Tensor:
        return spec(t)

    _compile_check(fn, x, assert_same)


@pytest.mark.compile
def test_compile_straight_through_with_callable_soft(fresh_dynamo, assert_same):
    op = hg.straight_through(torch.round, torch.sin)
    x = elementwise_input(OPS.get("round"), torch.float32, 1e8, finite=True)
    _compile_check(op, x, assert_same)
    assert_same(torch.compile(op, fullgraph=True)(x), torch.round(x))


# --------------------------------------------------------------------------------------
# 6/7. Empty tensors, dtype/shape/device preservation.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 3)], ids=str)
@pytest.mark.parametrize("name", list(OPS))
def test_empty_tensors(name, shape, dtype):
    spec = OPS.get(name)
    x = torch.empty(shape, dtype=dtype, requires_grad=True)
    if spec.family is None and shape[-1] == 0:
        arg = next(iter(inspect.signature(spec.op).parameters))
        with pytest.raises(ValueError, match=f"`{arg}`.*at least one entry"):
            spec(x)
        return
    y = spec(x)
    assert y.shape == x.shape and y.dtype == dtype
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape and x.grad.dtype == dtype


@pytest.mark.parametrize(("name", "surrogate"), PAIRS)
def test_dtype_shape_device_preserved(name, surrogate, dtype):
    spec = OPS.get(name)
    for shape in [(7,), (2, 3, 5), (1, 1, 4)]:
        x = (torch.randn(shape) * 3).to(dtype).requires_grad_()
        y = call(spec, x, surrogate)
        assert (y.shape, y.dtype, y.device) == (x.shape, dtype, x.device)
        y.backward(torch.ones_like(y))
        assert x.grad is not None
        assert (x.grad.shape, x.grad.dtype, x.grad.device) == (x.shape, dtype, x.device)


@pytest.mark.parametrize("name", list(OPS))
def test_non_contiguous_input(name, assert_same):
    spec = OPS.get(name)
    x = (torch.randn(6, 8) * 3)[:, ::2].T  # non-contiguous (4, 6)
    assert not x.is_contiguous()
    assert_same(spec(x), spec(x.contiguous()))


# --------------------------------------------------------------------------------------
# 9. The same on CUDA (skipped without a GPU by conftest).
# --------------------------------------------------------------------------------------


@pytest.mark.cuda
class TestCUDA:
    device = "cuda"

    @pytest.mark.parametrize(("name", "surrogate"), PAIRS)
    def test_forward_matches_reference(self, name, surrogate, dtype, large, assert_same):
        _check_forward(name, surrogate, dtype, large, self.device, assert_same)

    @pytest.mark.parametrize(("name", "surrogate", "variant"), PAIRS_WITH_VARIANTS)
    def test_backward_matches_closed_form(
        self, name, surrogate, variant, dtype, large, tol, closed_form, assert_close_to
    ):
        _check_backward(
            name, surrogate, variant, dtype, large, self.device, tol, closed_form, assert_close_to
        )

    @pytest.mark.parametrize(("name", "surrogate"), PAIRS)
    def test_outputs_and_gradients_stay_on_device(self, name, surrogate):
        spec = OPS.get(name)
        x = torch.randn(3, 6, device=self.device, requires_grad=True)
        y = call(spec, x, surrogate)
        assert y.device == x.device
        y.sum().backward()
        assert x.grad is not None and x.grad.device == x.device

    @pytest.mark.parametrize("name", TORCH_NAMED)
    def test_forward_matches_cpu(self, name, dtype, large, assert_same):
        spec = OPS.get(name)
        x = make_input(spec, dtype, large)
        assert_same(spec(x.to(self.device)).cpu(), spec(x))


# --------------------------------------------------------------------------------------
# clamp with tensor bounds, and torch.clamp's own gradient.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lo_shape", "hi_shape"), [((), ()), ((4, 1), (1, 6)), ((6,), None), (None, (4, 6))], ids=str
)
def test_clamp_tensor_bounds_match_torch_clamp(lo_shape, hi_shape, dtype, assert_same):
    g_ = torch.Generator().manual_seed(5)
    x = (torch.randn(4, 6, generator=g_) * 2).to(dtype)
    lo = None if lo_shape is None else (-torch.rand(lo_shape, generator=g_) - 0.2).to(dtype)
    hi = None if hi_shape is None else (torch.rand(hi_shape, generator=g_) + 0.2).to(dtype)
    if lo is not None:
        x[0, 0] = lo.flatten()[0]  # exactly on a bound
    g = torch.randn(4, 6, generator=g_).to(dtype)

    def grads(fn):
        leaves = [t.clone().requires_grad_() for t in (x, lo, hi) if t is not None]
        it = iter(leaves)
        args = [next(it) if t is not None else None for t in (x, lo, hi)]
        y = fn(*args)
        return y.detach(), torch.autograd.grad(y, leaves, g)

    y_ref, g_ref = grads(lambda a, b, c: torch.clamp(a, b, c))
    y_hg, g_hg = grads(lambda a, b, c: hg.clamp(a, b, c))
    assert_same(y_hg, y_ref)
    # Gradients: equal values (the sign of a zero gradient carries no meaning).
    for got, expected in zip(g_hg, g_ref, strict=True):
        assert_same(got, expected, signed_zeros=False)
    _, (g_id, *bounds_id) = grads(lambda a, b, c: hg.clamp(a, b, c, surrogate="identity"))
    assert_same(g_id, g)
    for got, expected in zip(bounds_id, g_ref[1:], strict=True):
        assert_same(got, expected, signed_zeros=False)


@pytest.mark.parametrize("rows", [16, 1024], ids=["float-masks", "bool-masks"])
def test_clamp_tensor_bounds_match_torch_clamp_with_both_mask_kinds(rows):
    """Both saved-mask forms (0/1 floats below MASK_CONVERT_MIN_NUMEL elements, bools
    from there on) against torch.clamp, with a fifth of the entries saturated on each side,
    crossed bounds (lo > hi) in one column, NaN inputs, and every bound learnable."""
    g_ = torch.Generator().manual_seed(7)
    x = torch.randn(rows, 64, generator=g_)
    x[::9, 3] = math.nan
    lo = torch.full((64,), -0.85).requires_grad_()
    hi = (torch.rand(rows, 1, generator=g_) + 0.5).requires_grad_()
    crossed = torch.zeros(64)
    crossed[5] = 3.0  # lo = 2.15 > hi in column 5
    g = torch.randn(rows, 64, generator=g_)

    def grads(fn):
        leaves = [t.detach().clone().requires_grad_() for t in (x, lo, hi)]
        y = fn(leaves[0], leaves[1] + crossed, leaves[2])
        return (y.detach(), *torch.autograd.grad(y, leaves, g))

    ours, torchs = grads(hg.clamp), grads(torch.clamp)
    assert torch.equal(ours[0].isnan(), torchs[0].isnan())
    assert torch.equal(ours[0].nan_to_num(), torchs[0].nan_to_num())
    assert torch.equal(ours[1], torchs[1])
    for got, expected in zip(ours[2:], torchs[2:], strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-5)


def test_clamp_masked_gradient_with_nonfinite_incoming_gradient_is_documented():
    """The mask multiplies (documented in hg.clamp): finite incoming gradients match
    torch.clamp exactly; inf/NaN at a saturated entry give NaN, where torch.clamp gives 0."""
    x = torch.tensor([-2.0, 0.0, 2.0, 0.5], requires_grad=True)
    g = torch.tensor([math.inf, 1.0, math.nan, math.inf])
    (ours,) = torch.autograd.grad(hg.clamp(x, -1.0, 1.0), x, g)
    (torchs,) = torch.autograd.grad(torch.clamp(x, -1.0, 1.0), x, g)
    assert torch.equal(ours[1:4:2], torchs[1:4:2])  # in range: the gradient itself
    assert torch.isnan(ours[0]) and torch.isnan(ours[2])
    assert torchs[0] == 0 and torchs[2] == 0


@pytest.mark.parametrize("rows", [160, 1100], ids=["float-masks", "bool-masks"])
@pytest.mark.parametrize(
    ("lo_kind", "hi_kind"),
    [("number", "learned"), ("learned", "number"), ("learned", "learned"), ("none", "learned"),
     ("learned", "fixed"), ("equal", "learned"), ("learned", "nan")],
)  # fmt: skip
def test_clamp_ordered_tensor_bounds_one_mask_each(rows, lo_kind, hi_kind, monkeypatch):
    """Above the size where a tensor-bound clamp is torch's own node, bounds that do not
    cross get one comparison per mask (y == x, x < lo, x > hi): the same output and
    gradients bit for bit as the general masks (forced here by reporting every bound as
    crossed), and torch.clamp's. PACT's clamp(x, 0, alpha), learned lower bounds, a lower
    bound equal to the upper one in a column (where lo gets nothing), a NaN upper bound,
    NaN and -0.0 inputs and entries exactly on a bound."""
    from hardgrad.ops import _elementwise

    g_ = torch.Generator().manual_seed(8)
    x = torch.randn(rows, 64, generator=g_) * 2
    x[::7, 2] = math.nan
    x[1, :] = -0.0
    lo_values = -torch.rand(64, generator=g_) - 0.3
    hi_values = torch.rand(rows, 1, generator=g_) + 0.4
    x[2, :] = lo_values
    x[3, :] = hi_values[3]
    if lo_kind == "equal":
        lo_values[4] = float(hi_values.min()) * 0  # 0 <= hi everywhere, equal nowhere yet
        hi_values[5] = 0.0  # ... and here lo[4] == hi[5] == 0
    if hi_kind == "nan":
        hi_values[6] = math.nan
    g = torch.randn(rows, 64, generator=g_)

    def args(leaves):
        lo = {"number": 0.0, "none": None}.get(lo_kind, leaves[1])
        hi = {"number": 1.5}.get(hi_kind, leaves[2])
        return lo, hi

    def grads(fn):
        learn_lo = lo_kind in ("learned", "equal")
        learn_hi = hi_kind in ("learned", "nan")
        leaves = [
            x.clone().requires_grad_(),
            lo_values.clone().requires_grad_(learn_lo),
            hi_values.clone().requires_grad_(learn_hi),
        ]
        y = fn(leaves[0], *args(leaves))
        wanted = [t for t in leaves if t.requires_grad]
        return (y.detach(), *torch.autograd.grad(y, wanted, g))

    lean = grads(hg.clamp)

    def torch_clamp(t, lo, hi):
        as_tensor = [b if not isinstance(b, float) else torch.tensor(b) for b in (lo, hi)]
        return torch.clamp(t, *as_tensor)

    torchs = grads(torch_clamp)
    monkeypatch.setattr(_elementwise, "_crossed", lambda lo, hi, strict: True)
    general = grads(hg.clamp)
    for a, b in zip(lean, general, strict=True):
        assert torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(), b.nan_to_num())
    assert torch.equal(lean[0].isnan(), torchs[0].isnan())
    assert torch.equal(lean[0].nan_to_num(), torchs[0].nan_to_num())
    assert torch.equal(lean[1], torchs[1])
    for got, expected in zip(lean[2:], torchs[2:], strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-5)
