"""Shared fixtures for the hardgrad test suite.

Helpers are handed to tests as fixtures (``--import-mode=importlib`` makes test modules
unable to import one another); the exceptions are ``_properties.py`` (the hypothesis
strategies that the property tests need when they are decorated), ``_spawn.py`` (process
groups), ``_references.py`` (small problems with known answers) and
``_solver_references.py`` (toy solvers) and ``_sorting_references.py`` (float64 soft-sort
references), which this file makes importable by putting this folder on ``sys.path``. Parametrisations are built from the
registries (``hardgrad.ops.OPS``, ``hardgrad.surrogates.SURROGATES``), never from hand-kept
lists.

CUDA tests. Tests marked ``cuda`` are skipped when ``torch.cuda.is_available()`` is False.
Tests that take their device from the :func:`cuda_device` fixture (rather than writing
``"cuda"``) can also be checked without a GPU: set the environment variable
``HARDGRAD_CUDA_TESTS_DEVICE`` to a device (e.g. ``cpu``) and those tests run on it, e.g.
``HARDGRAD_CUDA_TESTS_DEVICE=cpu .venv/bin/python -m pytest tests/test_cuda.py``; tests
marked ``cuda`` that do not use the fixture stay skipped without a GPU. With a GPU, the
variable picks the device the fixture returns (e.g. ``cuda:1``; default ``cuda``).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # for _properties.py

DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16)

#: A large but finite magnitude for each dtype (the conformance suite's "large inputs").
LARGE = {torch.float64: 1e300, torch.float32: 1e8, torch.float16: 1e4, torch.bfloat16: 1e4}

#: Tolerances for gradients computed in a dtype and compared with a float64 closed form.
#: ``atol`` is relative to the largest magnitude of the expected values (at least 1).
TOLERANCES = {
    torch.float64: {"rtol": 1e-12, "atol": 1e-12},
    torch.float32: {"rtol": 1e-5, "atol": 1e-6},
    torch.float16: {"rtol": 1e-2, "atol": 4e-3},
    torch.bfloat16: {"rtol": 4e-2, "atol": 3e-2},
}


#: The environment variable that runs ``cuda_device`` tests on another device (see above).
CUDA_TESTS_DEVICE_VARIABLE = "HARDGRAD_CUDA_TESTS_DEVICE"


def _cuda_available() -> bool:
    return torch.cuda.is_available()


def _cuda_tests_device() -> str | None:
    """The device named by ``HARDGRAD_CUDA_TESTS_DEVICE``, or None when it is unset or empty."""
    return os.environ.get(CUDA_TESTS_DEVICE_VARIABLE) or None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip every test marked ``cuda`` when there is no CUDA device, except, when
    ``HARDGRAD_CUDA_TESTS_DEVICE`` is set, those that use the ``cuda_device`` fixture."""
    if _cuda_available():
        return
    override = _cuda_tests_device()
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if "cuda" not in item.keywords:
            continue
        if override is not None and "cuda_device" in getattr(item, "fixturenames", ()):
            continue
        item.add_marker(skip)


@pytest.fixture
def cuda_device() -> torch.device:
    """The device for tests marked ``cuda``: ``cuda``, or ``HARDGRAD_CUDA_TESTS_DEVICE``."""
    return torch.device(_cuda_tests_device() or "cuda")


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same global RNG state."""
    torch.manual_seed(0)


@pytest.fixture(params=DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def dtype(request: pytest.FixtureRequest) -> torch.dtype:
    """Each floating dtype hardgrad supports."""
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def large(dtype: torch.dtype) -> float:
    """A large finite magnitude in ``dtype`` (1e300, 1e8, 1e4, 1e4)."""
    return LARGE[dtype]


@pytest.fixture
def tol(dtype: torch.dtype) -> dict[str, float]:
    """Tolerance for float64 closed forms against values computed in ``dtype``."""
    return TOLERANCES[dtype]


@pytest.fixture(scope="module", params=["native", "function"])
def autograd_route(request: pytest.FixtureRequest) -> Any:
    """Both ways an identity or masked op records its backward on a small CPU tensor:
    autograd's own nodes (``"native"``, the default up to
    ``hardgrad.ops._autograd.NATIVE_NODE_MAX_NUMEL`` elements, and torch's own clamp for
    tensor bounds up to ``NATIVE_CLAMP_MAX_NUMEL``) and the Python Function (``"function"``,
    forced by thresholds of 0), which larger tensors, CUDA and
    ``torch.func``/``torch.compile`` take. Module-scoped (hypothesis refuses
    function-scoped fixtures), so a module that uses it runs once per route."""
    import hardgrad.ops._autograd as autograd_module

    with pytest.MonkeyPatch.context() as patch:
        if request.param == "function":
            patch.setattr(autograd_module, "NATIVE_NODE_MAX_NUMEL", 0)
            patch.setattr(autograd_module, "NATIVE_VALUE_MAX_NUMEL", 0)
            patch.setattr(autograd_module, "NATIVE_CLAMP_MAX_NUMEL", 0)
        yield request.param


@pytest.fixture
def function_route(monkeypatch: pytest.MonkeyPatch) -> None:
    """Small CPU ops take the Python Function route in this test (see :func:`autograd_route`)."""
    import hardgrad.ops._autograd as autograd_module

    monkeypatch.setattr(autograd_module, "NATIVE_NODE_MAX_NUMEL", 0)
    monkeypatch.setattr(autograd_module, "NATIVE_VALUE_MAX_NUMEL", 0)
    monkeypatch.setattr(autograd_module, "NATIVE_CLAMP_MAX_NUMEL", 0)


@pytest.fixture
def validation_off() -> Any:
    """Switch hardgrad's value checks off for one test, and back on afterwards."""
    import hardgrad as hg

    hg.set_validation(False)
    try:
        yield
    finally:
        hg.set_validation(True)


