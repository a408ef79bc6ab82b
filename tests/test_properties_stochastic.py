"""Property-based tests (hypothesis) of the samplers, ``hg.expectation`` and the estimators.

Estimators come from :data:`hardgrad.estimators.ESTIMATORS`: the pathwise ones through
``hg.bernoulli``/``hg.categorical``, all of them through ``hg.expectation``. Hypothesis draws
shapes (0-dim, empty dimensions), dtypes and logits of every magnitude (``+-finfo.max``,
all equal, subnormal) and, separately, +-inf and NaN. The properties:

* finite logits give exact samples ({0, 1}, one-hot along ``dim``) or, for the relaxation,
  values in [0, 1]; output and gradient are finite; shape and dtype are kept;
* ``-inf`` logits exclude a category and ``+inf`` forces it; NaN logits give the documented
  finite result in the samplers and a ``ValueError`` in ``hg.expectation``;
* the same generator seed gives identical samples and gradients, and a generator leaves
  the global RNG alone;
* ``hg.expectation``'s value and gradient are finite for finite logits, for every
  estimator that applies to the distribution;
* bad settings raise ``TypeError``/``ValueError`` naming the argument.

Runs are deterministic (``derandomize=True``, no example database).
"""

from __future__ import annotations

import dataclasses
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
from hardgrad.estimators import ESTIMATORS

SETTINGS = property_settings(max_examples=25)


PATHWISE = [name for name, cls in ESTIMATORS.items() if cls.pathwise]
SAMPLERS = {"bernoulli": hg.bernoulli, "categorical": hg.categorical}


# --------------------------------------------------------------------------------------
# Strategies.
# --------------------------------------------------------------------------------------


TAUS = st.one_of(st.just(1.0), st.floats(0.05, 20.0))


@st.composite
def pathwise_estimators(draw: st.DrawFn, name: str) -> str | hg.estimators.Estimator:
    """The estimator's name, or an instance with drawn settings."""
    cls = ESTIMATORS.get(name)
    fields = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else []
    if not fields or draw(st.booleans()):
        return name
    kwargs: dict[str, Any] = {"tau": draw(TAUS)}
    if "k" in fields:
        kwargs["k"] = draw(st.integers(1, 4))
    if "gap" in fields:
        kwargs["gap"] = draw(st.floats(0.05, 20.0))
    return cls(**kwargs)  # type: ignore[no-any-return]


def sample(
    dist: str, logits: torch.Tensor, estimator: Any, dim: int, generator: torch.Generator
) -> torch.Tensor:
    if dist == "bernoulli":
        return hg.bernoulli(logits, estimator=estimator, generator=generator)
    return hg.categorical(logits, dim=dim, estimator=estimator, generator=generator)


@st.composite
def sampler_inputs(draw: st.DrawFn, nonfinite: bool = False) -> tuple[str, torch.Tensor, int]:
    """``(dist, logits, dim)`` valid for the sampler: categorical logits have >= 1 dim and
    at least one category along ``dim``."""
    dist = draw(st.sampled_from(tuple(SAMPLERS)))
    if dist == "bernoulli":
        return dist, draw(tensors(max_dims=3, nonfinite=nonfinite)), -1
    logits = draw(tensors(max_dims=3, min_dims=1, nonfinite=nonfinite))
    dim = draw(st.integers(-logits.dim(), logits.dim() - 1))
    if logits.shape[dim] == 0:  # no category: an error (tested below); use 2 instead
        logits = logits.new_zeros(with_side(logits.shape, dim, 2))
    return dist, logits, dim


def with_side(shape: torch.Size, dim: int, side: int) -> tuple[int, ...]:
    dim %= len(shape)
    return tuple(side if d == dim else s for d, s in enumerate(shape))


