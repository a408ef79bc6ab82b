"""hardgrad.estimators: the registry, each pathwise estimator's settings and noise protocol,
every backward against an independent closed form computed with the same noise, and the
statistical properties the literature states (ST's mean on the Bernoulli toy, Gumbel-Rao's
mean and variance against ST-Gumbel, ReinMax's bias on quadratics).

Statistical tests are seeded (so deterministic) and each states the false-failure rate of
its threshold for a fresh seed. Two-sided normal tails used below:
``P(|Z| > 4.5) = 6.8e-6``, ``P(|Z| > 5) = 5.7e-7``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.func import vjp

import hardgrad as hg
from hardgrad.estimators import (
    ESTIMATORS,
    GST,
    ST,
    Estimator,
    GumbelRao,
    GumbelSoftmax,
    ReinMax,
    STGumbel,
    STIdentity,
)

INF, NAN = math.inf, math.nan
EULER_GAMMA = 0.5772156649015329

#: The pathwise names API.md section 2 asks for, in registration order.
API_NAMES = ("st", "st_identity", "gumbel_softmax", "st_gumbel", "gumbel_rao", "reinmax", "gst")
#: The score-function family and exact enumeration (API.md section 3); tests/stochastic/test_expectation.py.
SCORE_NAMES = ("reinforce", "rloo", "arm", "disarm", "exact", "rebar", "relax")
PATHWISE = [name for name, cls in ESTIMATORS.items() if cls.pathwise]

DEFAULT_REPRS = {
    "st": "ST(tau=1.0)",
    "st_identity": "STIdentity()",
    "gumbel_softmax": "GumbelSoftmax(tau=1.0)",
    "st_gumbel": "STGumbel(tau=1.0)",
    "gumbel_rao": "GumbelRao(tau=1.0, k=10)",
    "reinmax": "ReinMax(tau=1.0)",
    "gst": "GST(tau=1.0, gap=1.0)",
}

#: Estimators with non-default settings, for the closed-form checks.
CASES = [
    pytest.param(instance, id=repr(instance))
    for instance in (
        ST(),
        ST(tau=0.3),
        ST(tau=2.5),
        STIdentity(),
        GumbelSoftmax(),
        GumbelSoftmax(tau=0.3),
        GumbelSoftmax(tau=2.5),
        STGumbel(),
        STGumbel(tau=0.3),
        STGumbel(tau=2.5),
        GumbelRao(),
        GumbelRao(tau=0.3, k=1),
        GumbelRao(tau=2.5, k=7),
        ReinMax(),
        ReinMax(tau=0.3),
        ReinMax(tau=2.5),
        GST(),
        GST(tau=0.3, gap=0.5),
        GST(tau=2.5, gap=3.0),
    )
]

SHAPES_DIMS = [((6, 5), -1), ((5, 6), 0), ((2, 4, 3), 1), ((2, 4, 3), -2)]


# --------------------------------------------------------------------------------------
# Independent closed forms (float64), written from the math in the issue and the papers.
# --------------------------------------------------------------------------------------


def jtg(p: torch.Tensor, g: torch.Tensor, dim: int) -> torch.Tensor:
    """J(p)^T g = p * (g - <g, p>), the softmax Jacobian product at probabilities p."""
    return p * (g - (g * p).sum(dim, keepdim=True))


def dsigmoid(x: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(x)
    return s * (1 - s)


def conditional_gumbels(
    logits: torch.Tensor, sample: torch.Tensor, exponentials: torch.Tensor, dim: int
) -> torch.Tensor:
    """Gumbels z = l + g conditioned on argmax z = D, top-down (Maddison et al. 2014):
    z_D = logsumexp(l) - log E_D, z_i = -log(E_D exp(-logsumexp(l)) + E_i exp(-l_i)).

    Written directly (not in log space) in float64; ``exponentials`` has shape
    ``(k, *logits.shape)`` and ``dim`` is non-negative. Returns ``(k, *logits.shape)``.
    """
    ell = logits.double().movedim(dim, -1)
    chosen = sample.movedim(dim, -1).bool()
    e = exponentials.double().movedim(dim + 1, -1)
    lse = torch.logsumexp(ell, -1, keepdim=True)
    e_top = (e * chosen).sum(-1, keepdim=True)
    top = lse - torch.log(e_top)
    rest = -torch.log(e_top * torch.exp(-lse) + e * torch.exp(-ell))
    return torch.where(chosen, top, rest).movedim(-1, dim + 1)


def gumbel_of(noise: Any) -> torch.Tensor:
    """The Gumbel part of an estimator's noise."""
    return noise[0] if isinstance(noise, tuple) else noise


def expected_forward(est: Estimator, logits: torch.Tensor, noise: Any, dim: int) -> torch.Tensor:
    """The sample (or relaxation) in float64 for discrete checks: onehot(argmax(l + g)) or
    softmax((l + g) / tau). The sum is taken in the noise's dtype, as the forward documents."""
    g = gumbel_of(noise)
    if not est.discrete:
        return torch.softmax((logits.double() + g.double()) / est.tau, dim)
    index = (logits.to(g.dtype) + g).argmax(dim)
    return F.one_hot(index, logits.shape[dim]).movedim(-1, dim).double()


def expected_backward(
    est: Estimator,
    logits: torch.Tensor,
    noise: Any,
    sample: torch.Tensor,
    gbar: torch.Tensor,
    dim: int,
) -> torch.Tensor:
    """The estimator's gradient with respect to the logits, in float64."""
    ell, g = logits.double(), gbar.double()
    name = type(est).name
    if name == "st":
        return jtg(torch.softmax(ell / est.tau, dim), g, dim) / est.tau
    if name == "st_identity":
        return g
    if name in ("st_gumbel", "gumbel_softmax"):
        return jtg(torch.softmax((ell + noise.double()) / est.tau, dim), g, dim) / est.tau
    if name == "gumbel_rao":
        _, exponentials = noise
        z = conditional_gumbels(ell, sample, exponentials, dim)
        p = torch.softmax(z / est.tau, dim + 1)
        return jtg(p, g.unsqueeze(0), dim + 1).mean(0) / est.tau
    if name == "reinmax":
        pi0 = torch.softmax(ell, dim)
        pi1 = (torch.softmax(ell / est.tau, dim) + sample.double()) / 2
        return 2 * jtg(pi1, g, dim) - 0.5 * jtg(pi0, g, dim)
    if name == "gst":
        # Fan et al. (2022): the sampled logit lifted to the max, the others at least `gap` below.
        top = ell.amax(dim, keepdim=True)
        z = torch.where(sample.bool(), top, torch.minimum(ell, top - est.gap))
        return jtg(torch.softmax(z / est.tau, dim), g, dim) / est.tau
    raise AssertionError(f"estimator {name!r} has no closed form in this file; add one")


