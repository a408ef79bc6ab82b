"""Forward-mode AD (issue 14, item 3): ``torch.func.jvp``, ``jacfwd`` and
``torch.autograd.forward_ad`` through every hard op (with the same surrogate the backward
uses), every sampler and every estimator of ``hg.expectation`` (REBAR and RELAX refuse,
saying why).

For an elementwise op with surrogate :math:`s` the JVP is :math:`\\dot x \\odot s'(x)`;
for the selections it is the smooth relaxation's Jacobian times the tangent (the softmax's
and the soft top-k's Jacobians are symmetric, so the JVP equals the VJP of the same
vector). Registry-driven: a new op or surrogate is covered automatically.
"""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import hardgrad as hg
from hardgrad.estimators import ESTIMATORS
from hardgrad.ops import OPS
from hardgrad.surrogates import SURROGATES

ELEMENTWISE = [(n, spec) for n, spec in OPS.items() if spec.family is not None]
OP_SURROGATE = [
    (name, surrogate)
    for name, spec in ELEMENTWISE
    for surrogate, cls in SURROGATES.items()
    if spec.family in cls.applies_to
]
SELECTIONS = [n for n, spec in OPS.items() if spec.family is None]


def _inputs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(40, generator=g) * 2, torch.tensor([0.0, -0.0, 1.0, -1.0, 0.5])])
    t = torch.randn(x.shape, generator=g)
    return x.to(dtype), t.to(dtype)


@pytest.mark.parametrize(("name", "surrogate"), OP_SURROGATE)
def test_jvp_is_the_tangent_times_the_surrogate_derivative(
    name, surrogate, dtype, tol, closed_form, assert_close_to
):
    spec = OPS.get(name)
    x, t = _inputs(dtype)

    def op(v: torch.Tensor) -> torch.Tensor:
        return spec(v, surrogate=surrogate)

    value, tangent = torch.func.jvp(op, (x,), (t,))
    assert torch.equal(value, op(x))
    assert tangent.dtype == dtype and tangent.shape == x.shape
    # The same numbers the backward gives for the same vector (one definition, both modes).
    _, pullback = torch.func.vjp(op, x)
    (cotangent,) = pullback(t)
    assert torch.equal(tangent, cotangent)
    # And the surrogate's formula, from the independent closed forms of conftest.py;
    # clamp-family surrogates use the op's own range (quantize: its levels' range).
    if name in ("clamp", "quantize"):
        low, high = (-1.0, 1.0) if name == "clamp" else (-8 * 0.25 - 0.125, 7 * 0.25 + 0.125)
        inside = (x.double() >= low) & (x.double() <= high)
        expected = t.double() * (inside.double() if surrogate == "masked" else 1.0)
        if name == "quantize":  # in range on the rounded level: checked through the backward
            expected = cotangent.double()
    else:
        expected = t.double() * closed_form(SURROGATES.get(surrogate)(), x)
    assert_close_to(tangent, expected, tol)


@pytest.mark.parametrize(("name", "surrogate"), OP_SURROGATE)
def test_forward_ad_dual_tensors_and_jacfwd(name, surrogate):
    spec = OPS.get(name)
    x, t = _inputs(torch.float64)

    def op(v: torch.Tensor) -> torch.Tensor:
        return spec(v, surrogate=surrogate)

    with fwAD.dual_level():
        out = op(fwAD.make_dual(x, t))
        primal, tangent = fwAD.unpack_dual(out)
    assert torch.equal(primal, op(x))
    assert torch.equal(tangent, torch.func.jvp(op, (x,), (t,))[1])
    small = x[:6]
    torch.testing.assert_close(torch.func.jacfwd(op)(small), torch.func.jacrev(op)(small))


@pytest.mark.parametrize("name", SELECTIONS)
def test_selection_jvp_is_the_relaxation_jacobian_times_the_tangent(name, dtype):
    spec = OPS.get(name)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 7, generator=g).to(dtype)
    t = torch.randn(4, 7, generator=g).to(dtype)

    def op(v: torch.Tensor) -> torch.Tensor:
        return spec(v, tau=0.7)

    value, tangent = torch.func.jvp(op, (x,), (t,))
    assert torch.equal(value, op(x))
    # Against the relaxation's Jacobian in float64, by autograd through the smooth map.
    x64 = x.double()
    if name == "one_hot_argmax":
        relaxation = lambda v: torch.softmax(v / 0.7, -1)  # noqa: E731
    else:
        relaxation = lambda v: hg.ops.soft_topk_mask(v, spec.kwargs["k"], tau=0.7)  # noqa: E731
    _, expected = torch.func.jvp(relaxation, (x64,), (t.double(),))
    tolerance = {torch.float64: 1e-12, torch.float32: 1e-5}.get(dtype, 2e-2)
    torch.testing.assert_close(tangent.double(), expected, rtol=tolerance, atol=tolerance)
    if dtype == torch.float64:
        torch.testing.assert_close(torch.func.jacfwd(op)(x[0]), torch.func.jacrev(op)(x[0]))


