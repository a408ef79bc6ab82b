"""hardgrad.testing's ``assert_compiles``: hard ops compile, a graph break or a compiled
result that differs fails, and bad arguments are rejected."""

from __future__ import annotations

import pytest
import torch

import hardgrad as hg
from hardgrad.testing import assert_compiles


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --------------------------------------------------------------------------------------
# assert_compiles
# --------------------------------------------------------------------------------------


@pytest.fixture
def x() -> torch.Tensor:
    return (torch.randn(32, generator=gen(0)) * 3).requires_grad_()


@pytest.mark.compile
def test_compiles_hard_ops_with_inductor(x):
    assert_compiles(lambda t: hg.sign(t) * hg.round(3 * t) + hg.clamp(t, -1, 1), x)


@pytest.mark.compile
def test_nested_outputs_and_keyword_arguments(x):
    def fn(t, *, scale):
        return {"a": hg.round(t * scale), "b": [hg.sign(t), t.argmax()]}

    assert_compiles(fn, x, kwargs={"scale": torch.tensor(2.0)}, backend="aot_eager")


@pytest.mark.compile
def test_a_graph_break_fails_under_fullgraph_and_passes_without(x):
    def breaks(t):
        if t.sum() > 0:  # data-dependent Python control flow
            return hg.round(t)
        return -hg.round(t)

    with pytest.raises(AssertionError, match="breaks does not compile with fullgraph=True"):
        assert_compiles(breaks, x, backend="aot_eager")
    assert_compiles(breaks, x, backend="aot_eager", fullgraph=False)


@pytest.mark.compile
def test_a_compiled_result_that_differs_fails(x):
    """A function reading Python state that changes between calls: dynamo bakes in the
    value seen while tracing (the second call), eager ran with the first."""
    calls = [0]

    def stateful(t):
        calls[0] += 1
        return t * calls[0]

    with pytest.raises(AssertionError, match="output 0 differs between compiled and eager"):
        assert_compiles(stateful, x, backend="aot_eager")


@pytest.mark.compile
def test_random_functions_need_a_seed(x):
    def noisy(t):
        return hg.bernoulli(t, estimator="st") * t

    assert_compiles(noisy, x, seed=0)  # inductor with fallback_random: eager's numbers
    assert_compiles(noisy, x, seed=0, backend="aot_eager")
    with pytest.raises(AssertionError, match="differs between compiled and eager"):
        assert_compiles(noisy, x, backend="aot_eager")  # unseeded: different draws


@pytest.mark.compile
def test_gradients_are_compared(x):
    """Same values, different gradients: the compiled branch doubles the backward."""

    def fn(t):
        if torch.compiler.is_compiling():
            return hg.straight_through(torch.round, lambda s: 2 * s)(t)
        return hg.round(t)

    with pytest.raises(AssertionError, match="gradient of tensor argument 0 differs"):
        assert_compiles(fn, x, backend="aot_eager")
    assert_compiles(fn, x, backend="aot_eager", check_grad=False)


def test_compiles_bad_arguments(x):
    with pytest.raises(TypeError, match="`fn`"):
        assert_compiles(3, x)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`kwargs`"):
        assert_compiles(hg.round, x, kwargs=[1])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`rtol` and `atol`"):
        assert_compiles(hg.round, x, rtol=1e-3)
