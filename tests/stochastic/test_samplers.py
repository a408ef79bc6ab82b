"""hg.bernoulli and hg.categorical: exact samples, the Bernoulli unit as the two-class
categorical one, generators and reproducibility, shapes/dtypes/devices, numerical safety,
bad input, torch.func (vmap, grad) and CUDA.

Each estimator's backward formula is tested in ``test_estimators.py``; here every estimator
in the registry goes through the public samplers. Statistical tests are seeded (so
deterministic) and state the false-failure rate of their threshold for a fresh seed.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch.func import grad, vmap

import hardgrad as hg
from hardgrad.estimators import ESTIMATORS, ST, GumbelRao

INF, NAN = math.inf, math.nan
NAMES = [name for name, cls in ESTIMATORS.items() if cls.pathwise]
HALF = (torch.float16, torch.bfloat16)
DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def instance(name: str, **settings: Any) -> Any:
    """The estimator ``name`` with those of ``settings`` that it takes."""
    cls = ESTIMATORS.get(name)
    fields = getattr(cls, "__dataclass_fields__", {})
    return cls(**{k: v for k, v in settings.items() if k in fields})


def assert_valid(y: torch.Tensor, dim: int | None, discrete: bool) -> None:
    """A one-hot sample along ``dim`` ({0, 1} for ``dim=None``), or, for a relaxation,
    finite values in [0, 1] summing to 1 along ``dim``."""
    assert torch.isfinite(y).all(), y
    assert ((y >= 0) & (y <= 1)).all(), y
    if discrete:
        assert ((y == 0) | (y == 1)).all(), y
    if dim is not None:
        total = y.double().sum(dim)
        if discrete:
            assert torch.equal(total, torch.ones_like(total)), total
        else:
            torch.testing.assert_close(total, torch.ones_like(total), rtol=0, atol=2e-2)


def chi2_sf_even(x: float, dof: int) -> float:
    """P(chi^2_dof > x) for even dof: exp(-x/2) sum_{i < dof/2} (x/2)^i / i!."""
    assert dof % 2 == 0
    half = x / 2
    return math.exp(-half) * sum(half**i / math.factorial(i) for i in range(dof // 2))


def test_chi2_sf_even_reference_values():
    # Known quantiles: P(chi2_2 > 13.8155) = 1e-3, P(chi2_6 > 12.5916) = 0.05.
    assert chi2_sf_even(13.815510557964274, 2) == pytest.approx(1e-3, rel=1e-9)
    assert chi2_sf_even(12.591587243743977, 6) == pytest.approx(0.05, rel=1e-6)


# --------------------------------------------------------------------------------------
# Samples are exact draws.
# --------------------------------------------------------------------------------------

#: Seven classes (6 degrees of freedom), probabilities from 0.0046 to 0.42; exact in
#: every dtype.
PROBE = torch.tensor([1.0, 2.0, 0.5, -1.0, 0.0, -2.5, 1.5], dtype=torch.float64)

#: Relaxed samples are checked through their argmax (argmax softmax((l+g)/tau) =
#: argmax(l+g)), in float64/float32 only: rounding a relaxed sample to 8 or 11 bits makes
#: near-ties, which argmax breaks towards the first index.
EXACTNESS = [
    pytest.param(name, dt, id=f"{name}-{str(dt).removeprefix('torch.')}")
    for name in NAMES
    for dt in DTYPES
    if ESTIMATORS.get(name).discrete or dt not in HALF
]


def _winner(y: torch.Tensor, dim: int, discrete: bool) -> torch.Tensor:
    if discrete:
        assert_valid(y, dim, True)
    return y.argmax(dim)


@pytest.mark.statistical
@pytest.mark.parametrize(("name", "dt"), EXACTNESS)
def test_categorical_samples_are_exact(name, dt):
    """Pearson chi-square of 20000 draws over the 7 classes of PROBE against
    softmax(PROBE); failure below p = 1e-6 (false-failure rate 1e-6 per test, about 22
    tests: 2.2e-5). A second statistic draws along dim=1 of a 3-D tensor with the reversed
    probabilities in the other column (2e-6 more per test)."""
    n, c = 20_000, PROBE.numel()
    discrete = ESTIMATORS.get(name).discrete
    expected = n * torch.softmax(PROBE, 0)
    y = hg.categorical(PROBE.to(dt).expand(n, c), estimator=name, generator=gen(1))
    counts = torch.bincount(_winner(y, 1, discrete), minlength=c).double()
    assert counts.sum() == n
    stat = float(((counts - expected) ** 2 / expected).sum())
    assert chi2_sf_even(stat, c - 1) > 1e-6, (stat, counts.tolist())
    # Category axis in the middle: (n/2, C, 2), the second column reversed.
    logits = torch.stack((PROBE, PROBE.flip(0)), -1).to(dt).expand(n // 2, c, 2)
    y = hg.categorical(logits, dim=1, estimator=name, generator=gen(2))
    winners = _winner(y, 1, discrete)
    for column, probs in ((0, expected / 2), (1, expected.flip(0) / 2)):
        counts = torch.bincount(winners[:, column], minlength=c).double()
        stat = float(((counts - probs) ** 2 / probs).sum())
        assert chi2_sf_even(stat, c - 1) > 1e-6, (column, stat, counts.tolist())


BERNOULLI_LOGITS = torch.tensor([-4.0, -1.0, 0.0, 0.5, 3.0], dtype=torch.float64)


@pytest.mark.statistical
@pytest.mark.parametrize(("name", "dt"), EXACTNESS)
def test_bernoulli_samples_are_exact(name, dt):
    """Binomial z-test per logit (n = 20000 draws each, p = sigmoid(l) from 0.018 to 0.95),
    |z| < 5: false-failure rate 5.7e-7 per comparison, 5 per test, about 22 tests: 6e-5."""
    n = 20_000
    discrete = ESTIMATORS.get(name).discrete
    logits = BERNOULLI_LOGITS.to(dt).expand(n, -1)
    b = hg.bernoulli(logits, estimator=name, generator=gen(3))
    assert b.shape == logits.shape and b.dtype == dt
    assert_valid(b, None, discrete)
    ones = (b > 0.5).double().sum(0)  # for the relaxation: sigma((l + L)/tau) > 1/2 iff l + L > 0
    p = torch.sigmoid(BERNOULLI_LOGITS)
    z = (ones - n * p) / torch.sqrt(n * p * (1 - p))
    assert (z.abs() < 5).all(), z


def test_bernoulli_is_the_two_class_categorical_by_default():
    """The API's definition, spelled out with the default estimator."""
    x = torch.tensor([-3.0, 0.0, 3.0])
    b = hg.bernoulli(x, generator=gen(0))
    c = hg.categorical(torch.stack((torch.zeros(3), x), -1), generator=gen(0))
    assert torch.equal(b, c[:, 1])
    assert torch.equal(1 - b, c[:, 0])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", [(4, 5), (3,), ()], ids=str)
