"""Probabilities as well as logits (issue 13, part 3): ``probs=`` in ``hg.bernoulli``,
``hg.categorical``, ``hg.expectation``, the stochastic modules and the diagnostics.

Published stochastic-neuron code feeds probabilities, often from a hard sigmoid, so
exactly 0 or 1. Checked here, registry-driven where an estimator is involved:

* the API: exactly one of ``logits``/``probs``, clear errors, value checks under
  :func:`hardgrad.set_validation`, the logits path unchanged (positional);
* samples: as likely as the probability says, deterministic at 0 and 1, the same draw as
  the equivalent logits on the same generator;
* gradients: inside (0, 1) the logits estimator times the chain rule (against the logits
  path, an independent implementation, in float64); at exactly 0 and 1 finite and equal to
  the limit of the formula (analytic limits, and the logits path just inside the interval);
* the transforms: torch.compile, torch.func, forward mode, half precision.

Statistical tests are seeded (deterministic); each states its false-failure rate.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.autograd.forward_ad as fwAD

import hardgrad as hg
from hardgrad.estimators import ESTIMATORS

PATHWISE = [n for n, cls in ESTIMATORS.items() if cls.pathwise]
TEMPERED = [n for n in PATHWISE if n != "st_identity"]
SCORE = [n for n, cls in ESTIMATORS.items() if not cls.pathwise]
EAGER_ONLY = {"rebar", "relax"}
SAMPLERS = {"bernoulli": hg.bernoulli, "categorical": hg.categorical}


def _seed(k: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(k)


def _estimator(name: str, tau: float | None = None) -> hg.estimators.Estimator:
    estimator = hg.estimators.get(name)
    if tau is not None:
        estimator = type(estimator)(**{**estimator.__dict__, "tau": tau})
    return estimator


def _log_odds(p: torch.Tensor) -> torch.Tensor:
    return torch.log(p) - torch.log1p(-p)


def _interior_bernoulli(n: int = 64) -> torch.Tensor:
    return torch.rand(n, generator=_seed(11), dtype=torch.float64) * 0.96 + 0.02


def _interior_categorical() -> torch.Tensor:
    return torch.softmax(torch.randn(6, 4, generator=_seed(12), dtype=torch.float64), -1)


def _weights(shape: torch.Size, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(shape, generator=_seed(13), dtype=torch.float64).to(dtype)


def _probs_and_logits_gradients(name, dist, probs, *, seed=1, tau=None):
    """The sample and gradient from ``probs`` and from their logits, on the same noise."""
    estimator = _estimator(name, tau)
    sampler = SAMPLERS[dist]
    logits = (_log_odds(probs) if dist == "bernoulli" else torch.log(probs)).detach()
    p_leaf = probs.detach().clone().requires_grad_()
    l_leaf = logits.clone().requires_grad_()
    y_p = sampler(probs=p_leaf, estimator=estimator, generator=_seed(seed))
    y_l = sampler(l_leaf, estimator=estimator, generator=_seed(seed))
    w = _weights(y_p.shape, y_p.dtype)
    (y_p * w).sum().backward()
    (y_l * w).sum().backward()
    return y_p.detach(), p_leaf.grad, y_l.detach(), l_leaf.grad, w


# --------------------------------------------------------------------------------------
# The API
# --------------------------------------------------------------------------------------


def _calls():
    p = torch.full((3,), 0.5)
    q = torch.full((2, 3), 1 / 3)
    return (
        {
            "bernoulli": lambda **kw: hg.bernoulli(**kw),
            "categorical": lambda **kw: hg.categorical(**kw),
            "expectation": lambda **kw: hg.expectation(lambda b: b.sum(-1), **kw),
            "nn.Bernoulli": lambda **kw: hg.nn.Bernoulli()(**kw),
            "nn.Categorical": lambda **kw: hg.nn.Categorical()(**kw),
        },
        p,
        q,
    )


@pytest.mark.parametrize("call", list(_calls()[0]))
def test_exactly_one_of_logits_and_probs(call):
    calls, p, _ = _calls()
    fn = calls[call]
    with pytest.raises(ValueError, match=r"exactly one of `logits` and `probs`.*both"):
        fn(logits=p, probs=p)
    with pytest.raises(ValueError, match=r"exactly one of `logits` and `probs`.*neither"):
        fn()
    with pytest.raises(TypeError, match=r"`probs` to be a torch\.Tensor.*list"):
        fn(probs=[0.5, 0.5])
    with pytest.raises(TypeError, match=r"`probs` to be a floating-point tensor.*int64"):
        fn(probs=torch.tensor([0, 1]))


def test_logits_stay_positional_and_unchanged():
    """Existing code: hg.bernoulli(x), hg.categorical(x), hg.expectation(f, x) and
    unit(x) draw what logits=x draws."""
    x = torch.randn(5, 3, generator=_seed(3))
    for fn in (hg.bernoulli, hg.categorical):
        assert torch.equal(fn(x, generator=_seed(4)), fn(logits=x, generator=_seed(4)))
    f = lambda b: b.sum(-1)  # noqa: E731
    assert torch.equal(
        hg.expectation(f, x, generator=_seed(5)), hg.expectation(f, logits=x, generator=_seed(5))
    )


def test_modules_check_before_the_step_advances():
    unit = hg.nn.Bernoulli(tau=hg.nn.anneal(1.0, 0.5, 10))
    with pytest.raises(ValueError, match="exactly one"):
        unit(torch.zeros(2), probs=torch.zeros(2))
    assert unit.step == 0
    b = unit(probs=torch.tensor([0.0, 1.0]))
    assert torch.equal(b, torch.tensor([0.0, 1.0])) and unit.step == 1
    cat = hg.nn.Categorical(dim=0)
    assert torch.equal(cat(probs=torch.tensor([0.0, 1.0, 0.0])), torch.tensor([0.0, 1.0, 0.0]))


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (1.5, r"`probs` in \[0, 1\], but found probs=1.5 at index \(1,\)"),
        (-0.25, r"`probs` in \[0, 1\], but found probs=-0.25 at index \(1,\)"),
        (float("nan"), r"`probs` without NaN, but found NaN at index \(1,\)"),
    ],
)
def test_bernoulli_probs_out_of_range_are_rejected(value, message):
    probs = torch.tensor([0.5, value, 0.2])
    with pytest.raises(ValueError, match=message):
        hg.bernoulli(probs=probs)
    with pytest.raises(ValueError, match=message):
        hg.expectation(lambda b: b.sum(-1), probs=probs, estimator="disarm")
    with pytest.raises(ValueError, match=message):
        hg.expectation(lambda b: b.sum(-1), probs=probs, estimator="st")


def test_value_checks_follow_set_validation(validation_off):
    """Unchecked, nothing scans the values (no synchronisation): no error."""
    hg.bernoulli(probs=torch.tensor([1.5, -1.0]))
    hg.categorical(probs=torch.tensor([0.2, 0.2]))


@pytest.mark.parametrize(
    ("probs", "message"),
    [
        ([[0.5, 0.6, 0.1], [0.2, 0.3, 0.5]], r"sum to 1 along dim=1 \(within 1e-06\).*1.2.*\(0,\)"),
        ([[0.5, 0.5, 0.0], [0.2, -0.1, 0.9]], r"`probs` >= 0 along dim=1.*-0.1.*\(1, 1\)"),
        ([[0.5, 0.5, 0.0], [0.2, float("nan"), 0.8]], r"without NaN.*\(1, 1\)"),
    ],
)
def test_categorical_probs_must_be_a_distribution(probs, message):
    tensor = torch.tensor(probs, dtype=torch.float64)
    with pytest.raises(ValueError, match=message):
        hg.categorical(probs=tensor)
    with pytest.raises(ValueError, match=message):
        hg.expectation(lambda b: b.sum((-1, -2)), probs=tensor, dist="categorical")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_softmax_outputs_pass_the_simplex_check(dtype):
    """The tolerance (torch.distributions' 1e-6, 8 ulps for the half types) accepts what
    torch.softmax produces in each dtype, up to many categories."""
    for classes in (2, 10, 1000, 30000):
        logits = torch.randn(3, classes, generator=_seed(classes)) * 3
        hg.categorical(probs=torch.softmax(logits.to(dtype), -1), generator=_seed(0))
    assert hg.stochastic._checks._simplex_tolerance(torch.float32) == 1e-6


def test_empty_and_zero_dim_probs():
    assert hg.bernoulli(probs=torch.tensor(1.0)).item() == 1.0
    assert hg.bernoulli(probs=torch.empty(0, 3)).shape == (0, 3)
    with pytest.raises(ValueError, match="at least one category"):
        hg.categorical(probs=torch.empty(2, 0))


# --------------------------------------------------------------------------------------
# Samples
# --------------------------------------------------------------------------------------


DISCRETE = [n for n in PATHWISE if ESTIMATORS.get(n).discrete]


@pytest.mark.statistical
@pytest.mark.parametrize("name", DISCRETE)
def test_probs_of_a_tenth_give_a_sample_mean_of_a_tenth(name):
    """The issue's trap: probabilities passed where logits go gave a mean of 0.526. With
    probs=0.1, n = 2*10^5 draws: |mean - 0.1| < 5 sd (sd = 6.7e-4; false-failure rate
    5.7e-7). (The Gumbel-softmax relaxation is not a Bernoulli draw.)"""
    n = 200_000
    b = hg.bernoulli(probs=torch.full((n,), 0.1), estimator=name, generator=_seed(7))
    sd = math.sqrt(0.1 * 0.9 / n)
    assert abs(float(b.double().mean()) - 0.1) < 5 * sd


@pytest.mark.statistical
@pytest.mark.parametrize("name", SCORE)
def test_expectation_samples_probs_as_given(name):
    """f sees samples with P(b = 1) = p: the mean of f(b) = b over 2*10^5 variables at
    p = 0.1 and the estimator's default number of samples, within 5 sd (false-failure rate
    5.7e-7; REBAR and RELAX draw through their logistic relaxation); "exact" gives p."""
    n = 200_000
    probs = torch.full((n,), 0.1)
    value = hg.expectation(lambda b: b, probs=probs, estimator=name, generator=_seed(8))
    if name == "exact":
        torch.testing.assert_close(value, probs)
        return
    draws = n * hg.estimators.get(name).default_num_samples()
    sd = math.sqrt(0.1 * 0.9 / draws)
    assert abs(float(value.double().mean()) - 0.1) < 5 * sd


@pytest.mark.statistical
def test_categorical_frequencies_and_zero_probability_classes():
    """Cat(q) with q = (0.1, 0, 0.2, 0.7, 0): 10^5 draws per discrete estimator, each
    frequency within 5 sd of q_i (6 estimators x 3 classes of nonzero probability:
    false-failure rate < 1.1e-5), and the zero classes never drawn (nor given mass by the
    relaxation)."""
    q = torch.tensor([0.1, 0.0, 0.2, 0.7, 0.0])
    n = 100_000
    for name in PATHWISE:
        y = hg.categorical(probs=q.expand(n, 5), estimator=name, generator=_seed(9))
        if name == "gumbel_softmax":
            assert torch.equal(y[:, [1, 4]], torch.zeros(n, 2))
            continue
        freq = y.double().mean(0)
        sd = (q.double() * (1 - q.double()) / n).sqrt()
        assert ((freq - q.double()).abs() <= 5 * sd).all(), (name, freq)
        assert y[:, [1, 4]].sum() == 0


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", PATHWISE)
def test_end_points_give_fixed_samples(name, dtype):
    p = torch.tensor([0.0, 1.0], dtype=dtype).repeat(500)
    b = hg.bernoulli(probs=p, estimator=name, generator=_seed(1))
    assert b.dtype == dtype and torch.equal(b, p)  # the relaxation too: sigma(-inf) = 0
    q = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], dtype=dtype).repeat(200, 1)
    y = hg.categorical(probs=q, estimator=name, generator=_seed(2))
    assert y.dtype == dtype and torch.equal(y, q)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_same_draw_as_the_equivalent_logits(dtype):
    """hg.bernoulli(probs=sigmoid(l)) draws hg.bernoulli(l)'s sample on the same generator
    (the same noise, compared with log p - log(1 - p)): exact except where the noise falls
    within the round trip's rounding of the threshold, which no element of these 2^16 does
    (per element about 1e-7 in float32 and 1e-16 in float64). Likewise categorical with
    softmax, and the score-function samples of hg.expectation (u < p on the same uniforms)."""
    logits = torch.randn(1 << 16, generator=_seed(20), dtype=dtype) * 3
    rows = logits.reshape(-1, 8)
    for name in DISCRETE:
        assert torch.equal(
            hg.bernoulli(probs=torch.sigmoid(logits), estimator=name, generator=_seed(21)),
            hg.bernoulli(logits, estimator=name, generator=_seed(21)),
        ), name
        assert torch.equal(
            hg.categorical(probs=torch.softmax(rows, -1), estimator=name, generator=_seed(22)),
            hg.categorical(rows, estimator=name, generator=_seed(22)),
        ), name
    # The relaxation: the same value up to rounding (log q + g is computed, not l + g).
    relaxed = hg.bernoulli(
        probs=torch.sigmoid(logits), estimator="gumbel_softmax", generator=_seed(21)
    )
    torch.testing.assert_close(
        relaxed, hg.bernoulli(logits, estimator="gumbel_softmax", generator=_seed(21))
    )
    for name in ("reinforce", "rloo", "disarm"):
        seen = []

        def f(b, seen=seen):
            seen.append(b)
            return b.sum(-1)

        hg.expectation(f, logits.reshape(64, -1), estimator=name, generator=_seed(23))
        hg.expectation(
            f, probs=torch.sigmoid(logits.reshape(64, -1)), estimator=name, generator=_seed(23)
        )
        assert torch.equal(seen[0], seen[1]), name


def test_same_seed_same_sample_and_gradient():
    p = torch.tensor([0.0, 0.3, 0.5, 1.0])
    results = []
    for _ in range(2):
        leaf = p.clone().requires_grad_()
        y = hg.bernoulli(probs=leaf, estimator="gumbel_rao", generator=_seed(5))
        y.sum().backward()
        results.append((y.detach(), leaf.grad))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])


# --------------------------------------------------------------------------------------
# Gradients inside (0, 1): the logits estimator times the chain rule
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("tau", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("dist", ["bernoulli", "categorical"])
@pytest.mark.parametrize("name", PATHWISE)
def test_interior_gradient_is_the_chain_rule_of_the_logits_path(name, dist, tau):
    """Same noise, float64: d/dp = (d/dl) / (p (1 - p)) (Bernoulli), d/dq = (d/dl) / q
    (categorical); "st_identity" copies the gradient onto probs unchanged."""
    if name == "st_identity" and tau != 1.0:
        pytest.skip("no temperature")
    probs = _interior_bernoulli() if dist == "bernoulli" else _interior_categorical()
    y_p, g_p, y_l, g_l, w = _probs_and_logits_gradients(
        name, dist, probs, tau=None if name == "st_identity" else tau
    )
    torch.testing.assert_close(y_p, y_l, rtol=1e-12, atol=1e-14)
    if name == "st_identity":
        assert torch.equal(g_p, w)
        return
    chain = 1 / (probs * (1 - probs)) if dist == "bernoulli" else 1 / probs
    torch.testing.assert_close(g_p, g_l * chain, rtol=1e-9, atol=1e-12)


def test_st_closed_forms_in_probability_space():
    """Independent closed forms: Bernoulli d/dp = sigma'(l/tau) / (tau p (1 - p)), which is
    1 at tau = 1; categorical at tau = 1: ybar_i - <ybar, q>."""
    p = _interior_bernoulli()
    ell = _log_odds(p)
    for tau in (0.3, 1.0, 3.0):
        leaf = p.clone().requires_grad_()
        hg.bernoulli(probs=leaf, estimator=hg.estimators.ST(tau=tau)).sum().backward()
        s = torch.sigmoid(ell / tau)
        torch.testing.assert_close(leaf.grad, s * (1 - s) / (tau * p * (1 - p)))
    q = torch.tensor([[0.0, 0.25, 0.75], [0.5, 0.5, 0.0]], dtype=torch.float64)
    leaf = q.clone().requires_grad_()
    w = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.0, -1.0]], dtype=torch.float64)
    (hg.categorical(probs=leaf) * w).sum().backward()
    torch.testing.assert_close(leaf.grad, w - (w * q).sum(-1, keepdim=True))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_bernoulli_st_at_tau_one_passes_the_gradient_exactly(dtype):
    """At tau = 1, d b / d p = sigma'(l) / (p (1 - p)) = 1 everywhere, 0 and 1 included: the
    gradient (and forward-mode tangent) is the incoming one bit for bit, and the sample
    is the one the same noise gives through the explicit-noise API."""
    p = torch.tensor([0.0, 1e-3, 0.3, 0.5, 0.999, 1.0], dtype=dtype)
    w = torch.tensor([1.0, -2.0, 0.5, 3.0, -0.25, 7.0], dtype=dtype)
    leaf = p.clone().requires_grad_()
    b = hg.bernoulli(probs=leaf, estimator="st", generator=_seed(4))
    (b * w).sum().backward()
    assert torch.equal(leaf.grad, w)
    st = hg.estimators.get("st")
    explicit = st.bernoulli_probs(p, st.bernoulli_noise(p, _seed(4)))
    assert torch.equal(b.detach(), explicit)
    _, tangent = torch.func.jvp(
        lambda q: hg.bernoulli(probs=q, estimator="st", generator=_seed(4)), (p,), (w,)
    )
    assert torch.equal(tangent, w)


def test_categorical_st_at_tau_one_normalises_unnormalised_probs(validation_off):
    """At tau = 1 the categorical ST's backward in probability space is written without
    logarithms: (ybar - <ybar, q/S>) / S with S = sum q, which treats unnormalised q as
    q / S, as every other path does; rows with zeros and a row summing to 2 (no value
    checks), against the float64 closed form, and the JVP its transpose."""
    q = torch.tensor([[0.0, 0.25, 0.75], [0.5, 1.5, 0.0]], dtype=torch.float64)
    w = torch.tensor([[1.0, -2.0, 0.5], [3.0, 0.0, -1.0]], dtype=torch.float64)
    leaf = q.clone().requires_grad_()
    (hg.categorical(probs=leaf, generator=_seed(1)) * w).sum().backward()
    total = q.sum(-1, keepdim=True)
    expected = (w - (w * q / total).sum(-1, keepdim=True)) / total
    torch.testing.assert_close(leaf.grad, expected, rtol=1e-15, atol=1e-15)
    jacobian = torch.autograd.functional.jacobian(
        lambda t: hg.categorical(probs=t, generator=_seed(1)), q
    ).reshape(6, 6)
    _, tangent = torch.func.jvp(lambda t: hg.categorical(probs=t, generator=_seed(1)), (q,), (w,))
    torch.testing.assert_close(tangent.reshape(6), jacobian @ w.reshape(6), rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize(
    ("p_dtype", "u_dtype"),
    [
        (torch.float64, torch.float64),
        (torch.float32, torch.float32),
        (torch.float16, torch.float32),
    ],
)
def test_disarm_probs_weight_equals_the_where_form_bit_for_bit(p_dtype, u_dtype):
    """DisARM's probability-space weight multiplies by the disagreement mask (no
    torch.where); it must equal where(d, (1/2)(1 - 2 b~) / min(p, 1 - p), 0) bit for bit,
    signed zeros included, with probabilities 0 and 1 among them."""
    gen = _seed(8)
    p = torch.rand(4096, generator=gen, dtype=torch.float64).to(p_dtype)
    p[:5] = torch.tensor([0.0, 1.0, 0.5, 1e-30, 1 - 2**-20], dtype=torch.float64).to(p_dtype)
    u = torch.rand(4096, generator=gen, dtype=torch.float64).to(u_dtype)
    disarm = hg.estimators.get("disarm")
    first, second = disarm.pair_probs(p, u)
    got = disarm.weight_probs(p, u, first, second)
    disagree = first != second
    smaller = torch.where(disagree, torch.minimum(p, 1 - p), 1)
    expected = torch.where(disagree, 0.5 * (1 - 2 * second) / smaller, 0)
    assert got.dtype == expected.dtype
    assert torch.equal(got, expected) and torch.equal(got.signbit(), expected.signbit())
    assert disagree.any() and not disagree.all()


@pytest.mark.parametrize("tau", [0.5, 1.0, 2.0])
@pytest.mark.parametrize(
    "name", ["st", "st_gumbel", "gumbel_softmax", "gst", "reinmax", "gumbel_rao"]
)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_bernoulli_direct_factor_equals_the_two_class_terms(
    name, tau, dtype, monkeypatch, validation_off
):
    """The Bernoulli backward in closed form (sigma'(d/tau) / (tau p (1 - p)) for the
    one-term kinds, t (2 - t) / (2 p (1 - p)) - 1/2 for ReinMax, the mean of the one-term
    form over the conditional draws for Gumbel-Rao) elementwise, with the two-class terms'
    limits where p (1 - p) is not normal (0, 1, subnormal); against the terms everywhere
    (the path with the closed forms switched off),
    on the same draw, end points and extreme probabilities included, eager and torch.func."""
    from hardgrad.estimators import _probs

    gen = _seed(9)
    p = torch.rand(2000, generator=gen, dtype=torch.float64)
    tiny = torch.finfo(dtype).tiny
    p[:8] = torch.tensor([0.0, 1.0, tiny / 4, 1e-30, 0.5, 1 - 2**-20, 2e-7, 1.0])
    p = p.to(dtype)
    w = torch.randn(2000, generator=gen, dtype=torch.float64).to(dtype)
    estimator = _estimator(name, tau)

    def gradient() -> torch.Tensor:
        leaf = p.clone().requires_grad_()
        (hg.bernoulli(probs=leaf, estimator=estimator, generator=_seed(2)) * w).sum().backward()
        return leaf.grad

    def func_gradient() -> torch.Tensor:
        draw = lambda v: hg.bernoulli(probs=v, estimator=estimator, generator=_seed(2))  # noqa: E731
        return torch.func.grad(lambda v: (draw(v) * w).sum())(p)

    # (validation off: tau = 2 at 0 and 1 takes the documented floor instead of raising)
    fast, fast_func = gradient(), func_gradient()
    monkeypatch.setattr(_probs, "_DIRECT_BINARY", ())
    terms = gradient()
    assert torch.equal(fast, fast_func)
    finite = torch.isfinite(terms)
    assert torch.equal(finite, torch.isfinite(fast))
    rtol = 1e-12 if dtype == torch.float64 else 2e-5
    # ReinMax's factor is a difference, t (2 - t) / (2 p (1 - p)) - 1/2, in both forms: each
    # is accurate relative to |F| + 1/2, the size of the parts, not to |F| where they cancel
    # (the closed form is the closer to a 50-digit reference; see the test below).
    atol = rtol / 2 if name == "reinmax" else 0
    torch.testing.assert_close(fast[finite], terms[finite], rtol=rtol, atol=atol)


@pytest.mark.parametrize("tau", [0.5, 1.0, 2.0])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_bernoulli_reinmax_factor_against_a_50_digit_reference(tau, dtype):
    """d b / d p of ReinMax in probability space against mpmath at 50 digits of the formula
    2 J(pi_1) - J(pi_0) / 2 for two classes, t (2 - t) / (2 p (1 - p)) - 1/2 with t the
    temperature softmax of the class not drawn: within a few units of the rounding of its
    parts (|F| + 1/2), plus the conditioning of t through the log-odds away from tau = 1
    (t = sigma(-+l / tau) carries l's absolute rounding, eps |l|, times 1/tau), at every
    probability, extreme ones included."""
    mpmath = pytest.importorskip("mpmath")
    gen = _seed(11)
    p = torch.rand(300, generator=gen, dtype=torch.float64)
    p[:6] = torch.tensor([1e-30, 1e-7, 0.5, 1 - 2**-20, 1 - 2**-24, 1e-300])
    p = p.to(dtype).clamp(torch.finfo(dtype).tiny, 1 - 2**-24)  # inside (0, 1) in float32
    leaf = p.clone().requires_grad_()
    estimator = hg.estimators.ReinMax(tau=tau)
    b = hg.bernoulli(probs=leaf, estimator=estimator, generator=_seed(3))
    b.sum().backward()
    with mpmath.workdps(50):
        expected, conditioning = [], []
        for pi, bi in zip(p.tolist(), b.tolist(), strict=True):
            q = mpmath.mpf(pi)
            odds = mpmath.log(q) - mpmath.log1p(-q)
            t = 1 / (1 + mpmath.exp((1 if bi == 0 else -1) * -odds / tau))
            expected.append(float(t * (2 - t) / (2 * q * (1 - q)) - mpmath.mpf(1) / 2))
            conditioning.append(0.0 if tau == 1 else float(abs(odds)) / tau)
    reference = torch.tensor(expected, dtype=torch.float64)
    scale = reference.abs() + 0.5
    error = (leaf.grad.double() - reference).abs() / scale
    bound = (8 + torch.tensor(conditioning, dtype=torch.float64)) * torch.finfo(dtype).eps
    assert (error <= bound).all(), (error / bound).max()


@pytest.mark.parametrize("value", [math.inf, -math.inf])
def test_bernoulli_probs_infinities_are_rejected(value):
    probs = torch.tensor([0.5, value])
    with pytest.raises(
        ValueError, match=r"`probs` in \[0, 1\], but found probs=-?inf at index \(1,\)"
    ):
        hg.bernoulli(probs=probs)


# --------------------------------------------------------------------------------------
# Gradients at exactly 0 and 1: finite, the limit of the formula
# --------------------------------------------------------------------------------------


def _bernoulli_end_point_limits(name: str, tau: float, noise) -> torch.Tensor:
    """Analytic limits of d b / d p at p = (0, 1) for the default settings (k = 10), from
    the noise the sampler draws ((2, 2) Gumbels; Gumbel-Rao also (k, 2, 2) exponentials)."""
    if name == "st_identity":
        return torch.ones(2, dtype=torch.float64)
    if tau < 1:
        value = -0.5 if name == "reinmax" else 0.0
        return torch.full((2,), value, dtype=torch.float64)
    if name in ("st", "gst"):
        return torch.ones(2, dtype=torch.float64)
    if name == "reinmax":
        return torch.full((2,), 0.5, dtype=torch.float64)
    if name in ("st_gumbel", "gumbel_softmax"):
        g = noise  # p = 0: exp(g1 - g0); p = 1: exp(g0 - g1)
        return torch.stack([(g[0, 1] - g[0, 0]).exp(), (g[1, 0] - g[1, 1]).exp()])
    assert name == "gumbel_rao"
    e = noise[1]  # p = 0: mean E0 / E1; p = 1: mean E1 / E0
    return torch.stack([(e[:, 0, 0] / e[:, 0, 1]).mean(), (e[:, 1, 1] / e[:, 1, 0]).mean()])


@pytest.mark.parametrize("tau", [0.5, 1.0])
@pytest.mark.parametrize("name", PATHWISE)
def test_bernoulli_end_point_gradients_are_the_analytic_limits(name, tau):
    if name == "st_identity" and tau != 1.0:
        pytest.skip("no temperature")
    estimator = _estimator(name, None if name == "st_identity" else tau)
    p = torch.tensor([0.0, 1.0], dtype=torch.float64, requires_grad=True)
    b = hg.bernoulli(probs=p, estimator=estimator, generator=_seed(3))
    b.sum().backward()
    noise = estimator.bernoulli_noise(torch.empty(2, dtype=torch.float64), _seed(3))
    expected = _bernoulli_end_point_limits(name, tau, noise)
    assert torch.isfinite(p.grad).all()
    torch.testing.assert_close(p.grad, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("tau", [0.5, 1.0])
@pytest.mark.parametrize("dist", ["bernoulli", "categorical"])
@pytest.mark.parametrize("name", TEMPERED)
def test_end_point_gradients_continue_the_logits_path(name, dist, tau):
    """The gradient at exactly 0 (and 1) equals the logits path's chain rule just inside
    the interval (probabilities delta = 2^-30 from the ends, same noise, same sample): the
    limit of the formula, from an independent implementation. (The logits path itself loses
    about eps/delta to cancellation in 1 - sigma(l) there, hence rtol 1e-6.)"""
    delta = 2.0**-30
    if dist == "bernoulli":
        exact = torch.tensor([0.0, 1.0, 0.0, 1.0], dtype=torch.float64)
        near = exact.clamp(delta, 1 - delta)
        chain = 1 / (near * (1 - near))
    else:
        exact = torch.tensor([[0.0, 0.4, 0.6], [0.0, 1.0, 0.0], [0.2, 0.0, 0.8]])
        exact = exact.double()
        near = (exact + delta) / (1 + 3 * delta)
        chain = 1 / near
    y_p, g_p, *_ = _probs_and_logits_gradients(name, dist, exact, seed=4, tau=tau)
    _, g_n, y_l, g_l, _ = _probs_and_logits_gradients(name, dist, near, seed=4, tau=tau)
    if name != "gumbel_softmax":
        assert torch.equal(y_p, y_l)
    assert torch.isfinite(g_p).all()
    # For tau < 1 the values at delta are O(delta^(1/tau - 1)) (times noise terms) from the
    # limit; at tau = 1, O(delta).
    atol = 1e-4 if tau < 1 else 1e-6
    torch.testing.assert_close(g_p, g_l * chain, rtol=1e-6, atol=atol)
    torch.testing.assert_close(g_p, g_n, rtol=1e-6, atol=atol)


@pytest.mark.parametrize("dist", ["bernoulli", "categorical"])
@pytest.mark.parametrize("name", TEMPERED)
def test_tau_above_one_at_the_end_points(name, dist, validation_off):
    """The limit is infinite for tau > 1. Checked (validation on): ValueError while probs
    requires grad, none without grad; unchecked: the formula at eps in place of an exact 0,
    finite and equal to the logits path there (up to O(eps^(1/tau)) in the other classes,
    which the reference moves by eps too)."""
    estimator = _estimator(name, 2.0)
    sampler = SAMPLERS[dist]
    probs = torch.tensor([[0.0, 1.0], [0.5, 0.5]], dtype=torch.float64)
    hg.set_validation(True)
    with pytest.raises(ValueError, match=r"tau > 1.*found probs=0\.0 at index \(0, 0\)"):
        sampler(probs=probs.clone().requires_grad_(), estimator=estimator)
    with pytest.raises(ValueError, match=r"tau > 1"):
        hg.expectation(
            lambda b: b.flatten(1).sum(-1),
            probs=probs.clone().requires_grad_(),
            dist=dist,
            estimator=estimator,
        )
    sampler(probs=probs, estimator=estimator)  # no gradient wanted: fine
    hg.set_validation(False)
    eps = torch.finfo(torch.float64).eps
    _, g_p, *_ = _probs_and_logits_gradients(name, dist, probs, seed=5, tau=2.0)
    near = probs.clamp(eps, 1 - eps)
    _, g_n, *_ = _probs_and_logits_gradients(name, dist, near, seed=5, tau=2.0)
    assert torch.isfinite(g_p).all()
    torch.testing.assert_close(g_p, g_n, rtol=1e-6, atol=1e-6)


def _toy(t: float = 0.3):
    return lambda b: (b - t).square()


@pytest.mark.parametrize("name", SCORE)
def test_score_function_end_points(name):
    """One variable, f(b) = (b - t)^2, t = 0.3, at p = 0 and 1 (always b = p): every draw's
    gradient is the limit of the estimator's formula, finite. REINFORCE: f(p) * (score
    -1 at 0, +1 at 1); with the optimal baseline, and RLOO, every sample has the same f and
    score: 0; ARM: 0 (see its docstring); DisARM: the pair never disagrees: 0; exact:
    f(1) - f(0) = 1 - 2t. REBAR and RELAX refuse (their relaxation is infinite there)."""
    p = torch.tensor([0.0, 1.0], dtype=torch.float64, requires_grad=True)
    estimator = hg.estimators.get(name)
    num = None if name in ("exact", "arm", "disarm") else 4
    if name in EAGER_ONLY:
        with pytest.raises(ValueError, match=r"strictly inside.*exactly 0 or 1"):
            hg.expectation(_toy(), probs=p, estimator=estimator, num_samples=num)
        with torch.no_grad():
            value = hg.expectation(_toy(), probs=p, estimator=estimator, num_samples=num)
        torch.testing.assert_close(value, torch.tensor([0.09, 0.49], dtype=torch.float64))
        return
    value = hg.expectation(_toy(), probs=p, estimator=estimator, num_samples=num, generator=_seed())
    torch.testing.assert_close(value, torch.tensor([0.09, 0.49], dtype=torch.float64))
    value.sum().backward()
    expected = {"reinforce": [-0.09, 0.49], "exact": [0.4, 0.4]}.get(name, [0.0, 0.0])
    torch.testing.assert_close(p.grad, torch.tensor(expected, dtype=torch.float64))


@pytest.mark.parametrize("baseline", [None, "ema", "optimal"])
def test_reinforce_categorical_zero_class(baseline):
    """The score of a class of probability 0 is D_i/q_i - 1/sum(q) = -1 (it is never drawn):
    the gradient there is -mean(f - beta) (with the optimal baseline, whose denominator is
    0 there, beta is the mean of the other samples' f, the limit: the gradient is 0)."""
    q = torch.tensor([[0.0, 0.3, 0.7]], dtype=torch.float64, requires_grad=True)
    values = []

    def f(d):
        out = (d * torch.tensor([1.0, 2.0, 5.0], dtype=d.dtype)).sum(-1)
        values.append(out.detach())
        return out

    estimator = hg.estimators.Reinforce(baseline=baseline)
    hg.expectation(
        f, probs=q, dist="categorical", estimator=estimator, num_samples=4, generator=_seed(6)
    ).sum().backward()
    expected = 0.0 if baseline == "optimal" else -float(values[0].mean())
    assert torch.isfinite(q.grad).all()
    torch.testing.assert_close(q.grad[0, 0], torch.tensor(expected, dtype=torch.float64))


def test_arm_end_point_coordinate_is_zero_where_the_chain_rule_is_infinite():
    """Two variables, one at p = 0 and one at 1/2: ARM's formula for the first, (f(b) -
    f(b~)) (u - 1/2), is nonzero whenever the second variable's pair differs, and
    1/(p(1-p)) is infinite; hardgrad gives its conditional mean given the pair, 0, there
    (with probs, and with logits where sigma(theta) is exactly 0 or 1: issue 38), and the
    chain rule at the other."""
    p = torch.tensor([[0.0, 0.5]], dtype=torch.float64, requires_grad=True)
    f = lambda b: (b * torch.tensor([1.0, 2.0], dtype=b.dtype)).sum(-1).square()  # noqa: E731
    hg.expectation(f, probs=p, estimator="arm", num_samples=64, generator=_seed(7)).backward()
    logits = torch.tensor([[-1e300, 0.0]], dtype=torch.float64, requires_grad=True)
    hg.expectation(f, logits, estimator="arm", num_samples=64, generator=_seed(7)).backward()
    assert logits.grad[0, 0] == 0  # sigma(-1e300) = 0 exactly: the term's mean, 0
    torch.testing.assert_close(
        p.grad, torch.tensor([[0.0, 4.0 * float(logits.grad[0, 1])]]).double()
    )


@pytest.mark.parametrize("dist", ["bernoulli", "categorical"])
@pytest.mark.parametrize("name", [n for n in ESTIMATORS.names() if n not in EAGER_ONLY])
def test_every_estimator_is_finite_at_the_end_points(name, dist, dtype):
    """Registry-driven: hg.expectation with probs containing 0 and 1, each dtype: a finite
    gradient of probs' dtype."""
    cls = ESTIMATORS.get(name)
    if dist not in getattr(cls, "dists", ("bernoulli", "categorical")):
        pytest.skip(f"{name} is Bernoulli only")
    if dist == "bernoulli":
        probs = torch.tensor([[0.0, 1.0, 0.25], [1.0, 0.0, 0.5]])
    else:
        probs = torch.tensor([[[0.0, 1.0, 0.0], [0.0, 0.5, 0.5]], [[0.2, 0.0, 0.8], [1, 0, 0]]])
    leaf = probs.to(dtype).requires_grad_()
    value = hg.expectation(
        lambda b: (b - 0.3).square().flatten(2).sum(-1),
        probs=leaf,
        dist=dist,
        estimator=name,
        generator=_seed(8),
    )
    value.sum().backward()
    assert leaf.grad.dtype == dtype and torch.isfinite(leaf.grad).all()


def _multi(b: torch.Tensor) -> torch.Tensor:
    w = torch.tensor([1.0, -2.0, 0.5], dtype=b.dtype)
    return ((b * w).sum(-1) - 0.4).square()


def test_exact_gradient_in_probs_is_the_chain_rule_of_logits():
    """Exact enumeration over probabilities (a product, no logs) against the logits one."""
    p = torch.tensor([0.2, 0.5, 0.9], dtype=torch.float64)
    by_probs = hg.diagnostics.exact_gradient(_multi, probs=p)
    by_logits = hg.diagnostics.exact_gradient(_multi, _log_odds(p))
    torch.testing.assert_close(by_probs, by_logits / (p * (1 - p)))
    q = _interior_categorical()[:2]
    f = lambda d: (d * torch.arange(4.0, dtype=d.dtype)).sum(-1).square().sum(-1)  # noqa: E731
    by_probs = hg.diagnostics.exact_gradient(f, probs=q, dist="categorical")
    by_logits = hg.diagnostics.exact_gradient(f, torch.log(q), dist="categorical")
    torch.testing.assert_close(by_probs, by_logits / q)
    # At the end points: f(b with p_i = 1) - f(b with p_i = 0), given the others.
    ends = torch.tensor([0.0, 1.0, 0.5], dtype=torch.float64)
    grad = hg.diagnostics.exact_gradient(_multi, probs=ends)
    b = torch.tensor([[1.0, 1.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 1.0, 1.0]])
    v = _multi(b.double())
    torch.testing.assert_close(grad[0], 0.5 * (v[0] - v[1]) + 0.5 * (v[2] - v[3]))


@pytest.mark.statistical
@pytest.mark.parametrize("name", ["reinforce", "rloo", "arm", "disarm"])
def test_unbiased_estimators_stay_unbiased_in_probs(name):
    """Inside (0, 1): the mean of 20000 draws of each unbiased estimator's probs-gradient on
    a 3-variable objective at p = (0.15, 0.5, 0.85) matches the exact one, |z| < 5 per
    coordinate with the sample standard deviation (3 coordinates: rate < 2e-6)."""
    p = torch.tensor([0.15, 0.5, 0.85], dtype=torch.float64)
    exact = hg.diagnostics.exact_gradient(_multi, probs=p)
    draws = hg.diagnostics.gradient_samples(
        _multi, probs=p, estimator=name, num_draws=20000, generator=_seed(9)
    )
    z = (draws.mean(0) - exact) / (draws.std(0) / math.sqrt(draws.shape[0]))
    assert (z.abs() < 5).all(), z


def test_rebar_relax_inside_are_the_chain_rule_of_logits():
    """Same noise: the REBAR/RELAX probs-gradient is the logits one over p (1 - p), and the
    control variate's parameters get the variance gradient of that probs-space estimate."""
    p = torch.tensor([[0.2, 0.5, 0.9]], dtype=torch.float64)
    for make in (
        lambda: hg.estimators.REBAR(),
        lambda: hg.estimators.RELAX(
            torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Flatten(-2)).double()
        ),
    ):
        torch.manual_seed(0)
        est_p, est_l = make(), make()
        est_l.load_state_dict(est_p.state_dict())
        leaf_p = p.clone().requires_grad_()
        leaf_l = _log_odds(p).requires_grad_()
        hg.expectation(_multi, probs=leaf_p, estimator=est_p, generator=_seed(10)).sum().backward()
        hg.expectation(_multi, leaf_l, estimator=est_l, generator=_seed(10)).sum().backward()
        torch.testing.assert_close(leaf_p.grad, leaf_l.grad / (p * (1 - p)))
        assert est_p.scale.grad is not None and torch.isfinite(est_p.scale.grad)


