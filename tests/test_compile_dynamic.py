"""torch.compile when the batch size changes (issue 14): every registered op, compiled the
way users compile, called on batches of 8, then 5 (the last, smaller batch: the automatic
dynamic-shape path recompiles with a symbolic batch size), then 3, and with
``dynamic=True`` from the start; with and without ``fullgraph``.

The backend is ``aot_eager``: Dynamo's tracing with fake and symbolic tensors and
AOTAutograd's tracing of the forward and backward graphs (where shape and scalar
arguments go symbolic, the failures this file guards against) without Inductor's code
generation, which the other compile tests cover on fixed shapes. Each compiled result must
equal eager bit for bit, and so must its gradient.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from hardgrad.ops import OPS

pytestmark = pytest.mark.compile

BATCHES = (8, 5, 3)

#: (dynamic, fullgraph) as users pass them; dynamic=None is the default automatic path.
MODES = [(None, False), (None, True), (True, False), (True, True)]
MODE_IDS = ["auto", "auto-fullgraph", "dynamic", "dynamic-fullgraph"]


def _assert_compiled_matches_eager(
    fn: Callable[[torch.Tensor], torch.Tensor], make: Callable[[int], torch.Tensor], mode
) -> None:
    dynamic, fullgraph = mode
    torch._dynamo.reset()
    compiled = torch.compile(fn, dynamic=dynamic, fullgraph=fullgraph, backend="aot_eager")
    for batch in BATCHES:
        x = make(batch)
        leaf_c = x.clone().requires_grad_()
        leaf_e = x.clone().requires_grad_()
        y_c, y_e = compiled(leaf_c), fn(leaf_e)
        assert torch.equal(y_c.detach(), y_e.detach()), batch
        w = torch.randn(y_e.shape, generator=torch.Generator().manual_seed(batch))
        (y_c * w).sum().backward()
        (y_e * w).sum().backward()
        assert torch.equal(leaf_c.grad, leaf_e.grad), batch
    torch._dynamo.reset()


@pytest.mark.parametrize("mode", MODES, ids=MODE_IDS)
@pytest.mark.parametrize("name", OPS.names())
def test_every_op_with_a_changing_batch(name: str, mode) -> None:
    spec = OPS.get(name)

    def make(batch: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(batch)
        return torch.randn(batch, 6, generator=g, dtype=torch.float32) * 2

    _assert_compiled_matches_eager(lambda x: spec(x), make, mode)
