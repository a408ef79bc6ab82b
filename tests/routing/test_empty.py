"""Empty batches (0 tokens) through hg.nn.MoE and every routing function, forward and
backward: empty outputs of the right shapes, zero gradients of the right shapes."""

from __future__ import annotations

import pytest
import torch

import hardgrad as hg

R = hg.routing

MOE_ESTIMATORS = [
    ("sparse", (1, 2)),
    ("dense", (1, 2)),  # failed in backward before ("cannot reshape tensor of 0 elements")
    ("default", (1, 2)),
    ("sparsemixer", (1, 2)),
    ("sparsemixer_v1", (1,)),
    ("st", (1, 2)),
    ("st_gumbel", (1, 2)),
    ("reinmax", (1, 2)),
    ("gumbel_rao", (1, 2)),
    ("gst", (1, 2)),
    ("st_identity", (1, 2)),
]
CASES = [(est, k) for est, ks in MOE_ESTIMATORS for k in ks]


@pytest.mark.parametrize("batch", [(0,), (3, 0)])
@pytest.mark.parametrize(("estimator", "k"), CASES)
def test_moe_on_an_empty_batch(estimator, k, batch):
    torch.manual_seed(0)
    moe = hg.nn.MoE(4, 5, num_experts=4, k=k, estimator=estimator)
    for training in (True, False):
        moe.train(training)
        moe.zero_grad(set_to_none=True)
        x = torch.zeros(*batch, 4, requires_grad=True)
        y, indices, loss = moe(x)
        assert y.shape == (*batch, 5) and y.dtype == x.dtype
        assert indices.shape == (*batch, k) and indices.dtype == torch.int64
        assert loss.shape == () and float(loss.detach()) == 0.0
        (y.square().sum() + loss).backward()
        assert x.grad is not None and x.grad.shape == x.shape
        for name, p in moe.named_parameters():
            assert p.grad is not None, name
            assert p.grad.shape == p.shape and torch.equal(p.grad, torch.zeros_like(p)), name


@pytest.mark.parametrize("normalize", ["none", "renormalize"])
@pytest.mark.parametrize("shape", [(0, 4), (2, 0, 4)])
def test_dense_mixer_on_an_empty_batch(shape, normalize):
    """Failed before: the backward reshaped the 0 indices to (0, -1)."""
    logits = torch.zeros(shape, requires_grad=True)
    gates, indices = hg.topk_route(logits, 2, estimator="dense", normalize=normalize)
    calls = []

    def unselected(tokens, experts):
        calls.append(len(tokens))
        return torch.zeros(len(tokens), 3)

    y = (gates.unsqueeze(-1) * torch.ones(*shape[:-1], 2, 3)).sum(-2)
    out = R.dense_mixer(y, logits, indices, unselected, normalize=normalize)
    assert out.shape == (*shape[:-1], 3)
    out.sum().backward()
    assert torch.equal(logits.grad, torch.zeros(shape)) and calls == []


ROUTE_ESTIMATORS = ["sparse", "dense", "sparsemixer", "sparsemixer_v1", "st", "st_gumbel"]
ROUTE_ESTIMATORS += ["reinmax", "gumbel_rao", "gst", "st_identity"]


@pytest.mark.parametrize("estimator", ROUTE_ESTIMATORS)
@pytest.mark.parametrize(("shape", "dim"), [((0, 4), -1), ((2, 0, 4), -1), ((0, 4, 3), 1)])
def test_topk_route_on_an_empty_batch(estimator, shape, dim):
    k = 1 if estimator == "sparsemixer_v1" else 2
    logits = torch.zeros(shape, requires_grad=True)
    gates, indices = hg.topk_route(logits, k, dim=dim, estimator=estimator)
    expected = list(shape)
    expected[dim] = k
    assert gates.shape == tuple(expected) == indices.shape
    gates.sum().backward()
    assert torch.equal(logits.grad, torch.zeros(shape))


@pytest.mark.parametrize("estimator", ["exact", "reinforce", "rloo", "sparse", "dense", "reinmax"])
def test_expectation_and_the_other_routing_functions_on_an_empty_batch(estimator):
    logits = torch.zeros(0, 4, requires_grad=True)
    indices = torch.zeros(0, 2, dtype=torch.int64)

    def f(gates, idx):
        return (gates * idx.to(gates.dtype)).sum(-1)

    value = R.expectation(f, logits, 2, estimator=estimator, generator=torch.Generator())
    assert value.shape == (0,)
    loss = R.load_balancing_loss(logits, indices)
    assert loss.shape == () and float(loss.detach()) == 0.0
    zero_gates, rest = R.unselected_gates(logits, indices)
    assert zero_gates.shape == rest.shape == (0, 2)
    subsets, log_probs = R.enumerate_routes(logits, 2)
    assert subsets.shape == (6, 2) and log_probs.shape == (6, 0)
    (value.sum() + loss + zero_gates.sum() + log_probs.sum()).backward()
    assert torch.equal(logits.grad, torch.zeros(0, 4))
    assert R.unselected_experts(indices, 4).shape == (0, 2)