def test_every_registered_estimator_has_a_closed_form():
    ell, g = torch.zeros(2, 3, dtype=torch.float64), torch.ones(2, 3, dtype=torch.float64)
    for name in PATHWISE:
        est = hg.estimators.get(name)
        noise = est.noise(ell, torch.Generator().manual_seed(0))
        sample = expected_forward(est, ell, noise, 1)
        assert expected_backward(est, ell, noise, sample, g, 1).shape == ell.shape


# --------------------------------------------------------------------------------------
# Registry, classes, reprs, settings.
# --------------------------------------------------------------------------------------


def test_registry_names():
    assert ESTIMATORS.names() == API_NAMES + SCORE_NAMES
    assert len(ESTIMATORS) == len(API_NAMES) + len(SCORE_NAMES)
    assert tuple(PATHWISE) == API_NAMES
    for name in SCORE_NAMES:  # usable through hg.expectation only
        assert not ESTIMATORS.get(name).pathwise


@pytest.mark.parametrize("name", SCORE_NAMES)
def test_score_function_estimators_are_refused_by_the_samplers(name):
    with pytest.raises(ValueError, match="pathwise `estimator`"):
        hg.categorical(torch.zeros(3), estimator=name)
    with pytest.raises(ValueError, match="pathwise `estimator`"):
        hg.bernoulli(torch.zeros(3), estimator=name)


@pytest.mark.parametrize("name", API_NAMES)
def test_registry_entry(name):
    cls = ESTIMATORS.get(name)
    assert issubclass(cls, Estimator)
    assert cls.name == name
    assert cls.__name__ in hg.estimators.__all__
    assert getattr(hg.estimators, cls.__name__) is cls
    default = hg.estimators.get(name)
    assert type(default) is cls
    assert default == cls()
    assert hg.estimators.get(name) is default  # one default instance per name
    assert hg.estimators.resolve(name) is default
    assert hg.estimators.resolve(default) is default
    assert repr(default) == DEFAULT_REPRS[name]
    # Pathwise, biased; only the relaxation is not discrete.
    assert cls.pathwise is True
    assert cls.unbiased is False
    assert cls.discrete is (name != "gumbel_softmax")


def test_reprs_carry_the_settings():
    assert repr(ST(tau=0.5)) == "ST(tau=0.5)"
    assert repr(GumbelSoftmax(tau=2.0)) == "GumbelSoftmax(tau=2.0)"
    assert repr(STGumbel(tau=0.25)) == "STGumbel(tau=0.25)"
    assert repr(GumbelRao(tau=0.5, k=3)) == "GumbelRao(tau=0.5, k=3)"
    assert repr(ReinMax(tau=1.5)) == "ReinMax(tau=1.5)"
    assert GumbelRao(tau=0.5, k=3) == GumbelRao(tau=0.5, k=3) != GumbelRao(tau=0.5, k=4)
    assert hash(ST(tau=0.5)) == hash(ST(tau=0.5))


def test_estimators_are_immutable():
    est = GumbelRao(tau=0.5, k=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        est.tau = 2.0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        est.k = 1  # type: ignore[misc]


TAU_CLASSES = [ST, GumbelSoftmax, STGumbel, GumbelRao, ReinMax]


@pytest.mark.parametrize("cls", TAU_CLASSES, ids=lambda c: c.name)
@pytest.mark.parametrize("tau", [0, 0.0, -1.0, -1e-9, INF, -INF, NAN])
def test_bad_tau_value(cls, tau):
    with pytest.raises(ValueError, match="`tau`"):
        cls(tau=tau)


@pytest.mark.parametrize("cls", TAU_CLASSES, ids=lambda c: c.name)
@pytest.mark.parametrize("tau", ["1.0", None, True, torch.tensor(1.0)], ids=repr)
def test_bad_tau_type(cls, tau):
    with pytest.raises(TypeError, match="`tau`"):
        cls(tau=tau)


@pytest.mark.parametrize("cls", TAU_CLASSES, ids=lambda c: c.name)
def test_small_and_integer_tau_accepted(cls):
    assert cls(tau=1e-3).tau == 1e-3
    assert cls(tau=2).tau == 2


@pytest.mark.parametrize("k", [0, -1, -10])
def test_bad_k_value(k):
    with pytest.raises(ValueError, match="`k` >= 1"):
        GumbelRao(k=k)


@pytest.mark.parametrize("k", [2.0, True, "3", None])
def test_bad_k_type(k):
    with pytest.raises(TypeError, match="`k`"):
        GumbelRao(k=k)


def test_resolve_errors():
    with pytest.raises(ValueError, match="'no_such'") as info:
        hg.estimators.resolve("no_such")
    for name in API_NAMES:  # the message lists the available names
        assert repr(name) in str(info.value)
    with pytest.raises(TypeError, match="`estimator`"):
        hg.estimators.resolve(ST)  # the class, not an instance
    with pytest.raises(TypeError, match="`estimator`"):
        hg.estimators.resolve(None)


def test_user_subclass_is_usable():
    """The public base class is enough to write an estimator: noise + categorical."""

    class Argmax(Estimator):
        def categorical(self, logits, noise, dim):
            return hg.one_hot_argmax(logits + noise, dim=dim)

    x = torch.tensor([[0.0, 10.0, -10.0]], requires_grad=True)
    y = hg.categorical(x, estimator=Argmax(), generator=torch.Generator().manual_seed(0))
    assert y.tolist() == [[0.0, 1.0, 0.0]]
    y.sum().backward()
    assert x.grad is not None


# --------------------------------------------------------------------------------------
# The noise protocol.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", API_NAMES)
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 0, 3)], ids=str)
def test_noise_shape_dtype_device(name, shape, dtype):
    est = hg.estimators.get(name)
    logits = torch.randn(shape).to(dtype)
    noise = est.noise(logits, torch.Generator().manual_seed(0))
    want = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    if name == "gumbel_rao":
        assert isinstance(noise, tuple) and len(noise) == 2
        gumbel, exponentials = noise
        assert exponentials.shape == (est.k, *shape)
        assert exponentials.dtype == want and exponentials.device == logits.device
        assert torch.isfinite(exponentials).all() and (exponentials > 0).all()
    else:
        gumbel = noise
    assert isinstance(gumbel, torch.Tensor)
    assert gumbel.shape == shape and gumbel.dtype == want and gumbel.device == logits.device
    assert torch.isfinite(gumbel).all()


