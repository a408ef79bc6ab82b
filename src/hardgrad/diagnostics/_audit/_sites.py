"""What :func:`hardgrad.diagnostics.audit` keeps of a watched call: its *site* (op and
``file:line``, with what the backwards said about it) and each occurrence still waiting for
a backward."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ._ops import Family


@dataclass(eq=False)
class Site:
    """A watched call at one ``file:line``: counts, and what the backwards said about it."""

    family: Family
    kind: str
    op: str
    location: str
    suggestion: str
    order: int
    count: int = 0
    resolutions: int = 0
    reached: bool = False  # an input also reached a loss by a gradient path
    zero_fed: bool = False  # a loss's gradient ran into its zero derivative, no way around
    zero_bypassed: bool = False  # ... but its input got gradient by another path too
    failed: bool = False  # pending when a backward of a tensor without grad was called
    #: Trainable tensors behind its inputs: all, those of the occurrences that cut them
    #: off (input not reached by a gradient path), those a zero derivative starved.
    leaves: dict[int, torch.Tensor] = field(default_factory=dict)
    cut: dict[int, torch.Tensor] = field(default_factory=dict)
    starved: dict[int, torch.Tensor] = field(default_factory=dict)
    upstream: set[tuple[Any, ...]] = field(default_factory=set)
    trick: tuple[bool, str | None] | None = None  # detach trick, and the hard op
    values: str | None = None  # what a ``.data =`` wrote: "sign", "scaled sign", "integer"
    module: torch.nn.Module | None = None  # a module called under no_grad
    #: Trainable tensors that a loss term depends on only through this cut (another term
    #: may give them a gradient), and which terms; those cut off in a backward whose
    #: gradient an optimizer holding them then stepped with.
    term_cut: dict[int, torch.Tensor] = field(default_factory=dict)
    terms: list[str] = field(default_factory=list)
    step_cut: set[int] = field(default_factory=set)

    @property
    def key(self) -> tuple[Any, ...]:
        return (self.family, self.op, self.location)


@dataclass(eq=False)
class Pending:
    """One occurrence of a site waiting for a backward: where its inputs came from, the
    trainable tensors behind them, and the watched zero-derivative ops on the way."""

    site: Site
    ends: list[Any]
    out: Any  # the output's node, for a zero-derivative op
    leaves: dict[int, torch.Tensor]
    upstream: set[tuple[Any, ...]]
