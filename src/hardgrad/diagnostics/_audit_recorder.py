"""The watcher behind :func:`hardgrad.diagnostics.audit`: what it records while the block
runs (:class:`AuditMode`, the module and optimizer hooks) and how it decides at each
backward.

A call that can lose a gradient (a ``round``, a ``detach``, an ``argmax``... on a tensor
that requires grad, made by your code) becomes a *site* (``file:line`` and op) with a
pending occurrence that holds where its inputs came from and the trainable tensors behind
them. At the next backward the occurrence is resolved against the graph of the loss: did
an input reach the loss by a gradient path anyway (a straight-through estimator, a VQ
loss's stop-gradient)? did the loss's gradient run into a zero derivative? After each
backward, the tracked tensors that got a gradient are crossed off. When the block ends the
sites are judged against what was left (:mod:`._audit_judge`).

The watcher never changes what runs: its own bookkeeping is guarded, so a failure there
can only cost a finding, never your call.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any

import torch

from . import _audit_frames as frames
from . import _audit_ops as ops
from ._audit_copies import OutOfGraph
from ._audit_graph import end_of, leaves_below, reach, straight_through_parts
from ._audit_leaves import Leaf, grad_changed, grad_state, grad_tensors, nested_grad_tensors
from ._audit_ops import Family
from ._audit_terms import Label, Taints

#: How many occurrences of one site are all resolved against a backward; later ones are
#: only counted, except the 2**k-th and those reading a trainable tensor directly that the
#: site has not read before (a layer first used late, through a line its siblings share).
MAX_RESOLUTIONS = 3
#: At most this many occurrences wait for a backward (one per site and set of trainable
#: tensors behind it: the layers of a network that share one line of code stay apart,
#: the batches of an evaluation loop without backward do not pile up).
MAX_PENDING = 256
NO_GRAD_HINT = (
    "move the call out of torch.no_grad() if it should be trained; if it is frozen on "
    "purpose, call .requires_grad_(False) on it or leave its parameters out of the optimizer"
)
#: Calls that only read or copy a tensor: on a parameter outside a module's forward they
#: are set-up, logging or an EMA, not a cut in the model.
_BOOKKEEPING = {Family.DETACH, Family.DATA_GET, Family.LOG}

#: Calls also watched under no_grad (on a tensor that requires grad): the hard ops a user
#: may have wrapped there by mistake. Never findings unless what they read gets no
#: gradient otherwise.
_NO_GRAD_WATCHED = {
    Family.ZERO, Family.COMPARE, Family.INDEX, Family.TUPLE_INDEX, Family.CAST, Family.COPY,
}  # fmt: skip

Post = Callable[[Any], None]
_HARDGRAD_CALLERS = (frames.OPS_DIR, frames.FUNCTION_FILE)


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


class Recorder:
    def __init__(self) -> None:
        self.sites: dict[tuple[Any, ...], Site] = {}
        self.pending: dict[tuple[Any, ...], Pending] = {}
        #: Output nodes of pending zero-derivative ops (node id -> (node, site key)).
        self.zero_outs: dict[int, tuple[Any, tuple[Any, ...]]] = {}
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
        self.grad_inputs: set[int] = set()
        self.backward_seen = False  # a backward that fills .grad ran
        self.any_backward = False  # ... or torch.autograd.grad was called
        self.failures: list[str] = []
        self.taints = Taints()
        self.outside = OutOfGraph()
        self.last_cuts: list[Pending] = []  # cut occurrences of the latest backward
        self.last_sample: FrameType | None = None
        self._inside_hardgrad: dict[tuple[CodeType, CodeType | None], bool] = {}
        self._order = 0
        #: The opening thread: the global module/optimizer hooks skip other threads' calls.
        self.thread = threading.get_ident()
        #: The frames running when the block opened: never "inside hardgrad" for it (the
        #: ``hardgrad audit`` command runs the script from hardgrad's own code).
        self.outer = frames.running()

    def _next(self) -> int:
        self._order += 1
        return self._order

    # -- sites -----------------------------------------------------------------------------
    def site(self, family: Family, op: str, location: str, suggestion: str) -> Site:
        key = (family, op, location)
        found = self.sites.get(key)
        if found is None:
            kind = ops.kind_of(family)
            found = self.sites[key] = Site(family, kind, op, location, suggestion, self._next())
        return found

    def record(
        self,
        family: Family,
        op: str,
        location: str,
        suggestion: str,
        ends: list[Any],
        out: Any,
        result: Any = None,
    ) -> Label | None:
        """A watched call's occurrence, pending until the next backward; its ``result``
        (the value without graph) is tainted with it. Returns its key."""
        found = self.site(family, op, location, suggestion)
        found.count += 1
        if not self.due(found, ends):
            if family is Family.DETACH and found.leaves:  # intent stays known, unwalked
                self.taints.source((found.key, None), found, found.leaves, result, intent=True)
            return None
        watch = {**self.zero_outs, **self.taints.upstream()}
        leaves, upstream = leaves_below(ends, watch)
        key = (found.key, frozenset(leaves))
        self.drop(key)
        self.pending[key] = Pending(found, ends, out, leaves, upstream)
        if out is not None:
            self.zero_outs[id(out)] = (out, found.key)
        if len(self.pending) > MAX_PENDING:
            self.drop(next(iter(self.pending)))
        if leaves and family is not Family.LOG:
            intent = family is Family.DETACH
            self.taints.source(key, found, leaves, result, intent=intent, node=out)
        return key

    @staticmethod
    def due(found: Site, ends: list[Any]) -> bool:
        """Whether this occurrence is resolved (see MAX_RESOLUTIONS)."""
        if found.resolutions < MAX_RESOLUTIONS:
            return True
        if any(isinstance(e, torch.Tensor) and id(e) not in found.leaves for e in ends):
            return True
        return found.count & (found.count - 1) == 0

    def drop(self, key: tuple[Any, ...]) -> None:
        old = self.pending.pop(key, None)
        if old is not None and old.out is not None:
            self.zero_outs.pop(id(old.out), None)

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

    # -- calls -----------------------------------------------------------------------------
    def handle(
        self, family: Family, func: Any, args: Any, kwargs: Any, frame: FrameType | None
    ) -> Any:
        """Call ``func`` once, unchanged; look before and after (never failing it)."""
        try:
            post = self.before(family, func, args, kwargs, frame)
        except Exception:  # the watcher's own failure: a finding lost, never the call
            post = None
        result = func(*args, **kwargs)
        if post is not None:
            with contextlib.suppress(Exception):
                post(result)
        return result

    def before(
        self, family: Family, func: Any, args: Any, kwargs: Any, frame: FrameType | None
    ) -> Post | None:
        if family is Family.BACKWARD:
            return self.backward(args, kwargs, frame)
        if family is Family.GRAD:
            self.autograd_grad(args, kwargs)
            return None
        if family is Family.REQUIRES_GRAD:
            wanted = args[1] if len(args) > 1 else kwargs.get("requires_grad", True)
            if args and isinstance(args[0], torch.Tensor) and wanted is True:
                tensor = args[0]
                return lambda _: self.tensor_born(tensor, frame, frames.REQUIRES)
            return None
        if family in (Family.SAMPLE, Family.SAMPLE_PRIMITIVE):
            return self.sample(family, func, args, kwargs, frame)
        if family is Family.DATA_SET:
            return self.data_set(func, args, frame)
        grad_on = torch.is_grad_enabled()
        if not grad_on and family not in _NO_GRAD_WATCHED:
            return None
        if family is Family.COPY:
            data = args[1] if ops.raw_name(func) == "new_tensor" and len(args) > 1 else args[0]
            inputs = nested_grad_tensors(data)
        else:
            inputs = grad_tensors(args, {}, (0, 1) if family is Family.COMPARE else (0,))
        if not inputs and not grad_on and family in (Family.INDEX, Family.TUPLE_INDEX):
            carried = self.taints.carried_by(args)  # computed from trainable tensors
            inputs = list(carried.values()) if carried else []
        if not inputs:
            return self.made_outside(func, frame) if family is Family.COPY else None
        if family is Family.CAST and not ops.casts_to_non_float(func, args, kwargs):
            return None
        user = frames.caller(frame, func)
        if user is None or self.hardgrad_callable(user):
            return None
        if (
            family in _BOOKKEEPING
            and all(isinstance(t, torch.nn.Parameter) for t in inputs)
            and not frames.in_module_forward(user)
        ):
            # A parameter read outside a forward: set-up, logging, an EMA; the cause of a
            # failed backward if it comes back through NumPy (a solver without wrapper).
            self.outside.read(frames.where(user), ops.display(func), inputs)
            return None
        ends = [end_of(t) for t in inputs]
        location = frames.where(user)

        def after(result: Any) -> None:
            if family is Family.TUPLE_INDEX and not isinstance(result, tuple):
                return
            out = result.grad_fn if isinstance(result, torch.Tensor) else None
            label, hint = ops.op_label(family, func), ops.suggestion(family, func)
            if not grad_on:  # a cause only when what it reads gets no gradient otherwise
                label += " under torch.no_grad()"
                hint += "; and move it out of torch.no_grad(), which keeps no graph at all"
            value = result[1] if family is Family.TUPLE_INDEX else result
            if family is Family.ZERO:
                value = None
            else:
                out = None
            self.record(family, label, location, hint, ends, out, value)

        return after

    def made_outside(self, func: Any, frame: FrameType | None) -> Post | None:
        """``torch.tensor(array)`` after a parameter was read out: see _audit_copies."""
        user = frames.caller(frame, func) if self.outside.is_maker(func) else None
        if user is None:
            return None
        label, location = ops.op_label(Family.COPY, func), frames.where(user)
        return lambda result: self.outside.made(self, label, location, result)

    def sample(
        self, family: Family, func: Any, args: Any, kwargs: Any, frame: FrameType | None
    ) -> Post | None:
        near = frames.past_plumbing(frame)
        if near is not None and near.f_code.co_filename.startswith(frames.DISTRIBUTIONS_DIR):
            key = self.distribution_sample(near)
            if key is None:
                return None
            source = self.taints.sources.get(key)
            return (
                None
                if source is None
                else lambda r: self.taints.source(key, source.site, source.leaves, r, intent=False)
            )
        if family is Family.SAMPLE_PRIMITIVE:
            return None
        positions = (1,) if ops.raw_name(func) == "bernoulli_" else (0,)
        inputs = grad_tensors(args, kwargs, positions)
        user = frames.caller(frame, func) if inputs else None
        if (
            user is None
            or self.hardgrad_callable(user)
            or frames.inside(user, frames.FUNCTION_FILE, self.outer)
        ):
            return None
        ends = [end_of(t) for t in inputs]
        location, label = frames.where(user), ops.op_label(family, func)

        def after(result: Any) -> None:
            out = result.grad_fn if isinstance(result, torch.Tensor) else None
            self.record(family, label, location, ops.SAMPLE_HINT, ends, out, result)

        return after

    def distribution_sample(self, near: FrameType) -> Label | None:
        """A torch.distributions sampler is drawing: when the user called ``.sample()`` on
        a distribution whose parameters require grad, record it (once per call; the key
        of the occurrence, whose taint the draw carries, when recorded)."""
        outer: FrameType | None = None
        frame: FrameType | None = near
        while frame is not None and frames.category(frame.f_code.co_filename) != "user":
            if frame.f_code.co_filename.startswith(frames.DISTRIBUTIONS_DIR):
                outer = frame
            frame = frame.f_back
        if outer is None or frame is None or outer.f_code.co_name not in ("sample", "sample_n"):
            return None
        if outer is self.last_sample:
            return None
        self.last_sample = outer
        if self.hardgrad_callable(frame) or frames.inside(frame, frames.FUNCTION_FILE, self.outer):
            return None
        dist = outer.f_locals.get("self")
        inputs = ops.distribution_tensors(dist)
        if not inputs:
            return None
        ends = [end_of(t) for t in inputs]
        label = f"{type(dist).__name__}.sample"
        where = frames.where(frame)
        return self.record(Family.SAMPLE, label, where, ops.DIST_SAMPLE_HINT, ends, None)

    def data_set(self, func: Any, args: Any, frame: FrameType | None) -> Post | None:
        """``w.data = value`` on a parameter (or an activation) that requires grad: autograd
        never sees the op that made ``value``. Noted when the values are hard."""
        if len(args) < 2 or not isinstance(args[0], torch.Tensor) or not args[0].requires_grad:
            return None
        target = args[0]
        if not (isinstance(target, torch.nn.Parameter) or target.grad_fn is not None):
            return None  # a plain leaf: an adversarial perturbation, an input...
        user = frames.caller(frame, func)
        if user is None or frames.inside(user, frames.FUNCTION_FILE, self.outer):
            return None
        location = frames.where(user)
        found = self.sites.get((Family.DATA_SET, "Tensor.data =", location))
        if found is None:
            values = ops.hard_values(args[1])
            if values is None:
                return None
            found = self.site(Family.DATA_SET, "Tensor.data =", location, "")
            found.values = values
        found.count += 1
        return None

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

    # -- backward --------------------------------------------------------------------------
    def backward(self, args: Any, kwargs: Any, frame: FrameType | None) -> Post:
        first = args[0] if args else kwargs.get("tensors")
        roots = [first] if isinstance(first, torch.Tensor) else list(first or ())
        roots = [r for r in roots if isinstance(r, torch.Tensor)]
        ok = any(r.requires_grad for r in roots)
        self.read_grads()
        self.any_backward = True
        if not ok:
            user = frames.first_user(frames.past_plumbing(frame))
            self.failures.append(frames.where(user) if user is not None else "?")
            for leaf in self.outside.failed(self.taints, roots).values():
                self.seen(leaf, self.failures[-1])
        self.outside.clear()
        cuts, walked = self.taints.judge(roots if ok else [])
        self.last_cuts = []
        if self.pending:
            self.resolve(roots if ok else [], failed=not ok, walked=walked)
        for term_cut in cuts.values():
            site = term_cut.site
            site.term_cut.update(term_cut.cut)
            site.terms.extend(t for t in term_cut.terms if t not in site.terms)
        return self.observe

    def autograd_grad(self, args: Any, kwargs: Any) -> None:
        outputs = args[0] if args else kwargs.get("outputs")
        inputs = args[1] if len(args) > 1 else kwargs.get("inputs")
        roots = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs or ())
        targets = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs or ())
        self.grad_inputs.update(id(t) for t in targets if isinstance(t, torch.Tensor))
        self.read_grads()
        self.any_backward = True
        if self.pending:
            self.resolve([r for r in roots if isinstance(r, torch.Tensor)], failed=False)

    def resolve(self, roots: list[torch.Tensor], *, failed: bool, walked: Any = None) -> None:
        """Decide the pending occurrences against the graph of ``roots`` (``walked``: what
        the per-term walk reached already, so that the graph is walked once)."""
        pending = list(self.pending.values())
        self.pending.clear()
        self.zero_outs.clear()
        reached = walked or reach(roots, clean=any(p.out is not None for p in pending))
        for p in pending:
            site = p.site
            site.resolutions += 1
            site.failed |= failed
            site.leaves.update(p.leaves)
            if p.out is not None and id(p.out) in reached.nodes:
                if any(reached.contains_clean(end) for end in p.ends):
                    site.zero_bypassed = True
                    continue
                site.zero_fed = True
                site.starved.update(p.leaves)
            elif any(reached.contains(end) for end in p.ends):
                site.reached = True
                continue
            elif site.family in (Family.DETACH, Family.DATA_GET) and site.trick is None:
                site.trick = straight_through_parts(p.ends[0], reached)
            site.cut.update(p.leaves)
            site.upstream |= p.upstream - {site.key}
            self.last_cuts.append(p)
            for leaf in p.leaves.values():
                self.seen(leaf, site.location)

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
                held = {id(p) for group in optimizer.param_groups for p in group["params"]}
                for cut in self.last_cuts:
                    cut.site.step_cut.update(k for k in cut.leaves if k in held)
            held = sum(len(group["params"]) for group in optimizer.param_groups)
            if self.optimizers.get(id(optimizer)) == held:  # known (a group added: look again)
                return
            self.optimizers[id(optimizer)] = held
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