def assert_valid_sample(
    y: torch.Tensor, logits: torch.Tensor, dist: str, dim: int, discrete: bool
) -> None:
    assert y.shape == logits.shape and y.dtype == logits.dtype and y.device == logits.device
    assert torch.isfinite(y).all(), y
    if discrete:
        assert ((y == 0) | (y == 1)).all(), y
    else:
        assert ((y >= 0) & (y <= 1)).all(), y
    if dist == "categorical" and y.numel():
        total = y.double().sum(dim)
        tolerance = (
            0 if discrete else {torch.float16: 1e-2, torch.bfloat16: 4e-2}.get(y.dtype, 1e-5)
        )
        assert ((total - 1).abs() <= tolerance * y.shape[dim]).all(), total


# --------------------------------------------------------------------------------------
# Samplers: exact samples, finite gradients.
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", PATHWISE)
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_finite_logits_give_valid_samples_and_finite_gradients(name, data, seed):
    dist, logits, dim = data.draw(sampler_inputs(), label="dist, logits, dim")
    estimator = data.draw(pathwise_estimators(name), label="estimator")
    leaf = logits.clone().requires_grad_()
    y = sample(dist, leaf, estimator, dim, torch.Generator().manual_seed(seed))
    assert_valid_sample(y.detach(), logits, dist, dim, ESTIMATORS.get(name).discrete)
    (grad,) = torch.autograd.grad(y, leaf, upstream(y, seed + 1))
    assert grad.shape == logits.shape and grad.dtype == logits.dtype
    assert torch.isfinite(grad).all(), grad


def _a_row_of_minus_inf(logits: torch.Tensor, dim: int) -> bool:
    """Whether some row along ``dim`` is all -inf (no NaN in it)."""
    return logits.numel() > 0 and bool((logits == -INF).all(dim).any())


@pytest.mark.parametrize("name", PATHWISE)
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_infinite_and_nan_logits_give_the_documented_samples(name, data, seed):
    """``-inf`` excludes a category (an event of probability 0; a row of -inf only is a
    ValueError), ``+inf`` forces it, NaN counts as the largest logit (documented, as in ``torch.argmax``); samples and
    gradients stay finite."""
    dist, logits, dim = data.draw(sampler_inputs(nonfinite=True), label="dist, logits, dim")
    estimator = data.draw(pathwise_estimators(name), label="estimator")
    leaf = logits.clone().requires_grad_()
    if dist == "categorical" and _a_row_of_minus_inf(logits, dim):
        # No distribution (every category excluded): a ValueError naming `logits` (issue 38)
        generator = torch.Generator().manual_seed(seed)
        assert_raises_naming("logits", sample, dist, leaf, estimator, dim, generator)
        return
    y = sample(dist, leaf, estimator, dim, torch.Generator().manual_seed(seed))
    discrete = ESTIMATORS.get(name).discrete
    if discrete:
        assert_valid_sample(y.detach(), logits, dist, dim, discrete)
    (grad,) = torch.autograd.grad(y, leaf, upstream(y, seed + 1))
    assert torch.isfinite(grad).all(), grad
    if not discrete:
        return
    y = y.detach()
    if dist == "bernoulli":
        assert (y[logits == -INF] == 0).all() and (y[logits == INF] == 1).all()
        assert (y[logits.isnan()] == 1).all()
        return
    categories = logits.shape[dim]
    rows = logits.movedim(dim, -1).reshape(-1, categories)
    picks = y.movedim(dim, -1).reshape(-1, categories).argmax(-1)
    for row, pick in zip(rows, picks, strict=True):
        chosen = row[pick]
        if row.isnan().any():
            assert chosen.isnan(), (row, pick)
        elif (row == INF).any():
            assert chosen == INF, (row, pick)
        elif (row > -INF).any():
            assert chosen > -INF, (row, pick)


@pytest.mark.parametrize("name", PATHWISE)
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_same_seed_same_samples_and_gradients_and_global_rng_untouched(name, data, seed):
    dist, logits, dim = data.draw(sampler_inputs(), label="dist, logits, dim")
    estimator = data.draw(pathwise_estimators(name), label="estimator")
    state = torch.get_rng_state()
    results = []
    for _ in range(2):
        leaf = logits.clone().requires_grad_()
        y = sample(dist, leaf, estimator, dim, torch.Generator().manual_seed(seed))
        (grad,) = torch.autograd.grad(y, leaf, upstream(y, 1))
        results.append((y.detach(), grad))
    assert torch.equal(torch.get_rng_state(), state)
    (y1, g1), (y2, g2) = results
    assert torch.equal(y1, y2) and torch.equal(g1, g2)


