"""Categorical sampling depends on logit differences only (shifted to a largest entry of 0,
:mod:`hardgrad.estimators._shift`), and infinite logits are exact: -inf excludes a category,
+inf is a point mass, a row of -inf only is a ValueError. Every pathwise estimator (through
``hg.categorical`` / ``hg.bernoulli``) and every estimator of ``hg.expectation``.

Statistical tests are seeded (deterministic); each states its false-failure rate for a
correct sampler under other seeds."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import hardgrad as hg
from hardgrad.estimators import ESTIMATORS, Estimator

INF = math.inf
PATHWISE = [name for name, cls in ESTIMATORS.items() if cls.pathwise]
SCORE_CATEGORICAL = [
    name
    for name, cls in ESTIMATORS.items()
    if not cls.pathwise and "categorical" in getattr(cls, "dists", ())
]
SCORE_BERNOULLI = [name for name, cls in ESTIMATORS.items() if not cls.pathwise]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def make(name: str) -> Estimator:
    return hg.estimators.GumbelRao(k=3) if name == "gumbel_rao" else hg.estimators.get(name)


def chosen(y: torch.Tensor) -> torch.Tensor:
    """The drawn category (for the relaxation, its largest entry)."""
    return y.detach().argmax(-1)


#: Equal logits whose sum with a Gumbel rounds coarsely (or loses it altogether).
HUGE = [
    (1e7, torch.float32),
    (-1e7, torch.float32),
    (3e38, torch.float32),
    (-3e38, torch.float32),
    (6e4, torch.float16),
    (1e16, torch.float64),
]
ROWS = 2000


def assert_uniform(counts: torch.Tensor, total: int) -> None:
    """Each class's count within 5 binomial standard deviations of total / C: a false
    failure has probability < 6e-7 per class (normal approximation; ~1e-4 over every
    class checked in this file)."""
    c = counts.numel()
    p = 1 / c
    sd = math.sqrt(total * p * (1 - p))
    assert (counts.double() - total * p).abs().max() <= 5 * sd, (counts.tolist(), total)


@pytest.mark.parametrize(("value", "dtype"), HUGE, ids=str)
@pytest.mark.parametrize("name", PATHWISE)
def test_equal_huge_logits_are_drawn_uniformly(name, value, dtype):
    # (before: class 0 drawn ~62 % of the time at 1e7 in float32, always at 3e38)
    logits = torch.full((ROWS, 2), value, dtype=dtype)
    y = hg.categorical(logits, estimator=make(name), generator=gen(1))
    assert_uniform(torch.bincount(chosen(y), minlength=2), ROWS)


@pytest.mark.parametrize(("value", "dtype"), HUGE, ids=str)
@pytest.mark.parametrize("name", SCORE_CATEGORICAL)
def test_expectation_draws_equal_huge_logits_uniformly(name, value, dtype):
    if name == "exact":  # no draws: the probabilities themselves
        value_of = hg.expectation(
            lambda b: b[..., 0],
            torch.full((3,), value, dtype=dtype),
            dist="categorical",
            estimator="exact",
        )
        assert float(value_of) == pytest.approx(1 / 3, rel=1e-3)
        return
    seen = []

    def f(b):
        seen.append(b.detach())
        return b[..., 0].to(dtype)

    logits = torch.full((ROWS // 2, 2), value, dtype=dtype)
    hg.expectation(
        f, logits, dist="categorical", estimator=make(name), num_samples=2, generator=gen(2)
    )
    drawn = seen[0].argmax(-1).flatten()  # the hard samples (REBAR/RELAX: the first call)
    assert_uniform(torch.bincount(drawn, minlength=2), drawn.numel())


def _integer_logits(dtype, shape=(64, 5)):
    return torch.randint(-4, 5, shape, generator=gen(3)).to(dtype)


SHIFTS = [
    (torch.float32, 2.0**20),
    (torch.float32, -1e6),
    (torch.float64, 2.0**40),
    (torch.float16, 512.0),
    (torch.bfloat16, -64.0),
]


@pytest.mark.parametrize(("dtype", "c"), SHIFTS, ids=str)
@pytest.mark.parametrize("name", PATHWISE)
def test_samples_and_gradients_identical_for_logits_plus_a_constant(name, dtype, c):
    # The guaranteed invariant: where logits + c is exact (integer values here), the
    # shifted logits are the same floats, so the same seed gives the same sample and the
    # same gradient, bit for bit.
    base = _integer_logits(dtype)
    moved = base + c
    assert torch.equal(moved - c, base)  # (the premise: logits + c exact)
    grad_out = torch.randn(base.shape, generator=gen(4)).to(dtype)
    results = []
    for logits in (base, moved):
        x = logits.clone().requires_grad_()
        y = hg.categorical(x, estimator=make(name), generator=gen(5))
        (g,) = torch.autograd.grad(y, x, grad_out)
        results.append((y.detach(), g))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])


@pytest.mark.parametrize("name", SCORE_CATEGORICAL)
def test_expectation_identical_for_logits_plus_a_constant(name):
    base = _integer_logits(torch.float32, (6, 3))
    weights = torch.randn(6, 3, generator=gen(6))
    results = []
    for logits in (base, base + 2.0**20):
        x = logits.clone().requires_grad_()
        kwargs = {} if name == "exact" else {"num_samples": 4, "generator": gen(7)}
        value = hg.expectation(
            lambda b: (b * weights).sum(-1), x, dist="categorical", estimator=make(name), **kwargs
        )
        (g,) = torch.autograd.grad(value.sum(), x)
        results.append((value.detach(), g))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])


BINARY_EXTREMES = [1e7, -1e7, 3e38, -3e38, INF, -INF, 0.0, 1e-30, -2.5]


@pytest.mark.parametrize("name", PATHWISE)
def test_bernoulli_direct_form_is_the_two_class_categorical_on_the_same_noise(name):
    est = make(name)
    logits = torch.tensor(BINARY_EXTREMES * 50, dtype=torch.float32)
    noise = est.bernoulli_noise(logits, gen(8))
    direct = est.bernoulli(logits, noise)
    two_class = Estimator.bernoulli(est, logits, noise)  # the categorical on [0, logits]
    if est.discrete:
        assert torch.equal(direct, two_class)
    else:
        torch.testing.assert_close(direct, two_class, rtol=1e-5, atol=1e-6)
    at = {v: direct[i].item() for i, v in enumerate(BINARY_EXTREMES)}
    assert at[INF] == 1 and at[-INF] == 0 and at[3e38] == 1 and at[-3e38] == 0


@pytest.mark.parametrize("name", PATHWISE)
def test_minus_inf_excludes_its_category_and_gets_zero_gradient(name):
    # (before: the backward read -inf as -max/4, above -1e38, so class 0 of the first row
    # got the gradient of a probability near 1)
    rows = torch.tensor(
        [[-INF, -1e38, -1e38], [-INF, 0.0, 0.0], [-INF, -3e38, 3e38], [0.5, -INF, -0.5]]
    ).repeat(100, 1)
    x = rows.clone().requires_grad_()
    y = hg.categorical(x, estimator=make(name), generator=gen(9))
    drawn = chosen(y)
    assert not (drawn[0::4] == 0).any() and not (drawn[1::4] == 0).any()
    assert (drawn[2::4] == 2).all() and not (drawn[3::4] == 1).any()
    (g,) = torch.autograd.grad(y, x, torch.randn(x.shape, generator=gen(10)))
    assert torch.isfinite(g).all()
    if name != "st_identity":  # (whose backward copies the gradient to every logit)
        minus_inf = rows == -INF
        assert (g[minus_inf] == 0).all(), g[minus_inf]


@pytest.mark.parametrize("name", PATHWISE)
def test_plus_inf_is_a_point_mass_shared_equally(name):
    rows = torch.tensor([[INF, 0.0, -INF], [INF, INF, 5.0]]).repeat(ROWS // 2, 1)
    x = rows.clone().requires_grad_()
    y = hg.categorical(x, estimator=make(name), generator=gen(11))
    drawn = chosen(y)
    assert (drawn[0::2] == 0).all()
    assert_uniform(torch.bincount(drawn[1::2], minlength=2), ROWS // 2)
    (g,) = torch.autograd.grad(y, x, torch.randn(x.shape, generator=gen(12)))
    assert torch.isfinite(g).all()
    if name != "st_identity":
        # a single +inf: its point mass does not move; the excluded entries get 0
        assert (g[0::2] == 0).all() and (g[1::2, 2] == 0).all()


@pytest.mark.parametrize("name", PATHWISE)
def test_a_row_of_minus_inf_is_a_value_error_naming_logits(name):
    logits = torch.tensor([[0.0, 1.0], [-INF, -INF]])
    with pytest.raises(ValueError, match=r"`logits`.*-inf.*batch index \(1,\)"):
        hg.categorical(logits, estimator=make(name))
    hg.set_validation(False)
    try:  # unchecked: a uniform draw, no NaN
        y = hg.categorical(logits, estimator=make(name), generator=gen(13))
        assert torch.isfinite(y).all()
    finally:
        hg.set_validation(True)


@pytest.mark.parametrize("name", [*SCORE_CATEGORICAL, *PATHWISE])
def test_expectation_refuses_a_row_of_minus_inf(name):
    logits = torch.tensor([[0.0, 1.0], [-INF, -INF]])
    with pytest.raises(ValueError, match=r"`logits`.*-inf"):
        hg.expectation(lambda b: b[..., 0], logits, dist="categorical", estimator=make(name))


# -- hg.expectation against an independent float64 enumeration --------------------------

CAT_LOGITS = [[-INF, -1e38, -2e38], [0.2, -INF, -0.3], [INF, 0.0, -1.0]]
CAT_WEIGHTS = [[1.0, -2.0, 0.5], [0.3, 1.5, -1.0], [2.0, -0.5, 0.7]]


def _softmax64(row):
    finite = [v for v in row if v != -INF]
    if INF in row:
        count = row.count(INF)
        return [1.0 / count if v == INF else 0.0 for v in row]
    top = max(finite)
    weights = [0.0 if v == -INF else math.exp(v - top) for v in row]
    total = sum(weights)
    return [w / total for w in weights]


def _objective(onehot, weights):
    """f(b) = (sum_i <b_i, w_i>)^2 + sum_i <b_i, w_i>: every variable jointly."""
    linear = (onehot * weights).sum((-1, -2))
    return linear.square() + linear


def _enumerate_categorical():
    """E[f] and dE/dlogits by the score identity, in float64 from Python numbers."""
    probs = [_softmax64(row) for row in CAT_LOGITS]
    weights = torch.tensor(CAT_WEIGHTS, dtype=torch.float64)
    value, grad = 0.0, torch.zeros(3, 3, dtype=torch.float64)
    for config in itertools.product(range(3), repeat=3):
        p = math.prod(probs[i][c] for i, c in enumerate(config))
        if p == 0:
            continue
        onehot = torch.nn.functional.one_hot(torch.tensor(config), 3).double()
        f = float(_objective(onehot, weights))
        value += p * f
        grad += p * f * (onehot - torch.tensor(probs, dtype=torch.float64))
    return value, grad


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_exact_categorical_with_infinite_logits_matches_enumeration(dtype):
    # (before: [-inf, -1e38, ...] enumerated as if class 0 were the likely one)
    expected_value, expected_grad = _enumerate_categorical()
    logits = torch.tensor(CAT_LOGITS, dtype=dtype, requires_grad=True)
    weights = torch.tensor(CAT_WEIGHTS, dtype=dtype)
    value = hg.expectation(
        lambda b: _objective(b, weights), logits, dist="categorical", estimator="exact"
    )
    (g,) = torch.autograd.grad(value, logits)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert float(value.detach()) == pytest.approx(expected_value, rel=tol, abs=tol)
    torch.testing.assert_close(g.double(), expected_grad, rtol=tol, atol=tol)
    assert (g[torch.isinf(logits.detach())] == 0).all()


@pytest.mark.parametrize("name", [n for n in [*SCORE_CATEGORICAL, *PATHWISE] if n != "exact"])
def test_every_categorical_estimator_respects_infinite_logits(name):
    logits = torch.tensor(CAT_LOGITS, requires_grad=True)
    weights = torch.tensor(CAT_WEIGHTS)
    seen = []

    def f(b):
        seen.append(b.detach())
        return _objective(b, weights)

    value = hg.expectation(f, logits, dist="categorical", estimator=make(name), generator=gen(14))
    (g,) = torch.autograd.grad(value.sum(), logits)
    hard = seen[0]  # the samples (REBAR/RELAX: their first, hard evaluation)
    assert (hard[..., 0, 0] == 0).all() and (hard[..., 1, 1] == 0).all()
    assert (hard[..., 2, 0] == 1).all()  # +inf: always drawn
    assert torch.isfinite(g).all()
    if name != "st_identity":
        assert (g[torch.isinf(logits.detach())] == 0).all(), g


BERN_LOGITS = [INF, -INF, 0.3, -0.7]
BERN_WEIGHTS = [1.0, -2.0, 0.5, 1.5]


def _enumerate_bernoulli():
    p = [1.0 if v == INF else 0.0 if v == -INF else 1 / (1 + math.exp(-v)) for v in BERN_LOGITS]
    w = BERN_WEIGHTS
    value, grad = 0.0, [0.0] * 4
    for bits in itertools.product((0, 1), repeat=4):
        prob = math.prod(p[i] if b else 1 - p[i] for i, b in enumerate(bits))
        if prob == 0:
            continue
        linear = sum(b * wi for b, wi in zip(bits, w, strict=True))
        f = linear**2 + linear
        value += prob * f
        for i, b in enumerate(bits):
            grad[i] += prob * f * (b - p[i])
    return value, torch.tensor(grad, dtype=torch.float64)


def _bern_objective(b, weights):
    linear = (b * weights).sum(-1)
    return linear.square() + linear


def test_exact_bernoulli_with_infinite_logits_matches_enumeration():
    expected_value, expected_grad = _enumerate_bernoulli()
    logits = torch.tensor(BERN_LOGITS, dtype=torch.float64, requires_grad=True)
    weights = torch.tensor(BERN_WEIGHTS, dtype=torch.float64)
    value = hg.expectation(lambda b: _bern_objective(b, weights), logits, estimator="exact")
    (g,) = torch.autograd.grad(value, logits)
    assert float(value.detach()) == pytest.approx(expected_value, rel=1e-12)
    torch.testing.assert_close(g, expected_grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", [n for n in [*SCORE_BERNOULLI, *PATHWISE] if n != "exact"])
def test_every_bernoulli_estimator_respects_infinite_logits(name):
    logits = torch.tensor(BERN_LOGITS, requires_grad=True)
    weights = torch.tensor(BERN_WEIGHTS)
    seen = []

    def f(b):
        seen.append(b.detach())
        return _bern_objective(b, weights)

    value = hg.expectation(f, logits, estimator=make(name), generator=gen(15))
    (g,) = torch.autograd.grad(value, logits)
    hard = seen[0]
    assert (hard[..., 0] == 1).all() and (hard[..., 1] == 0).all()
    assert torch.isfinite(g).all()
    if name != "st_identity":
        assert (g[:2] == 0).all(), g