@pytest.mark.parametrize("name", API_NAMES)
def test_noise_is_gumbel_noise_with_the_same_seed(name):
    logits = torch.randn(4, 5)
    noise = hg.estimators.get(name).noise(logits, torch.Generator().manual_seed(7))
    expected = hg.estimators.gumbel_noise(logits, torch.Generator().manual_seed(7))
    assert torch.equal(gumbel_of(noise), expected)


def test_gumbel_rao_noise_k():
    logits = torch.randn(3, 4, dtype=torch.float64)
    g1, e1 = GumbelRao(k=1).noise(logits, torch.Generator().manual_seed(3))
    g5, e5 = GumbelRao(k=5).noise(logits, torch.Generator().manual_seed(3))
    assert e1.shape == (1, 3, 4) and e5.shape == (5, 3, 4)
    assert torch.equal(g1, g5)  # the Gumbels come first
    assert torch.equal(e1[0], e5[0])


@pytest.mark.parametrize("ldtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
def test_noise_is_minus_log_minus_log_of_clamped_uniforms(ldtype):
    """Gumbels are -log(-log u) and Gumbel-Rao's exponentials -log u, for uniforms u drawn
    from the generator (Gumbels first) and kept in [tiny, 1 - eps] of the noise dtype."""
    ndtype = torch.float32 if ldtype in (torch.float16, torch.bfloat16) else ldtype
    info = torch.finfo(ndtype)
    logits = torch.zeros(3, 4, dtype=ldtype)
    gumbel, exponentials = GumbelRao(k=2).noise(logits, torch.Generator().manual_seed(5))
    g = torch.Generator().manual_seed(5)
    u1 = torch.rand(3, 4, generator=g, dtype=ndtype).clamp(info.tiny, 1 - info.eps)
    u2 = torch.rand(2, 3, 4, generator=g, dtype=ndtype).clamp(info.tiny, 1 - info.eps)
    torch.testing.assert_close(gumbel, -torch.log(-torch.log(u1)), rtol=0, atol=0)
    torch.testing.assert_close(exponentials, -torch.log(u2), rtol=0, atol=0)


@pytest.mark.parametrize("name", API_NAMES)
def test_noise_is_finite_at_uniform_extremes(name, dtype, monkeypatch):
    """Uniform draws of exactly 0 and 1 (forced here) are clamped: finite Gumbels, positive
    finite exponentials, and finite samples and gradients."""
    real_rand = torch.rand

    def extreme_rand(*args: Any, **kwargs: Any) -> torch.Tensor:
        u = real_rand(*args, **kwargs)
        flat = u.view(-1)
        flat[0::2] = 0.0
        flat[1::2] = 1.0
        return u

    monkeypatch.setattr(torch, "rand", extreme_rand)
    est = hg.estimators.get(name)
    logits = torch.randn(4, 5, generator=torch.Generator().manual_seed(0)).to(dtype)
    noise = est.noise(logits, None)
    for n in noise if isinstance(noise, tuple) else (noise,):
        assert torch.isfinite(n).all(), n
    if isinstance(noise, tuple):
        assert (noise[1] > 0).all()
    x = logits.clone().requires_grad_()
    y = est.categorical(x, noise, 1)
    (g,) = torch.autograd.grad(y, x, torch.ones_like(y))
    assert torch.isfinite(y).all() and torch.isfinite(g).all()


def ks_statistic(x: torch.Tensor, cdf: Any) -> float:
    """sqrt(n) * sup |F_n - F| for a sample ``x`` (float64) against ``cdf``."""
    x, _ = x.double().sort()
    n = x.numel()
    f = cdf(x)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return math.sqrt(n) * float(torch.maximum(i / n - f, f - (i - 1) / n).max())


@pytest.mark.statistical
@pytest.mark.parametrize("ldtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
def test_noise_distributions_ks(ldtype):
    """Kolmogorov-Smirnov with n = 10^6: the Gumbels have CDF exp(-exp(-x)) and Gumbel-Rao's
    exponentials CDF 1 - exp(-x). Threshold sqrt(n) D < 2.7: asymptotic false-failure rate
    2 exp(-2 * 2.7^2) = 9.4e-7 per statistic, 2 statistics per dtype, 3 dtypes: 6e-6.
    (Gumbels scaled by 1.02 give sqrt(n) D = 6.)"""
    logits = torch.zeros(10**6, dtype=ldtype)
    gumbel, exponentials = GumbelRao(k=1).noise(logits, torch.Generator().manual_seed(11))
    assert ks_statistic(gumbel, lambda x: torch.exp(-torch.exp(-x))) < 2.7
    assert ks_statistic(exponentials[0], lambda x: 1 - torch.exp(-x)) < 2.7


@pytest.mark.parametrize("name", API_NAMES)
def test_categorical_map_is_deterministic_and_draws_nothing(name, dtype):
    """``categorical(logits, noise, dim)`` is a deterministic map: the noise is drawn outside."""
    est = hg.estimators.get(name)
    logits = torch.randn(4, 5).to(dtype)
    noise = est.noise(logits, torch.Generator().manual_seed(1))
    gbar = torch.randn(4, 5).to(dtype)
    state = torch.get_rng_state()
    results = []
    for _ in range(2):
        x = logits.clone().requires_grad_()
        y = est.categorical(x, noise, 1)
        (grad,) = torch.autograd.grad(y, x, gbar)
        results.append((y.detach(), grad))
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])


# --------------------------------------------------------------------------------------
# Forward and backward against the closed forms, with the same noise.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "dim"), SHAPES_DIMS, ids=str)
@pytest.mark.parametrize("est", CASES)
def test_forward_and_backward_closed_form(est, shape, dim, dtype, tol, assert_close_to):
    gen = torch.Generator().manual_seed(5)
    logits = (torch.randn(shape, generator=gen, dtype=torch.float64) * 2).to(dtype)
    gbar = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    noise = est.noise(logits, gen)
    x = logits.clone().requires_grad_()
    y = est.categorical(x, noise, dim)  # a negative dim is passed on as given
    d = dim % len(shape)
    assert y.shape == logits.shape and y.dtype == dtype
    forward = expected_forward(est, logits, noise, d)
    if est.discrete:
        assert torch.equal(y.detach().double(), forward)
    else:
        assert_close_to(y.detach(), forward, tol)
        assert ((y >= 0) & (y <= 1)).all()
    (grad,) = torch.autograd.grad(y, x, gbar)
    assert grad.dtype == dtype and grad.shape == logits.shape
    expected = expected_backward(est, logits, noise, forward, gbar, d)
    assert_close_to(grad, expected, tol)
    if type(est).name != "st_identity" and dtype == torch.float64:
        # Every softmax-based backward sums to zero along the category axis.
        torch.testing.assert_close(grad.sum(d), torch.zeros_like(grad.sum(d)), rtol=0, atol=1e-12)