# --------------------------------------------------------------------------------------
# Bengio et al. (2013) units.
# --------------------------------------------------------------------------------------


UNITS: dict[str, Callable[..., torch.Tensor]] = {
    "stochastic_times_smooth": hg.stochastic_times_smooth,
    "noisy_rectifier": hg.noisy_rectifier,
}


@pytest.mark.parametrize("name", UNITS)
@SETTINGS
@given(
    data=st.data(),
    sigma=st.one_of(st.just(1.0), st.just(0.0), st.floats(0.0, 10.0)),
    seed=st.integers(0, 2**16),
)
def test_bengio_units_are_finite_reproducible_and_leave_the_global_rng(name, data, sigma, seed):
    x = data.draw(tensors(max_dims=3), label="x")
    kwargs = {"sigma": sigma} if name == "noisy_rectifier" else {}
    state = torch.get_rng_state()
    results = []
    for _ in range(2):
        leaf = x.clone().requires_grad_()
        y = UNITS[name](leaf, generator=torch.Generator().manual_seed(seed), **kwargs)
        assert y.shape == x.shape and y.dtype == x.dtype
        (grad,) = torch.autograd.grad(y, leaf, upstream(y, seed + 1))
        results.append((y.detach(), grad))
    assert torch.equal(torch.get_rng_state(), state)
    (y1, g1), (y2, g2) = results
    assert torch.equal(y1, y2) and torch.equal(g1, g2)
    assert torch.isfinite(y1).all(), y1
    assert torch.isfinite(g1).all(), g1
    assert (y1 >= 0).all()


@SETTINGS
@given(bad=st.sampled_from((-1.0, -1e-30, NAN, INF, "1", None, True)))
def test_noisy_rectifier_bad_sigma(bad):
    assert_raises_naming("sigma", hg.noisy_rectifier, torch.zeros(3), sigma=bad)


# --------------------------------------------------------------------------------------
# hg.expectation with every estimator.
# --------------------------------------------------------------------------------------


