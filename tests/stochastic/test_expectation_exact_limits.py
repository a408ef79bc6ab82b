"""``estimator="exact"`` on problems too large to enumerate: a ValueError that names the
number of configurations, the limit and what to use instead, before anything is allocated."""

import time

import pytest
import torch

import hardgrad as hg
from hardgrad.estimators import Exact


def _joint(b):
    """One value per sample: every variable enumerated jointly."""
    return b.flatten(1)[:, :1].sum(-1)


def test_2_to_the_80_configurations_is_a_clear_value_error():
    with pytest.raises(ValueError, match=r"max_configurations.*=65536 .*found 2\^80 .*disarm"):
        hg.expectation(_joint, torch.zeros(80), estimator="exact")


def test_a_limit_beyond_int64_is_not_an_overflow_error():
    # (raised a raw OverflowError from torch.arange before: "int too big to convert")
    exact = Exact(max_configurations=2**100)
    with pytest.raises(ValueError, match=r"2\^63 - 1.*found 2\^80 = 1208925819614629174706176 "):
        hg.expectation(_joint, torch.zeros(80), estimator=exact)


def test_categorical_sizes_are_named():
    logits = torch.zeros(10, 1000)
    with pytest.raises(ValueError, match=r"1000\^10 .*10 variables.*rloo"):
        hg.expectation(_joint, logits, dist="categorical", estimator="exact")


@pytest.mark.parametrize("dist", ["bernoulli", "categorical"])
def test_huge_expanded_shapes_fail_fast_without_computing_the_count(dist):
    # 10**6 variables of one entry: 2**(10**6) (or 3**(10**6)) configurations; neither
    # the power nor any tensor of that size may be made. The only call of f is the first
    # guess (each variable alone, 2 or 3 configurations).
    shape = (10**6,) if dist == "bernoulli" else (10**6, 3)
    logits = torch.zeros((1,) * len(shape)).expand(shape)
    calls = []

    def f(b):
        calls.append(tuple(b.shape))
        return _joint(b)

    start = time.perf_counter()
    for limit in (2**16, 2**1000):
        with pytest.raises(ValueError, match=r"\^1000000 \(1000000 variables"):
            hg.expectation(f, logits, dist=dist, estimator=Exact(max_configurations=limit))
    assert time.perf_counter() - start < 5
    assert all(shape[0] <= 3 for shape in calls)
