"""Property-based tests (hypothesis) of the hard ops, the surrogates and ``straight_through``.

Every op comes from :data:`hardgrad.ops.OPS` and every surrogate from
:data:`hardgrad.surrogates.SURROGATES`; hypothesis draws shapes (0-dim, empty dimensions,
up to 4 dimensions), dtypes (float64, float32, float16, bfloat16) and values (ordinary
ones, magnitudes up to ``finfo.max``, subnormals, signed zeros and, separately, +-inf and
NaN). The properties:

1. the forward equals the op's plain-torch reference bit for bit, with shape, dtype and
   device kept;
2. finite input gives a finite output and a finite gradient for a finite upstream gradient;
3. +-inf and NaN give the documented result (the reference's; a finite gradient where the
   docstring promises one);
4. bad settings raise ``TypeError``/``ValueError`` naming the argument.

Runs are deterministic (``derandomize=True``, no example database).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import hardgrad as hg
from _properties import (
    INF,
    NAN,
    assert_raises_naming,
    property_settings,
    tensors,
    upstream,
)
from hardgrad.ops import OPS, OpSpec
from hardgrad.surrogates import SURROGATES

# Every test here runs on both of a small op's autograd routes (see conftest.autograd_route).
pytestmark = pytest.mark.usefixtures("autograd_route")

SETTINGS = property_settings(max_examples=30)


ELEMENTWISE = [name for name, spec in OPS.items() if spec.family is not None]
SELECTIONS = [name for name, spec in OPS.items() if spec.family is None]


# --------------------------------------------------------------------------------------
# Strategies.
# --------------------------------------------------------------------------------------


def parameters(cls: type) -> st.SearchStrategy[dict[str, float]]:
    """Keyword arguments for a surrogate class: each positive parameter in [1e-3, 1e3]
    (``Masked``: an ordered ``min <= max``)."""
    names = [f.name for f in dataclasses.fields(cls)]
    if set(names) == {"min", "max"}:
        bounds = st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=2).map(sorted)
        return bounds.map(lambda b: {"min": b[0], "max": b[1]})
    return st.fixed_dictionaries({n: st.floats(1e-3, 1e3) for n in names})


@st.composite
def surrogates(draw: st.DrawFn, family: str) -> str | hg.surrogates.Surrogate:
    """A registered surrogate serving ``family``: its name, or an instance with drawn
    parameters."""
    names = [n for n, cls in SURROGATES.items() if family in cls.applies_to]
    name = draw(st.sampled_from(names))
    cls = SURROGATES.get(name)
    if not dataclasses.fields(cls) or draw(st.booleans()):
        return name
    return cls(**draw(parameters(cls)))  # type: ignore[no-any-return]


def call(spec: OpSpec, x: torch.Tensor, surrogate: Any = None, **overrides: Any) -> torch.Tensor:
    if surrogate is not None:
        overrides["surrogate"] = surrogate
    return spec(x, **overrides)


def grad_of(
    fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, dL/dx)`` for ``y = fn(x)`` and a random finite upstream gradient."""
    leaf = x.detach().clone().requires_grad_()
    y = fn(leaf)
    (grad,) = torch.autograd.grad(y, leaf, upstream(y, seed))
    return y.detach(), grad


def selection_error(spec: OpSpec, x: torch.Tensor) -> str | None:
    """The argument a selection op must name in its error for ``x`` (with its test kwargs),
    or None when ``x`` is valid."""
    argument = "logits" if spec.name == "one_hot_argmax" else "x"
    if x.dim() == 0 or x.shape[-1] == 0:
        return argument
    if x.shape[-1] < spec.kwargs.get("k", 0):
        return "k"
    return None


