"""``hg.nn.Quantize`` under ``torch.export`` with a dynamic batch and ``torch.compile``
from its first (uncalibrated) call, and an annealed ``hg.nn.Categorical`` under
``torch.compile`` (issue 38, item 4)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import hardgrad as hg


def _batch(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_exporting_an_uninitialised_quantize_says_what_to_do():
    """Before: a GuardOnDataDependentSymNode error from inside the initialisation."""
    with pytest.raises(RuntimeError, match=r"initialised before torch.export.*one batch"):
        torch.export.export(hg.nn.Quantize(bits=4), (_batch(4, 3),))


@pytest.mark.parametrize("per_channel_dim", [None, -1], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_export_with_a_dynamic_batch(per_channel_dim, training):
    """Before: 'Constraints violated (batch)': the gradient scale 1/sqrt(N q+) and the
    mask's size threshold specialised the batch size."""
    q = hg.nn.Quantize(bits=4, per_channel_dim=per_channel_dim)
    q(_batch(6, 5))
    q.train(training)
    batch = torch.export.Dim("batch")
    exported = torch.export.export(q, (_batch(4, 5, seed=1),), dynamic_shapes=({0: batch},))
    for size in (2, 9, 20000):  # 20,000 x 5 is past the small-tensor threshold, 65,536
        x = _batch(size, 5, seed=size)
        assert torch.equal(exported.module()(x), q(x)), size


# torch 2.11's Dynamo reads ``.grad`` of the non-leaf scale view it takes as an input of the
# frame after the initialisation's graph break (builder.safe_has_grad), hiding torch's
# warning with a filter that filterwarnings = error overrides; hardgrad reads no .grad.
@pytest.mark.filterwarnings(
    "ignore:The .grad attribute of a Tensor that is not a leaf Tensor:UserWarning"
)
@pytest.mark.compile
def test_compiled_from_its_first_call_with_a_zero_batch_first():
    torch._dynamo.reset()
    compiled_module, eager_module = (hg.nn.Quantize(bits=4, per_channel_dim=1) for _ in "ce")
    compiled = torch.compile(compiled_module, backend="aot_eager")
    for step, x in enumerate([torch.zeros(4, 3), _batch(4, 3), _batch(5, 3, seed=1)]):
        outputs = []
        for run in (compiled, eager_module):
            leaf = x.clone().requires_grad_()
            y = run(leaf)
            (y * torch.arange(3.0)).sum().backward()
            outputs.append((y.detach(), leaf.grad))
        assert torch.equal(outputs[0][0], outputs[1][0]), step
        assert torch.equal(outputs[0][1], outputs[1][1]), step
        assert compiled_module.initialized == eager_module.initialized == (step > 0)
    assert torch.equal(compiled_module.scale, eager_module.scale)
    torch.testing.assert_close(compiled_module.scale.grad, eager_module.scale.grad)
    torch._dynamo.reset()


@pytest.mark.compile
# Dynamo reads .grad of the non-leaf logits it hands across the unit's graph break (torch's
# own warning, not hardgrad's).
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
def test_an_annealed_categorical_compiles_without_a_recompile_per_step():
    """Before: the schedule's temperature entered the graph as a float that the
    estimators branch on, so every step recompiled (11 graphs in 12 steps with
    aot_eager, then the recompile limit and eager fallback)."""
    from torch._dynamo.testing import CompileCounterWithBackend

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.inner, self.outer = nn.Linear(4, 5), nn.Linear(5, 2)
            self.unit = hg.nn.Categorical(estimator="st_gumbel", tau=hg.nn.anneal(1.0, 0.2, 8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.outer(self.unit(torch.tanh(self.inner(x)) * 2)).relu()

    def make() -> nn.Module:
        return Model()

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    compiled_model, eager_model = make(), make()
    compiled = torch.compile(compiled_model, backend=counter)
    for step in range(12):
        x = _batch(3, 4, seed=step)
        grads = []
        for run, model in ((compiled, compiled_model), (eager_model, eager_model)):
            torch.manual_seed(step)
            model.zero_grad()
            run(x).square().sum().backward()
            grads.append(model.inner.weight.grad.clone())
        torch.testing.assert_close(grads[0], grads[1])
    assert compiled_model.unit.step == eager_model.unit.step == 12
    # The layers around the unit compile (two graphs around its eager draw), once.
    assert 1 <= counter.frame_count <= 3, counter.frame_count
    torch._dynamo.reset()