def test_bernoulli_equals_categorical_on_zero_and_logits(name, shape, dtype, tol):
    """hg.bernoulli(l) is the estimator's categorical on stack([0, l], -1), class 1, with
    the same noise (the estimator's bernoulli_noise: two Gumbels per unit, or (0, L) with
    one logistic L = g1 - g0 where only that difference matters): the same values
    (discrete samples bit for bit) and, up to rounding, the same gradients, for every
    estimator (some compute the binary case directly, in sigmoids)."""
    logits = (torch.randn(shape, generator=gen(4), dtype=torch.float64) * 2).to(dtype)
    gbar = torch.randn(shape, generator=gen(5), dtype=torch.float64).to(dtype)
    xb, xc, xp = (logits.clone().requires_grad_() for _ in range(3))
    est = hg.estimators.resolve(name)
    noise = est.bernoulli_noise(logits, gen(6))
    public = hg.bernoulli(xp, estimator=name, generator=gen(6))
    b = est.bernoulli(xb, noise)
    assert torch.equal(public, b)  # hg.bernoulli: bernoulli_noise, then bernoulli
    c = est.categorical(torch.stack((torch.zeros_like(xc), xc), -1), noise, xc.dim())
    if hg.estimators.get(name).discrete:
        assert torch.equal(b, c[..., 1])
    else:
        torch.testing.assert_close(b, c[..., 1], **tol)
    (gb,) = torch.autograd.grad(b, xb, gbar)
    (gc,) = torch.autograd.grad(c[..., 1], xc, gbar)
    torch.testing.assert_close(gb, gc, **tol)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("shape", "dim"), [((4, 5), -1), ((5, 4), 0), ((2, 3, 4), 1)], ids=str)
