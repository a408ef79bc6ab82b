"""Shared pieces of the property-based (hypothesis) test files ``test_properties_*.py``.

Strategies are needed when a test is decorated, so they cannot be fixtures; ``conftest.py``
puts this folder on ``sys.path`` so that the test files can import this module under
``--import-mode=importlib``.

Every property test runs with :func:`property_settings`: derandomized (the same examples on
every run and machine, so a failure is reproducible and CI is never flaky), no example
database, no deadline (the first call of a torch op can be slow).

A deeper search: ``HARDGRAD_PROPERTY_EXAMPLES=F`` multiplies every test's number of
examples by ``F`` (e.g. ``HARDGRAD_PROPERTY_EXAMPLES=20 .venv/bin/python -m pytest
tests/test_properties_*.py``, about 20 times as long); ``HARDGRAD_PROPERTY_RANDOM=1`` draws
fresh examples on every run instead of CI's fixed ones (hypothesis prints the seed of a
failure; ``--hypothesis-seed=N`` replays it).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from hardgrad.surrogates import SURROGATES

DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
INF, NAN = math.inf, math.nan


def _env_number(name: str, default: float) -> float:
    value = os.environ.get(name, "")
    try:
        return float(value) if value else default
    except ValueError:
        raise ValueError(
            f"Expected the environment variable {name} to be a number, but found {value!r}"
        ) from None


def property_settings(max_examples: int) -> settings:
    """Deterministic hypothesis settings with ``max_examples`` examples per test (times
    ``HARDGRAD_PROPERTY_EXAMPLES``)."""
    factor = _env_number("HARDGRAD_PROPERTY_EXAMPLES", 1.0)
    fresh = _env_number("HARDGRAD_PROPERTY_RANDOM", 0.0) != 0
    return settings(
        derandomize=not fresh,
        deadline=None,
        max_examples=max(1, round(max_examples * factor)),
        database=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,  # conftest's autouse seed; draws use their own
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
        ],
    )


def special_values(dtype: torch.dtype) -> tuple[float, ...]:
    """Signed zeros, half-integers, the dtype's extremes, its smallest normal and subnormal."""
    info = torch.finfo(dtype)
    subnormal = info.tiny * info.eps
    return (
        *(0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -2.5, 0.125, -0.125),
        *(info.max, -info.max, info.max / 3, -info.max / 3, info.eps, -info.eps),
        *(info.tiny, -info.tiny, subnormal, -subnormal, 3 * subnormal),
    )


def elements(
    dtype: torch.dtype, nonfinite: bool = False, bound: float | None = None
) -> st.SearchStrategy[float]:
    """Values for ``dtype``: small ones, the special values, every magnitude it holds (up to
    ``bound`` if given), subnormals, and ``+-inf`` and NaN when ``nonfinite``."""
    info = torch.finfo(dtype)
    top = info.max if bound is None else min(bound, info.max)
    choices = [
        st.floats(-8.0, 8.0),
        st.sampled_from([v for v in special_values(dtype) if abs(v) <= top]),
        st.floats(-top, top),
        st.floats(-info.tiny, info.tiny),  # subnormals (rounded to the dtype's)
    ]
    if nonfinite:
        choices.append(st.sampled_from((INF, -INF, NAN)))
    return st.one_of(choices)


@st.composite
def tensor_of(
    draw: st.DrawFn,
    dtype: torch.dtype,
    shape: tuple[int, ...],
    nonfinite: bool = False,
    bound: float | None = None,
) -> torch.Tensor:
    """Drawn values of ``dtype`` and ``shape``; sometimes all entries equal (ties)."""
    n = math.prod(shape)
    values_of = elements(dtype, nonfinite, bound)
    if n and draw(st.booleans()) and draw(st.booleans()):
        values = [draw(values_of)] * n
    else:
        values = draw(st.lists(values_of, min_size=n, max_size=n))
    x = torch.tensor(values, dtype=torch.float64)
    info = torch.finfo(dtype)
    # Clamped to the dtype's range first, so that the cast rounds and never overflows.
    x = torch.where(torch.isfinite(x), x.clamp(-info.max, info.max), x)
    return x.to(dtype).reshape(shape)


@st.composite
def tensors(
    draw: st.DrawFn,
    *,
    dtypes: tuple[torch.dtype, ...] = DTYPES,
    min_dims: int = 0,
    max_dims: int = 4,
    max_side: int = 4,
    nonfinite: bool = False,
    bound: float | None = None,
) -> torch.Tensor:
    """A tensor of a drawn dtype and shape (0-dim and empty included) with drawn values."""
    dtype = draw(st.sampled_from(dtypes))
    shape = tuple(draw(st.lists(st.integers(0, max_side), min_size=min_dims, max_size=max_dims)))
    return draw(tensor_of(dtype, shape, nonfinite, bound))


def upstream(like: torch.Tensor, seed: int) -> torch.Tensor:
    """A finite random upstream gradient shaped like ``like``, in its dtype."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(like.shape, generator=g, dtype=torch.float64).to(like.dtype)


def assert_raises_naming(name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """``fn`` raises TypeError or ValueError whose message names `name` (in backticks)."""
    with pytest.raises((TypeError, ValueError)) as info:
        fn(*args, **kwargs)
    assert f"`{name}`" in str(info.value), (name, str(info.value))


def surrogate_names(family: str) -> list[str]:
    """The registered surrogates that serve ``family``."""
    return [n for n, cls in SURROGATES.items() if family in cls.applies_to]
