"""Sparse (COO, CSR) and nested (strided, jagged) tensors are refused with a TypeError naming
the argument, by every op of the registry, every sampler and every estimator of
``hg.expectation``: one check (``hardgrad._core.validation.check_dense``) at the entry points.
Parametrized over the registries, so new ops and estimators are covered automatically."""

import inspect
import warnings

import pytest
import torch

import hardgrad as hg
import hardgrad.stochastic
from hardgrad._core.validation import check_dense
from hardgrad.estimators import ESTIMATORS
from hardgrad.ops import OPS


def _layouts():
    with warnings.catch_warnings():  # (prototype / beta warnings of torch's constructors)
        warnings.simplefilter("ignore")
        return {
            "coo": torch.eye(3).to_sparse(),
            "csr": torch.eye(3).to_sparse_csr(),
            "nested": torch.nested.nested_tensor([torch.zeros(2, 3), torch.zeros(1, 3)]),
            "jagged": torch.nested.nested_tensor(
                [torch.zeros(2, 3), torch.zeros(1, 3)], layout=torch.jagged
            ),
        }


LAYOUTS = tuple(_layouts())


def _refused(name):
    return pytest.raises(TypeError, match=rf"Expected `{name}` to be a dense \(strided\) tensor")


def test_check_dense_message_and_pass_through():
    tensors = _layouts()
    with pytest.raises(TypeError, match=r"^Expected `w` .* found layout=torch.sparse_coo$"):
        check_dense(tensors["coo"], "w")
    with pytest.raises(TypeError, match=r"found a nested tensor \(layout=torch.jagged\)$"):
        check_dense(tensors["jagged"], "w")
    dense = torch.zeros(3)
    assert check_dense(dense, "w") is dense
    assert check_dense(3.0, "w") == 3.0  # non-tensors are the caller's type check's business


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("op", OPS.names())
def test_every_op_refuses_sparse_and_nested_input(op, layout):
    # (before: round/floor/ceil/trunc returned a sparse tensor, the others failed deep
    # inside torch with NotImplementedError, RuntimeError or AssertionError)
    spec = OPS.get(op, "op")
    first = next(iter(inspect.signature(spec.op).parameters))
    spec(torch.eye(3))  # a dense call of the same shape first: its cached checks must not
    # let the sparse one through (before: one_hot_argmax and topk_mask reached torch.max)
    with _refused(first):
        spec(_layouts()[layout])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("soft", [None, "sigmoid", torch.sin], ids=repr)
def test_straight_through_refuses_sparse_and_nested(layout, soft):
    tensor = _layouts()[layout]
    with _refused("x"):
        hg.straight_through(torch.round, soft)(tensor)
    with _refused("hard"):
        hg.straight_through(tensor, soft)


SAMPLERS = hardgrad.stochastic.__all__


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("sampler", SAMPLERS)
def test_every_sampler_refuses_sparse_and_nested(sampler, layout):
    function = getattr(hg, sampler)
    first = next(iter(inspect.signature(function).parameters))
    function(torch.eye(3))  # (a dense call first: no cached check may let the next through)
    with _refused(first):
        function(_layouts()[layout])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("sampler", ["bernoulli", "categorical"])
def test_samplers_refuse_sparse_and_nested_probs(sampler, layout):
    with _refused("probs"):
        getattr(hg, sampler)(probs=_layouts()[layout])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("estimator", ESTIMATORS.names())
def test_expectation_refuses_sparse_and_nested_for_every_estimator(estimator, layout):
    cls = ESTIMATORS.get(estimator, "estimator")
    dist = next(iter(getattr(cls, "dists", ("bernoulli",))))
    tensor = _layouts()[layout]
    hg.expectation(lambda b: b.sum(-1), torch.eye(3), dist=dist, estimator=estimator)
    with _refused("logits"):
        hg.expectation(lambda b: b.sum(-1), tensor, dist=dist, estimator=estimator)
    with _refused("probs"):
        hg.expectation(lambda b: b.sum(-1), probs=tensor, dist=dist, estimator=estimator)