def test_categorical_is_resolve_noise_categorical(name, shape, dim):
    """hg.categorical = resolve the estimator, draw its noise, apply its categorical."""
    logits = torch.randn(shape, generator=gen(7))
    gbar = torch.randn(shape, generator=gen(8))
    x1, x2 = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    y1 = hg.categorical(x1, dim=dim, estimator=name, generator=gen(9))
    est = hg.estimators.resolve(name)
    y2 = est.categorical(x2, est.noise(x2, gen(9)), dim % len(shape))
    assert torch.equal(y1, y2)
    (g1,) = torch.autograd.grad(y1, x1, gbar)
    (g2,) = torch.autograd.grad(y2, x2, gbar)
    assert torch.equal(g1, g2)


def test_estimator_instances_carry_their_settings():
    """A name means the default instance; an instance brings its own tau and k."""
    logits = torch.randn(6, 5, generator=gen(10))
    gbar = torch.randn(6, 5, generator=gen(11))
    grads = {}
    for key, est in {
        "name": "gumbel_rao",
        "default": GumbelRao(),
        "tau": GumbelRao(tau=0.5),
        "k": GumbelRao(k=3),
    }.items():
        x = logits.clone().requires_grad_()
        y = hg.categorical(x, estimator=est, generator=gen(12))
        (grads[key],) = torch.autograd.grad(y, x, gbar)
    assert torch.equal(grads["name"], grads["default"])
    assert not torch.allclose(grads["default"], grads["tau"])
    assert not torch.allclose(grads["default"], grads["k"])
    x = logits.clone().requires_grad_()
    (g1,) = torch.autograd.grad(hg.categorical(x, generator=gen(12)), x, gbar)
    (g2,) = torch.autograd.grad(
        hg.categorical(x, estimator=ST(tau=3.0), generator=gen(12)), x, gbar
    )
    assert not torch.allclose(g1, g2)  # "st" by default, with tau = 1


# --------------------------------------------------------------------------------------
# Generators and reproducibility.
# --------------------------------------------------------------------------------------