@pytest.mark.parametrize("tau", [0.5, 1.0, 2.0])
@pytest.mark.parametrize(("shape", "dim"), SHAPES_DIMS[:3], ids=str)
@pytest.mark.parametrize("fdtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("hard", [True, False], ids=["st_gumbel", "gumbel_softmax"])
def test_matches_torch_gumbel_softmax_with_the_same_noise(hard, fdtype, shape, dim, tau):
    """ST-Gumbel is F.gumbel_softmax(hard=True) and the Gumbel-softmax is
    F.gumbel_softmax(hard=False), given the Gumbels F draws (regenerated from the seed)."""
    gen = torch.Generator().manual_seed(2)
    logits = (torch.randn(shape, generator=gen, dtype=torch.float64) * 2).to(fdtype)
    gbar = torch.randn(shape, generator=gen, dtype=torch.float64).to(fdtype)
    x_ref = logits.clone().requires_grad_()
    torch.manual_seed(123)
    ref = F.gumbel_softmax(x_ref, tau=tau, hard=hard, dim=dim)
    torch.manual_seed(123)  # F's own noise: -log(Exp(1))
    g = -torch.empty_like(logits, memory_format=torch.legacy_contiguous_format).exponential_().log()
    est = STGumbel(tau=tau) if hard else GumbelSoftmax(tau=tau)
    x = logits.clone().requires_grad_()
    y = est.categorical(x, g, dim)
    # F's hard forward is y_hard - y_soft.detach() + y_soft: one-hot only up to rounding.
    torch.testing.assert_close(y, ref)
    if hard:
        one_hot = F.one_hot(ref.argmax(dim), shape[dim]).movedim(-1, dim % len(shape))
        assert torch.equal(y, one_hot.to(fdtype))  # ours is exactly one-hot
    (got,) = torch.autograd.grad(y, x, gbar)
    (want,) = torch.autograd.grad(ref, x_ref, gbar)
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("tau", [0.3, 1.0, 2.5])
@pytest.mark.parametrize(("shape", "dim"), SHAPES_DIMS[:3], ids=str)
def test_gumbel_softmax_gradcheck(tau, shape, dim):
    """The relaxation's gradient is a true gradient: gradcheck it in float64."""
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(shape, generator=gen, dtype=torch.float64)
    est = GumbelSoftmax(tau=tau)
    noise = est.noise(logits, gen)
    assert torch.autograd.gradcheck(
        lambda t: est.categorical(t, noise, dim), (logits.requires_grad_(),), fast_mode=True
    )
    # And equals the relaxed form as a function of the logits (vjp of the formula).
    _, pullback = vjp(lambda t: torch.softmax((t + noise) / tau, dim), logits.detach())
    gbar = torch.randn(shape, generator=gen, dtype=torch.float64)
    x = logits.detach().clone().requires_grad_()
    (got,) = torch.autograd.grad(est.categorical(x, noise, dim), x, gbar)
    torch.testing.assert_close(got, pullback(gbar)[0], rtol=1e-12, atol=1e-14)


def test_reinmax_matches_the_published_reference_code():
    """The backward of the authors' ReinMaxCore (github.com/microsoft/ReinMax), rewritten:
    pi1 = (softmax(l/tau) + D)/2, g1 = 2 J(pi1)^T g, g0 = J(softmax(l))^T (-g/2), and the
    result centred (which changes nothing: both terms sum to zero)."""
    gen = torch.Generator().manual_seed(8)
    logits = torch.randn(7, 5, generator=gen, dtype=torch.float64) * 2
    gbar = torch.randn(7, 5, generator=gen, dtype=torch.float64)
    for tau in (0.5, 1.0, 2.0):
        est = ReinMax(tau=tau)
        noise = est.noise(logits, gen)
        x = logits.clone().requires_grad_()
        y = est.categorical(x, noise, -1)
        (got,) = torch.autograd.grad(y, x, gbar)
        y_soft = logits.softmax(-1)
        shifted = 0.5 * ((logits / tau).softmax(-1) + y)
        g1 = (2 * gbar) * shifted
        g1 = g1 - shifted * g1.sum(-1, keepdim=True)
        g0 = (-0.5 * gbar) * y_soft
        g0 = g0 - y_soft * g0.sum(-1, keepdim=True)
        ref = g0 + g1
        ref = ref - ref.mean(-1, keepdim=True)
        torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-14)


# --------------------------------------------------------------------------------------
# Bernoulli units: closed forms of the two-class definition.
# --------------------------------------------------------------------------------------


def _bernoulli_case(est: Estimator, dtype: torch.dtype) -> tuple[Any, ...]:
    gen = torch.Generator().manual_seed(9)
    logits = (torch.randn(4, 6, generator=gen, dtype=torch.float64) * 2).to(dtype)
    gbar = torch.randn(4, 6, generator=gen, dtype=torch.float64).to(dtype)
    x = logits.clone().requires_grad_()
    b = hg.bernoulli(x, estimator=est, generator=torch.Generator().manual_seed(10))
    (grad,) = torch.autograd.grad(b, x, gbar)
    noise = est.bernoulli_noise(logits, torch.Generator().manual_seed(10))
    g = gumbel_of(noise).double()
    logistic = g[..., 1] - g[..., 0]  # a standard logistic variable
    return logits.double(), gbar.double(), b, grad, logistic


@pytest.mark.parametrize("tau", [0.3, 1.0, 2.5])
def test_bernoulli_st_is_sigmoid_adjusted(tau, dtype, tol, assert_close_to):
    """ST on [0, l]: the backward is sigma'(l / tau) / tau (Bengio et al. 2013)."""
    ell, gbar, b, grad, logistic = _bernoulli_case(ST(tau=tau), dtype)
    assert torch.equal(b.detach().double(), (ell + logistic > 0).double())
    assert_close_to(grad, dsigmoid(ell / tau) / tau * gbar, tol)


@pytest.mark.parametrize("tau", [0.3, 1.0, 2.5])
def test_bernoulli_gumbel_softmax_is_binary_concrete(tau, dtype, tol, assert_close_to):
    """sigma((l + L) / tau) with logistic L = g1 - g0, and its derivative."""
    ell, gbar, b, grad, logistic = _bernoulli_case(GumbelSoftmax(tau=tau), dtype)
    u = (ell + logistic) / tau
    assert_close_to(b.detach(), torch.sigmoid(u), tol)
    assert_close_to(grad, dsigmoid(u) / tau * gbar, tol)


