"""Edge inputs to every public routing function and hg.nn.MoE: sparse COO and integer
tensors (TypeError naming the argument), float or sparse indices (TypeError naming
`indices`), inf and NaN (ValueError naming the argument, unless validation is off)."""

from __future__ import annotations

import math

import pytest
import torch

import hardgrad as hg

R = hg.routing


def _logits() -> torch.Tensor:
    return torch.randn(4, 3, generator=torch.Generator().manual_seed(0))


def _indices() -> torch.Tensor:
    return torch.tensor([[0], [2], [1], [0]])


def _y() -> torch.Tensor:
    return torch.randn(4, 2, generator=torch.Generator().manual_seed(1))


def _outputs(tokens: torch.Tensor, experts: torch.Tensor) -> torch.Tensor:
    return torch.ones(len(tokens), 2)


def _f(gates: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    return gates.sum(-1)


# (name of the argument, its good value, the call with that argument replaced)
FLOATING = {
    "topk_route-logits": ("logits", _logits, lambda x: hg.topk_route(x, 2)),
    "topk_route-st_gumbel-logits": (
        "logits",
        _logits,
        lambda x: hg.topk_route(x, 2, estimator="st_gumbel"),
    ),
    "unselected_gates-logits": ("logits", _logits, lambda x: R.unselected_gates(x, _indices())),
    "load_balancing_loss-logits": (
        "logits",
        _logits,
        lambda x: R.load_balancing_loss(x, _indices()),
    ),
    "enumerate_routes-logits": ("logits", _logits, lambda x: R.enumerate_routes(x, 2)),
    "expectation-logits": ("logits", _logits, lambda x: R.expectation(_f, x, 2)),
    "dense_mixer-y": ("y", _y, lambda y: R.dense_mixer(y, _logits(), _indices(), _outputs)),
    "dense_mixer-logits": (
        "logits",
        _logits,
        lambda x: R.dense_mixer(_y(), x, _indices(), _outputs),
    ),
    "MoE-x": ("x", _logits, lambda x: hg.nn.MoE(3, num_experts=4, k=2)(x)),
    "MoE-dense-x": ("x", _logits, lambda x: hg.nn.MoE(3, num_experts=4, estimator="dense")(x)),
}
INDICES = {
    "unselected_experts": lambda i: R.unselected_experts(i, 3),
    "unselected_gates": lambda i: R.unselected_gates(_logits(), i),
    "load_balancing_loss": lambda i: R.load_balancing_loss(_logits(), i),
    "dense_mixer": lambda i: R.dense_mixer(_y(), _logits(), i, _outputs),
}


@pytest.mark.parametrize("case", list(FLOATING))
def test_sparse_and_integer_tensors_are_refused_naming_the_argument(case):
    name, good, call = FLOATING[case]
    with pytest.raises(TypeError, match=rf"`{name}` to be a dense \(strided\).*sparse_coo"):
        call(good().to_sparse())
    with pytest.raises(TypeError, match=rf"`{name}` to be a floating-point.*int64"):
        call(good().round().long())


@pytest.mark.parametrize("case", list(INDICES))
def test_float_and_sparse_indices_are_refused(case):
    """Before: torch's "scatter(): Expected dtype int32/int64 for index" and the like."""
    call = INDICES[case]
    with pytest.raises(TypeError, match=r"`indices` to be an int64 tensor.*float32"):
        call(_indices().float())
    with pytest.raises(TypeError, match=r"`indices` to be a dense \(strided\)"):
        call(_indices().to_sparse())
    call(_indices())  # the good one passes


def test_shapes_and_num_experts_are_checked():
    with pytest.raises(ValueError, match=r"`indices` of shape \(\*batch, k\).*\(4,\).*\(3, 1\)"):
        R.unselected_gates(_logits(), _indices()[:3])
    with pytest.raises(ValueError, match=r"`indices` of shape \(\*batch, k\)"):
        R.load_balancing_loss(_logits(), _indices()[:3])
    with pytest.raises(ValueError, match=r"`num_experts` = logits.shape.* = 3.*num_experts=4"):
        R.load_balancing_loss(_logits(), _indices(), num_experts=4)
    with pytest.raises(ValueError, match="`num_experts` >= 2"):
        R.unselected_experts(torch.tensor([[0, 1]]), 1)


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
@pytest.mark.parametrize("case", list(FLOATING))
def test_inf_and_nan_are_refused_naming_the_argument_unless_validation_is_off(case, bad):
    """Before: unselected_gates, load_balancing_loss, enumerate_routes and dense_mixer
    returned (NaN values or gradients); MoE named the router's `logits`, not `x`."""
    name, good, call = FLOATING[case]
    x = good()
    x[1, -1] = bad
    with pytest.raises(ValueError, match=f"finite `{name}`"):
        call(x)
    hg.set_validation(False)
    try:
        call(x)  # no scan: whatever the arithmetic gives
    finally:
        hg.set_validation(True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_enumerate_routes_in_half_types_is_float32_rounded_once(dtype):
    """Before: computed in the half type (bfloat16 log-probabilities 0.067 off, against
    0.039 for one rounding of the float32 values)."""
    logits = (3 * torch.randn(3, 8, generator=torch.Generator().manual_seed(0))).to(dtype)
    subsets, log_probs = R.enumerate_routes(logits, 2)
    same, wide = R.enumerate_routes(logits.float(), 2)
    assert torch.equal(subsets, same) and log_probs.dtype == dtype
    assert torch.equal(log_probs, wide.to(dtype))
    exact = R.expectation(lambda g, i: g.sum(-1), logits, 2, estimator="exact")
    assert exact.dtype == dtype and torch.isfinite(exact).all()