def _both(name: str, x: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """hg.categorical along the last axis plus hg.bernoulli of the same logits."""
    return torch.cat(
        [
            hg.categorical(x, estimator=name, generator=generator),
            hg.bernoulli(x, estimator=name, generator=generator),
        ]
    )


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_samples_and_gradients(name, dtype):
    logits = torch.randn(6, 8, generator=gen(13)).to(dtype)
    gbar = torch.randn(12, 8, generator=gen(14)).to(dtype)
    results = []
    for seed in (21, 21, 22):
        x = logits.clone().requires_grad_()
        y = _both(name, x, gen(seed))
        (g,) = torch.autograd.grad(y, x, gbar)
        results.append((y.detach(), g))
    assert torch.equal(results[0][0], results[1][0])
    assert torch.equal(results[0][1], results[1][1])
    assert not torch.equal(results[0][0], results[2][0])  # another seed, another sample


@pytest.mark.parametrize("name", NAMES)
def test_generator_leaves_the_global_rng_alone(name):
    logits = torch.randn(6, 8, generator=gen(15))
    state = torch.get_rng_state()
    x = logits.clone().requires_grad_()
    y = _both(name, x, gen(23))
    y.backward(torch.ones_like(y))
    assert torch.equal(torch.get_rng_state(), state)


@pytest.mark.parametrize("name", NAMES)
def test_no_generator_draws_from_the_global_rng(name):
    logits = torch.randn(6, 8, generator=gen(16))
    torch.manual_seed(24)
    state = torch.get_rng_state()
    y1 = _both(name, logits, None)
    assert not torch.equal(torch.get_rng_state(), state)
    torch.manual_seed(24)
    assert torch.equal(_both(name, logits, None), y1)


def test_a_generator_gives_the_same_draws_as_the_global_rng_with_that_seed():
    logits = torch.randn(6, 8, generator=gen(17))
    torch.manual_seed(25)
    assert torch.equal(hg.categorical(logits), hg.categorical(logits, generator=gen(25)))


# --------------------------------------------------------------------------------------
# Shapes, dtypes, devices; 0-dim and empty tensors.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    ("shape", "dim"), [((7,), 0), ((3, 5), -1), ((3, 5), 0), ((2, 3, 4), 1), ((1, 1, 4), -1)]
)
def test_categorical_dtype_shape_device_preserved(name, shape, dim, dtype):
    discrete = ESTIMATORS.get(name).discrete
    x = (torch.randn(shape, generator=gen(18)) * 2).to(dtype).requires_grad_()
    y = hg.categorical(x, dim=dim, estimator=name, generator=gen(19))
    assert (y.shape, y.dtype, y.device) == (x.shape, dtype, x.device)
    assert_valid(y.detach(), dim, discrete)
    y.backward(torch.randn(shape, generator=gen(20)).to(dtype))
    assert x.grad is not None
    assert (x.grad.shape, x.grad.dtype, x.grad.device) == (x.shape, dtype, x.device)
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("shape", [(), (1,), (7,), (2, 3, 4)], ids=str)
def test_bernoulli_dtype_shape_device_preserved(name, shape, dtype):
    """0-dim logits included."""
    discrete = ESTIMATORS.get(name).discrete
    x = (torch.randn(shape, generator=gen(21)) * 2).to(dtype).requires_grad_()
    b = hg.bernoulli(x, estimator=name, generator=gen(22))
    assert (b.shape, b.dtype, b.device) == (x.shape, dtype, x.device)
    assert_valid(b.detach(), None, discrete)
    b.backward(torch.randn(shape, generator=gen(23)).to(dtype))
    assert x.grad is not None
    assert (x.grad.shape, x.grad.dtype, x.grad.device) == (x.shape, dtype, x.device)
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("name", NAMES)
def test_no_grad_logits_give_a_plain_sample(name):
    x = torch.randn(3, 4)
    assert not hg.categorical(x, estimator=name).requires_grad
    assert not hg.bernoulli(x, estimator=name).requires_grad
    with torch.no_grad():
        y = hg.categorical(x.requires_grad_(), estimator=name)
    assert not y.requires_grad


def test_bernoulli_zero_dim_values():
    for logit, value in ((1e4, 1.0), (-1e4, 0.0), (INF, 1.0), (-INF, 0.0)):
        x = torch.tensor(logit, requires_grad=True)
        b = hg.bernoulli(x, generator=gen(0))
        assert b.shape == () and b.item() == value
        b.backward()
        assert x.grad is not None and x.grad.shape == () and torch.isfinite(x.grad)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(
    ("shape", "dim"), [((0,), None), ((3, 0), None), ((0, 4), -1), ((3, 0), 0), ((2, 0, 3), -1)]
)
def test_empty_tensors(name, shape, dim):
    for dt in (torch.float32, torch.bfloat16):
        x = torch.empty(shape, dtype=dt, requires_grad=True)
        if dim is None:
            y = hg.bernoulli(x, estimator=name, generator=gen(0))
        else:
            y = hg.categorical(x, dim=dim, estimator=name, generator=gen(0))
        assert y.shape == x.shape and y.dtype == dt
        y.sum().backward()
        assert x.grad is not None and x.grad.shape == x.shape and x.grad.dtype == dt


@pytest.mark.parametrize("name", NAMES)
def test_no_categories_is_an_error(name):
    with pytest.raises(ValueError, match=r"`logits`.*at least one category.*dim=-1"):
        hg.categorical(torch.empty(3, 0), estimator=name)
    with pytest.raises(ValueError, match=r"at least one category.*dim=0"):
        hg.categorical(torch.empty(0, 3), dim=0, estimator=name)


def test_single_category_is_certain():
    for name in NAMES:
        x = torch.randn(4, 1, requires_grad=True)
        y = hg.categorical(x, estimator=name, generator=gen(0))
        assert torch.equal(y, torch.ones(4, 1))
        y.backward(torch.randn(4, 1))
        assert x.grad is not None and torch.isfinite(x.grad).all()


