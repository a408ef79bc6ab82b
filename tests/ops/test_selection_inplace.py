"""An input modified in place after the forward: the ops that save it (autograd.Functions,
through ``ctx.save_for_backward``) raise torch's error in backward, and the rest compute
the gradient of the values they were given, never of the new ones."""

from __future__ import annotations

import pytest
import torch

import hardgrad as hg

INPLACE = "modified by an inplace operation"

# (name, op, dtype, row length, whether it saves its input: then backward must raise).
# The native one_hot_argmax path (float32/float64 CPU logits of at most 8,192 elements,
# grad_fn CloneBackward0) saves the softmax of the logits it was given, as torch.softmax
# does, not the logits; half types and larger tensors take the Function, which saves them.
F32, F64, BF16 = torch.float32, torch.float64, torch.bfloat16
OPS = [
    ("one_hot_argmax/native", lambda x: hg.one_hot_argmax(x), F32, 5, False),
    ("one_hot_argmax/native-tau", lambda x: hg.one_hot_argmax(x, tau=0.5), F64, 5, False),
    ("one_hot_argmax/function-bf16", lambda x: hg.one_hot_argmax(x), BF16, 5, True),
    ("one_hot_argmax/function-large", lambda x: hg.one_hot_argmax(x), F32, 10_000, True),
    ("topk_mask", lambda x: hg.topk_mask(x, 2), F64, 5, True),
    ("topk_mask/bf16", lambda x: hg.topk_mask(x, 2), BF16, 5, True),
    ("soft_topk_mask", lambda x: hg.ops.soft_topk_mask(x, 2), F64, 5, False),  # saves m
    ("sort/soft", lambda x: hg.sort(x), F64, 5, True),
    ("rank/neuralsort", lambda x: hg.rank(x, backward="neuralsort"), F64, 5, True),
    (
        "subset/st",
        lambda x: hg.subset(x, 2, generator=torch.Generator().manual_seed(0)),
        F64,
        5,
        True,
    ),
    (
        "subset/simple",
        lambda x: hg.subset(x, 2, estimator="simple", generator=torch.Generator().manual_seed(0)),
        F64,
        5,
        True,
    ),
]


@pytest.mark.parametrize(("name", "op", "dtype", "n", "saves_input"), OPS, ids=[o[0] for o in OPS])
def test_inplace_change_of_the_input_after_forward(name, op, dtype, n, saves_input):
    g = torch.Generator().manual_seed(1)
    base = torch.randn(2, n, generator=g).to(dtype)
    c = torch.randn(2, n, generator=g).to(dtype)

    def run(modify: bool) -> torch.Tensor:
        leaf = base.clone().requires_grad_()
        x = leaf * 1  # a non-leaf that needs a gradient
        y = op(x)
        if name.startswith("one_hot_argmax/"):  # the path the case is about
            native = type(y.grad_fn).__name__ == "CloneBackward0"
            assert native == ("native" in name), type(y.grad_fn).__name__
        if modify:
            x.mul_(2)
        (y * c).sum().backward()
        return leaf.grad

    want = run(False)
    if saves_input:
        with pytest.raises(RuntimeError, match=INPLACE):
            run(True)
    else:
        assert torch.equal(run(True), want), name
