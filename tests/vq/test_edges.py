"""Edge inputs to every public VQ function and module: sparse COO tensors and integer
tensors (TypeError naming the argument), inf and NaN (ValueError naming it, unless
validation is off), and empty batches (empty outputs, zero gradients of the right shapes)."""

from __future__ import annotations

import math

import pytest
import torch

import hardgrad as hg

V = hg.vq


def _codebook() -> torch.Tensor:
    return torch.randn(5, 3, generator=torch.Generator().manual_seed(1))


def _z() -> torch.Tensor:
    return torch.randn(4, 3, generator=torch.Generator().manual_seed(2))


# (name of the argument, its good value, the call with that argument replaced)
CALLS = {
    "vector_quantize-z": ("z", _z, lambda z: V.vector_quantize(z, _codebook())),
    "vector_quantize-gumbel-z": (
        "z",
        _z,
        lambda z: V.vector_quantize(z, _codebook(), estimator="gumbel"),
    ),
    "vector_quantize-codebook": ("codebook", _codebook, lambda c: V.vector_quantize(_z(), c)),
    "nearest_code-z": ("z", _z, lambda z: V.nearest_code(z, _codebook())),
    "nearest_code-codebook": ("codebook", _codebook, lambda c: V.nearest_code(_z(), c)),
    "rotation_gradient-z": ("z", _z, lambda z: V.rotation_gradient(z, _z() + 1)),
    "rotation_gradient-z_q": ("z_q", _z, lambda q: V.rotation_gradient(_z() + 1, q)),
    "fsq-z": ("z", _z, lambda z: V.fsq(z, (5, 4, 3))),
    "fsq_codes_to_indices-codes": (
        "codes",
        lambda: torch.zeros(4, 3),
        lambda c: V.fsq_codes_to_indices(c, (5, 4, 3)),
    ),
    "lfq-z": ("z", _z, lambda z: V.lfq(z)),
    "lfq_entropy-z": ("z", _z, lambda z: V.lfq_entropy(z)),
    "VectorQuantize-z": ("z", _z, lambda z: hg.nn.VectorQuantize(5, 3)(z)),
    "VectorQuantize-ema-z": (
        "z",
        _z,
        lambda z: hg.nn.VectorQuantize(5, 3, codebook_update="ema", estimator="gumbel")(z),
    ),
    "FSQ-z": ("z", _z, lambda z: hg.nn.FSQ((5, 4, 3))(z)),
    "LFQ-z": ("z", _z, lambda z: hg.nn.LFQ(3)(z)),
}


@pytest.mark.parametrize("case", list(CALLS))
def test_sparse_and_integer_tensors_are_refused_naming_the_argument(case):
    """Before: a sparse tensor failed deep inside with torch's own message (or, for
    rotation_gradient's z, was accepted)."""
    name, good, call = CALLS[case]
    with pytest.raises(TypeError, match=rf"`{name}` to be a dense \(strided\).*sparse_coo"):
        call(good().to_sparse())
    with pytest.raises(TypeError, match=rf"`{name}` to be a floating-point.*int64"):
        call(good().round().long())


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("case", list(CALLS))
def test_inf_and_nan_are_refused_naming_the_argument_unless_validation_is_off(case, bad):
    """Before: nearest_code, rotation_gradient, fsq, fsq_codes_to_indices, lfq,
    lfq_entropy, FSQ and LFQ returned (NaN codes, entropies or gradients, or an index
    made of NaN)."""
    name, good, call = CALLS[case]
    x = good()
    x[1, 2] = bad
    with pytest.raises(ValueError, match=f"finite `{name}`"):
        call(x)
    hg.set_validation(False)
    try:
        call(x)  # no scan: whatever the arithmetic gives
    finally:
        hg.set_validation(True)


def test_codebook_usage_and_index_conversions_refuse_bad_indices():
    with pytest.raises(TypeError, match="`indices` to be a dense"):
        V.codebook_usage(torch.tensor([0, 1]).to_sparse(), 4)
    with pytest.raises(TypeError, match=r"`indices` to be an integer tensor.*bool"):
        V.codebook_usage(torch.tensor([True, False]), 4)
    with pytest.raises(ValueError, match=r"`indices` in \[0, 3\].*\[0, 4\]"):
        V.codebook_usage(torch.tensor([0, 4]), 4)
    with pytest.raises(TypeError, match="`indices` to be a dense"):
        V.fsq_indices_to_codes(torch.tensor([0, 1]).to_sparse(), (3, 3))
    used, perplexity = V.codebook_usage(torch.tensor([0, 0, 1, 3], dtype=torch.int32), 4)
    assert float(used) == 0.75 and math.isclose(float(perplexity), 2**1.5, rel_tol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("codebook_update", ["loss", "ema"])
def test_an_empty_batch_gives_zero_gradients_to_every_parameter(codebook_update, dtype):
    """Before: with the codebook loss the codebook got no gradient at all (None) from an
    empty batch: a DDP rank without tokens would have an unused parameter."""
    vq = hg.nn.VectorQuantize(5, 3, codebook_update=codebook_update, estimator="gumbel")
    for shape, channel_dim in (((0, 3), -1), ((2, 3, 0), 1)):
        vq.zero_grad(set_to_none=True)
        z = torch.zeros(shape, dtype=dtype, requires_grad=True)
        vq.channel_dim = channel_dim
        z_q, indices, loss = vq(z)
        assert z_q.shape == shape and z_q.dtype == dtype
        assert indices.shape == ((0,) if channel_dim == -1 else (2, 0))
        assert loss.shape == () and float(loss.detach()) == 0.0
        (z_q.float().sum() + loss).backward()
        assert z.grad is not None and z.grad.shape == shape
        for p in vq.parameters():
            assert p.grad is not None and torch.equal(p.grad, torch.zeros_like(p))