# --------------------------------------------------------------------------------------
# Numerical safety: large and infinite logits, tiny temperatures, half precision.
# --------------------------------------------------------------------------------------


def extreme_rows(dtype: torch.dtype, large: float) -> torch.Tensor:
    """Rows with +-1e4, the dtype's large magnitude, +-inf (a forced class, two forced
    classes, all classes excluded, one excluded) and ordinary values."""
    return torch.tensor(
        [
            [1e4, -1e4, 0.0, 1.0],
            [-1e4, 1e4, 1e4, -1e4],
            [large, -large, 0.0, 1.0],
            [INF, 0.0, -INF, 1.0],
            [0.0, INF, INF, -INF],
            [-INF, -INF, -INF, -INF],
            [-INF, 1.0, 2.0, -INF],
            [0.3, -0.2, 0.1, 0.0],
        ],
        dtype=torch.float64,
    ).to(dtype)


@pytest.mark.parametrize("tau", [1e-3, 1.0, 1e3])
@pytest.mark.parametrize("name", NAMES)
def test_extreme_logits_give_valid_samples_and_finite_gradients(name, tau, dtype, large):
    est = instance(name, tau=tau, k=3)
    logits = extreme_rows(dtype, large)
    gbar = torch.randn(logits.shape, generator=gen(30)).to(dtype)
    # A row of -inf only has no distribution: a ValueError naming `logits` (the categorical
    # part below leaves that row out; the Bernoulli part keeps it: 0 everywhere).
    with pytest.raises(ValueError, match=r"`logits`.*-inf"):
        hg.categorical(logits, estimator=est, generator=gen(31))
    rows = [0, 1, 2, 3, 4, 6, 7]
    x = logits[rows].clone().requires_grad_()
    y = hg.categorical(x, estimator=est, generator=gen(31))
    assert_valid(y.detach(), -1, est.discrete)
    (g,) = torch.autograd.grad(y, x, gbar[rows])
    assert g.dtype == dtype and torch.isfinite(g).all(), g
    if est.discrete:
        index = y.argmax(-1).tolist()
        assert index[0] == 0 and index[1] in (1, 2) and index[2] == 0  # 1e4 and large win
        assert index[3] == 0 and index[4] in (1, 2)  # +inf is a point mass (shared by several)
        assert index[5] in (1, 2)  # -inf excludes a class
    # The same for Bernoulli units, 0 and 1 at the extremes.
    xb = logits.clone().requires_grad_()
    b = hg.bernoulli(xb, estimator=est, generator=gen(32))
    assert_valid(b.detach(), None, est.discrete)
    (gb,) = torch.autograd.grad(b, xb, gbar)
    assert torch.isfinite(gb).all(), gb
    d = b.detach()
    assert d[3, 0] == 1 and d[3, 2] == 0 and (d[5] == 0).all()  # +-inf: exactly 1 and 0
    if est.discrete or tau <= 1:  # (the relaxation at tau = 1e3 gives sigma(1e4 / 1e3))
        assert d[0, 0] == 1 and d[0, 1] == 0 and d[2, 0] == 1 and d[2, 1] == 0


@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_half_precision_matches_float32_with_the_same_noise(name, dtype):
    """Noise is float32 for half logits: the sample is the float32 sample of the rounded
    logits, and the gradient that one rounded."""
    est = hg.estimators.get(name)
    logits = (torch.randn(6, 5, generator=gen(33)) * 3).to(dtype)
    gbar = torch.randn(6, 5, generator=gen(34)).to(dtype)
    xh, xf = logits.clone().requires_grad_(), logits.float().requires_grad_()
    yh = hg.categorical(xh, estimator=est, generator=gen(35))
    yf = hg.categorical(xf, estimator=est, generator=gen(35))
    if est.discrete:
        assert torch.equal(yh.float(), yf)
    else:
        torch.testing.assert_close(yh.float(), yf.to(dtype).float(), rtol=0, atol=0)
    (gh,) = torch.autograd.grad(yh, xh, gbar)
    (gf,) = torch.autograd.grad(yf, xf, gbar.float())
    torch.testing.assert_close(gh.float(), gf.to(dtype).float(), rtol=1e-2, atol=1e-3)


