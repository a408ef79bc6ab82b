"""hardgrad.diagnostics.exact_gradient() against hand-computed gradients,
``gradient_samples()``' shape, reproducibility and unbiasedness (z-test).

Monte-Carlo tests are seeded (deterministic); each docstring states the false-failure rate
of its thresholds for a fresh seed. Two-sided normal tail: ``P(|Z| > 5) = 5.7e-7``.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor

from _references import CAT_LOGITS, two_categoricals, two_categoricals_gradient
from hardgrad.diagnostics import exact_gradient, gradient_samples


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# --------------------------------------------------------------------------------------
# 5. exact_gradient() and gradient_samples().
# --------------------------------------------------------------------------------------

BITS = torch.tensor([0.4, -1.2, 0.9], dtype=torch.float64)


def three_bits(b: Tensor) -> Tensor:
    """3 b0 b1 b2 + (b0 - 2 b2)^2 - b1 b2: not separable."""
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    return 3 * b0 * b1 * b2 + (b0 - 2 * b2) ** 2 - b1 * b2


def three_bits_gradient(phi: Tensor) -> Tensor:
    """By hand: on {0,1}, (b0 - 2 b2)^2 = b0 + 4 b2 - 4 b0 b2, so with independent bits
    E f = 3 p0 p1 p2 + p0 + 4 p2 - 4 p0 p2 - p1 p2, and d/dphi_i = dE/dp_i p_i (1 - p_i)."""
    p0, p1, p2 = (sigmoid(float(v)) for v in phi)
    de = (3 * p1 * p2 + 1 - 4 * p2, 3 * p0 * p2 - p2, 3 * p0 * p1 + 4 - 4 * p0 - p1)
    return torch.tensor([d * p * (1 - p) for d, p in zip(de, (p0, p1, p2), strict=True)],
                        dtype=torch.float64)  # fmt: skip


def test_exact_gradient_by_hand() -> None:
    torch.testing.assert_close(
        exact_gradient(three_bits, BITS), three_bits_gradient(BITS), rtol=1e-12, atol=1e-14
    )
    got = exact_gradient(two_categoricals, CAT_LOGITS, dist="categorical")
    assert got.shape == CAT_LOGITS.shape and got.dtype == torch.float64
    torch.testing.assert_close(got, two_categoricals_gradient(CAT_LOGITS), rtol=1e-12, atol=1e-14)
    # The categorical axis first: the same problem, transposed.
    got_t = exact_gradient(
        lambda d: two_categoricals(d.transpose(-1, -2)), CAT_LOGITS.T.contiguous(),
        dist="categorical", dim=0,
    )  # fmt: skip
    torch.testing.assert_close(got_t, two_categoricals_gradient(CAT_LOGITS).T)
    # Logits that require grad are not touched.
    leaf = BITS.clone().requires_grad_()
    exact_gradient(three_bits, leaf)
    assert leaf.grad is None


def test_gradient_samples_shape_and_reproducibility() -> None:
    draws = gradient_samples(three_bits, BITS, estimator="rloo", num_draws=7, generator=gen(4))
    assert draws.shape == (7, 3) and draws.dtype == torch.float64
    again = gradient_samples(three_bits, BITS, estimator="rloo", num_draws=7, generator=gen(4))
    assert torch.equal(draws, again)
    other = gradient_samples(three_bits, BITS, estimator="rloo", num_draws=7, generator=gen(5))
    assert not torch.equal(draws, other)
    assert torch.unique(draws, dim=0).shape[0] > 1  # independent draws, not copies of one

    state = torch.get_rng_state()
    cat = gradient_samples(
        two_categoricals, CAT_LOGITS, estimator="st", dist="categorical", num_draws=5,
        generator=gen(6),
    )  # fmt: skip
    assert cat.shape == (5, *CAT_LOGITS.shape)
    assert torch.equal(torch.get_rng_state(), state)  # a generator given: global RNG untouched
    with pytest.raises(ValueError, match="num_draws"):
        gradient_samples(three_bits, BITS, estimator="rloo", num_draws=0)


def test_gradient_samples_in_several_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Draws computed in many small vectorised chunks: the same shape, every chunk drawn
    afresh (no chunk repeats another), reproducible."""
    import hardgrad.diagnostics._gradients as gradients

    monkeypatch.setattr(gradients, "CHUNK_ELEMENTS", 6)  # 2 draws of 3 logits per chunk
    draws = gradient_samples(three_bits, BITS, estimator="disarm", num_draws=41, generator=gen(8))
    assert draws.shape == (41, 3)
    assert torch.equal(
        draws,
        gradient_samples(three_bits, BITS, estimator="disarm", num_draws=41, generator=gen(8)),
    )
    chunks = [draws[i : i + 2] for i in range(0, 40, 2)]
    assert len({tuple(c.flatten().tolist()) for c in chunks}) > 10


@pytest.mark.statistical
def test_gradient_samples_rloo_mean_is_the_exact_gradient() -> None:
    """M = 20000 RLOO draws (2 samples each) on the 3-bit and the categorical objective: per
    coordinate |z| < 5 with the sample variance, 3 + 6 coordinates: false-failure rate
    9 * 5.7e-7 = 5e-6. (The estimates have finite support, so the normal approximation is
    good at this M.)"""
    m = 20_000
    for f, logits, dist in (
        (three_bits, BITS, "bernoulli"),
        (two_categoricals, CAT_LOGITS, "categorical"),
    ):
        draws = gradient_samples(f, logits, estimator="rloo", dist=dist, num_draws=m,
                                 generator=gen(21))  # fmt: skip
        assert draws.shape == (m, *logits.shape)
        exact = exact_gradient(f, logits, dist=dist)
        z = (draws.mean(0) - exact) / (draws.std(0) / math.sqrt(m))
        assert bool((z.abs() < 5).all()), (dist, z)