def field_names(name: str) -> list[str]:
    cls = ESTIMATORS.get(name)
    return [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else []


def _dists(name: str) -> tuple[str, ...]:
    return tuple(getattr(ESTIMATORS.get(name), "dists", ("bernoulli", "categorical")))


def make_estimator(name: str) -> Any:
    """A fresh instance for stateful (module) estimators, the name otherwise."""
    cls = ESTIMATORS.get(name)
    return cls() if issubclass(cls, torch.nn.Module) else name


EXPECTATION_CASES = [
    pytest.param(name, dist, id=f"{name}-{dist}")
    for name in ESTIMATORS.names()
    for dist in _dists(name)
]


@st.composite
def expectation_inputs(
    draw: st.DrawFn, dist: str, nonfinite: bool = False
) -> tuple[torch.Tensor, int, int]:
    """``(logits, dim, prefix_ndim)``: small logits (at most 6 variables, so that exact
    enumeration stays small) and how many batch dimensions ``f``'s value keeps."""
    if dist == "bernoulli":
        logits = draw(
            tensors(max_dims=2, max_side=3, nonfinite=nonfinite).filter(lambda t: t.numel() <= 6)
        )
        batch = logits.dim()
        dim = 0
    else:
        logits = draw(
            tensors(min_dims=1, max_dims=2, max_side=3, nonfinite=nonfinite).filter(
                lambda t: t.numel() <= 6
            )
        )
        dim = draw(st.integers(-logits.dim(), logits.dim() - 1))
        if logits.shape[dim] == 0:
            logits = logits.new_zeros(with_side(logits.shape, dim, 2))
        batch = logits.dim() - 1
    prefix = draw(st.integers(0, batch))
    return logits, dim, prefix


def objective(
    logits: torch.Tensor, dist: str, dim: int, prefix: int
) -> Callable[[torch.Tensor], torch.Tensor]:
    """A smooth per-example loss ``(n, *logits.shape) -> (n, *batch[:prefix])``."""
    target = torch.linspace(-0.3, 0.7, max(logits.numel(), 1), dtype=logits.dtype)[: logits.numel()]
    target = target.reshape(logits.shape)

    def f(b: torch.Tensor) -> torch.Tensor:
        value = (b - target).square()
        if dist == "categorical":
            value = value.sum(dim % logits.dim() + 1)
        trailing = tuple(range(1 + prefix, value.dim()))
        return value.sum(trailing) if trailing else value

    return f


@pytest.mark.parametrize(("name", "dist"), EXPECTATION_CASES)
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_expectation_value_and_gradient_are_finite(name, dist, data, seed):
    logits, dim, prefix = data.draw(expectation_inputs(dist), label="logits, dim, prefix")
    estimator = make_estimator(name)
    cls = ESTIMATORS.get(name)
    num_samples = None
    if name != "exact" and data.draw(st.booleans(), label="explicit num_samples"):
        multiple = getattr(cls, "sample_multiple", 1)
        num_samples = multiple * data.draw(st.integers(max(1, 2 // multiple), 3), label="n")
    leaf = logits.clone().requires_grad_()
    f = objective(logits, dist, dim, prefix)
    value = hg.expectation(
        f,
        leaf,
        dist=dist,
        estimator=estimator,
        num_samples=num_samples,
        dim=dim,
        generator=torch.Generator().manual_seed(seed),
    )
    batch = logits.shape if dist == "bernoulli" else logits.movedim(dim, -1).shape[:-1]
    assert value.shape == batch[:prefix] and value.dtype == logits.dtype
    assert torch.isfinite(value).all(), value
    (grad,) = torch.autograd.grad(value, leaf, upstream(value, seed + 1), allow_unused=True)
    if grad is not None:
        assert grad.shape == logits.shape and grad.dtype == logits.dtype
        assert torch.isfinite(grad).all(), grad


@pytest.mark.parametrize(("name", "dist"), EXPECTATION_CASES)
@SETTINGS
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_expectation_with_inf_and_nan_logits(name, dist, data, seed):
    """Documented: ``+-inf`` logits are allowed (finite value and gradient), NaN logits
    raise ``ValueError`` naming `logits` while validation is on."""
    logits, dim, prefix = data.draw(
        expectation_inputs(dist, nonfinite=True), label="logits, dim, prefix"
    )
    f = objective(logits, dist, dim, prefix)
    leaf = logits.clone().requires_grad_()
    kwargs = {
        "dist": dist,
        "estimator": make_estimator(name),
        "dim": dim,
        "generator": torch.Generator().manual_seed(seed),
    }
    if logits.isnan().any() or (dist == "categorical" and _a_row_of_minus_inf(logits, dim)):
        assert_raises_naming("logits", hg.expectation, f, leaf, **kwargs)
        return
    value = hg.expectation(f, leaf, **kwargs)
    assert torch.isfinite(value).all(), value
    (grad,) = torch.autograd.grad(value, leaf, upstream(value, seed + 1), allow_unused=True)
    assert grad is None or torch.isfinite(grad).all(), grad


@pytest.mark.parametrize(("name", "dist"), EXPECTATION_CASES)
@SETTINGS
@given(data=st.data())
def test_expectation_same_seed_same_value_and_gradient(name, dist, data):
    logits, dim, prefix = data.draw(expectation_inputs(dist), label="logits, dim, prefix")
    f = objective(logits, dist, dim, prefix)
    state = torch.get_rng_state()
    results = []
    for _ in range(2):
        leaf = logits.clone().requires_grad_()
        value = hg.expectation(
            f,
            leaf,
            dist=dist,
            estimator=make_estimator(name),
            dim=dim,
            generator=torch.Generator().manual_seed(3),
        )
        (grad,) = torch.autograd.grad(value, leaf, upstream(value, 1), allow_unused=True)
        results.append((value.detach(), grad))
    assert torch.equal(torch.get_rng_state(), state)
    (v1, g1), (v2, g2) = results
    assert torch.equal(v1, v2)
    assert (g1 is None and g2 is None) or torch.equal(g1, g2)


# --------------------------------------------------------------------------------------
# Bad settings.
# --------------------------------------------------------------------------------------


@SETTINGS
@given(
    fn=st.sampled_from(tuple(SAMPLERS)),
    case=st.sampled_from(
        (
            ("estimator", {"estimator": "no_such_estimator"}),
            ("estimator", {"estimator": 3}),
            ("estimator", {"estimator": "disarm"}),  # not pathwise
            ("generator", {"generator": 0}),
            ("logits", {"logits": torch.tensor([1, 2])}),
            ("logits", {"logits": [0.5]}),
        )
    ),
)
def test_sampler_bad_settings_raise_naming_them(fn, case):
    argument, kwargs = case[0], dict(case[1])
    logits = kwargs.pop("logits", torch.zeros(2, 3))
    assert_raises_naming(argument, SAMPLERS[fn], logits, **kwargs)


@SETTINGS
@given(data=st.data())
def test_categorical_bad_dim_raises_naming_it(data):
    logits = data.draw(tensors(dtypes=(torch.float32,), max_dims=3))
    if logits.dim() == 0:
        dim = data.draw(st.sampled_from((0, -1)))
    else:
        dim = data.draw(st.sampled_from((logits.dim(), -logits.dim() - 1, 0.0, "0", None)))
    assert_raises_naming("dim", hg.categorical, logits, dim=dim)


ESTIMATOR_BAD: tuple[tuple[str, str, dict[str, Any]], ...] = (
    *(
        ("tau", n, {"tau": t})
        for n in PATHWISE
        if "tau" in field_names(n)
        for t in (0.0, -1.0, NAN, INF, "1")
    ),
    ("k", "gumbel_rao", {"k": 0}),
    ("k", "gumbel_rao", {"k": 1.5}),
    ("gap", "gst", {"gap": 0.0}),
    ("gap", "gst", {"gap": NAN}),
    ("baseline", "reinforce", {"baseline": "mean"}),
    ("decay", "reinforce", {"baseline": "ema", "decay": 1.0}),
    ("decay", "reinforce", {"baseline": "ema", "decay": NAN}),
    ("max_configurations", "exact", {"max_configurations": 0}),
    ("max_configurations", "exact", {"max_configurations": 2.0}),
    ("tau", "rebar", {"tau": 0.0}),
    ("scale", "rebar", {"scale": NAN}),
    ("control_variate", "relax", {"control_variate": 3}),
)


@SETTINGS
@given(case=st.sampled_from(ESTIMATOR_BAD))
def test_estimator_bad_settings_raise_naming_them(case):
    argument, name, kwargs = case
    assert_raises_naming(argument, ESTIMATORS.get(name), **kwargs)


EXPECTATION_BAD: tuple[tuple[str, dict[str, Any]], ...] = (
    ("f", {"f": 3}),
    ("f", {"f": lambda b: b.sum()}),  # no sample dimension
    ("f", {"f": lambda b: (b > 0).long()}),  # not floating
    ("dist", {"dist": "poisson"}),
    ("dist", {"dist": "categorical", "estimator": "arm"}),
    ("estimator", {"estimator": "no_such_estimator"}),
    ("num_samples", {"estimator": "disarm", "num_samples": 3}),
    ("num_samples", {"estimator": "rloo", "num_samples": 1}),
    ("num_samples", {"estimator": "exact", "num_samples": 4}),
    ("num_samples", {"estimator": "st", "num_samples": 0}),
    ("num_samples", {"estimator": "st", "num_samples": 2.0}),
    ("generator", {"generator": "seed"}),
    ("dim", {"dist": "categorical", "dim": 5}),
    ("max_configurations", {"estimator": hg.estimators.Exact(max_configurations=2)}),
)


@SETTINGS
@given(case=st.sampled_from(EXPECTATION_BAD))
def test_expectation_bad_settings_raise_naming_them(case):
    argument, kwargs = case[0], dict(case[1])
    f = kwargs.pop("f", lambda b: b.square().sum(-1))
    assert_raises_naming(argument, hg.expectation, f, torch.zeros(2, 3), **kwargs)
