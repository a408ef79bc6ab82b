"""Per-term verdicts of :func:`hardgrad.diagnostics.audit`: a cut that another loss term hides.

A loss is often a sum of terms (a reconstruction and a commitment loss, a task loss and a
load-balancing loss, a policy term and an entropy bonus). When one term depends in its
forward on a trained tensor only through a cut (an ``argmin``/``topk`` index, a draw, a
comparison, a ``.data`` read, a zero-derivative op) its gradient never reaches that tensor,
even though another term gives the tensor a gradient, and the whole-loss check sees
nothing wrong.

*Forward provenance* is kept for the values that left the graph: the result of a watched
cut is *tainted* with the occurrence that made it; every torch call that takes a tainted
value taints what it returns (a value without graph stays tainted, a result with a graph
marks its ``grad_fn`` as an *entry* of the taint). At a backward the loss is split at its
top-level sums and scalings into terms, and one walk labels every node and leaf with the
terms that reach it, and the leaves with the terms whose gradient reaches them without a
zero derivative on the way. A term that reaches an entry depends on the occurrence's
trainable tensors; those its gradient does not reach are cut off for that term, unless the
term also reads them through an explicit ``detach()`` (a stop-gradient is intent: a VQ loss's
``sg[.]``, a straight-through copy).

Nothing here runs while no cut is watched: a clean step pays one attribute check per torch
call and never walks its graph.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from ._graph import Reach, _children, _variable
from ._ops import Family, is_zero_node

Label = tuple[Any, ...]  # the key of a pending occurrence: (site key, frozenset of leaf ids)
#: Top-level operations a loss is split at (``a + b``, ``a - b``, ``-a``; ``c * a`` and
#: ``a / c`` by a constant).
_SUMS = {"AddBackward0", "SubBackward0", "NegBackward0"}
_SCALES = {"MulBackward0", "DivBackward0"}
#: Bounds that keep a long run cheap: at most this many terms are told apart, and this
#: many values and entries are tainted at once (the oldest generation is dropped first).
MAX_TERMS = 32
MAX_TAINTED = 4096


@dataclass(eq=False)
class Source:
    """A watched cut whose result is tainted: its site, the trainable tensors behind its
    inputs, and whether it is an explicit stop-gradient (intent, never blamed here)."""

    site: Any
    leaves: dict[int, torch.Tensor]
    intent: bool
    generation: int


@dataclass(eq=False)
class TermCut:
    """What one backward's terms say about a source: the leaves a term cut off."""

    site: Any
    cut: dict[int, torch.Tensor] = field(default_factory=dict)
    terms: list[str] = field(default_factory=list)


