"""Walks over autograd graphs for :func:`hardgrad.diagnostics.audit`.

A graph is walked only when a backward runs while something the audit must decide about
is pending (a ``detach``, a ``round``... applied to a tensor that requires grad): a clean
training step pays nothing here.

An *end* is where a watched call took its input from: the input's ``grad_fn``, or the
tensor itself when it is a leaf (a parameter), whose node (``AccumulateGrad``) cannot be
reached from the tensor.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from ._ops import is_zero_node


def end_of(tensor: torch.Tensor) -> Any:
    """The graph node a tensor that requires grad comes from, or the leaf itself."""
    node = tensor.grad_fn
    return tensor if node is None else node


def _variable(node: Any) -> torch.Tensor | None:
    """The leaf tensor of an ``AccumulateGrad`` node, else None."""
    if type(node).__name__ == "AccumulateGrad":
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            return variable
    return None


def _children(node: Any) -> Iterable[Any]:
    try:
        pairs = node.next_functions
    except (AttributeError, RuntimeError):
        return ()
    return [child for child, _ in pairs if child is not None]


@dataclass
class Reach:
    """What a backward reaches from its roots: node ids and leaf ids; ``clean`` holds the
    part reached without passing through a zero-derivative node (``round``, ``sign``...)."""

    nodes: set[int] = field(default_factory=set)
    leaves: set[int] = field(default_factory=set)
    clean_nodes: set[int] = field(default_factory=set)
    clean_leaves: set[int] = field(default_factory=set)
    #: Keeps the node objects alive while their ids are in use.
    keep: list[Any] = field(default_factory=list)

    def contains(self, end: Any) -> bool:
        if isinstance(end, torch.Tensor):
            return id(end) in self.leaves
        return id(end) in self.nodes

    def contains_clean(self, end: Any) -> bool:
        if isinstance(end, torch.Tensor):
            return id(end) in self.clean_leaves
        return id(end) in self.clean_nodes


def reach(roots: Iterable[torch.Tensor], *, clean: bool) -> Reach:
    """Every node and leaf reached backwards from ``roots``; with ``clean``, also the part
    reached through nodes whose derivative is not zero."""
    result = Reach()
    starts = [r.grad_fn for r in roots if r.grad_fn is not None]
    leaves = [r for r in roots if r.grad_fn is None and r.requires_grad]
    result.leaves.update(id(r) for r in leaves)
    result.clean_leaves.update(id(r) for r in leaves)
    _walk(starts, result.nodes, result.leaves, result.keep, stop_at_zero=False)
    if clean:
        _walk(starts, result.clean_nodes, result.clean_leaves, result.keep, stop_at_zero=True)
    return result


def _walk(
    starts: list[Any], nodes: set[int], leaves: set[int], keep: list[Any], *, stop_at_zero: bool
) -> None:
    stack = list(starts)
    while stack:
        node = stack.pop()
        key = id(node)
        if key in nodes:
            continue
        nodes.add(key)
        keep.append(node)
        variable = _variable(node)
        if variable is not None:
            leaves.add(id(variable))
            continue
        if stop_at_zero and is_zero_node(node):
            continue
        stack.extend(_children(node))


def leaves_below(
    ends: Iterable[Any], watch: dict[int, tuple[Any, Any]]
) -> tuple[dict[int, torch.Tensor], set[Any]]:
    """The trainable leaves (by id) a gradient arriving at ``ends`` would reach without
    crossing a zero-derivative node (behind one, they lose it there), and the keys of
    ``watch`` (node id -> (node, key)) whose node is on the way."""
    found: dict[int, torch.Tensor] = {}
    hits: set[Any] = set()
    seen: set[int] = set()
    # The visited nodes stay referenced while their ids are in ``seen``: a node's Python
    # wrapper may die once visited (torch < 2.13 does not keep it alive with the node),
    # and a new wrapper could then reuse its id and be skipped as seen.
    visited: list[Any] = []
    stack: list[Any] = []
    for end in ends:
        if isinstance(end, torch.Tensor):
            found[id(end)] = end
        else:
            stack.append(end)
    while stack:
        node = stack.pop()
        key = id(node)
        if key in seen:
            continue
        seen.add(key)
        visited.append(node)
        if key in watch:
            hits.add(watch[key][1])
        if is_zero_node(node):  # what lies behind it is starved there already
            continue
        variable = _variable(node)
        if variable is not None:
            if variable.requires_grad:
                found[id(variable)] = variable
            continue
        stack.extend(_children(node))
    return found, hits


def straight_through_parts(end: Any, reached: Reach) -> tuple[bool, str | None]:
    """Whether a detached tensor looks like the ``(hard - soft)`` of the detach trick
    ``soft + (hard - soft).detach()``: a difference of two tensors with graphs, ``soft``
    reached by the backward; and which zero-derivative op made ``hard`` (``"round"``,
    ``"sign"``...), if one did."""
    if isinstance(end, torch.Tensor) or type(end).__name__ != "SubBackward0":
        return False, None
    children = [child for child, _ in end.next_functions]
    if len(children) != 2 or children[0] is None or children[1] is None:
        return False, None
    soft = _variable(children[1])
    if not reached.contains(children[1] if soft is None else soft):
        return False, None
    hard = children[0]
    hard_op = None
    if is_zero_node(hard):
        hard_op = type(hard).__name__.split("Backward", 1)[0].lower()
    return True, hard_op
