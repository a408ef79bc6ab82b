"""hardgrad.surrogates: the registry, every surrogate's math, parameters, reprs, and
user-defined surrogates."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from torch.func import grad, vmap

import hardgrad as hg
from hardgrad.surrogates import FAMILIES, SURROGATES, Surrogate

INF, NAN = math.inf, math.nan
KINDS = {"identity", "indicator", "smooth"}

#: The names the public API (API.md section 1) promises.
API_NAMES = {
    "identity",
    "clipped",
    "masked",
    "sigmoid",
    "tanh",
    "fast_sigmoid",
    "atan",
    "triangle",
    "approx_sign",
    "swish",
}


def variants(cls: type[Surrogate]) -> list[Surrogate]:
    """The default instance and one with every parameter changed."""
    default = cls()
    if not dataclasses.is_dataclass(default) or not dataclasses.fields(default):
        return [default]
    changed = {
        f.name: getattr(default, f.name) * (2.5 if getattr(default, f.name) > 0 else 0.5)
        for f in dataclasses.fields(default)
    }
    return [default, cls(**changed)]


INSTANCES = [
    pytest.param(instance, id=f"{name}-{i}")
    for name, cls in SURROGATES.items()
    for i, instance in enumerate(variants(cls))
]


def positive_params(cls: type[Surrogate]) -> list[str]:
    """Parameters of a surrogate whose parameters all default to positive values (widths,
    slopes, temperatures: each must be > 0). Range parameters such as Masked's min/max,
    which may be negative, are tested on their own."""
    default = cls()
    if not dataclasses.is_dataclass(default):
        return []
    names = [f.name for f in dataclasses.fields(default)]
    return names if all(getattr(default, n) > 0 for n in names) else []


def kinks(surrogate: Surrogate) -> list[float]:
    """Where a piecewise surrogate's derivative may jump (to keep autograd checks away)."""
    points = [0.0, 1.0, -1.0]
    for value in (
        dataclasses.asdict(surrogate).values() if dataclasses.is_dataclass(surrogate) else []
    ):
        points += [value, -value]
    return points


def sample(dtype: torch.dtype, *, extremes: bool = True) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    values = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 2.5, -2.5]
    if extremes:
        fmax = torch.finfo(dtype).max
        big = {torch.float64: 1e300, torch.float32: 1e8, torch.float16: 1e4, torch.bfloat16: 1e4}[
            dtype
        ]
        values += [big, -big, fmax, -fmax, INF, -INF]
    return torch.cat([torch.randn(64, generator=g) * 2, torch.tensor(values)]).to(dtype)


# --------------------------------------------------------------------------------------
# The registry.
# --------------------------------------------------------------------------------------


def test_registry_holds_the_api_names():
    assert set(SURROGATES.names()) >= API_NAMES
    assert len(SURROGATES) == len(SURROGATES.names()) == len(set(SURROGATES))


@pytest.mark.parametrize("name", SURROGATES.names())
def test_registered_class_is_consistent(name):
    cls = SURROGATES.get(name)
    assert issubclass(cls, Surrogate)
    assert cls.name == name
    assert cls.applies_to and cls.applies_to <= FAMILIES
    assert cls.kind in KINDS
    assert name in SURROGATES


@pytest.mark.parametrize("name", SURROGATES.names())
def test_get_returns_a_cached_default_instance(name):
    instance = hg.surrogates.get(name)
    assert type(instance) is SURROGATES.get(name)
    assert instance == SURROGATES.get(name)()
    assert hg.surrogates.get(name) is instance


def test_get_unknown_name_lists_the_names():
    with pytest.raises(ValueError, match="'nope'") as info:
        hg.surrogates.get("nope")
    for name in SURROGATES.names():
        assert repr(name) in str(info.value)


def test_resolve_rejects_other_types():
    with pytest.raises(TypeError, match="`surrogate`"):
        hg.surrogates.resolve(3.0, family="step", op="sign")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`surrogate`"):
        hg.surrogates.resolve(hg.surrogates.Sigmoid, family="step", op="sign")  # type: ignore[arg-type]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_resolve_wrong_family_lists_the_usable_names(family):
    usable = [n for n, cls in SURROGATES.items() if family in cls.applies_to]
    for name, cls in SURROGATES.items():
        if family in cls.applies_to:
            assert hg.surrogates.resolve(name, family=family, op="op") is hg.surrogates.get(name)
            continue
        with pytest.raises(ValueError, match="`op`") as info:
            hg.surrogates.resolve(name, family=family, op="op")
        for u in usable:
            assert repr(u) in str(info.value)