@pytest.mark.parametrize("soft", [None, "clipped", "tanh", torch.sin], ids=str)
def test_straight_through_forward_mode(soft):
    x, t = _inputs(torch.float64)
    value = torch.round(x)
    for hard in (torch.round, value):
        op = hg.straight_through(hard, soft)
        out, tangent = torch.func.jvp(op, (x,), (t,))
        assert torch.equal(out, value)
        _, pullback = torch.func.vjp(op, x)
        torch.testing.assert_close(tangent, pullback(t)[0], rtol=1e-15, atol=0.0)


def test_jvp_composes_with_vmap_and_jacfwd_of_a_model():
    """jacfwd of a small model with hard activations: one forward pass per input column."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(5, 3).double()

    def model(v: torch.Tensor) -> torch.Tensor:
        return hg.heaviside(layer(hg.sign(v, surrogate="tanh")), surrogate="fast_sigmoid")

    x = torch.randn(5, dtype=torch.float64)
    torch.testing.assert_close(torch.func.jacfwd(model)(x), torch.func.jacrev(model)(x))
    batch = torch.randn(4, 5, dtype=torch.float64)
    per_row = torch.vmap(torch.func.jacfwd(model))(batch)
    assert per_row.shape == (4, 3, 5)


# --------------------------------------------------------------------------------------
# Samplers and expectations: the same draw (seeded generator) in both modes.
# --------------------------------------------------------------------------------------

PATHWISE = [n for n, cls in ESTIMATORS.items() if cls.pathwise]
EAGER_ONLY = {"rebar", "relax"}


def _logits_and_tangent() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    return torch.randn(3, 4, generator=g, dtype=torch.float64), torch.randn(
        3, 4, generator=g, dtype=torch.float64
    )


@pytest.mark.parametrize("dist", ["bernoulli", "categorical"])
@pytest.mark.parametrize("name", PATHWISE)
def test_sampler_jvp_is_the_estimator_jacobian_times_the_tangent(name, dist):
    """Every pathwise estimator's surrogate Jacobian is symmetric (softmax Jacobians, their
    means and combinations, diagonal Bernoulli forms), so the JVP equals the VJP of the
    same vector on the same draw; jacfwd equals jacrev."""
    sampler = hg.bernoulli if dist == "bernoulli" else hg.categorical
    logits, t = _logits_and_tangent()

    def draw(v: torch.Tensor) -> torch.Tensor:
        return sampler(v, estimator=name, generator=torch.Generator().manual_seed(1))

    value, tangent = torch.func.jvp(draw, (logits,), (t,))
    assert torch.equal(value, draw(logits))
    _, pullback = torch.func.vjp(draw, logits)
    torch.testing.assert_close(tangent, pullback(t)[0], rtol=1e-12, atol=1e-15)
    with fwAD.dual_level():
        dual_tangent = fwAD.unpack_dual(draw(fwAD.make_dual(logits, t))).tangent
    assert dual_tangent is not None and torch.equal(dual_tangent, tangent)
    row = logits[0]
    torch.testing.assert_close(
        torch.func.jacfwd(draw, randomness="same")(row), torch.func.jacrev(draw)(row)
    )


EXPECTATIONS = [
    (name, dist)
    for name, cls in ESTIMATORS.items()
    if name not in EAGER_ONLY
    for dist in getattr(cls, "dists", ("bernoulli", "categorical"))
]


@pytest.mark.parametrize(("name", "dist"), EXPECTATIONS)
def test_expectation_jvp_is_the_estimate_dotted_with_the_tangent(name, dist):
    """Score-function estimators included: forward mode gives <estimate, tangent> on the
    same draw as grad (they returned a tangent of 0 or none before)."""
    logits, t = _logits_and_tangent()

    def objective(b: torch.Tensor) -> torch.Tensor:
        return (b - 0.3).pow(2).sum(-1)

    def estimate(v: torch.Tensor) -> torch.Tensor:
        g = torch.Generator().manual_seed(2)
        return hg.expectation(objective, v, dist=dist, estimator=name, generator=g).sum()

    _, tangent = torch.func.jvp(estimate, (logits,), (t,))
    gradient = torch.func.grad(estimate)(logits)
    torch.testing.assert_close(tangent, (gradient * t).sum(), rtol=1e-12, atol=1e-12)
    with fwAD.dual_level():
        dual = fwAD.unpack_dual(estimate(fwAD.make_dual(logits, t))).tangent
    assert dual is not None
    torch.testing.assert_close(dual, tangent, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", sorted(EAGER_ONLY))
def test_rebar_and_relax_refuse_forward_mode_with_a_reason(name):
    logits, t = _logits_and_tangent()
    estimator = hg.estimators.get(name)
    with fwAD.dual_level(), pytest.raises(RuntimeError, match="no forward mode"):
        hg.expectation(lambda b: b.sum(-1), fwAD.make_dual(logits, t), estimator=estimator)
    with pytest.raises(RuntimeError, match=r"torch\.func"):
        torch.func.jvp(
            lambda v: hg.expectation(lambda b: b.sum(-1), v, estimator=estimator).sum(),
            (logits,),
            (t,),
        )


@pytest.mark.parametrize("unit", ["stochastic_times_smooth", "noisy_rectifier"])
def test_bengio_units_forward_mode(unit):
    fn = getattr(hg, unit)
    logits, t = _logits_and_tangent()

    def draw(v: torch.Tensor) -> torch.Tensor:
        return fn(v, generator=torch.Generator().manual_seed(3))

    _, tangent = torch.func.jvp(draw, (logits,), (t,))
    _, pullback = torch.func.vjp(draw, logits)
    torch.testing.assert_close(tangent, pullback(t)[0])


# --------------------------------------------------------------------------------------
# Quantization with learned parameters: LSQ in forward mode (the scale's and zero point's
# tangents included), and nn.Quantize. It raised torch's "You must implement the jvp".
# --------------------------------------------------------------------------------------


def _lsq_reference_jvp(x, s, z, x_dot, s_dot, z_dot, in_range, identity, grad_scale, bounds):
    """float64 JVP from the LSQ formulas, written independently of hardgrad."""
    qmin, qmax = bounds
    v = x / s
    level = torch.round(v) + z
    decide = v + z if in_range == "unrounded" else level
    inside = (decide >= qmin) & (decide <= qmax)
    dy_ds = torch.where(inside, torch.round(v) - v, torch.where(decide < qmin, qmin - z, qmax - z))
    dy_dz = torch.where(inside, 0.0, -s)
    dy_dx = torch.ones_like(x) if identity else inside.double()
    return dy_dx * x_dot + grad_scale * (dy_ds * s_dot + dy_dz * z_dot)


@pytest.mark.parametrize("in_range", ["rounded", "unrounded"])
@pytest.mark.parametrize("surrogate", ["masked", "identity"])
def test_quantize_jvp_with_learned_scale_and_zero_point(in_range, surrogate, dtype):
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(4, 12, generator=g, dtype=torch.float64) * 0.6).to(dtype)
    s = torch.tensor([[0.1], [0.2], [0.05], [0.3]], dtype=torch.float64)
    z = torch.tensor(1.0, dtype=torch.float64)
    dots = [torch.randn(t.shape, generator=g, dtype=torch.float64) for t in (x, s, z)]
    x_dot = dots[0].to(dtype)

    def f(x_, s_, z_):
        return hg.quantize(
            x_,
            s_,
            z_,
            quant_min=-4,
            quant_max=3,
            grad_scale=0.7,
            in_range=in_range,
            surrogate=surrogate,
        )

    _, tangent = torch.func.jvp(f, (x, s, z), (x_dot, dots[1], dots[2]))
    expected = _lsq_reference_jvp(
        x.double(),
        s,
        z,
        x_dot.double(),
        dots[1],
        dots[2],
        in_range,
        surrogate == "identity",
        0.7,
        (-4, 3),
    )
    torch.testing.assert_close(tangent, expected.to(dtype), **_tolerance(dtype))
    for argnum in range(3):  # and the forward Jacobian is the transpose of the reverse one
        forward = torch.func.jacfwd(f, argnums=argnum)(x, s, z)
        reverse = torch.func.jacrev(f, argnums=argnum)(x, s, z)
        # (jacfwd has the output's dtype, jacrev the input's)
        torch.testing.assert_close(forward, reverse, check_dtype=False, **_tolerance(dtype))


def _tolerance(dtype: torch.dtype) -> dict[str, float]:
    return {"rtol": 1e-2, "atol": 1e-2} if dtype in (torch.float16, torch.bfloat16) else {}


def test_quantize_module_forward_mode_matches_reverse_mode():
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(2))
    q = hg.nn.Quantize(bits=4, per_channel_dim=0, init_scale=torch.full((5,), 0.2))
    with torch.no_grad():
        q.scale[1] = -0.3  # a stored negative scale: the step size's gradient is sign(s)
    params = {"scale": q.scale.detach()}

    def call(p):
        return torch.func.functional_call(q, p, (x,))

    forward = torch.func.jacfwd(call)(params)["scale"]
    reverse = torch.func.jacrev(call)(params)["scale"]
    assert forward.abs().sum() > 0
    torch.testing.assert_close(forward, reverse)
    with fwAD.dual_level():
        out = q(fwAD.make_dual(x, torch.ones_like(x)))
        assert fwAD.unpack_dual(out).tangent is not None


def test_quantize_module_built_inside_a_transform():
    """init_scale is the parameter's initial value, not a .data write (which functorch
    forbids inside a transform)."""
    x = torch.randn(6, generator=torch.Generator().manual_seed(3))
    _, tangent = torch.func.jvp(
        lambda v: hg.nn.Quantize(bits=4, init_scale=0.2)(v), (x,), (torch.ones_like(x),)
    )
    in_range = (torch.round(x / 0.2) >= -8) & (torch.round(x / 0.2) <= 7)
    assert torch.equal(tangent, in_range.float())