def quantize_expected(spec: OpSpec, x: torch.Tensor) -> torch.Tensor:
    """The op's documented value: ``spec.reference`` (torch's fake quantization, computed in
    float32) wherever it applies, and the documented formula computed in float64 for float64
    values that float32 cannot hold (where the float32 reference would round them first).
    NaN stays NaN (the op propagates it, as torch.clamp does; torch's kernel maps it to a
    bound)."""
    expected = spec.reference(x)
    if x.dtype == torch.float64:
        scale, low, high = spec.kwargs["scale"], spec.kwargs["quant_min"], spec.kwargs["quant_max"]
        formula = torch.clamp(torch.round(x * (1.0 / scale)), low, high) * scale
        held = (x.float().double() == x) | ~torch.isfinite(x)
        expected = torch.where(held, expected, formula)
    return torch.where(torch.isnan(x), NAN, expected).to(x.dtype)


# --------------------------------------------------------------------------------------
# 1 and 3. Forward: the reference bit for bit, shape/dtype/device kept (+-inf and NaN too).
# --------------------------------------------------------------------------------------


def _forward_matches_reference(name: str, data: st.DataObject, assert_same: Any, nonfinite: bool):
    spec = OPS.get(name)
    x = data.draw(tensors(nonfinite=nonfinite), label="x")
    surrogate = data.draw(surrogates(spec.family), label="surrogate") if spec.family else None
    if spec.family is None and (argument := selection_error(spec, x)) is not None:
        assert_raises_naming(argument, call, spec, x)
        return
    y = call(spec, x, surrogate)
    if name == "quantize":
        # torch's own kernel gives +0.0 where the documented formula gives -0.0
        # (tests/ops/test_quantize.py checks the sign separately).
        assert_same(y, quantize_expected(spec, x), signed_zeros=False)
    else:
        assert_same(y, spec.reference(x))
    # With requires_grad the forward is the same, bit for bit.
    assert_same(call(spec, x.clone().requires_grad_(), surrogate).detach(), y)


@pytest.mark.parametrize("name", OPS.names())
@SETTINGS
@given(data=st.data())
def test_forward_matches_reference_for_finite_input(name, data, assert_same):
    _forward_matches_reference(name, data, assert_same, nonfinite=False)


@pytest.mark.parametrize("name", OPS.names())
@SETTINGS
@given(data=st.data())
def test_forward_matches_reference_with_inf_and_nan(name, data, assert_same):
    _forward_matches_reference(name, data, assert_same, nonfinite=True)


# --------------------------------------------------------------------------------------
# 2. Finite input: finite output and gradient.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ELEMENTWISE)
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_elementwise_finite_input_gives_finite_output_and_gradient(name, data, seed):
    spec = OPS.get(name)
    x = data.draw(tensors(), label="x")
    surrogate = data.draw(surrogates(spec.family), label="surrogate")
    y, grad = grad_of(lambda t: call(spec, t, surrogate), x, seed)
    assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device
    assert grad.shape == x.shape and grad.dtype == x.dtype
    assert torch.isfinite(y).all(), y
    assert torch.isfinite(grad).all(), grad


@pytest.mark.parametrize("name", SELECTIONS)
@SETTINGS
@given(
    data=st.data(),
    tau=st.one_of(st.floats(1e-2, 1e2), st.sampled_from((1.0, 0.5))),
    seed=st.integers(0, 2**16),
)
def test_selection_finite_input_gives_finite_output_and_gradient(name, data, tau, seed):
    """Any finite logits, all equal, +-finfo.max or subnormal, along any valid dim: an
    exact one-hot (or k-hot) output and a finite gradient that sums to 0 along ``dim``."""
    spec = OPS.get(name)
    x = data.draw(tensors(min_dims=1), label="x")
    dim = data.draw(st.integers(-x.dim(), x.dim() - 1), label="dim")
    if x.shape[dim] == 0:
        assert_raises_naming("logits" if name == "one_hot_argmax" else "x", call, spec, x, dim=dim)
        return
    if x.dim() > 1 and data.draw(st.booleans(), label="all equal"):
        x = x.narrow(dim, 0, 1).expand_as(x).contiguous()  # ties everywhere
    kwargs: dict[str, Any] = {"dim": dim, "tau": tau}
    if name == "topk_mask":
        kwargs["k"] = data.draw(st.integers(0, x.shape[dim]), label="k")
    y, grad = grad_of(lambda t: spec.op(t, **kwargs), x, seed)
    assert y.shape == x.shape and y.dtype == x.dtype and grad.dtype == x.dtype
    assert ((y == 0) | (y == 1)).all()
    count = kwargs.get("k", 1)
    assert (y.sum(dim) == count).all()
    assert torch.isfinite(grad).all(), grad
    if x.numel():
        tolerance = {torch.float16: 1e-2, torch.bfloat16: 1e-1}.get(x.dtype, 1e-5)
        scale = 1 + float(grad.double().abs().amax())
        assert grad.double().sum(dim).abs().max() <= tolerance * scale * x.shape[dim]