# --------------------------------------------------------------------------------------
# The math: derivative against an independent closed form, and against autograd of
# function; the indicator's support; integrals.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("surrogate", INSTANCES)
def test_derivative_matches_closed_form(surrogate, dtype, tol, closed_form, assert_close_to):
    x = sample(dtype)
    d = surrogate.derivative(x)
    assert d.dtype == dtype and d.shape == x.shape and d.device == x.device
    assert_close_to(d, closed_form(surrogate, x), tol)


@pytest.mark.parametrize("surrogate", INSTANCES)
def test_backward_is_grad_times_derivative(surrogate, dtype, tol, closed_form, assert_close_to):
    x = sample(dtype)
    g = torch.randn(x.shape).to(dtype)
    out = surrogate.backward(g, x)
    assert out.dtype == dtype and out.shape == x.shape
    assert_close_to(out, g.double() * closed_form(surrogate, x), tol)


@pytest.mark.parametrize("surrogate", INSTANCES)
def test_derivative_is_autograd_of_function(surrogate):
    x = torch.linspace(-3.0, 3.0, 241, dtype=torch.float64)
    away = torch.stack([(x - k).abs() > 1e-6 for k in kinks(surrogate)]).all(0)
    x = x[away]
    autograd = vmap(grad(surrogate.function))(x)
    torch.testing.assert_close(surrogate.derivative(x), autograd, rtol=1e-10, atol=1e-12)
    assert surrogate.function(x).dtype == torch.float64


@pytest.mark.parametrize("surrogate", INSTANCES)
def test_derivative_integrates_to_function(surrogate):
    x = torch.linspace(-4.0, 4.0, 160_001, dtype=torch.float64)
    integral = torch.trapezoid(surrogate.derivative(x), x)
    change = surrogate.function(x[-1:]) - surrogate.function(x[:1])
    # The trapezoid rule is off by up to a grid step (5e-5) at the jumps of indicators.
    torch.testing.assert_close(integral, change[0], rtol=1e-6, atol=1e-4)


@pytest.mark.parametrize("surrogate", INSTANCES)
def test_derivative_vanishes_at_infinity(surrogate, dtype):
    """Every surrogate but the identity has s'(+-inf) = 0, and no dtype overflows to NaN."""
    fmax = torch.finfo(dtype).max
    x = torch.tensor([INF, -INF, fmax, -fmax], dtype=dtype)
    d = surrogate.derivative(x)
    assert torch.isfinite(d).all(), d
    expected = 1.0 if surrogate.kind == "identity" else 0.0
    assert torch.equal(d[:2], torch.full((2,), expected, dtype=dtype))


@pytest.mark.parametrize("surrogate", INSTANCES)
def test_indicator_support(surrogate, dtype):
    x = sample(dtype)
    if surrogate.kind != "indicator":
        with pytest.raises(NotImplementedError):
            surrogate.support(x)
        return
    mask = surrogate.support(x)
    assert mask.dtype == torch.bool and mask.shape == x.shape
    assert torch.equal(surrogate.derivative(x), mask.to(dtype))


