"""hg.vq.fsq(..., preserve_symmetry=True) and hg.nn.FSQ(..., preserve_symmetry=True): the
symmetric grid (Parker et al. 2024) against a float64 formula written here, forward and
backward, every index's code round trip, dtypes, compile with a changing batch,
torch.func, bad input, empty batches."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch.func import grad, vmap

import hardgrad as hg

LEVELS = (2, 3, 4, 7)


def _reference(z, levels):
    """Values, digits and d z_q / d z in float64, channels last."""
    z = z.double()
    steps = torch.tensor([v - 1 for v in levels], dtype=torch.float64)
    k = torch.floor(steps * (torch.tanh(z) + 1) / 2 + 0.5)
    return 2 * k / steps - 1, k.long(), 1 - torch.tanh(z) ** 2


def _index(digits, levels):
    radix = torch.tensor([math.prod(levels[:i]) for i in range(len(levels))])
    return (digits * radix).sum(-1)


def test_values_indices_and_gradient_against_the_float64_formula():
    z = torch.randn(200, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 2
    z[:8] = torch.tensor([0.0, 50.0, -50.0, 0.3]).double()  # both ends, the middle
    z.requires_grad_()
    z_q, indices = hg.vq.fsq(z, LEVELS, preserve_symmetry=True)
    values, digits, slope = _reference(z.detach(), LEVELS)
    torch.testing.assert_close(z_q.detach(), values, rtol=0, atol=1e-15)
    assert torch.equal(indices, _index(digits, LEVELS))
    g = torch.randn(z.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    z_q.backward(g)
    torch.testing.assert_close(z.grad, slope * g)
    # the grid: L values evenly spaced on [-1, 1], both ends reached, +-1 for L = 2
    for c, v in enumerate(LEVELS):
        grid = torch.linspace(-1, 1, v, dtype=torch.float64)
        gaps = (z_q[:, c].detach()[:, None] - grid[None]).abs().min(-1).values
        assert float(gaps.max()) < 1e-15
        column = z_q[:, c].detach()
        assert float(column.max()) == 1.0 and float(column.min()) == -1.0


def test_every_index_round_trips_through_its_code():
    every = torch.arange(math.prod(LEVELS))
    codes = hg.vq.fsq_indices_to_codes(every, LEVELS, preserve_symmetry=True)
    assert torch.equal(hg.vq.fsq_codes_to_indices(codes, LEVELS, preserve_symmetry=True), every)
    digits = torch.tensor(list(itertools.product(*[range(v) for v in reversed(LEVELS)])))
    digits = digits.flip(-1)  # channel 0 least significant
    expected = 2 * digits.float() / torch.tensor([v - 1.0 for v in LEVELS]) - 1
    torch.testing.assert_close(codes[_index(digits, LEVELS)], expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_dtypes_the_module_and_codes_bit_for_bit(dtype):
    fsq = hg.nn.FSQ(LEVELS, preserve_symmetry=True, channel_dim=1)
    assert repr(fsq) == "FSQ(levels=(2, 3, 4, 7), preserve_symmetry=True)"
    z = torch.randn(5, 4, 3, generator=torch.Generator().manual_seed(2)).to(dtype)
    z_q, indices = fsq(z)
    assert z_q.dtype == dtype and indices.shape == (5, 3)
    assert torch.equal(fsq.indices_to_codes(indices, dtype=dtype), z_q)
    assert torch.equal(fsq.codes_to_indices(z_q), indices)
    _, digits, _ = _reference(z.movedim(1, -1).float(), LEVELS)
    assert torch.equal(indices, _index(digits, LEVELS))
    empty_q, empty_i = fsq(torch.zeros(0, 4, 3, dtype=dtype))
    assert empty_q.shape == (0, 4, 3) and empty_i.shape == (0, 3)


@pytest.mark.compile
def test_torch_func_and_compile_with_a_changing_batch():
    z = torch.randn(6, 4, generator=torch.Generator().manual_seed(3))
    f = lambda x: hg.vq.fsq(x, LEVELS, preserve_symmetry=True)[0].sum()  # noqa: E731
    torch.testing.assert_close(grad(f)(z), _reference(z, LEVELS)[2].float())
    rows = vmap(lambda x: hg.vq.fsq(x, LEVELS, preserve_symmetry=True)[0])(z)
    assert torch.equal(rows, hg.vq.fsq(z, LEVELS, preserve_symmetry=True)[0])
    fsq = hg.nn.FSQ(LEVELS, preserve_symmetry=True)
    compiled = torch.compile(fsq, dynamic=True, fullgraph=True)
    for n in (2, 5, 9):
        x = torch.randn(n, 4, generator=torch.Generator().manual_seed(n))
        for a, b in zip(compiled(x), fsq(x), strict=True):
            assert torch.equal(a, b)


def test_bad_input():
    with pytest.raises(TypeError, match="`preserve_symmetry`"):
        hg.vq.fsq(torch.zeros(2, 4), LEVELS, preserve_symmetry=1)
    with pytest.raises(TypeError, match="`preserve_symmetry`"):
        hg.nn.FSQ(LEVELS, preserve_symmetry="yes")
    with pytest.raises(ValueError, match="len\\(levels\\)"):
        hg.vq.fsq(torch.zeros(2, 3), LEVELS, preserve_symmetry=True)