@pytest.mark.parametrize("name", SELECTIONS)
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_selection_gradient_is_finite_for_inf_and_nan(name, data, seed):
    """Documented: NaN logits are read as 0 and infinite ones as large finite values in
    backward, so the gradient stays finite; the forward is the reference's."""
    spec = OPS.get(name)
    x = data.draw(tensors(min_dims=1, nonfinite=True), label="x")
    if selection_error(spec, x) is not None:
        return
    y, grad = grad_of(lambda t: call(spec, t), x, seed)
    assert torch.isfinite(grad).all(), grad
    assert ((y == 0) | (y == 1)).all()


@pytest.mark.parametrize("name", ELEMENTWISE)
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_elementwise_gradient_at_infinity_is_finite(name, data, seed):
    """At +-inf every surrogate's derivative has a finite limit (1 or 0): the gradient
    stays finite."""
    spec = OPS.get(name)
    x = data.draw(tensors(nonfinite=True), label="x")
    x = torch.where(torch.isnan(x), 0.0, x).to(x.dtype)
    surrogate = data.draw(surrogates(spec.family), label="surrogate")
    _, grad = grad_of(lambda t: call(spec, t, surrogate), x, seed)
    assert torch.isfinite(grad).all(), grad


# --------------------------------------------------------------------------------------
# Quantization with learned (tensor) scale and zero point: the LSQ path.
# --------------------------------------------------------------------------------------


@SETTINGS
@given(
    data=st.data(),
    scale=st.floats(1e-4, 1e4),
    zero_point=st.one_of(st.just(0.0), st.floats(-10.0, 10.0)),
    bounds=st.sampled_from(((-128, 127), (0, 255), (-8, 7), (0, 1))),
    grad_scale=st.one_of(st.none(), st.floats(1e-3, 1e3)),
    seed=st.integers(0, 2**16),
)
def test_quantize_with_learned_parameters_is_finite(
    data, scale, zero_point, bounds, grad_scale, seed
):
    """Finite x and a grid that fits the dtype: finite output and finite gradients for x,
    scale and zero point (LSQ); gradients keep the parameters' dtype."""
    x = data.draw(tensors(), label="x")
    low, high = bounds
    info = torch.finfo(x.dtype)
    # A grid whose extreme levels overflow the dtype cannot be represented (documented).
    scale = min(scale, info.max / (max(abs(low), abs(high)) + abs(zero_point) + 1) / 2)
    s = torch.tensor(scale, requires_grad=True)
    z = torch.tensor(zero_point, requires_grad=True)
    leaf = x.clone().requires_grad_()
    y = hg.quantize(leaf, s, z, quant_min=low, quant_max=high, grad_scale=grad_scale)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert torch.isfinite(y).all(), y
    gx, gs, gz = torch.autograd.grad(y, (leaf, s, z), upstream(y, seed))
    for g, like in ((gx, leaf), (gs, s), (gz, z)):
        assert g.dtype == like.dtype and g.shape == like.shape
        assert torch.isfinite(g).all(), (g, like)


# --------------------------------------------------------------------------------------
# straight_through: any hard function, any soft one.
# --------------------------------------------------------------------------------------

