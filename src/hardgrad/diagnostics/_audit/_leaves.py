"""The tensors :func:`hardgrad.diagnostics.audit` expects a gradient for: how they are found
(the parameters of the modules called in the block, tensors made with ``requires_grad=True``,
what an optimizer steps), how it tells whether a backward gave them one (their ``.grad``
object and its version) and crosses them off; the arguments of a call that require grad."""

from __future__ import annotations

import sys
import threading
import weakref
from dataclasses import dataclass
from types import CodeType, FrameType
from typing import Any

import torch

from . import _frames as frames
from ._ops import Family
from ._sites import Pending, Site

GradState = tuple["weakref.ref[torch.Tensor]", int] | None
NO_GRAD_HINT = (
    "move the call out of torch.no_grad() if it should be trained; if it is frozen on "
    "purpose, call .requires_grad_(False) on it or leave its parameters out of the optimizer"
)
_HARDGRAD_CALLERS = (frames.OPS_DIR, frames.FUNCTION_FILE)


@dataclass(eq=False)
class Leaf:
    """A tensor that requires grad and should get a gradient from a backward."""

    tensor: torch.Tensor
    label: str
    location: str
    order: int
    origin: str  # "module", "tensor", "optimizer" or "seen"
    from_no_grad: bool = False
    state: GradState = None  # its .grad when last looked at
    exposed: bool = False  # a backward ran while it was tracked
    touched: bool = False  # a backward changed its .grad (to all zeros, since it is open)


def grad_state(t: torch.Tensor) -> GradState:
    """The ``.grad`` a tensor has now (a weak reference: ids are reused once a grad set to
    None is freed) and its version, to tell later whether a backward touched it."""
    grad = t.grad
    return None if grad is None else (weakref.ref(grad), grad._version)


def grad_changed(t: torch.Tensor, state: GradState) -> bool:
    grad = t.grad
    if grad is None:
        return False
    return state is None or state[0]() is not grad or grad._version != state[1]


def grad_tensors(args: Any, kwargs: Any, positions: tuple[int, ...]) -> list[torch.Tensor]:
    found = []
    for i in positions:
        value = args[i] if i < len(args) else None
        if isinstance(value, torch.Tensor) and value.requires_grad:
            found.append(value)
    for value in kwargs.values():
        if isinstance(value, torch.Tensor) and value.requires_grad:
            found.append(value)
    return found


def nested_grad_tensors(data: Any) -> list[torch.Tensor]:
    """Tensors that require grad in ``data`` or in a (nested) list or tuple of it."""
    if isinstance(data, torch.Tensor):
        return [data] if data.requires_grad else []
    if isinstance(data, (list, tuple)):
        return [t for item in data[:4096] for t in nested_grad_tensors(item)]
    return []