def test_diagnostics_compare_with_probs():
    result = hg.diagnostics.compare(
        _multi,
        probs=torch.tensor([0.0, 0.5, 1.0]),
        estimators=["exact", "disarm"],
        num_draws=50,
        generator=_seed(11),
    )
    assert result.settings["parameter"] == "probs"
    assert result.rows[0].bias == pytest.approx(0.0, abs=1e-6)


# --------------------------------------------------------------------------------------
# Half precision, transforms, compile
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("half", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("dist", ["bernoulli", "categorical"])
@pytest.mark.parametrize("name", PATHWISE)
def test_half_precision_computes_in_float32_and_rounds_once(name, dist, half):
    """Half probs draw float32 noise and compute in float32: the sample and gradient are
    the float32 path's on the same (half-valued) probabilities, rounded once."""
    if dist == "bernoulli":
        probs = torch.tensor([0.0, 0.1, 0.5, 0.75, 1.0, 0.3]).to(half)
    else:
        probs = torch.tensor([[0.0, 0.25, 0.75], [0.5, 0.5, 0.0], [0.0, 1.0, 0.0]]).to(half)
    w = torch.tensor([1.0, -2.0, 0.5, 3.0, -1.0, 0.25]).reshape(-1)[: probs.shape[0]]
    w = w.reshape(-1, *([1] * (probs.dim() - 1)))
    sampler = SAMPLERS[dist]
    results = []
    for dtype in (half, torch.float32):
        leaf = probs.detach().to(dtype).clone().requires_grad_()
        y = sampler(probs=leaf, estimator=name, generator=_seed(12))
        (y * w.to(dtype)).sum().backward()
        results.append((y, leaf.grad))
    (y_h, g_h), (y_f, g_f) = results
    assert y_h.dtype == half and g_h.dtype == half
    assert torch.equal(y_h, y_f.to(half))
    assert torch.equal(g_h, g_f.to(half))


@pytest.mark.parametrize("dist", ["bernoulli", "categorical"])
@pytest.mark.parametrize("name", PATHWISE)
def test_forward_mode_and_torch_func(name, dist):
    """jacfwd equals jacrev on the same draw (the probability-space Jacobian is not
    symmetric: diag(1/q) J(s)); dual tensors give jvp's tangent; torch.func.grad equals
    backward; vmap over rows with different randomness runs."""
    sampler = SAMPLERS[dist]
    row = torch.tensor([0.0, 0.2, 0.8, 0.0], dtype=torch.float64)
    if dist == "bernoulli":
        row = torch.tensor([0.0, 0.2, 1.0, 0.6], dtype=torch.float64)

    def draw(v):
        return sampler(probs=v, estimator=name, generator=_seed(13))

    forward = torch.func.jacfwd(draw, randomness="same")(row)
    reverse = torch.func.jacrev(draw)(row)
    assert torch.isfinite(forward).all()
    torch.testing.assert_close(forward, reverse, rtol=1e-12, atol=1e-12)
    t = torch.tensor([1.0, -1.0, 0.5, 2.0], dtype=torch.float64)
    _, tangent = torch.func.jvp(draw, (row,), (t,))
    with fwAD.dual_level():
        dual = fwAD.unpack_dual(draw(fwAD.make_dual(row, t))).tangent
    assert dual is not None and torch.equal(dual, tangent)
    grad = torch.func.grad(lambda v: (draw(v) * t).sum())(row)
    leaf = row.clone().requires_grad_()
    (draw(leaf) * t).sum().backward()
    torch.testing.assert_close(grad, leaf.grad, rtol=0, atol=0)
    rows = row.expand(5, 4)
    batched = torch.vmap(lambda v: sampler(probs=v, estimator=name), randomness="different")(rows)
    assert batched.shape == rows.shape


@pytest.mark.parametrize("dist", ["bernoulli", "categorical"])
@pytest.mark.parametrize("name", [n for n in ESTIMATORS.names() if n not in EAGER_ONLY])
def test_expectation_forward_mode_with_probs(name, dist):
    cls = ESTIMATORS.get(name)
    if dist not in getattr(cls, "dists", ("bernoulli", "categorical")):
        pytest.skip(f"{name} is Bernoulli only")
    probs = torch.tensor([[0.0, 0.3, 0.7], [0.5, 0.5, 0.0]], dtype=torch.float64)
    if dist == "bernoulli":
        probs = torch.tensor([[0.0, 0.3, 1.0], [0.5, 0.9, 0.1]], dtype=torch.float64)
    t = torch.tensor([[1.0, -1.0, 0.5], [2.0, 0.25, -0.5]], dtype=torch.float64)

    def estimate(v):
        return hg.expectation(
            lambda b: (b - 0.3).square().sum(-1),
            probs=v,
            dist=dist,
            estimator=name,
            generator=_seed(14),
        ).sum()

    _, tangent = torch.func.jvp(estimate, (probs,), (t,))
    gradient = torch.func.grad(estimate)(probs)
    assert torch.isfinite(gradient).all()
    torch.testing.assert_close(tangent, (gradient * t).sum(), rtol=1e-12, atol=1e-12)


def _compiled_matches_eager(fn, make) -> None:
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager")
    for batch in (8, 5):
        x = make(batch)
        results = []
        for run in (compiled, fn):
            leaf = x.clone().requires_grad_()
            torch.manual_seed(batch)
            y = run(leaf)
            w = torch.randn(y.shape, generator=_seed(batch))
            (y * w).sum().backward()
            results.append((y.detach(), leaf.grad))
        (y_c, g_c), (y_e, g_e) = results
        assert torch.equal(y_c, y_e), batch
        assert torch.isfinite(g_c).all()
        torch.testing.assert_close(g_c, g_e, rtol=1e-6, atol=1e-7)
    torch._dynamo.reset()


def _probs(batch: int, dist: str) -> torch.Tensor:
    logits = torch.randn(batch, 4, generator=_seed(100 + batch))
    probs = torch.sigmoid(logits) if dist == "bernoulli" else torch.softmax(logits, -1)
    probs[0] = torch.tensor([0.0, 1.0, 0.0, 0.0])  # end points included
    return probs


@pytest.mark.compile
@pytest.mark.parametrize("dist", ["bernoulli", "categorical"])
@pytest.mark.parametrize("name", PATHWISE)
def test_samplers_with_probs_compile(name, dist):
    sampler = SAMPLERS[dist]
    _compiled_matches_eager(
        lambda p: sampler(probs=p, estimator=name), lambda batch: _probs(batch, dist)
    )


@pytest.mark.compile
@pytest.mark.parametrize(
    ("name", "dist"),
    [
        (name, dist)
        for name, cls in ESTIMATORS.items()
        if name not in EAGER_ONLY and not cls.pathwise
        for dist in getattr(cls, "dists", ("bernoulli", "categorical"))
    ],
)
def test_expectation_with_probs_compiles(name, dist):
    estimator = hg.estimators.get(name)
    estimator = estimator.eval() if isinstance(estimator, torch.nn.Module) else estimator

    def fn(p):
        return hg.expectation(
            lambda b: (b - 0.3).square().sum(-1), probs=p, dist=dist, estimator=estimator
        )

    _compiled_matches_eager(fn, lambda batch: _probs(batch, dist))


@pytest.mark.parametrize("estimator", ["st", "st_identity"])
@pytest.mark.parametrize("numel", [100, 20_000], ids=["small", "large"])
def test_identity_bernoulli_from_probs_is_the_two_class_path_in_one_step(estimator, numel, dtype):
    """hg.bernoulli(probs=...) with an identity probability backward (ST at tau = 1,
    ST-identity) samples in one step, without the (0, L) pair: the same value bit for bit
    as the estimator's bernoulli_probs on bernoulli_noise from the same generator state,
    end points included, and the incoming gradient unchanged."""
    chosen = hg.estimators.get(estimator)
    g = torch.Generator().manual_seed(numel)
    p = torch.rand(numel, generator=g, dtype=torch.float64)
    p[:4] = torch.tensor([0.0, 1.0, 0.5, 1e-30])
    p = p.to(dtype).requires_grad_()
    fast = hg.bernoulli(probs=p, estimator=estimator, generator=torch.Generator().manual_seed(9))
    two_class = chosen.bernoulli_probs(
        p, chosen.bernoulli_noise(p, torch.Generator().manual_seed(9))
    )
    assert type(fast.grad_fn).__name__ in {"IdentityGradientBackward", "CloneBackward0"}
    assert fast.dtype == two_class.dtype and torch.equal(fast, two_class)
    assert fast[0] == 0 and fast[1] == 1
    upstream = torch.randn(numel, generator=g, dtype=torch.float64).to(dtype)
    (got,) = torch.autograd.grad(fast, p, upstream)
    (want,) = torch.autograd.grad(two_class, p, upstream)
    assert torch.equal(got, upstream) and torch.equal(want, upstream)


def test_tempered_st_from_probs_keeps_the_two_class_path():
    p = torch.full((8,), 0.3, requires_grad=True)
    y = hg.bernoulli(probs=p, estimator=hg.estimators.ST(tau=0.5))
    assert type(y.grad_fn).__name__ == "_ProbsSampleBackward"