HARD = (torch.round, torch.floor, torch.sign, lambda t: (t > 0).to(t.dtype))
SOFT: tuple[Any, ...] = (None, torch.sin, torch.tanh, torch.sigmoid, *SURROGATES.names())


@SETTINGS
@given(
    data=st.data(),
    hard=st.sampled_from(HARD),
    soft=st.sampled_from(SOFT),
    seed=st.integers(0, 2**16),
)
def test_straight_through_forward_is_hard_and_gradient_finite(data, hard, soft, seed, assert_same):
    op = hg.straight_through(hard, soft)
    x = data.draw(tensors(nonfinite=data.draw(st.booleans(), label="nonfinite")), label="x")
    assert_same(op(x), hard(x))
    if torch.isfinite(x).all():
        _, grad = grad_of(op, x, seed)
        assert grad.dtype == x.dtype and torch.isfinite(grad).all(), grad


# --------------------------------------------------------------------------------------
# Surrogates: function and derivative.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SURROGATES.names())
@SETTINGS
@given(data=st.data())
def test_surrogate_function_and_derivative_are_finite(name, data):
    """For finite x (any magnitude): ``function`` and ``derivative`` are finite and keep
    shape and dtype; at +-inf the derivative's limit is finite too."""
    cls = SURROGATES.get(name)
    surrogate = cls(**data.draw(parameters(cls), label="parameters"))
    x = data.draw(tensors(), label="x")
    for method in (surrogate.function, surrogate.derivative):
        y = method(x)
        assert y.shape == x.shape and y.dtype == x.dtype, method
        assert torch.isfinite(y).all(), (method, y)
    edges = torch.tensor([INF, -INF], dtype=x.dtype)
    assert torch.isfinite(surrogate.derivative(edges)).all()
    grad = upstream(x, 0)
    assert torch.isfinite(surrogate.backward(grad, x)).all()


@pytest.mark.parametrize("name", SURROGATES.names())
@SETTINGS
@given(bad=st.sampled_from((0.0, -1.0, NAN, INF, -INF, "1", None, True)))
def test_surrogate_bad_parameters_raise_naming_them(name, bad):
    cls = SURROGATES.get(name)
    for field in dataclasses.fields(cls):
        if field.name in ("min", "max") and isinstance(bad, float) and not math.isnan(bad):
            continue  # any ordered real bounds are valid
        assert_raises_naming(field.name, cls, **{field.name: bad})


# --------------------------------------------------------------------------------------
# 4. Bad settings.
# --------------------------------------------------------------------------------------

NOT_FLOATING = (
    [0.5, 1.0],
    1.0,
    torch.tensor([1, 2]),
    torch.tensor([True, False]),
    torch.tensor([1 + 1j]),
)


@pytest.mark.parametrize("name", OPS.names())
@SETTINGS
@given(x=st.sampled_from(NOT_FLOATING))
def test_non_floating_input_is_a_type_error(name, x):
    spec = OPS.get(name)
    argument = "logits" if name == "one_hot_argmax" else "x"
    with pytest.raises(TypeError, match=f"`{argument}`"):
        call(spec, x)


@pytest.mark.parametrize("name", OPS.names())
@SETTINGS
@given(data=st.data())
def test_bad_surrogate_or_temperature_raises_naming_it(name, data):
    spec = OPS.get(name)
    x = data.draw(tensors(min_dims=1, dtypes=(torch.float32,)).filter(lambda t: t.shape[-1] >= 2))
    if spec.family is None:
        bad_tau = data.draw(st.sampled_from((0.0, -1.0, NAN, INF, "1", None, True)))
        assert_raises_naming("tau", call, spec, x, tau=bad_tau)
        bad_dim = data.draw(st.sampled_from((x.dim(), -x.dim() - 1, 1.0, "0", None)))
        assert_raises_naming("dim", call, spec, x, dim=bad_dim)
        return
    wrong = [n for n, cls in SURROGATES.items() if spec.family not in cls.applies_to]
    bad = data.draw(st.sampled_from(["no_such_surrogate", 3, None, *wrong]))
    assert_raises_naming("surrogate", spec, x, surrogate=bad)