class Taints:
    """Forward provenance of the values that left the graph (see the module docstring)."""

    def __init__(self) -> None:
        self.sources: dict[Label, Source] = {}
        #: id -> (tensor, labels, generation): values without graph that come from a cut.
        self.values: dict[int, tuple[torch.Tensor, frozenset[Label], int]] = {}
        #: id -> (node, labels, generation): graph nodes that read a tainted value.
        self.entries: dict[int, tuple[Any, frozenset[Label], int]] = {}
        self.generation = 0
        #: id -> (weak reference, trainable tensors, generation): values computed under
        #: no_grad from trainable tensors (by user code), for an index taken from them there.
        self.carried: dict[int, tuple[Any, dict[int, torch.Tensor], int]] = {}
        #: id -> (node, site key) of the entries: the cuts upstream of a later watched call.
        self.upstream_map: dict[int, tuple[Any, Any]] = {}

    # -- while the forward runs ------------------------------------------------------------
    def source(self, label: Label, site: Any, leaves: dict[int, torch.Tensor], result: Any,
               *, intent: bool, node: Any = None) -> None:  # fmt: skip
        """A watched cut made ``result`` (or, for a zero-derivative op, the graph ``node``)."""
        self.sources[label] = Source(site, leaves, intent, self.generation)
        labels = frozenset((label,))
        if node is not None:
            self._enter(node, labels)
        if isinstance(result, torch.Tensor):
            self._mark(result, labels)

    def carry(self, result: Any, leaves: dict[int, torch.Tensor]) -> None:
        if (
            isinstance(result, torch.Tensor)
            and not result.requires_grad
            and len(self.carried) < MAX_TAINTED
        ):
            self.carried[id(result)] = (weakref.ref(result), leaves, self.generation)

    def carried_by(self, args: Any) -> dict[int, torch.Tensor] | None:
        """The trainable tensors behind the no_grad values among ``args``, or None."""
        if not self.carried:
            return None
        found: dict[int, torch.Tensor] | None = None
        for arg in args[:4]:
            known = self.carried.get(id(arg))
            if known is not None and known[0]() is arg:
                found = {**(found or {}), **known[1]}
        return found

    def source_value(self, t: torch.Tensor, label: Label) -> None:
        """Taint a value with a label that is not a source (followed, never judged here)."""
        self._mark(t, frozenset((label,)))

    def labels_of(self, args: Any, kwargs: Any) -> frozenset[Label] | None:
        """The taint of a call's arguments (one level into lists and tuples), or None."""
        found: set[Label] | None = None
        values = self.values
        for group in (args, kwargs.values() if kwargs else ()):
            for arg in group:
                items = arg[:64] if isinstance(arg, (list, tuple)) else (arg,)
                for item in items:
                    known = values.get(id(item))
                    if known is not None and known[0] is item:
                        found = set(known[1]) if found is None else found | known[1]
        return None if found is None else frozenset(found)

    def propagate(self, labels: frozenset[Label], func: Any, args: Any, result: Any) -> None:
        """After a call that read tainted values: taint what it returned, and the tensor it
        wrote into (``out[rows] += ...``, ``x.data = value``)."""
        outputs = result if isinstance(result, (tuple, list)) else (result,)
        for out in outputs[:64]:
            if isinstance(out, torch.Tensor):
                self._mark(out, labels)
        target = args[0] if args else None
        if isinstance(target, torch.Tensor) and _writes_first(func):
            self._mark(target, labels)

    def _mark(self, t: torch.Tensor, labels: frozenset[Label]) -> None:
        node = t.grad_fn
        if node is not None:
            self._enter(node, labels)
        elif not t.requires_grad and len(self.values) < MAX_TAINTED:
            old = self.values.get(id(t))
            if old is not None and old[0] is t:
                labels = labels | old[1]
            self.values[id(t)] = (t, labels, self.generation)

    def _enter(self, node: Any, labels: frozenset[Label]) -> None:
        old = self.entries.get(id(node))
        if old is not None and old[0] is node:
            labels = labels | old[1]
        elif len(self.entries) >= MAX_TAINTED:
            return
        self.entries[id(node)] = (node, labels, self.generation)
        if id(node) not in self.upstream_map:
            self.upstream_map[id(node)] = (node, next(iter(labels))[0])

    def upstream(self) -> dict[int, tuple[Any, Any]]:
        return self.upstream_map

    # -- at a backward ---------------------------------------------------------------------
    def judge(self, roots: Iterable[torch.Tensor]) -> tuple[dict[Label, TermCut], Reach | None]:
        """Split the loss into terms; per source, the leaves some term depends on only
        through cuts, and what the walk reached (the whole loss's :class:`Reach`, so that
        the caller need not walk again), or None when nothing was walked: no value that
        left the graph came back into it. Then age the taints by one backward (those made
        before the previous backward are dropped: a GAN's fake batch serves two)."""
        try:
            if not self.entries or all(s.intent for s in self.sources.values()):
                return {}, None  # nothing to judge: no walk
            return self._judge([r for r in roots if isinstance(r, torch.Tensor)])
        finally:
            if self.sources or self.values or self.entries or self.carried:
                self._age()

    def _age(self) -> None:
        self.generation += 1
        old = self.generation - 2
        self.values = {k: v for k, v in self.values.items() if v[2] > old}
        self.entries = {k: v for k, v in self.entries.items() if v[2] > old}
        self.upstream_map = {k: v for k, v in self.upstream_map.items() if k in self.entries}
        self.carried = {k: v for k, v in self.carried.items() if v[2] > old}
        self.sources = {k: v for k, v in self.sources.items() if v.generation > old}

    def _judge(self, roots: list[torch.Tensor]) -> tuple[dict[Label, TermCut], Reach | None]:
        terms, ghosts, splits = self._split(roots)
        if not terms and not ghosts:
            return {}, None
        walked = Reach()
        reach_any, leaf_clean = _label_walk(terms, walked)
        for node in splits:
            walked.nodes.add(id(node))
            walked.clean_nodes.add(id(node))
            walked.keep.append(node)
        for root in roots:
            if root.grad_fn is None and root.requires_grad:
                walked.leaves.add(id(root))
                walked.clean_leaves.add(id(root))
        # Per term: the labels it depends on (entries it reaches) and its clean leaves.
        depends: list[set[Label]] = [set() for _ in terms]
        for key, (_node, labels, _) in self.entries.items():
            bits = reach_any.get(key, 0)
            index = 0
            while bits:
                if bits & 1:
                    depends[index] |= labels
                bits >>= 1
                index += 1
        names = [_term_name(t) for t in terms]
        for ghost_labels, name in ghosts:
            depends.append(set(ghost_labels))
            names.append(name)
        # A draw read by a term whose gradient reaches its distribution (a log_prob term)
        # is trained there: the other terms that read it (a critic's Q(s, a)) cut nothing.
        scored: dict[Label, int] = {}
        for index, term_labels in enumerate(depends):
            for label in term_labels:
                src = self.sources.get(label)
                if src is not None and src.site.family is Family.SAMPLE:
                    bit = 1 << index
                    if any(leaf_clean.get(k, 0) & bit for k in src.leaves):
                        scored[label] = 1
        found: dict[Label, TermCut] = {}
        for index, term_labels in enumerate(depends):
            sources = [
                (lb, self.sources[lb])
                for lb in term_labels
                if lb in self.sources and lb not in scored
            ]
            excused: set[int] = set()
            for _, src in sources:
                if src.intent:
                    excused.update(src.leaves)
            bit = 1 << index
            for label, src in sources:
                if src.intent:
                    continue
                cut = {
                    k: t
                    for k, t in src.leaves.items()
                    if k not in excused and not (leaf_clean.get(k, 0) & bit)
                }
                if cut:
                    entry = found.setdefault(label, TermCut(src.site))
                    entry.cut.update(cut)
                    entry.terms.append(names[index])
        return found, walked

    def _split(
        self, roots: list[torch.Tensor]
    ) -> tuple[list[Any], list[tuple[Any, str]], list[Any]]:
        """The loss's top-level terms (graph nodes), the terms without graph that read
        a tainted value (their labels and a name: ``-(advantage * action).mean()``), and the
        nodes split at."""
        terms: list[Any] = []
        ghosts: list[tuple[Any, str]] = []
        splits: list[Any] = []
        stack = [r.grad_fn for r in roots if r.grad_fn is not None]
        while stack:
            node = stack.pop()
            if len(terms) + len(stack) >= MAX_TERMS:
                terms.append(node)
                continue
            name = type(node).__name__
            try:
                children = [child for child, _ in node.next_functions]
            except (AttributeError, RuntimeError):
                children = []
            live = [c for c in children if c is not None]
            entry = self.entries.get(id(node))
            tainted = entry is not None and entry[0] is node
            if name in _SUMS or (name in _SCALES and len(live) == 1 and not tainted):
                if tainted and len(live) < len(children):  # a term without graph, tainted
                    ghosts.append((entry[1], "a term without gradient"))  # type: ignore[index]
                splits.append(node)
                stack.extend(live)
            else:
                terms.append(node)
        return terms, ghosts, splits


