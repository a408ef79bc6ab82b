"""The watcher behind :func:`hardgrad.diagnostics.audit`: what it records of the calls that
:class:`~._mode.AuditMode` passes it while the block runs and how it decides at each
backward (its base, :class:`~._leaves.LeafTracker`, finds the tensors that should be
trained: the module and optimizer hooks).

A call that can lose a gradient (a ``round``, a ``detach``, an ``argmax``... on a tensor
that requires grad, made by your code) becomes a *site* (``file:line`` and op) with a
pending occurrence that holds where its inputs came from and the trainable tensors behind
them. At the next backward the occurrence is resolved against the graph of the loss: did
an input reach the loss by a gradient path anyway (a straight-through estimator, a VQ
loss's stop-gradient)? did the loss's gradient run into a zero derivative? After each
backward, the tracked tensors that got a gradient are crossed off. When the block ends the
sites are judged against what was left (:mod:`._judge`).

The watcher never changes what runs: its own bookkeeping is guarded, so a failure there
can only cost a finding, never your call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch

from . import _frames as frames
from . import _ops as ops
from ._copies import OutOfGraph
from ._graph import end_of, leaves_below, reach, straight_through_parts
from ._leaves import LeafTracker, grad_tensors, nested_grad_tensors
from ._ops import Family
from ._sites import Pending, Site
from ._terms import Label, Taints

#: How many occurrences of one site are all resolved against a backward; later ones are
#: only counted, except the 2**k-th and those reading a trainable tensor directly that the
#: site has not read before (a layer first used late, through a line its siblings share).
MAX_RESOLUTIONS = 3
#: At most this many occurrences wait for a backward (one per site and set of trainable
#: tensors behind it: the layers of a network that share one line of code stay apart,
#: the batches of an evaluation loop without backward do not pile up).
MAX_PENDING = 256
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


class Recorder(LeafTracker):
    """Records the watched calls as sites with pending occurrences and resolves those at
    each backward; the tensors that should get a gradient are tracked by the base class."""

    def __init__(self) -> None:
        #: The frames running when the block opened: never "inside hardgrad" for it (the
        #: ``hardgrad audit`` command runs the script from hardgrad's own code).
        super().__init__(frames.running())
        self.sites: dict[tuple[Any, ...], Site] = {}
        self.pending: dict[tuple[Any, ...], Pending] = {}
        #: Output nodes of pending zero-derivative ops (node id -> (node, site key)).
        self.zero_outs: dict[int, tuple[Any, tuple[Any, ...]]] = {}
        self.grad_inputs: set[int] = set()
        self.failures: list[str] = []
        self.taints = Taints()
        self.outside = OutOfGraph()
        self.last_sample: FrameType | None = None

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
        """``torch.tensor(array)`` after a parameter was read out: see _copies."""
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