@SETTINGS
@given(data=st.data())
def test_topk_bad_k_raises_naming_it(data):
    x = data.draw(tensors(min_dims=1, dtypes=(torch.float32,)))
    n = x.shape[-1]
    bad = data.draw(st.sampled_from((-1, n + 1, 1.5, "2", True, None)))
    argument = "x" if n == 0 else "k"  # an empty selection is reported first
    assert_raises_naming(argument, hg.topk_mask, x, bad)


QUANTIZE_BAD: tuple[tuple[str, dict[str, Any]], ...] = (
    *(("scale", {"scale": s}) for s in (0.0, -0.5, NAN, INF, "a", True, None)),
    ("scale", {"scale": torch.tensor([0.5, -0.5])}),
    ("scale", {"scale": torch.tensor([0.0])}),
    ("scale", {"scale": torch.tensor([1, 2])}),
    ("scale", {"scale": torch.ones(7)}),  # not broadcastable
    *(("zero_point", {"scale": 0.5, "zero_point": z}) for z in (NAN, "a", None)),
    ("zero_point", {"scale": 0.5, "zero_point": torch.tensor([1 + 1j])}),
    *(("quant_min", {"scale": 0.5, "quant_min": q}) for q in (1.5, "0", None, True)),
    ("quant_min", {"scale": 0.5, "quant_min": 5, "quant_max": 5}),
    *(("quant_max", {"scale": 0.5, "quant_max": q}) for q in (127.0, "7")),
    *(("grad_scale", {"scale": 0.5, "grad_scale": g}) for g in (0.0, -1.0, NAN, INF, "1")),
    ("surrogate", {"scale": 0.5, "surrogate": "sigmoid"}),
)


@SETTINGS
@given(data=st.data(), case=st.sampled_from(QUANTIZE_BAD))
def test_quantize_bad_settings_raise_naming_them(data, case):
    x = data.draw(tensors(min_dims=1, max_dims=2).filter(lambda t: t.numel() > 0))
    argument, kwargs = case
    assert_raises_naming(argument, hg.quantize, x, **kwargs)


CLAMP_BAD: tuple[tuple[str, dict[str, Any]], ...] = (
    ("min", {"min": 1.0, "max": -1.0}),
    ("min", {"min": NAN}),
    ("min", {"min": "a"}),
    ("max", {"max": NAN}),
    ("max", {"min": 0.0, "max": torch.tensor([1, 2])}),
    ("max", {"max": torch.ones(7)}),
    ("min", {}),
    ("surrogate", {"min": torch.tensor(0.0), "max": 1.0, "surrogate": "sigmoid"}),
)


@SETTINGS
@given(data=st.data(), case=st.sampled_from(CLAMP_BAD))
def test_clamp_bad_settings_raise_naming_them(data, case):
    x = data.draw(tensors(min_dims=1, max_dims=2).filter(lambda t: t.numel() > 0))
    argument, kwargs = case
    assert_raises_naming(argument, hg.clamp, x, **kwargs)


@SETTINGS
@given(bad=st.sampled_from((None, 1.0, "round", [torch.round])))
def test_straight_through_bad_arguments(bad):
    assert_raises_naming("hard", hg.straight_through, bad)
    assert_raises_naming("soft", hg.straight_through, torch.round, 1.0)
    assert_raises_naming("soft", hg.straight_through, torch.round, "no_such_surrogate")
    wrong_shape = hg.straight_through(lambda t: t.sum(), None)
    assert_raises_naming("hard(x)", wrong_shape, torch.ones(3))
    wrong_dtype = hg.straight_through(torch.round, lambda t: t.double())
    assert_raises_naming("soft(x)", wrong_dtype, torch.ones(3))


@SETTINGS
@given(bad=st.sampled_from((0, 1, None, "yes", 1.0)))
def test_set_validation_takes_only_a_bool(bad):
    assert_raises_naming("enabled", hg.set_validation, bad)
    assert hg.validation_enabled() is True