def test_documented_values():
    s = hg.surrogates
    torch.testing.assert_close(
        s.Sigmoid(slope=4.0).derivative(torch.tensor([0.0])), torch.tensor([1.0])
    )
    torch.testing.assert_close(s.Tanh().derivative(torch.tensor([0.0])), torch.tensor([1.0]))
    torch.testing.assert_close(s.FastSigmoid().derivative(torch.tensor([0.0])), torch.tensor([1.0]))
    torch.testing.assert_close(
        s.ATan(alpha=3.0).derivative(torch.tensor([0.0])), torch.tensor([1.5])
    )
    torch.testing.assert_close(
        s.Triangle(width=0.5).derivative(torch.tensor([0.0])), torch.tensor([2.0])
    )
    torch.testing.assert_close(s.ApproxSign().derivative(torch.tensor([0.0])), torch.tensor([2.0]))
    torch.testing.assert_close(
        s.Swish(beta=1.0).derivative(torch.tensor([1.0])), torch.tensor([0.6047]), atol=1e-4, rtol=0
    )
    # Boundaries of the indicator windows are included.
    assert s.Clipped(width=2.0).derivative(torch.tensor([-2.0, 2.0, 2.0001])).tolist() == [
        1.0,
        1.0,
        0.0,
    ]
    assert s.Masked(min=0.0, max=1.0).derivative(torch.tensor([0.0, 1.0, -1e-6])).tolist() == [
        1.0,
        1.0,
        0.0,
    ]


# --------------------------------------------------------------------------------------
# Parameters and reprs.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [n for n, cls in SURROGATES.items() if positive_params(cls)])
def test_positive_parameters_are_validated(name):
    cls = SURROGATES.get(name)
    for param in positive_params(cls):
        for bad in (0.0, -1.0, INF):
            with pytest.raises(ValueError, match=f"`{param}`"):
                cls(**{param: bad})
        with pytest.raises(ValueError, match=f"`{param}`"):
            cls(**{param: NAN})
        for bad in ("1", True, None):
            with pytest.raises(TypeError, match=f"`{param}`"):
                cls(**{param: bad})


def test_sigmoid_slope_zero_names_slope():
    with pytest.raises(ValueError, match=r"`slope` > 0.*slope=0"):
        hg.surrogates.Sigmoid(slope=0)


def test_masked_bounds_are_validated():
    masked = hg.surrogates.Masked
    with pytest.raises(ValueError, match="`min` <= `max`"):
        masked(min=1.0, max=0.0)
    with pytest.raises(ValueError, match="`min`"):
        masked(min=NAN)
    with pytest.raises(TypeError, match="`max`"):
        masked(max="1")  # type: ignore[arg-type]
    assert masked(min=0.5, max=0.5).derivative(torch.tensor([0.5, 0.6])).tolist() == [1.0, 0.0]


@pytest.mark.parametrize("surrogate", INSTANCES)
def test_repr_round_trips_and_instances_are_immutable(surrogate):
    text = repr(surrogate)
    assert text.startswith(type(surrogate).__name__ + "(")
    assert eval(text, vars(hg.surrogates)) == surrogate
    assert hash(surrogate) == hash(eval(text, vars(hg.surrogates)))
    for field in dataclasses.fields(surrogate) if dataclasses.is_dataclass(surrogate) else []:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(surrogate, field.name, 1.0)


def test_documented_reprs():
    assert repr(hg.surrogates.Sigmoid(slope=4.0)) == "Sigmoid(slope=4.0)"
    assert repr(hg.surrogates.Clipped(width=2.0)) == "Clipped(width=2.0)"
    assert repr(hg.surrogates.get("sigmoid")) == "Sigmoid(slope=1.0)"


def test_instances_carry_their_parameters_into_ops():
    x = torch.tensor([-1.5, -0.5, 0.5, 1.5], requires_grad=True)
    hg.sign(x, surrogate=hg.surrogates.Clipped(width=2.0)).sum().backward()
    assert x.grad.tolist() == [1.0, 1.0, 1.0, 1.0]
    x.grad = None
    hg.sign(x, surrogate="clipped").sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 1.0, 0.0]


# --------------------------------------------------------------------------------------
# User-defined surrogates.
# --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Gaussian(Surrogate):
    """s(x) = Phi(x / sigma), s'(x) = exp(-x^2 / (2 sigma^2)) / (sigma sqrt(2 pi))."""

    sigma: float = 1.0

    def function(self, x):
        return 0.5 * (1 + torch.erf(x / (self.sigma * 2**0.5)))

    def derivative(self, x):
        return torch.exp(-0.5 * (x / self.sigma) ** 2) / (self.sigma * (2 * torch.pi) ** 0.5)