def assert_same(actual: torch.Tensor, expected: torch.Tensor, *, signed_zeros: bool = True) -> None:
    """Bit-for-bit equality of values: ``torch.equal`` off NaN, NaN at the same places,
    and (by default) the same sign on zeros. Also checks shape and dtype."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    assert actual.device == expected.device, (actual.device, expected.device)
    nan = actual.isnan()
    assert torch.equal(nan, expected.isnan()), "NaN at different positions"
    a, e = actual[~nan], expected[~nan]
    if not torch.equal(a, e):
        bad = (a != e).nonzero().flatten()[:8]
        raise AssertionError(
            f"values differ at {bad.tolist()}: {a[bad].tolist()} vs {e[bad].tolist()}"
        )
    if signed_zeros:
        assert torch.equal(a.signbit(), e.signbit()), "signed zeros differ"


def assert_close_to(
    actual: torch.Tensor, expected: torch.Tensor, tolerance: dict[str, float]
) -> None:
    """``actual`` (any dtype) against a float64 ``expected``, atol scaled by its magnitude."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = max(1.0, float(expected.abs().max())) if expected.numel() else 1.0
    torch.testing.assert_close(
        actual.double(),
        expected.double(),
        rtol=tolerance["rtol"],
        atol=tolerance["atol"] * scale,
        equal_nan=True,
    )


@pytest.fixture(name="assert_same")
def _assert_same_fixture() -> Callable[..., None]:
    """:func:`assert_same` for tests."""
    return assert_same


@pytest.fixture(name="assert_close_to")
def _assert_close_to_fixture() -> Callable[..., None]:
    """:func:`assert_close_to` for tests."""
    return assert_close_to


# --------------------------------------------------------------------------------------
# Independent closed forms of every surrogate's derivative, written from the math in the
# docstrings (never by calling ``Surrogate.derivative``). Evaluated in float64.
# --------------------------------------------------------------------------------------


def _identity(s: Any, x: torch.Tensor) -> torch.Tensor:
    return torch.ones_like(x)


def _clipped(s: Any, x: torch.Tensor) -> torch.Tensor:
    return torch.where(x.abs() <= s.width, 1.0, 0.0).to(x.dtype)


def _masked(s: Any, x: torch.Tensor) -> torch.Tensor:
    return torch.where((s.min <= x) & (x <= s.max), 1.0, 0.0).to(x.dtype)


def _sigmoid(s: Any, x: torch.Tensor) -> torch.Tensor:
    # k sigma(kx) sigma(-kx) = k / (4 cosh^2(kx / 2))
    return s.slope / (4 * torch.cosh(s.slope * x / 2) ** 2)


def _tanh(s: Any, x: torch.Tensor) -> torch.Tensor:
    # k (1 - tanh^2(kx)) = k / cosh^2(kx)
    return s.slope / torch.cosh(s.slope * x) ** 2


def _fast_sigmoid(s: Any, x: torch.Tensor) -> torch.Tensor:
    return 1 / (1 + s.slope * x.abs()) ** 2


def _atan(s: Any, x: torch.Tensor) -> torch.Tensor:
    return (s.alpha / 2) / (1 + (math.pi * s.alpha * x / 2) ** 2)


def _triangle(s: Any, x: torch.Tensor) -> torch.Tensor:
    w = s.width
    return torch.where(x.abs() < w, (w - x.abs()) / w**2, 0.0).to(x.dtype)


def _approx_sign(s: Any, x: torch.Tensor) -> torch.Tensor:
    return torch.where(x.abs() < 1, 2 - 2 * x.abs(), 0.0).to(x.dtype)


def _swish(s: Any, x: torch.Tensor) -> torch.Tensor:
    # beta (2 - u tanh(u/2)) / (1 + cosh u), u = beta x; its limit at +-inf is 0.
    u = s.beta * x
    value = s.beta * (2 - u * torch.tanh(u / 2)) / (1 + torch.cosh(u))
    return torch.where(u.isinf(), 0.0, value).to(x.dtype)


SURROGATE_CLOSED_FORMS: dict[str, Callable[[Any, torch.Tensor], torch.Tensor]] = {
    "identity": _identity,
    "clipped": _clipped,
    "masked": _masked,
    "sigmoid": _sigmoid,
    "tanh": _tanh,
    "fast_sigmoid": _fast_sigmoid,
    "atan": _atan,
    "triangle": _triangle,
    "approx_sign": _approx_sign,
    "swish": _swish,
}


@pytest.fixture
def closed_form() -> Callable[[Any, torch.Tensor], torch.Tensor]:
    """``closed_form(surrogate, x)``: the surrogate's derivative at ``x`` in float64, from
    the independent closed forms above (keyed by the surrogate's registry name)."""

    def evaluate(surrogate: Any, x: torch.Tensor) -> torch.Tensor:
        name = type(surrogate).name
        if name not in SURROGATE_CLOSED_FORMS:
            raise AssertionError(
                f"surrogate {name!r} has no closed form in tests/conftest.py; add one"
            )
        return SURROGATE_CLOSED_FORMS[name](surrogate, x.double())

    return evaluate


@pytest.fixture
def closed_form_names() -> frozenset[str]:
    """Names of the surrogates with a closed form in this suite."""
    return frozenset(SURROGATE_CLOSED_FORMS)