# --------------------------------------------------------------------------------------
# Bad input.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn", [hg.bernoulli, hg.categorical], ids=["bernoulli", "categorical"])
def test_unknown_estimator_lists_the_names(fn):
    with pytest.raises(ValueError, match="'no_such'") as info:
        fn(torch.zeros(3), estimator="no_such")
    for name in NAMES:
        assert repr(name) in str(info.value)
    with pytest.raises(ValueError, match="'ST'"):
        fn(torch.zeros(3), estimator="ST")  # names are case sensitive


@pytest.mark.parametrize("fn", [hg.bernoulli, hg.categorical], ids=["bernoulli", "categorical"])
@pytest.mark.parametrize("bad", [3, None, ST, hg.surrogates.Sigmoid(), lambda t: t], ids=repr)
def test_non_estimator_is_a_type_error(fn, bad):
    with pytest.raises(TypeError, match="`estimator`"):
        fn(torch.zeros(3), estimator=bad)


@pytest.mark.parametrize("fn", [hg.bernoulli, hg.categorical], ids=["bernoulli", "categorical"])
@pytest.mark.parametrize("bad", [0, "seed", torch.zeros(1), torch.default_generator.seed], ids=repr)
def test_bad_generator_type(fn, bad):
    with pytest.raises(TypeError, match=r"`generator`.*torch\.Generator"):
        fn(torch.zeros(3), generator=bad)


@pytest.mark.parametrize("fn", [hg.bernoulli, hg.categorical], ids=["bernoulli", "categorical"])
@pytest.mark.parametrize(
    "bad",
    [
        torch.zeros(3, dtype=torch.int64),
        torch.zeros(3, dtype=torch.bool),
        torch.zeros(3, dtype=torch.complex64),
    ],
    ids=lambda t: str(t.dtype),
)
def test_non_floating_logits(fn, bad):
    with pytest.raises(TypeError, match=r"`logits`.*floating-point.*dtype=torch"):
        fn(bad)


@pytest.mark.parametrize("fn", [hg.bernoulli, hg.categorical], ids=["bernoulli", "categorical"])
def test_non_tensor_logits(fn):
    with pytest.raises(TypeError, match=r"`logits`.*torch\.Tensor.*list"):
        fn([0.0, 1.0])


@pytest.mark.parametrize("dim", [2, -3, 10])
def test_dim_out_of_range(dim):
    with pytest.raises(ValueError, match=rf"`dim` in \[-2, 1\].*dim={dim}"):
        hg.categorical(torch.zeros(3, 4), dim=dim)


@pytest.mark.parametrize("dim", [1.0, None, "1", True])
def test_dim_not_an_int(dim):
    with pytest.raises(TypeError, match="`dim`"):
        hg.categorical(torch.zeros(3, 4), dim=dim)


def test_categorical_of_zero_dim_logits():
    with pytest.raises(ValueError, match="at least 1 dimension"):
        hg.categorical(torch.tensor(0.5))


def test_settings_are_keyword_only():
    with pytest.raises(TypeError):
        hg.categorical(torch.zeros(3), -1)  # type: ignore[misc]
    with pytest.raises(TypeError):
        hg.bernoulli(torch.zeros(3), "st")  # type: ignore[misc]


def test_bad_input_is_checked_before_drawing():
    state = torch.get_rng_state()
    with pytest.raises(ValueError):
        hg.categorical(torch.zeros(3, 4), dim=5)
    with pytest.raises(TypeError):
        hg.bernoulli(torch.zeros(3, dtype=torch.int32))
    assert torch.equal(torch.get_rng_state(), state)