@dataclasses.dataclass(frozen=True)
class Window(Surrogate):
    """An indicator surrogate: 1 on [-half, half], usable by staircase and step ops."""

    half: float = 0.25
    applies_to = frozenset({"staircase", "step"})
    kind = "indicator"

    def function(self, x):
        return torch.clamp(x, -self.half, self.half)

    def derivative(self, x):
        return self.support(x).to(x.dtype)

    def support(self, x):
        return x.abs() <= self.half


class PlainLinear(Surrogate):
    """Not a dataclass: a plain subclass works too."""

    def function(self, x):
        return 0.5 * x

    def derivative(self, x):
        return torch.full_like(x, 0.5)


def test_user_defined_surrogate_with_heaviside(dtype, assert_same):
    x = torch.tensor([-1.0, 0.0, 0.5, 3.0], dtype=dtype, requires_grad=True)
    y = hg.heaviside(x, surrogate=Gaussian(sigma=0.5))
    assert_same(y.detach(), (x.detach() > 0).to(dtype))
    y.sum().backward()
    expected = torch.exp(-2 * x.detach().double() ** 2) / (0.5 * math.sqrt(2 * math.pi))
    torch.testing.assert_close(
        x.grad.double(),
        expected,
        rtol=1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6,
        atol=1e-3,
    )


def test_user_defined_surrogate_docstring_values():
    x = torch.tensor([-1.0, 0.5], requires_grad=True)
    hg.heaviside(x, surrogate=Gaussian(sigma=0.5)).sum().backward()
    torch.testing.assert_close(x.grad, torch.tensor([0.1080, 0.4839]), rtol=0, atol=1e-4)


@pytest.mark.parametrize("repeat", [1, 20000], ids=["small", "large"])
def test_user_defined_indicator_surrogate_saves_a_mask(repeat):
    """Only ``support`` is implemented: small eager tensors keep it as 0/1 in x's dtype
    (through the default ``_support_into``), large ones as bool."""
    x = torch.tensor([-1.0, -0.25, 0.1, 0.3, 2.6] * repeat, requires_grad=True)
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = hg.round(x, surrogate=Window())
    assert [t.dtype for t in saved] == [torch.float32 if repeat == 1 else torch.bool]
    assert torch.equal(y.detach(), torch.round(x.detach()))
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 1.0, 0.0, 0.0] * repeat


def test_user_defined_surrogate_family_is_enforced():
    with pytest.raises(ValueError, match="`round`"):
        hg.round(torch.randn(3), surrogate=Gaussian())  # step-only by default
    with pytest.raises(ValueError, match="`clamp`"):
        hg.clamp(torch.randn(3), -1.0, 1.0, surrogate=Window())


def test_plain_subclass_and_torch_func():
    x = torch.randn(5, dtype=torch.float64)
    g = grad(lambda t: hg.sign(t, surrogate=PlainLinear()).sum())(x)
    assert torch.equal(g, torch.full_like(x, 0.5))
    per_sample = vmap(grad(lambda t: hg.heaviside(t, surrogate=Gaussian()).sum()))(x.reshape(5, 1))
    torch.testing.assert_close(per_sample.flatten(), Gaussian().derivative(x))


def test_base_class_is_abstract():
    with pytest.raises(TypeError):
        Surrogate()  # type: ignore[abstract]


# --------------------------------------------------------------------------------------
# Regressions found by tests/test_properties_ops.py: parameters at the dtype's limits.
# --------------------------------------------------------------------------------------


def test_sigmoid_derivative_with_a_steep_slope_in_half_precision_is_not_nan():
    """slope * sigmoid(kx) overflowed float16 before the factor sigmoid(-kx) = 0: NaN."""
    x = torch.tensor([1.0, 3.0, -2.0, 65504.0], dtype=torch.float16)
    d = hg.surrogates.Sigmoid(slope=1e6).derivative(x)
    assert torch.equal(d, torch.zeros_like(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_clamp_functions_with_bounds_beyond_the_dtype(dtype):
    """torch.clamp raised RuntimeError for a width or bound beyond x's dtype."""
    x = torch.tensor([-INF, -2.0, 0.5, INF], dtype=dtype)
    assert torch.equal(hg.surrogates.Clipped(width=1e300).function(x), x)
    assert torch.equal(hg.surrogates.Masked(min=-1e300, max=1e300).function(x), x)
