"""Functions with non-differentiable outputs (a saved mask, the perturbed logits, a
solver's samples) get no zero-filled gradients for them in backward
(``hardgrad.ops._autograd.mark_non_differentiable``): autograd would otherwise allocate
and fill one per output on every backward, for an argument the backward ignores.

Each case runs the Python Function route (tensors above the native-node limits, or the
limits set to 0) and profiles its backward alone."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import hardgrad as hg

pytestmark = pytest.mark.usefixtures("function_route")

_ZERO_FILLS = ("aten::zeros", "aten::zeros_like")  # what autograd materializes with


def _zero_fills_in_backward(forward: Callable[[torch.Tensor], torch.Tensor]) -> list[str]:
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(0), requires_grad=True)
    y = forward(x)
    upstream = torch.randn(y.shape, generator=torch.Generator().manual_seed(1))
    # (acc_events=True: one cycle either way; without it torch 2.11's profiler warns that
    # it clears events at each cycle's end, an error under filterwarnings = error.)
    with profile(activities=[ProfilerActivity.CPU], acc_events=True) as prof:
        y.backward(upstream)
    assert x.grad is not None and bool(torch.isfinite(x.grad).all())
    return [event.name for event in prof.events() if event.name in _ZERO_FILLS]


def _generator() -> torch.Generator:
    return torch.Generator().manual_seed(2)


@pytest.mark.parametrize(
    "estimator", ["st", "st_identity", "gumbel_softmax", "st_gumbel", "reinmax", "gst"]
)
def test_bernoulli_backward_fills_no_zeros(estimator: str) -> None:
    def sample(x: torch.Tensor) -> torch.Tensor:
        return hg.bernoulli(x, estimator=estimator, generator=_generator())

    assert _zero_fills_in_backward(sample) == []


@pytest.mark.parametrize("estimator", ["st_gumbel", "gst"])
def test_categorical_backward_fills_no_zeros(estimator: str) -> None:
    def sample(x: torch.Tensor) -> torch.Tensor:
        return hg.categorical(x, estimator=estimator, generator=_generator())

    assert _zero_fills_in_backward(sample) == []


def test_clamp_with_tensor_bounds_backward_fills_no_zeros() -> None:
    low, high = torch.full((32,), -0.5), torch.full((32,), 0.5, requires_grad=True)
    assert _zero_fills_in_backward(lambda x: hg.clamp(x, low, high.detach())) == []
    assert _zero_fills_in_backward(lambda x: hg.clamp(x, low, high)) == []
    assert high.grad is not None


def test_perturbed_solver_backward_fills_no_zeros() -> None:
    def top_one(theta: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(theta.argmax(-1), theta.shape[-1]).to(theta.dtype)

    layer = hg.solvers.perturbed(top_one, num_samples=4, sigma=0.5, generator=_generator())
    assert _zero_fills_in_backward(layer) == []


@pytest.mark.compile
def test_the_unused_gradients_are_still_zeros_when_compiled() -> None:
    """Under ``torch.compile`` the setting is left alone (Dynamo does not trace it); the
    compiled Bernoulli sample still gives the eager gradient."""
    x = torch.randn(64, generator=torch.Generator().manual_seed(3))
    grads = []
    for compiled in (False, True):
        leaf = x.clone().requires_grad_()

        def sample(t: torch.Tensor) -> torch.Tensor:
            return hg.bernoulli(t, estimator="st")

        run = torch.compile(sample, fullgraph=True, backend="eager") if compiled else sample
        torch.manual_seed(4)
        run(leaf).sum().backward()
        grads.append(leaf.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0)