# --------------------------------------------------------------------------------------
# torch.func: vmap with randomness, grad.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("with_generator", [False, True], ids=["global", "generator"])
@pytest.mark.parametrize("name", NAMES)
def test_vmap_randomness(name, with_generator):
    """randomness="different": each mapped row is its own draw; "same": one draw shared.
    Rows of 6 x 8 uniform classes (8^6 outcomes) and 32 fair bits: identical rows by chance
    have probability below 1e-4."""
    g = gen(40) if with_generator else None
    discrete = ESTIMATORS.get(name).discrete

    def sample(t: torch.Tensor) -> torch.Tensor:
        return hg.categorical(t, estimator=name, generator=g)

    def bits(t: torch.Tensor) -> torch.Tensor:
        return hg.bernoulli(t, estimator=name, generator=g)

    for fn, x, dim in ((sample, torch.zeros(8, 6, 8), -1), (bits, torch.zeros(8, 32), None)):
        different = vmap(fn, randomness="different")(x)
        same = vmap(fn, randomness="same")(x)
        for y in (different, same):
            assert y.shape == x.shape
            assert_valid(y, dim, discrete)
        assert len({tuple(row.flatten().tolist()) for row in different}) == len(x)
        assert all(torch.equal(row, same[0]) for row in same)
    with pytest.raises(RuntimeError, match="randomness"):
        vmap(sample)(torch.zeros(8, 6, 8))  # torch's default, randomness="error"


