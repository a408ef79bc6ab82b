"""Bernoulli samples in eager mode draw the logistic difference ``L = g1 - g0`` alone
(``Estimator.sample_bernoulli``, ``accepts_logistic_difference``) instead of the pair
``(0, L)``: the same draws, samples and gradients bit for bit, without the pair."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import Tensor
from torch.profiler import ProfilerActivity, profile

import hardgrad as hg
from hardgrad.estimators import _base, _noise

from ..conftest import assert_same

ESTIMATORS: list[Any] = [
    "st",
    "st_identity",
    "gumbel_softmax",
    "st_gumbel",
    "reinmax",
    "gst",
    hg.estimators.ST(tau=0.5),
    hg.estimators.GumbelSoftmax(tau=2.0),
    hg.estimators.ReinMax(tau=3.0),
    hg.estimators.GST(tau=0.7, gap=0.5),
]


def _logits(dtype: torch.dtype) -> Tensor:
    special = torch.tensor([0.0, -0.0, 5.0, -5.0, 100.0, -100.0, 1e-30, -1e-30])
    extremes = torch.tensor([float("nan"), float("inf"), -float("inf")])
    random = torch.randn(500, generator=torch.Generator().manual_seed(0)) * 4
    return torch.cat([special, extremes, random]).to(dtype)


def _sample_and_grad(estimator: Any, x: Tensor, upstream: Tensor) -> tuple[Tensor, Tensor]:
    leaf = x.clone().requires_grad_()
    y = hg.bernoulli(leaf, estimator=estimator, generator=torch.Generator().manual_seed(1))
    y.backward(upstream)
    assert leaf.grad is not None
    return y.detach(), leaf.grad


def _pair_route(self: Any, logits: Tensor, generator: torch.Generator | None) -> Tensor:
    return self.bernoulli(logits, self.bernoulli_noise(logits, generator))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("estimator", ESTIMATORS, ids=str)
def test_the_difference_alone_gives_the_pairs_sample_and_gradient(
    estimator: Any, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = _logits(dtype)
    upstream = torch.randn(x.shape, generator=torch.Generator().manual_seed(2)).to(dtype)
    upstream[:3] = torch.tensor([0.0, -0.0, 1e30]).to(dtype)
    fast = _sample_and_grad(estimator, x, upstream)
    monkeypatch.setattr(_base.Estimator, "sample_bernoulli", _pair_route)
    paired = _sample_and_grad(estimator, x, upstream)
    assert_same(fast[0], paired[0])
    assert_same(fast[1], paired[1])


def _forward_ops(estimator: Any) -> list[str]:
    x = torch.randn(64, 32, requires_grad=True)
    # (acc_events=True: one cycle either way; without it torch 2.11's profiler warns that
    # it clears events at each cycle's end, an error under filterwarnings = error.)
    with profile(activities=[ProfilerActivity.CPU], acc_events=True) as prof:
        hg.bernoulli(x, estimator=estimator, generator=torch.Generator().manual_seed(0))
    return [event.name for event in prof.events()]


def test_eager_samples_build_no_pair() -> None:
    ops = _forward_ops("st")
    assert "aten::zero_" not in ops and "aten::movedim" not in ops
    assert ops.count("aten::uniform_") == 1


class _PairsOnlyST(hg.estimators.ST):
    """A subclass whose own ``bernoulli`` (not marked) reads the noise as a pair."""

    def bernoulli(self, logits: Tensor, noise: Tensor) -> Tensor:
        assert noise.shape == (*logits.shape, 2)
        return super().bernoulli(logits, noise)


def test_an_unmarked_override_still_gets_pairs() -> None:
    assert "aten::movedim" in _forward_ops(_PairsOnlyST())
    x = _logits(torch.float32)
    upstream = torch.randn(x.shape, generator=torch.Generator().manual_seed(2))
    assert_same(
        _sample_and_grad(_PairsOnlyST(), x, upstream)[1],
        _sample_and_grad("st", x, upstream)[1],
    )


def test_noise_pairs_passed_by_hand_still_work() -> None:
    """``Estimator.bernoulli`` with a pair whose first class is not 0 (two Gumbels)."""
    logits = torch.randn(8, 3, generator=torch.Generator().manual_seed(4))
    gumbels = _noise.gumbel_noise(torch.empty(8, 3, 2), torch.Generator().manual_seed(5))
    sample = hg.estimators.ST().bernoulli(logits, gumbels)
    expected = (logits + gumbels[..., 1] > gumbels[..., 0]).to(logits.dtype)
    assert_same(sample, expected)