@pytest.mark.parametrize("tau", [0.3, 1.0, 2.5])
def test_bernoulli_st_gumbel(tau, dtype, tol, assert_close_to):
    ell, gbar, b, grad, logistic = _bernoulli_case(STGumbel(tau=tau), dtype)
    u = (ell + logistic) / tau
    assert torch.equal(b.detach().double(), (ell + logistic > 0).double())
    assert_close_to(grad, dsigmoid(u) / tau * gbar, tol)


@pytest.mark.parametrize(
    "estimator", [GumbelSoftmax, STGumbel], ids=["gumbel_softmax", "st_gumbel"]
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("tau", [0.5, 1.0, 2.0])
def test_bernoulli_relaxed_gradients_keep_their_tails(estimator, dtype, tau):
    """sigma'(d / tau) / tau at perturbed log-odds d = l + L far out (|d / tau| from 15 to
    40), where sigma(d / tau) rounds to 1 in float32 and s (1 - s) of it would be 0: the
    gradient keeps its relative accuracy (float32: the rounding of d, |d| 6e-8 at most,
    moves sigma' by that much over tau)."""
    est = estimator(tau=tau)
    gen = torch.Generator().manual_seed(21)
    noise = est.bernoulli_noise(torch.empty(2, 64, dtype=dtype), gen)
    logistic = noise[..., 1].double() - noise[..., 0].double()
    target = torch.linspace(15, 40, 64, dtype=torch.float64) * tau * torch.tensor([[1.0], [-1.0]])
    logits = (target - logistic).to(dtype)
    gbar = torch.randn(logits.shape, generator=gen, dtype=torch.float64).to(dtype)
    x = logits.clone().requires_grad_()
    (grad,) = torch.autograd.grad(est.bernoulli(x, noise), x, gbar)
    u = (logits.double() + logistic) / tau
    slope = torch.exp(-u.abs()) / (1 + torch.exp(-u.abs())) ** 2  # sigma'(u), no cancellation
    rtol = 1e-12 if dtype == torch.float64 else 4e-5
    torch.testing.assert_close(grad.double(), slope / tau * gbar.double(), rtol=rtol, atol=0)


def test_bernoulli_st_identity(dtype):
    ell, gbar, b, grad, logistic = _bernoulli_case(STIdentity(), dtype)
    assert torch.equal(b.detach().double(), (ell + logistic > 0).double())
    assert torch.equal(grad.double(), gbar)


@pytest.mark.parametrize("tau", [0.3, 1.0, 2.5])
def test_bernoulli_reinmax(tau, dtype, tol, assert_close_to):
    """Two classes: with p = sigma(l), q = sigma(l / tau), r = (q + b) / 2,
    the backward is (2 r (1 - r) - p (1 - p) / 2) * g."""
    ell, gbar, b, grad, _ = _bernoulli_case(ReinMax(tau=tau), dtype)
    p, q = torch.sigmoid(ell), torch.sigmoid(ell / tau)
    r = (q + b.detach().double()) / 2
    assert_close_to(grad, (2 * r * (1 - r) - 0.5 * p * (1 - p)) * gbar, tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("tau", [0.5, 1.0, 2.0])
def test_bernoulli_reinmax_keeps_its_tails(dtype, tau):
    """Log-odds from 15 to 40 (b = 1 but with probability below 3e-7) and their negatives
    (b = 0): 2 r (1 - r) with r = (sigma(l / tau) + 1) / 2 has 1 - r = sigma(-l / tau) / 2,
    which a direct 1 - r rounds to 0 in float32 (and loses in float64 too); the backward
    keeps its relative accuracy. Reference: float64 from exponentials, no differences of
    nearly equal numbers."""
    est = ReinMax(tau=tau)
    gen = torch.Generator().manual_seed(22)
    ell = torch.linspace(15, 40, 64, dtype=torch.float64) * torch.tensor([[1.0], [-1.0]])
    noise = est.bernoulli_noise(ell.to(dtype), gen)
    x = ell.to(dtype).requires_grad_()
    b = est.bernoulli(x, noise)
    assert torch.equal(b.detach().double(), (ell > 0).double())
    gbar = torch.randn(ell.shape, generator=gen, dtype=torch.float64).to(dtype)
    (grad,) = torch.autograd.grad(b, x, gbar)
    other = 1 / (1 + torch.exp(ell.abs() / tau))  # sigma(-|l| / tau): the value not drawn
    two_r_one_minus_r = other * (2 - other) / 2
    slope = torch.exp(-ell.abs()) / (1 + torch.exp(-ell.abs())) ** 2
    expected = (two_r_one_minus_r - slope / 2) * gbar.double()
    rtol = 1e-12 if dtype == torch.float64 else 2e-5
    torch.testing.assert_close(grad.double(), expected, rtol=rtol, atol=0)


# --------------------------------------------------------------------------------------
# Statistical properties.
# --------------------------------------------------------------------------------------


@pytest.mark.statistical
@pytest.mark.parametrize(
    ("phi", "t", "tau"),
    [
        (0.0, 0.45, 1.0),
        (1.0, 0.45, 1.0),
        (-2.0, 0.3, 1.0),
        (math.log(0.3 / 0.7), 0.3, 1.0),  # p = t: the mean is 0, training stalls here
        (1.0, 0.45, 0.5),
    ],
)
def test_st_bernoulli_toy_mean(phi, t, tau):
    """On L = E[(b - t)^2], b ~ Bern(sigmoid(phi)), ST's per-sample gradient is
    2 (b - t) sigma'(phi / tau) / tau, so its mean is 2 (p - t) sigma'(phi/tau)/tau
    (= 2 (p - t) p (1 - p) at tau = 1) instead of the exact p (1 - p) (1 - 2t).

    z-test with the exact variance, |z| < 4.5: false-failure rate 6.8e-6 per case, 5 cases:
    3.4e-5."""
    n = 40_000
    x = torch.full((n,), phi, dtype=torch.float64, requires_grad=True)
    b = hg.bernoulli(x, estimator=ST(tau=tau), generator=torch.Generator().manual_seed(21))
    ((b - t) ** 2).sum().backward()
    assert x.grad is not None
    p = 1 / (1 + math.exp(-phi))
    s = float(dsigmoid(torch.tensor(phi / tau, dtype=torch.float64))) / tau
    # Each per-sample gradient is one of two values.
    on, off = (torch.tensor(v, dtype=torch.float64) for v in (2 * (1 - t) * s, -2 * t * s))
    expected = torch.where(b.detach() == 1, on, off)
    torch.testing.assert_close(x.grad, expected, rtol=1e-12, atol=1e-15)
    mean, var = 2 * (p - t) * s, 4 * s * s * p * (1 - p)
    z = (float(x.grad.mean()) - mean) / math.sqrt(var / n)
    assert abs(z) < 4.5, z
    exact = p * (1 - p) * (1 - 2 * t)
    if abs(mean - exact) > 0.02:  # biased, and the bias is seen: far more than 4.5 se
        assert abs(float(x.grad.mean()) - exact) / math.sqrt(var / n) > 20


def quadratic(c: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """logits, A (symmetric) and b of f(D) = D^T A D + b^T D on c classes (float64)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(c, generator=g, dtype=torch.float64)
    a = torch.randn(c, c, generator=g, dtype=torch.float64)
    return logits, a + a.T, torch.randn(c, generator=g, dtype=torch.float64)


def f_quadratic(d: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return ((d @ a) * d).sum(-1) + d @ b


def exact_gradient(logits: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """d/dl sum_i softmax(l)_i f(e_i), by enumeration: sum_i pi_i f_i (e_i - pi)."""
    pi = torch.softmax(logits, -1)
    eye = torch.eye(logits.numel(), dtype=logits.dtype)
    return (pi[:, None] * values[:, None] * (eye - pi)).sum(0)


def forced_noise(logits: torch.Tensor) -> torch.Tensor:
    """Gumbel noise that makes class i the sample in row i (for enumerating samples)."""
    c = logits.shape[-1]
    return torch.eye(c, dtype=logits.dtype) * 1e3


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_reinmax_is_unbiased_on_quadratics_at_tau_1(seed):
    """ReinMax's backward depends on the sample only, so its mean is a finite sum over the
    samples: E = sum_i pi_i ReinMax(e_i). On f(D) = D^T A D + b^T D (C = 4 classes) it
    equals the exact gradient at tau = 1 (Heun's rule is exact for quadratics), and not
    at other temperatures.

    Measured bias norms |E[ReinMax] - exact| (seeds 0 / 1 / 2; |exact| = 0.49 / 1.43 / 0.79):
      tau = 0.25: 0.66 / 0.45 / 0.94     tau = 1.5: 0.12 / 0.070 / 0.072
      tau = 0.5:  0.33 / 0.19 / 0.31     tau = 2:   0.20 / 0.11 / 0.10
      tau = 1:    4.7e-16 / 2.8e-16 / 4.5e-16 (rounding)      tau = 4: 0.38 / 0.16 / 0.14
    and ST's at tau = 1: 0.44 / 0.52 / 0.46. So ReinMax is exactly unbiased on quadratics at
    tau = 1 only; its bias grows on both sides. Asserted: < 1e-12 * |exact| at tau = 1,
    > 0.05 * |exact| at tau = 0.5 and 2 (smallest measured ratio 0.074), ST > 0.2 * |exact|."""
    c = 4
    logits, a, b = quadratic(c, seed)
    eye = torch.eye(c, dtype=torch.float64)
    values = f_quadratic(eye, a, b)
    exact = exact_gradient(logits, values)
    pi = torch.softmax(logits, -1)
    scale = float(exact.norm())
    assert scale > 0.1
    for tau in (0.5, 1.0, 2.0):
        est = ReinMax(tau=tau)
        rows = logits.expand(c, c).clone().requires_grad_()
        samples = est.categorical(rows, forced_noise(rows), 1)
        assert torch.equal(samples.detach(), eye)
        f_quadratic(samples, a, b).sum().backward()  # incoming gradient 2 A D + b per row
        assert rows.grad is not None
        mean = (pi[:, None] * rows.grad).sum(0)
        bias = float((mean - exact).norm())
        if tau == 1.0:
            assert bias < 1e-12 * scale, bias
        else:
            assert bias > 0.05 * scale, bias
    # For contrast, ST (also a function of the sample only) is biased at tau = 1.
    rows = logits.expand(c, c).clone().requires_grad_()
    f_quadratic(ST().categorical(rows, forced_noise(rows), 1), a, b).sum().backward()
    assert rows.grad is not None
    assert float(((pi[:, None] * rows.grad).sum(0) - exact).norm()) > 0.2 * scale


def test_reinmax_bernoulli_toy_is_unbiased_at_tau_1():
    """(b - t)^2 is quadratic in the two-class sample: E[ReinMax] = p (1 - p) (1 - 2 t)."""
    for phi, t in ((0.7, 0.45), (-1.5, 0.2), (2.0, 0.499)):
        p = 1 / (1 + math.exp(-phi))
        x = torch.tensor([phi, phi], dtype=torch.float64, requires_grad=True)
        two = torch.stack((torch.zeros_like(x), x), -1)
        sample = ReinMax().categorical(two, forced_noise(two), 1)[..., 1]
        assert sample.tolist() == [0.0, 1.0]
        ((sample - t) ** 2).sum().backward()
        assert x.grad is not None
        mean = (1 - p) * x.grad[0] + p * x.grad[1]
        torch.testing.assert_close(mean.item(), p * (1 - p) * (1 - 2 * t), rtol=1e-12, atol=1e-15)


@pytest.mark.statistical
def test_reinmax_monte_carlo_mean_on_a_quadratic():
    """The sampled estimator (hg.categorical) has the enumerated mean: at tau = 1 the
    exact gradient. z-test per coordinate with the sample variance, |z| < 4.5, C = 4
    coordinates: false-failure rate 4 * 6.8e-6 = 2.7e-5."""
    c, n = 4, 20_000
    logits, a, b = quadratic(c, 0)
    exact = exact_gradient(logits, f_quadratic(torch.eye(c, dtype=torch.float64), a, b))
    x = logits.expand(n, c).clone().requires_grad_()
    d = hg.categorical(x, estimator="reinmax", generator=torch.Generator().manual_seed(3))
    f_quadratic(d, a, b).sum().backward()
    assert x.grad is not None
    z = (x.grad.mean(0) - exact) / (x.grad.std(0) / math.sqrt(n))
    assert (z.abs() < 4.5).all(), z


@pytest.mark.statistical
def test_conditional_gumbel_construction_has_gumbel_marginals():
    """Checks this file's reference: D ~ Cat(softmax(l)) followed by the top-down conditional
    draws gives z with the unconditional law, z_i ~ Gumbel(l_i) independent: mean
    l_i + gamma, variance pi^2/6, and max_i z_i ~ Gumbel(logsumexp l).
    KS on each of the C = 3 marginals and on the max, sqrt(n) D < 2.7 (asymptotic rate
    9.4e-7 each, 4 statistics: 3.8e-6)."""
    n = 50_000
    gen = torch.Generator().manual_seed(13)
    logits = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    d = torch.distributions.Categorical(logits=logits).sample((n,))  # global RNG, seeded
    sample = F.one_hot(d, 3).double()
    exponentials = -torch.rand(1, n, 3, generator=gen, dtype=torch.float64).log()
    z = conditional_gumbels(logits.expand(n, 3), sample, exponentials, 1)[0]
    assert torch.equal(z.argmax(-1), d)  # the conditioning holds exactly
    for i in range(3):
        shift = float(logits[i])
        assert ks_statistic(z[:, i], lambda x, m=shift: torch.exp(-torch.exp(-(x - m)))) < 2.7
    lse = float(torch.logsumexp(logits, 0))
    assert ks_statistic(z.amax(-1), lambda x: torch.exp(-torch.exp(-(x - lse)))) < 2.7


@pytest.mark.statistical
@pytest.mark.parametrize("tau", [0.5, 1.0, 2.0])
def test_gumbel_rao_has_st_gumbel_mean_and_lower_variance(tau):
    """Gumbel-Rao is E[ST-Gumbel | D] estimated with k conditional draws: same mean as
    ST-Gumbel, lower variance. Objective: f(D) = D^T A D + b^T D on C = 4 classes, exact
    gradient by enumeration (|exact| = 0.49; both estimators are biased for it).

    Paired z-test (the same Gumbels, hence the same D, for both estimators) of
    mean(GR_k - ST) = 0 per coordinate, |z| < 4.5, for k = 1 and 10: false-failure rate
    8 * 6.8e-6 = 5.4e-5 per tau, 1.6e-4 over the 3 temperatures.

    Measured with n = 20000 (seeded), total variance (trace of the covariance), ST-Gumbel
    -> GR k=1 / k=10 / k=50:
      tau = 0.5: 1.568 -> 1.568 / 0.771 / 0.695   (ratios 1.00 / 0.49 / 0.44)
      tau = 1.0: 0.566 -> 0.566 / 0.399 / 0.383   (ratios 1.00 / 0.71 / 0.68)
      tau = 2.0: 0.174 -> 0.174 / 0.153 / 0.151   (ratios 1.00 / 0.88 / 0.87)
    so the reduction is large at low temperature and small at high temperature, and most of
    it is reached by k = 10. Bias norms against the exact gradient, the same for both
    estimators: 0.137, 0.195, 0.288 (max |z| of the paired mean differences: 0.95).
    k = 1 has ST-Gumbel's law (one conditional draw given D is distributed as l + g given
    D), so its variance ratio is 1 (asserted within 10 %); k = 10 asserted below 0.95
    (below 0.8 for tau <= 1), and k = 50 below k = 10 for tau <= 1. Standard errors of these
    ratios are about 1-2 %."""
    c, n = 4, 20_000
    logits, a, b = quadratic(c, 0)
    exact = exact_gradient(logits, f_quadratic(torch.eye(c, dtype=torch.float64), a, b))
    x = logits.expand(n, c).clone().requires_grad_()
    gumbel, exponentials = GumbelRao(tau=tau, k=50).noise(x, torch.Generator().manual_seed(17))

    def grads(est: Estimator, noise: Any) -> torch.Tensor:
        x.grad = None
        f_quadratic(est.categorical(x, noise, -1), a, b).sum().backward()
        assert x.grad is not None
        return x.grad.clone()

    st = grads(STGumbel(tau=tau), gumbel)
    gr = {k: grads(GumbelRao(tau=tau, k=k), (gumbel, exponentials[:k])) for k in (1, 10, 50)}
    for k in (1, 10):
        diff = gr[k] - st
        z = diff.mean(0) / (diff.std(0) / math.sqrt(n))
        assert (z.abs() < 4.5).all(), (k, z)
    var_st = float(st.var(0).sum())
    ratio = {k: float(g.var(0).sum()) / var_st for k, g in gr.items()}
    assert 0.9 < ratio[1] < 1.1, ratio
    assert ratio[10] < (0.8 if tau <= 1 else 0.95), ratio
    if tau <= 1:
        assert ratio[50] < ratio[10], ratio
    # Same mean, lower variance: a lower mean squared error against the exact gradient.
    mse_st = float(((st - exact) ** 2).sum(-1).mean())
    mse_gr = float(((gr[10] - exact) ** 2).sum(-1).mean())
    assert mse_gr < mse_st
    # Both are biased (same mean as ST-Gumbel): the bias is many standard errors wide.
    for g in (st, gr[10]):
        bias = float((g.mean(0) - exact).norm())
        assert bias > 5 * math.sqrt(float(g.var(0).sum()) / n), bias


# --------------------------------------------------------------------------------------
# torch.compile (marked "compile"; float32).
# --------------------------------------------------------------------------------------


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def compile_rows() -> torch.Tensor:
    """Extreme rows (+-1e4, +-inf, a forced class, two forced, two excluded, huge equal
    logits) and rows scaled so that tau = 1e-3 leaves the relaxation unsaturated. (A row
    of -inf only is a ValueError in eager mode, tested elsewhere.)"""
    return torch.tensor(
        [
            [1e4, -1e4, 0.0],
            [INF, 0.0, -INF],
            [INF, INF, 0.0],
            [-INF, 3e38, -INF],
            [3e38, 3e38, 3e38],  # (drawn by the noise only once shifted: compiled = eager)
            [1e7, 1e7, -1e7],
            [-INF, 1.0, 2.0],
            [1e4, 1e4, -1e4],
            [1e-3, -2e-3, 0.5e-3],
            [-1e-3, 0.0, 2e-3],
        ]
    )


def tiny_tau(name: str) -> Estimator:
    """The estimator ``name`` with tau = 1e-3 (and k = 3) where it has those settings."""
    cls = ESTIMATORS.get(name)
    fields = {f.name for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else set()
    settings: dict[str, Any] = {"tau": 1e-3} if "tau" in fields else {}
    if "k" in fields:
        settings["k"] = 3
    return cls(**settings)


@pytest.mark.compile
def test_compile_fullgraph_matches_eager_and_stays_finite(fresh_dynamo, assert_same):
    """torch.compile(fullgraph=True) of hg.categorical with every registered estimator at
    tau = 1e-3 on extreme logits (and of hg.bernoulli with "st", "st_gumbel" and
    "gumbel_softmax"): no NaN, and, with inductor's fallback_random (so that the compiled
    graph draws eager's random numbers), the same samples and gradients as eager.

    One graph holds all the estimators: each compile costs seconds of fixed overhead on
    CPU (about 20 s cold for this graph, against about 30 s for one graph per estimator).
    A ``generator`` cannot be passed through a fullgraph compile in torch 2.13 (dynamo has
    no proxy for torch.Generator), so the global RNG is used here."""
    estimators = [tiny_tau(name) for name in PATHWISE]
    binary = [ST(tau=1e-3), STGumbel(tau=1e-3), GumbelSoftmax(tau=1e-3)]
    units = [*estimators, *binary]  # the last ones as Bernoulli units
    logits = compile_rows().expand(len(units), -1, -1).contiguous()  # one slice per unit
    w = torch.randn(logits.shape, generator=torch.Generator().manual_seed(3))

    def fn(x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        outputs = [hg.categorical(x[i], estimator=est) for i, est in enumerate(estimators)]
        outputs += [hg.bernoulli(x[len(estimators) + i], estimator=e) for i, e in enumerate(binary)]
        return outputs, sum((y * w[i]).sum() for i, y in enumerate(outputs))

    compiled = torch.compile(fn, fullgraph=True)
    xe, xc = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    torch.manual_seed(31)
    eager, le = fn(xe)
    le.backward()
    # (reorder_for_peak_memory off: torch 2.11's inductor moves independent draws ahead of
    # earlier ones to lower peak memory, so that each estimator read another's numbers.)
    with torch._inductor.config.patch(fallback_random=True, reorder_for_peak_memory=False):
        torch.manual_seed(31)
        got, lc = compiled(xc)
        lc.backward()
    assert xc.grad is not None and xe.grad is not None
    for i, (est, yc, ye) in enumerate(zip(units, got, eager, strict=True)):
        assert torch.isfinite(yc).all(), est
        assert_same(yc.detach(), ye.detach())
        if est.discrete and i < len(estimators):
            assert torch.equal(yc.detach().sum(-1), torch.ones(yc.shape[0])), est
            assert yc[1, 0] == 1 and yc[2, :2].sum() == 1, est  # +inf: a point mass
            assert yc[3, 1] == 1, est  # -inf excluded
        assert torch.isfinite(xc.grad[i]).all(), est
        scale = max(1.0, float(xe.grad[i].abs().max()))
        torch.testing.assert_close(
            xc.grad[i], xe.grad[i], rtol=1e-4, atol=1e-5 * scale, msg=lambda m, e=est: f"{e}: {m}"
        )


@pytest.mark.parametrize(
    "sampler", [hg.categorical, hg.bernoulli], ids=["categorical", "bernoulli"]
)
@pytest.mark.parametrize(
    ("name", "limit"), [("st_identity", 0), ("st", 4), ("st_gumbel", 4), ("gumbel_softmax", 4)]
)
def test_bytes_saved_for_backward_per_element(sampler, name, limit):
    """float32 logits: st_identity saves nothing, st the logits, st_gumbel only the perturbed
    logits (not logits and noise separately), the Gumbel-softmax its output (categorical)
    or the perturbed log-odds (Bernoulli), not the noise or NaN masks besides."""
    logits = torch.randn(64, 16, requires_grad=True)
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        sampler(logits, estimator=name, generator=torch.Generator().manual_seed(0))
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in saved}
    assert sum(storages.values()) / logits.numel() <= limit


def test_binary_gumbel_rao_backward_in_chunks_equals_one_pass(monkeypatch):
    """The Bernoulli Gumbel-Rao backward sums its k conditional draws in chunks of
    GUMBEL_RAO_CHUNK elements (to keep its temporaries small); any chunk size gives the
    one-pass gradient up to the order of the float64 sums."""
    from hardgrad.estimators import _gumbel_rao_draws

    logits = torch.randn(6, 7, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    upstream = torch.randn(6, 7, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    est = GumbelRao(tau=0.7, k=9)
    grads = []
    for chunk in (10**9, 42, 1):  # one pass; one row (42 elements) per chunk; the same
        monkeypatch.setattr(_gumbel_rao_draws, "GUMBEL_RAO_CHUNK", chunk)
        leaf = logits.clone().requires_grad_()
        y = hg.bernoulli(leaf, estimator=est, generator=torch.Generator().manual_seed(5))
        (grad,) = torch.autograd.grad(y, leaf, upstream)
        grads.append(grad)
    assert grads[0].abs().sum() > 0
    for grad in grads[1:]:
        torch.testing.assert_close(grad, grads[0], rtol=1e-14, atol=1e-15)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_categorical_gumbel_rao_backward_in_chunks_equals_one_pass(monkeypatch, dim):
    """The categorical Gumbel-Rao backward works on rows of classes and slices rows and
    draws into chunks of at most GUMBEL_RAO_CHUNK elements: every chunking (all at once;
    a few rows with every draw; one row, a few draws; one row, one draw) gives the one-pass
    gradient up to the order of the float64 sums, along any dim."""
    from hardgrad.estimators import _gumbel_rao_draws

    g = torch.Generator().manual_seed(3)
    logits = torch.randn(5, 6, 7, generator=g, dtype=torch.float64)
    upstream = torch.randn(5, 6, 7, generator=g, dtype=torch.float64)
    est = GumbelRao(tau=0.7, k=9)
    classes = logits.shape[dim]
    grads = []
    for chunk in (10**9, 3 * 9 * classes, 4 * classes, 1):
        monkeypatch.setattr(_gumbel_rao_draws, "GUMBEL_RAO_CHUNK", chunk)
        leaf = logits.clone().requires_grad_()
        y = hg.categorical(leaf, dim=dim, estimator=est, generator=torch.Generator().manual_seed(5))
        (grad,) = torch.autograd.grad(y, leaf, upstream)
        grads.append(grad)
    assert grads[0].abs().sum() > 0
    for grad in grads[1:]:
        torch.testing.assert_close(grad, grads[0], rtol=1e-13, atol=1e-14)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_uniform_noise_is_torch_rand_number_for_number(dtype) -> None:
    """The eager noise (rand_like into a contiguous tensor) is what torch.rand(shape,
    generator=...) draws, also for a transposed input, in the noise dtype (float32 for
    half types), clamped to [tiny, 1 - eps]."""
    from hardgrad.estimators._noise import noise_dtype, uniform

    for like in (torch.zeros(7, 5, dtype=dtype), torch.zeros(5, 7, dtype=dtype).T):
        got = uniform(like, torch.Generator().manual_seed(11))
        info = torch.finfo(noise_dtype(like))
        want = torch.rand(
            like.shape, generator=torch.Generator().manual_seed(11), dtype=noise_dtype(like)
        ).clamp(info.tiny, 1 - info.eps)
        assert got.is_contiguous() and torch.equal(got, want)