def _writes_first(func: Any) -> bool:
    """Whether a call writes into its first argument: ``x[i] = v``, ``x.data = v``,
    ``x.add_(v)``, ``x += v``."""
    name = getattr(func, "__name__", "")
    if name in ("__setitem__", "__set__"):
        return True
    if name.startswith("__i") and name.endswith("__"):
        return True
    return name.endswith("_") and not name.startswith("_")


def _label_walk(terms: list[Any], walked: Reach) -> tuple[dict[int, int], dict[int, int]]:
    """One walk from all terms: per node id the bit mask of the terms that reach it, and
    per leaf id the mask of those that reach it without crossing a zero derivative; the
    union of all goes to ``walked``. A node is visited again only when it gains a bit."""
    reach_any: dict[int, int] = {}
    reach_clean: dict[int, int] = {}
    leaf_clean: dict[int, int] = {}
    keep = walked.keep
    stack: list[tuple[Any, int, int]] = [(t, 1 << i, 1 << i) for i, t in enumerate(terms)]
    while stack:
        node, any_bits, clean_bits = stack.pop()
        key = id(node)
        old_any, old_clean = reach_any.get(key, 0), reach_clean.get(key, 0)
        new_any, new_clean = any_bits & ~old_any, clean_bits & ~old_clean
        if not (new_any or new_clean):
            continue
        reach_any[key] = old_any | any_bits
        reach_clean[key] = old_clean | clean_bits
        keep.append(node)
        walked.nodes.add(key)
        if clean_bits:
            walked.clean_nodes.add(key)
        variable = _variable(node)
        if variable is not None:
            leaf_clean[id(variable)] = leaf_clean.get(id(variable), 0) | clean_bits
            walked.leaves.add(id(variable))
            if clean_bits:
                walked.clean_leaves.add(id(variable))
            continue
        if is_zero_node(node):
            new_clean = 0
        for child in _children(node):
            stack.append((child, new_any, new_clean))
    return reach_any, leaf_clean


def _term_name(node: Any) -> str:
    name = type(node).__name__
    core = name.split("Backward", 1)[0]
    return f"the term made by {core.lower() or name}" if core else "a term"
