"""hg.stochastic_times_smooth and hg.noisy_rectifier (Bengio, Léonard & Courville 2013)."""

from __future__ import annotations

import math

import pytest
import torch

import hardgrad as hg

DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.statistical
def test_sts_mean_is_sigmoid():
    """E[h] = sigmoid(a): binomial z-test per coordinate, |z| < 4.5 (two-sided false-failure
    rate ~7e-6 per coordinate, 5 coordinates: < 4e-5); seeded, so deterministic."""
    a = torch.tensor([-3.0, -1.0, 0.0, 1.0, 3.0])
    n = 100_000
    h = hg.stochastic_times_smooth(a.expand(n, 5), generator=gen(0))
    smooth = torch.sigmoid(a).sqrt()
    fired = (h > 0).double().mean(0)
    z = (fired - smooth) / (smooth * (1 - smooth) / n).sqrt()
    assert z.abs().max() < 4.5
    # Every value is exactly 0 or sqrt(sigmoid(a)).
    assert torch.all((h == 0) | torch.isclose(h, smooth.expand(n, 5)))


def test_sts_backward_is_the_smooth_part_only():
    a = torch.linspace(-6, 6, 25, dtype=torch.float64, requires_grad=True)
    h = hg.stochastic_times_smooth(a, generator=gen(1))
    upstream = torch.randn(25, generator=gen(2), dtype=torch.float64)
    (grad,) = torch.autograd.grad(h, a, upstream)
    p = torch.sigmoid(a.detach())
    gate = (h.detach() > 0).double()
    expected = upstream * gate * p.sqrt() * (1 - p) / 2
    torch.testing.assert_close(grad, expected)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_sts_extremes_dtype_and_seed(dtype):
    a = (
        torch.tensor([-1e4, -100.0, 0.0, 100.0, 1e4, -math.inf, math.inf])
        .to(dtype)
        .requires_grad_()
    )
    h = hg.stochastic_times_smooth(a, generator=gen(3))
    assert h.dtype == dtype and h.shape == a.shape
    assert torch.isfinite(h).all()
    assert h[5] == 0 and h[6] == 1 and h[4] == 1 and h[0] == 0
    (grad,) = torch.autograd.grad(h.sum(), a)
    assert torch.isfinite(grad).all()
    again = hg.stochastic_times_smooth(a, generator=gen(3))
    assert torch.equal(h, again)


def test_noisy_rectifier_value_and_gradient_with_the_same_noise():
    x = torch.randn(50, generator=gen(4), dtype=torch.float64, requires_grad=True)
    h = hg.noisy_rectifier(x, sigma=0.3, generator=gen(5))
    noise = torch.randn(50, generator=gen(5), dtype=torch.float64)
    expected = torch.relu(x.detach() + 0.3 * noise)
    torch.testing.assert_close(h.detach(), expected)
    (grad,) = torch.autograd.grad(h.sum(), x)
    assert torch.equal(grad, (x.detach() + 0.3 * noise > 0).double())


def test_noisy_rectifier_sigma_zero_is_relu_and_bad_sigma():
    x = torch.randn(10, generator=gen(6))
    assert torch.equal(hg.noisy_rectifier(x, sigma=0.0), torch.relu(x))
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="sigma"):
            hg.noisy_rectifier(x, sigma=bad)
    with pytest.raises(TypeError, match="sigma"):
        hg.noisy_rectifier(x, sigma="1")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_noisy_rectifier_dtypes(dtype):
    x = torch.zeros(100, dtype=dtype)
    h = hg.noisy_rectifier(x, generator=gen(7))
    assert h.dtype == dtype and (h >= 0).all() and (h > 0).any()


def test_bad_inputs_and_global_rng_untouched():
    with pytest.raises(TypeError, match="logits"):
        hg.stochastic_times_smooth(torch.zeros(3, dtype=torch.int64))
    with pytest.raises(TypeError, match="x"):
        hg.noisy_rectifier([0.0, 1.0])
    with pytest.raises(TypeError, match="generator"):
        hg.stochastic_times_smooth(torch.zeros(3), generator=0)
    state = torch.get_rng_state()
    hg.stochastic_times_smooth(torch.zeros(8), generator=gen(8))
    hg.noisy_rectifier(torch.zeros(8), generator=gen(9))
    assert torch.equal(state, torch.get_rng_state())


def test_vmap_randomness_different():
    rows = torch.vmap(lambda a: hg.stochastic_times_smooth(a), randomness="different")(
        torch.zeros(16, 32)
    )
    assert not torch.equal(rows[0], rows[1])
    rows = torch.vmap(lambda x: hg.noisy_rectifier(x), randomness="same")(torch.zeros(4, 8))
    assert torch.equal(rows[0], rows[3])
