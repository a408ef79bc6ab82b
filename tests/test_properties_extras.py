"""Property-based tests (hypothesis) of the public functions the other property files do not
reach: temperature schedules (``hg.nn.anneal``), ``hg.ops.soft_topk_mask``, the estimator
toolkit (``gumbel_noise``, ``attach_gradient``), ``hg.diagnostics.audit`` and the
``hardgrad.testing`` helpers.

The properties:

* schedules are finite, positive, start at ``start``, end at ``end`` and are monotone;
* the soft top-k mask lies in ``[0, 1]``, sums to ``k`` along ``dim`` and has a finite
  gradient for finite input in every dtype;
* Gumbel noise is finite, shaped like its template, of the documented dtype, reproducible
  from a generator and leaves the global RNG alone;
* ``attach_gradient`` returns its value bit for bit and hands the logits exactly the
  attached gradient times the incoming one;
* ``audit`` never changes what the watched code computes, for any input (inf and NaN
  included), and flags ``torch.round`` but not ``hg.round``;
* ``assert_straight_through`` accepts every op with any of its surrogates.

Runs are deterministic (``derandomize=True``, no example database).
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import hardgrad as hg
from _properties import (
    property_settings,
    tensors,
    upstream,
)
from hardgrad.estimators import Problem, attach_gradient, gumbel_noise
from hardgrad.ops import OPS
from hardgrad.surrogates import SURROGATES

SETTINGS = property_settings(max_examples=30)


# --------------------------------------------------------------------------------------
# Temperature schedules.
# --------------------------------------------------------------------------------------

positive = st.one_of(st.floats(1e-6, 1e6), st.sampled_from((1e-300, 1e300, 1.0)))


@SETTINGS
@given(
    start=positive,
    end=positive,
    steps=st.integers(1, 10**6),
    kind=st.sampled_from(("exponential", "linear", "cosine")),
    probes=st.lists(st.integers(-10, 2 * 10**6), min_size=1, max_size=8),
)
def test_schedule_is_finite_positive_monotone_and_hits_its_ends(start, end, steps, kind, probes):
    schedule = hg.nn.anneal(start, end, steps, kind=kind)
    assert schedule(0) == pytest.approx(start, rel=1e-12)
    assert schedule(steps) == pytest.approx(end, rel=1e-12)
    assert schedule(steps + 1) == schedule(10 * steps) == schedule(steps)
    low, high = min(start, end), max(start, end)
    values = [schedule(t) for t in sorted(probes)]
    for value in values:
        assert math.isfinite(value) and value > 0, value
        assert low * (1 - 1e-12) <= value <= high * (1 + 1e-12), (value, low, high)
    differences = [b - a for a, b in itertools.pairwise(values)]
    slack = 1e-12 * high
    if end <= start:
        assert all(d <= slack for d in differences), values
    else:
        assert all(d >= -slack for d in differences), values


# --------------------------------------------------------------------------------------
# soft_topk_mask.
# --------------------------------------------------------------------------------------


@SETTINGS
@given(data=st.data(), tau=st.one_of(st.floats(0.01, 100.0), st.just(1.0)), seed=st.integers(0, 99))
def test_soft_topk_mask_is_a_finite_relaxed_mask(data, tau, seed):
    x = data.draw(
        tensors(max_dims=3, min_dims=1, bound=1e4).filter(lambda t: t.shape[-1] > 0), label="x"
    )
    k = data.draw(st.integers(0, x.shape[-1]), label="k")
    leaf = x.clone().requires_grad_()
    m = hg.ops.soft_topk_mask(leaf, k, tau=tau)
    assert m.shape == x.shape and m.dtype == x.dtype
    assert torch.isfinite(m).all() and (m >= 0).all() and (m <= 1).all(), m
    if x.numel():
        sums = m.double().sum(-1)
        tolerance = 1e-6 if x.dtype == torch.float64 else 2e-2 * x.shape[-1]
        torch.testing.assert_close(sums, torch.full_like(sums, k), atol=tolerance, rtol=0)
    (grad,) = torch.autograd.grad(m, leaf, upstream(m, seed))
    assert grad.shape == x.shape and grad.dtype == x.dtype and torch.isfinite(grad).all(), grad


# --------------------------------------------------------------------------------------
# The estimator toolkit.
# --------------------------------------------------------------------------------------


@SETTINGS
@given(like=tensors(max_dims=3, nonfinite=True), seed=st.integers(0, 2**31))
def test_gumbel_noise_is_finite_reproducible_and_leaves_the_global_rng(like, seed):
    before = torch.random.get_rng_state()
    first = gumbel_noise(like, torch.Generator().manual_seed(seed))
    again = gumbel_noise(like, torch.Generator().manual_seed(seed))
    assert torch.equal(torch.random.get_rng_state(), before)
    assert first.shape == like.shape
    # Half-precision templates get float32 noise (their own would round the tails away).
    expected = torch.float32 if like.dtype in (torch.float16, torch.bfloat16) else like.dtype
    assert first.dtype == expected
    assert torch.isfinite(first).all()
    assert torch.equal(first, again)


@SETTINGS
@given(
    logits=tensors(dtypes=(torch.float64, torch.float32), max_dims=3, bound=1e30),
    scale=st.floats(-1e3, 1e3),
    seed=st.integers(0, 99),
)
def test_attach_gradient_keeps_the_value_and_attaches_the_gradient(logits, scale, seed):
    leaf = logits.clone().requires_grad_()
    problem = Problem(
        f=lambda b: b.sum(tuple(range(1, b.dim()))),
        logits=leaf,
        categorical=False,
        dim=0,
        num_samples=1,
        generator=None,
    )
    g = torch.Generator().manual_seed(seed)
    value = torch.randn((), generator=g, dtype=leaf.dtype)
    gradient = torch.randn(leaf.shape, generator=g, dtype=torch.float64).to(leaf.dtype)
    out = attach_gradient(problem, value, gradient)
    assert torch.equal(out.detach(), value)
    (received,) = torch.autograd.grad(out, leaf, torch.tensor(scale, dtype=leaf.dtype))
    torch.testing.assert_close(received, gradient * scale)


# --------------------------------------------------------------------------------------
# audit.
# --------------------------------------------------------------------------------------


def _model(x: torch.Tensor, w: torch.Tensor, use_hardgrad: bool) -> torch.Tensor:
    h = x * w
    return (hg.round(h) if use_hardgrad else torch.round(h)).sum()


@SETTINGS
@given(
    x=tensors(dtypes=(torch.float32, torch.float64), max_dims=3, nonfinite=True),
    hardgrad_op=st.booleans(),
)
def test_audit_never_changes_results_and_flags_only_torch_round(x, hardgrad_op):
    w = torch.full((), 1.5, dtype=x.dtype, requires_grad=True)
    plain = _model(x, w, hardgrad_op)
    (plain_grad,) = torch.autograd.grad(plain, w)
    with hg.diagnostics.audit() as report:
        watched = _model(x, w, hardgrad_op)
        (watched_grad,) = torch.autograd.grad(watched, w)
    torch.testing.assert_close(watched, plain, equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(watched_grad, plain_grad, equal_nan=True, rtol=0, atol=0)
    flagged = {f.op for f in report.of_kind("zero_gradient")}
    assert ("torch.round" in flagged) is (not hardgrad_op), str(report)
    assert report.ops_seen > 0


# --------------------------------------------------------------------------------------
# hardgrad.testing on the library's own ops.
# --------------------------------------------------------------------------------------

STEP_LIKE = [name for name, spec in OPS.items() if spec.family in ("staircase", "step")]


@SETTINGS
@given(name=st.sampled_from(STEP_LIKE), data=st.data())
def test_assert_straight_through_accepts_every_op_with_its_surrogates(name, data):
    """On drawn inputs (every dtype, any magnitude, 0-dim and empty): the op with any of its
    surrogates passes the public helper against its plain-torch reference, or (issue 38)
    the helper refuses inputs that check nothing, and they are seen to check nothing."""
    spec = OPS.get(name)
    surrogates = [n for n, cls in SURROGATES.items() if spec.family in cls.applies_to]
    surrogate = data.draw(st.sampled_from(surrogates), label="surrogate")
    x = data.draw(tensors(max_dims=3), label="x")

    def op(t: torch.Tensor) -> torch.Tensor:
        return spec(t, surrogate=surrogate)

    instance = SURROGATES.default(surrogate)
    try:
        hg.testing.assert_straight_through(op, spec.reference, instance, inputs=x, dtypes=[x.dtype])
    except AssertionError as error:
        if "nothing is checked" not in str(error):
            raise
        # Empty, hard == s at every input, or s' negligible at every input (the op's
        # gradient then rounds to zero in the dtype; 0.1 is far above every dtype's atol).
        hard, smooth = spec.reference(x), instance.function(x)
        vacuous = (
            x.numel() == 0
            or bool(((hard == smooth) | (hard.isnan() & smooth.isnan())).all())
            or float(instance.derivative(x.double()).abs().max()) <= 0.1
        )
        assert vacuous, error
