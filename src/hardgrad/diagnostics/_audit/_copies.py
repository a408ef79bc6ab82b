"""Values that leave autograd through NumPy or Python and come back as new tensors, for
:func:`hardgrad.diagnostics.audit`.

A parameter read outside a module's forward (``w.detach().cpu().numpy()``, ``w.tolist()``,
``w.data``) is usually set-up, logging or an EMA, and is not a finding. But when a tensor
is then made from outside torch (``torch.tensor(result)``, ``torch.from_numpy``...) and a
``backward()`` of a tensor computed from it fails ("does not require grad"), that round
trip is the cause: a solver called without its wrapper. The reads are remembered until the
next backward, the copies made meanwhile are tainted (:mod:`._terms`), and a failed
backward whose loss carries such a taint names the copy, with the read it came from.
"""

from __future__ import annotations

from typing import Any

import torch

from ._ops import Family

#: At most this many reads are remembered between two backwards.
MAX_READS = 64
_TAG = "outside"
_MAKERS = {"tensor", "as_tensor", "from_numpy", "asarray", "new_tensor"}
HINT = (
    "the values went through NumPy or Python and came back as a new tensor, which has no "
    "graph: for a solver or other non-differentiable routine wrap it with hg.perturbed("
    "solver), hg.imle(solver, ...) or hg.blackbox(solver, lam=...), which give it a "
    "gradient; otherwise compute it with torch ops on the tensor itself"
)


class OutOfGraph:
    def __init__(self) -> None:
        #: (location, op) of the reads since the last backward, and the tensors read.
        self.reads: dict[tuple[str, str], None] = {}
        self.leaves: dict[int, torch.Tensor] = {}
        self.sites: dict[Any, Any] = {}  # label -> site

    def read(self, location: str, op: str, tensors: list[torch.Tensor]) -> None:
        if len(self.reads) < MAX_READS:
            self.reads[(location, op)] = None
            self.leaves.update((id(t), t) for t in tensors)

    def is_maker(self, func: Any) -> bool:
        return bool(self.reads) and getattr(func, "__name__", "") in _MAKERS

    def made(self, recorder: Any, label_op: str, location: str, result: Any) -> None:
        """A tensor made from outside torch at ``location`` while reads are remembered."""
        if not isinstance(result, torch.Tensor) or result.requires_grad:
            return
        where = "; ".join(f"{op} at {loc}" for loc, op in list(self.reads)[:3])
        site = recorder.site(Family.COPY, label_op, location, f"{HINT} (read out at {where})")
        site.count += 1
        label = (_TAG, site.key)
        self.sites[label] = (site, dict(self.leaves))
        recorder.taints.source_value(result, label)

    def failed(self, taints: Any, roots: list[Any]) -> dict[int, torch.Tensor]:
        """A backward of ``roots`` failed: the copies their values came from are the cause
        (marked failed, cutting off the tensors read). Returns those tensors."""
        cut: dict[int, torch.Tensor] = {}
        for root in roots:
            known = taints.values.get(id(root)) if isinstance(root, torch.Tensor) else None
            if known is None or known[0] is not root:
                continue
            for label in known[1]:
                found = self.sites.get(label)
                if found is not None:
                    site, leaves = found
                    site.failed = True
                    site.cut.update(leaves)
                    cut.update(leaves)
        return cut

    def clear(self) -> None:
        self.reads.clear()
        self.leaves.clear()