class LeafTracker:
    """The tensors that should get a gradient, found as the block runs (module and optimizer
    hooks, tensors born with ``requires_grad``) and crossed off after each backward; the
    base of the :class:`~._recorder.Recorder`, whose sites and findings count in the same
    order of first sight."""

    def __init__(self, outer: frozenset[int]) -> None:
        self.leaves: dict[int, Leaf] = {}
        self.open: dict[int, Leaf] = {}  # leaves that have not had a gradient yet
        #: Modules whose parameters are known (id -> known only from a no_grad call).
        self.covered: dict[int, bool] = {}
        # Strong references: a model built inside a function is gone by the end of the
        # block, but its parameters must still be checked; released with the recorder.
        self.grad_modules: dict[int, torch.nn.Module] = {}
        self.no_grad_sites: dict[int, Site] = {}
        self.stepped: dict[int, torch.Tensor] = {}
        self.optimizers: dict[int, int] = {}  # id -> how many tensors it held
        self.backward_seen = False  # a backward that fills .grad ran
        self.any_backward = False  # ... or torch.autograd.grad was called
        self.last_cuts: list[Pending] = []  # cut occurrences of the latest backward
        self._inside_hardgrad: dict[tuple[CodeType, CodeType | None], bool] = {}
        self._order = 0
        #: The opening thread: the global module/optimizer hooks skip other threads' calls.
        self.thread = threading.get_ident()
        #: The frames running when the block opened (see :func:`._frames.inside`).
        self.outer = outer

    def _next(self) -> int:
        self._order += 1
        return self._order

    def hardgrad_callable(self, frame: FrameType) -> bool:
        """Whether user code at ``frame`` runs inside a hardgrad op (the ``hard`` and
        ``soft`` callables of :func:`hardgrad.straight_through` are meant to be hard) or
        inside a custom ``autograd.Function`` (a forward that turns grad back on);
        cached per code object and that of its caller (a function passed to
        ``hg.straight_through`` may also be called directly, where it is watched)."""
        parent = frame.f_back
        key = (frame.f_code, parent.f_code if parent is not None else None)
        known = self._inside_hardgrad.get(key)
        if known is None:
            known = any(frames.inside(frame, d, self.outer) for d in _HARDGRAD_CALLERS)
            self._inside_hardgrad[key] = known
        return known

    # -- after a backward ------------------------------------------------------------------
    def seen(self, leaf: torch.Tensor, location: str) -> None:
        """Track a tensor a cut was seen to cut off (named where the cut is)."""
        if id(leaf) not in self.leaves:
            label = f"tensor of shape {tuple(leaf.shape)}"
            self.add_leaf(Leaf(leaf, label, location, self._next(), "seen"))

    def observe(self, _result: Any) -> None:
        """After a backward: cross off the tracked tensors that got a gradient."""
        self.backward_seen = True
        for key, leaf in list(self.open.items()):
            leaf.exposed = True
            t = leaf.tensor
            if not grad_changed(t, leaf.state):
                continue
            grad = t.grad
            assert grad is not None
            values = grad.coalesce().values() if grad.is_sparse else grad
            if values.numel() == 0 or bool(values.any()):
                del self.open[key]
            else:
                leaf.touched = True
                leaf.state = grad_state(t)

    # -- tensors, modules and optimizers ---------------------------------------------------
    def tensor_born(self, t: torch.Tensor, frame: FrameType | None, pattern: Any) -> None:
        """A leaf that requires grad was made by user code (``requires_grad=True`` or
        ``requires_grad_()``): it should get a gradient once a backward runs."""
        if not (t.requires_grad and t.grad_fn is None) or isinstance(t, torch.nn.Parameter):
            return
        user = frames.past_plumbing(frame)
        if user is None or frames.category(user.f_code.co_filename) != "user":
            return
        known = self.leaves.get(id(t))
        if (known is not None and known.tensor is t) or self.hardgrad_callable(user):
            return
        name = frames.name_on_line(user.f_code.co_filename, user.f_lineno, pattern)
        if name is None and pattern is not frames.ASSIGNED:
            name = frames.name_on_line(user.f_code.co_filename, user.f_lineno, frames.ASSIGNED)
        label = f"tensor {name}" if name else f"tensor of shape {tuple(t.shape)}"
        self.add_leaf(Leaf(t, label, frames.where(user), self._next(), "tensor"))

    def add_leaf(self, leaf: Leaf) -> None:
        """Track a tensor that should get a gradient; what its ``.grad`` is now is read
        before each backward (and now, when one ran already: it may be running)."""
        self.leaves[id(leaf.tensor)] = leaf
        self.open[id(leaf.tensor)] = leaf
        if self.any_backward:
            leaf.state = grad_state(leaf.tensor)

    def read_grads(self) -> None:
        """Before a backward (inside the watcher: ``.grad`` costs no dispatch): each open
        tensor's ``.grad`` now, so only this backward's change counts (not an in-place
        ``zero_grad(set_to_none=False)`` between the backwards of an accumulated step)."""
        for leaf in self.open.values():
            leaf.state = grad_state(leaf.tensor)

    def module_called(self, module: torch.nn.Module, _inputs: Any) -> None:
        if threading.get_ident() != self.thread:
            return
        try:
            if torch.is_grad_enabled():
                if id(module) not in self.grad_modules:
                    self.grad_modules[id(module)] = module
                    if self.covered.get(id(module)) is not False:
                        self.register_module(module, sys._getframe(1), from_no_grad=False)
            else:
                self.no_grad_call(module)
        except Exception:  # pragma: no cover - never fail the user's forward
            pass

    def no_grad_call(self, module: torch.nn.Module) -> None:
        found = self.no_grad_sites.get(id(module))
        if found is not None:
            found.count += 1
            return
        frame = frames.first_user(sys._getframe(2))
        if (
            frame is None
            or frames.inside(frame, frames.HARDGRAD_DIR, self.outer)
            or frames.inside(frame, frames.FUNCTION_FILE, self.outer)
            or not any(p.requires_grad for p in module.parameters())
        ):
            return
        op = f"{type(module).__name__} called under torch.no_grad()"
        found = Site(
            Family.NO_GRAD_CALL, "graph_cut", op, frames.where(frame), NO_GRAD_HINT, self._next()
        )
        found.count, found.module = 1, module
        self.no_grad_sites[id(module)] = found
        if id(module) not in self.covered:
            self.register_module(module, frame, from_no_grad=True)

    def register_module(
        self, module: torch.nn.Module, frame: FrameType | None, *, from_no_grad: bool
    ) -> None:
        """Know the parameters of a module (and of all its submodules: a layer that is
        never called is reported where its parent was called)."""
        if not module._parameters and not module._modules:  # ReLU, Dropout...: nothing
            self.covered[id(module)] = False
            return
        user = frames.first_user(frame)
        where = frames.where(user) if user is not None else "?"
        name = type(module).__name__
        subs = module.named_modules() if module._modules else [("", module)]
        for prefix, sub in subs:
            if self.covered.get(id(sub)) is False:
                continue
            self.covered[id(sub)] = from_no_grad
            for pname, p in sub._parameters.items():
                if p is None:
                    continue
                label = f"{name}.{prefix}.{pname}" if prefix else f"{name}.{pname}"
                known = self.leaves.get(id(p))
                if known is not None and known.tensor is p:
                    if known.from_no_grad and not from_no_grad:  # a training call says more
                        known.location, known.from_no_grad = where, False
                    if known.origin != "module":
                        known.label, known.origin = label, "module"
                    continue
                self.add_leaf(Leaf(p, label, where, self._next(), "module", from_no_grad))

    def optimizer_step(self, optimizer: torch.optim.Optimizer, _args: Any, _kwargs: Any) -> None:
        if threading.get_ident() != self.thread:
            return
        try:
            if self.last_cuts:  # which cuts of the latest backward this step pays for
                stepped = {id(p) for group in optimizer.param_groups for p in group["params"]}
                for cut in self.last_cuts:
                    cut.site.step_cut.update(k for k in cut.leaves if k in stepped)
            count = sum(len(group["params"]) for group in optimizer.param_groups)
            if self.optimizers.get(id(optimizer)) == count:  # known (a group added: look again)
                return
            self.optimizers[id(optimizer)] = count
            user = frames.first_user(sys._getframe(1))
            where = frames.where(user) if user is not None else "?"
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if not isinstance(p, torch.Tensor) or not p.requires_grad:
                        continue
                    self.stepped[id(p)] = p
                    if id(p) not in self.leaves:
                        label = f"{type(optimizer).__name__} parameter of shape {tuple(p.shape)}"
                        leaf = Leaf(p, label, where, self._next(), "optimizer", exposed=True)
                        self.add_leaf(leaf)
                        if p.grad is not None and bool(p.grad.any()):  # it had one: trained
                            del self.open[id(p)]
        except Exception:  # pragma: no cover - never fail the user's step
            pass
