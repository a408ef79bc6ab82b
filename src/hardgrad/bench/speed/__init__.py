r"""The ``speed`` benchmark: hardgrad's ops against the code people write by hand.

For every op in :data:`hardgrad.ops.OPS` it times forward plus backward,

.. code-block:: python

    y = fn(x); torch.autograd.grad(y, x, g)

for hardgrad and for the common hand-written alternatives with the *same* semantics:

* the **detach trick** ``soft + (hard - soft).detach()`` (e.g. ``x + (torch.round(x) -
  x).detach()``; for ``sign`` the clipped STE through ``clamp(x, -1, 1)``; for
  ``heaviside`` through ``sigmoid``; for ``one_hot_argmax`` the ``y_hard - y_soft.detach()
  + y_soft`` of ``F.gumbel_softmax``);
* a classic ``torch.autograd.Function`` written as blog posts write it: it saves the float
  input with ``ctx.save_for_backward(x)`` and masks or multiplies in backward (for the
  identity straight-through of the rounding ops it saves nothing);
* PyTorch's own op where one has the same forward and backward: ``torch.clamp`` and
  ``torch.fake_quantize_per_tensor_affine``.

Before anything is timed, every alternative's forward is checked against the op's plain
torch reference (bit for bit, except the detach trick's known rounding: ``s + (h - s)``
need not be exactly ``h`` in floating point, the mismatches are counted and reported) and
its gradient against hardgrad's (``allclose``).

Candidates of one op are timed in interleaved rounds (``blocked_autorange`` per candidate
per round, the order shuffled each round) and the median over rounds is kept. The
**floor** is timed in the same rounds: the two tensors of ``x``'s size that any such op
must write (forward output and input gradient), as ``dst.copy_(x)`` twice into
preallocated tensors. Bytes saved for backward are counted with
``torch.autograd.graph.saved_tensors_hooks``. All of it runs eagerly and again with every
candidate under ``torch.compile`` (compilation time excluded from the timings).

The **samplers** (``hg.categorical`` with every pathwise estimator of
:data:`hardgrad.estimators.ESTIMATORS`, ``hg.bernoulli`` with ``"st"``) are timed the same
way, in their own interleaved rounds, against ``F.gumbel_softmax`` (``hard=True`` and
``False``), ``OneHotCategoricalStraightThrough(...).rsample()`` and the hand-written
Bernoulli straight-through, each row as a ratio to the alternative with the same semantics
(or to ``F.gumbel_softmax(hard=True)`` as a labelled common reference), eagerly and
compiled on the large input and eagerly again on a small one (``small_numel`` elements),
where the per-call cost shows: see :mod:`hardgrad.bench.speed._samplers`. Gumbel-Rao is
also swept over its number of draws ``k`` (time, saved bytes and page faults per call next
to ST-Gumbel: its cost should be linear in ``k``): see :mod:`hardgrad.bench.speed._rao`. LSQ (``hg.quantize`` with a learned
scale, and zero point) is timed against PyTorch's fused learnable fake-quantize kernels,
per tensor and per channel, at both sizes: see :mod:`hardgrad.bench.speed._lsq`.
``hg.soft_sort`` and ``hg.soft_rank`` (l2 and kl) are timed against torchsort at 256 x 100
and 32 x 1000 when ``import torchsort`` works (else hardgrad alone, the row saying so):
see :mod:`hardgrad.bench.speed._sorting`.
"""

from ._candidates import ALTERNATIVES, Candidate, alternatives_for
from ._config import QUICK_BUDGET_S as QUICK_BUDGET_S
from ._config import QUICK_COMPILE_OPS as QUICK_COMPILE_OPS
from ._config import QUICK_COMPILE_SAMPLERS as QUICK_COMPILE_SAMPLERS
from ._config import SpeedConfig, default_config
from ._run import run

__all__ = ["ALTERNATIVES", "Candidate", "SpeedConfig", "alternatives_for", "default_config", "run"]