@pytest.mark.parametrize("name", NAMES)
def test_vmap_of_grad(name):
    x = torch.randn(8, 6, generator=gen(41))
    w = torch.randn(8, 6, generator=gen(42))

    def loss(t: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return (hg.categorical(t, estimator=name) * v).sum()

    per_row = vmap(grad(loss), randomness="different")(x, w)
    assert per_row.shape == x.shape and torch.isfinite(per_row).all()
    assert per_row.abs().sum() > 0
    if name != "st_identity":  # softmax backwards sum to zero per row
        torch.testing.assert_close(per_row.sum(-1), torch.zeros(8), rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", NAMES)
def test_func_grad_matches_eager(name):
    x = torch.randn(5, 6, generator=gen(43), dtype=torch.float64)
    w = torch.randn(5, 6, generator=gen(44), dtype=torch.float64)

    def loss(t: torch.Tensor) -> torch.Tensor:
        c = hg.categorical(t, estimator=name, generator=gen(45))
        b = hg.bernoulli(t, estimator=name, generator=gen(46))
        return (c * w).sum() + (b * w).sum()

    xr = x.clone().requires_grad_()
    loss(xr).backward()
    assert xr.grad is not None
    torch.testing.assert_close(grad(loss)(x), xr.grad, rtol=1e-12, atol=1e-14)


# --------------------------------------------------------------------------------------
# CUDA (skipped without a device).
# --------------------------------------------------------------------------------------


@pytest.mark.cuda
class TestCuda:
    @pytest.mark.parametrize("name", NAMES)
    def test_sampling_and_backward(self, name, dtype):
        device = torch.device("cuda")
        est = hg.estimators.get(name)
        logits = (torch.randn(6, 5, generator=gen(50)) * 2).to(dtype)
        gbar = torch.randn(6, 5, generator=gen(51)).to(dtype)
        state = torch.cuda.get_rng_state()
        results = []
        for _ in range(2):
            x = logits.to(device).requires_grad_()
            g = torch.Generator(device=device).manual_seed(52)
            y = hg.categorical(x, estimator=est, generator=g)
            (grad_,) = torch.autograd.grad(y, x, gbar.to(device))
            assert y.device == x.device and grad_.device == x.device
            assert y.dtype == dtype and grad_.dtype == dtype
            assert_valid(y.detach(), -1, est.discrete)
            assert torch.isfinite(grad_).all()
            results.append((y.detach(), grad_))
        assert torch.equal(torch.cuda.get_rng_state(), state)  # the generator was used
        assert torch.equal(results[0][0], results[1][0])
        assert torch.equal(results[0][1], results[1][1])
        # The same noise on the CPU gives the same sample and gradient.
        noise = est.noise(logits.to(device), torch.Generator(device=device).manual_seed(52))
        noise_cpu = tuple(n.cpu() for n in noise) if isinstance(noise, tuple) else noise.cpu()
        x = logits.clone().requires_grad_()
        y = est.categorical(x, noise_cpu, 1)
        (grad_cpu,) = torch.autograd.grad(y, x, gbar)
        if est.discrete:
            assert torch.equal(y, results[0][0].cpu())
        torch.testing.assert_close(
            results[0][1].cpu().double(), grad_cpu.double(), rtol=1e-2, atol=1e-2
        )

    @pytest.mark.parametrize("name", NAMES)
    def test_noise_on_the_device(self, name):
        x = torch.zeros(3, 4, device="cuda", dtype=torch.bfloat16)
        noise = hg.estimators.get(name).noise(x, torch.Generator(device="cuda").manual_seed(0))
        for n in noise if isinstance(noise, tuple) else (noise,):
            assert n.device == x.device and n.dtype == torch.float32

    @pytest.mark.parametrize("name", NAMES)
    def test_bernoulli_extremes(self, name):
        x = torch.tensor([1e4, -1e4, INF, -INF, 0.0], device="cuda", requires_grad=True)
        b = hg.bernoulli(x, estimator=name, generator=torch.Generator(device="cuda").manual_seed(0))
        assert b.device == x.device
        assert b[:4].tolist() == [1.0, 0.0, 1.0, 0.0]
        b.backward(torch.ones_like(b))
        assert x.grad is not None and torch.isfinite(x.grad).all()

    @pytest.mark.statistical
    def test_categorical_samples_are_exact(self):
        """As on the CPU: chi-square, p > 1e-6 (false-failure rate 1e-6)."""
        n, c = 100_000, PROBE.numel()
        logits = PROBE.float().cuda().expand(n, c)
        y = hg.categorical(logits, generator=torch.Generator(device="cuda").manual_seed(1))
        counts = torch.bincount(y.argmax(-1), minlength=c).double().cpu()
        expected = n * torch.softmax(PROBE, 0)
        stat = float(((counts - expected) ** 2 / expected).sum())
        assert chi2_sf_even(stat, c - 1) > 1e-6, stat


@pytest.mark.parametrize("tau", [1.0, 0.5, 3.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_small_st_bernoulli_records_autograd_own_product_by_the_slope(dtype, tau, monkeypatch):
    """Small CPU log-odds that need a gradient: the ST sample is recorded as autograd's own
    product by sigma'(l/tau)/tau (``MulBackward0``, no Python in backward). The same sample
    as the Function's, bit for bit, and the same gradient to the last bit's rounding (2
    ulps), also in the tails, at +-inf (0) and NaN (read as 0: slope 1/4)."""
    from hardgrad.estimators import _straight_through

    logits = torch.tensor(
        [0.0, -0.0, 0.3, -2.5, 7.0, -15.0, 30.0, -88.0, 100.0, math.inf, -math.inf, math.nan],
        dtype=dtype,
    )
    upstream = torch.linspace(-2.0, 3.0, logits.numel(), dtype=dtype)
    estimator = hg.estimators.ST(tau=tau)

    def run():
        x = logits.clone().requires_grad_()
        y = hg.bernoulli(x, estimator=estimator, generator=torch.Generator().manual_seed(3))
        (grad,) = torch.autograd.grad(y, x, upstream)
        return y, grad

    native_y, native_grad = run()
    assert type(native_y.grad_fn).__name__ == "MulBackward0"
    with monkeypatch.context() as patch:
        patch.setattr(_straight_through, "records_natively", lambda x: False)
        function_y, function_grad = run()
    assert type(function_y.grad_fn).__name__ == "_BinarySampleBackward"
    assert torch.equal(native_y.detach(), function_y.detach())
    ulp = torch.finfo(dtype).eps * native_grad.abs().clamp_min(torch.finfo(dtype).tiny)
    assert ((native_grad - function_grad).abs() <= 2 * ulp).all()
    wide = logits.double().nan_to_num(0.0) / tau
    exact = upstream.double() * torch.sigmoid(wide) * torch.sigmoid(-wide) / tau
    # a few roundings, plus |l/tau| times the rounding of l/tau itself (the exponent's
    # argument); below the smallest normal number: 0 or a subnormal
    precision = torch.finfo(dtype)
    argument = wide.abs().nan_to_num(posinf=0.0)  # (+-inf: an exact 0 either way)
    bound = (4 + argument) * precision.eps * exact.abs() + precision.tiny
    assert ((native_grad.double() - exact).abs() <= bound).all()
    assert (native_grad[-3:-1] == 0).all() and native_grad[-1] != 0
