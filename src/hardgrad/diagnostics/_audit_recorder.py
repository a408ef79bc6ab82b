"""The watcher behind :func:`hardgrad.diagnostics.audit`: what it records while the block
runs (``_AuditMode``, the module and optimizer hooks) and how it decides at each backward.

While the block runs, a call that can lose a gradient (a ``round``, a ``detach``, an
``argmax``... on a tensor that requires grad, made by your code) becomes a *site*
(``file:line`` and op) with a pending occurrence that holds where its input came from.
At the next backward the occurrence is resolved against the graph of the loss: did the
input reach the loss by a gradient path anyway (a straight-through estimator, a
stop-gradient in a VQ loss)? did the loss's gradient run into a zero derivative? which
trainable tensors lie behind it? When the block ends, the sites are judged against what
each trainable tensor actually got (see :mod:`._audit_judge`).
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import sysconfig
import weakref
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from . import _audit_ops as ops
from ._audit_graph import end_of, leaves_below, reach, straight_through_parts
from ._audit_ops import Family
from ._audit_report import AuditReport

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_HARDGRAD_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_OPS_DIR = os.path.join(_HARDGRAD_DIR, "ops") + os.sep
_DISTRIBUTIONS_DIR = os.path.join(_TORCH_DIR, "distributions") + os.sep
_FUNCTION_FILE = os.path.join(_TORCH_DIR, "autograd", "function.py")
_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_LIBRARY_DIRS = tuple(
    {_TORCH_DIR, _HARDGRAD_DIR}
    | {
        os.path.abspath(path) + os.sep
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if (path := sysconfig.get_paths().get(key))
    }
)
_PLUMBING = {
    os.path.join(_TORCH_DIR, "overrides.py"),
    os.path.join(_TORCH_DIR, "_tensor.py"),
    os.path.join(_TORCH_DIR, "utils", "_device.py"),
}
#: How many occurrences of one site are resolved against a backward; later ones are only
#: counted (the verdict is stable after a few steps, and a long run stays cheap).
MAX_RESOLUTIONS = 3
#: At most this many occurrences wait for a backward (one per site and set of trainable
#: tensors behind it: the layers of a network that share one line of code stay apart,
#: the batches of an evaluation loop without backward do not pile up).
MAX_PENDING = 256
_ASSIGNED = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?::[^=]+)?=[^=]")
_REQUIRES = re.compile(r"([A-Za-z_][\w.]*)\.requires_grad(?:_\(|\s*=)")

_path_cache: dict[str, str] = {}


def _category(filename: str) -> str:
    """``"plumbing"``, ``"library"`` (torch, hardgrad, the standard library, installed
    packages) or ``"user"`` for a code file name (cached)."""
    known = _path_cache.get(filename)
    if known is None:
        if filename.startswith("<frozen"):
            known = "library"
        else:
            path = os.path.abspath(filename)
            if path in _PLUMBING or path.startswith(_HERE):
                known = "plumbing"
            elif path.startswith(_LIBRARY_DIRS):
                known = "library"
            else:
                known = "user"
        _path_cache[filename] = known
    return known


def _past_plumbing(frame: FrameType | None) -> FrameType | None:
    while frame is not None and _category(frame.f_code.co_filename) == "plumbing":
        frame = frame.f_back
    return frame


def _first_user(frame: FrameType | None) -> FrameType | None:
    while frame is not None and _category(frame.f_code.co_filename) != "user":
        frame = frame.f_back
    return frame


def _where(frame: FrameType) -> str:
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def _inside(frame: FrameType | None, prefix: str) -> bool:
    """Whether a frame above ``frame`` runs code from a file starting with ``prefix``."""
    parent = frame.f_back if frame is not None else None
    while parent is not None:
        if os.path.abspath(parent.f_code.co_filename).startswith(prefix):
            return True
        parent = parent.f_back
    return False


def _grad_tensors(args: Any, kwargs: Any, positions: tuple[int, ...]) -> list[torch.Tensor]:
    found = []
    for i in positions:
        value = args[i] if i < len(args) else None
        if isinstance(value, torch.Tensor) and value.requires_grad:
            found.append(value)
    for value in kwargs.values():
        if isinstance(value, torch.Tensor) and value.requires_grad:
            found.append(value)
    return found


def _distribution_tensors(dist: Any) -> list[torch.Tensor]:
    """The tensors that require grad among a distribution's attributes (one level into a
    wrapped ``base_dist``)."""
    found: dict[int, torch.Tensor] = {}
    for owner in (dist, getattr(dist, "base_dist", None)):
        for value in getattr(owner, "__dict__", {}).values():
            if isinstance(value, torch.Tensor) and value.requires_grad:
                found[id(value)] = value
    return list(found.values())


def _name_on_line(filename: str, line: int, pattern: re.Pattern[str]) -> str | None:
    match = pattern.search(linecache.getline(filename, line))
    return match[1] if match else None


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
    values: str | None = None  # what a ``.data =`` wrote: "sign" or "integer"
    module: torch.nn.Module | None = None  # a module called under no_grad

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


@dataclass(eq=False)
class Leaf:
    """A tensor that requires grad and should get a gradient from a backward."""

    tensor: torch.Tensor
    label: str
    location: str
    order: int
    origin: str  # "module", "tensor", "optimizer" or "seen"
    grad_state: tuple[weakref.ref[torch.Tensor], int] | None
    from_no_grad: bool = False


def grad_state(t: torch.Tensor) -> tuple[weakref.ref[torch.Tensor], int] | None:
    """The ``.grad`` a tensor has now (a weak reference: ids are reused once a grad set to
    None is freed) and its version, to tell later whether a backward touched it."""
    grad = t.grad
    return None if grad is None else (weakref.ref(grad), grad._version)


def grad_unchanged(t: torch.Tensor, state: tuple[weakref.ref[torch.Tensor], int] | None) -> bool:
    grad = t.grad
    if grad is None:
        return True
    return state is not None and state[0]() is grad and grad._version == state[1]


class Recorder:
    def __init__(self, report: AuditReport) -> None:
        self.report = report
        self.sites: dict[tuple[Any, ...], Site] = {}
        self.pending: dict[tuple[Any, ...], Pending] = {}
        #: Output nodes of pending zero-derivative ops (node id -> (node, site key)).
        self.zero_outs: dict[int, tuple[Any, tuple[Any, ...]]] = {}
        self.leaves: dict[int, Leaf] = {}
        self.unread: list[Leaf] = []  # leaves whose .grad is read before the next backward
        #: Modules whose parameters are known (id -> known only from a no_grad call).
        self.covered: dict[int, bool] = {}
        # Strong references: a model built inside a function is gone by the end of the
        # block, but its parameters must still be checked; released with the recorder.
        self.grad_modules: dict[int, torch.nn.Module] = {}
        self.no_grad_sites: dict[int, Site] = {}
        self.stepped: dict[int, torch.Tensor] = {}
        self.optimizers: set[int] = set()
        self.grad_inputs: set[int] = set()
        self.backward_seen = False  # a backward that fills .grad ran
        self.any_backward = False  # ... or torch.autograd.grad
        self.failures: list[str] = []
        self.last_sample: FrameType | None = None
        self._inside_hardgrad: dict[CodeType, bool] = {}
        self._order = 0

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
        self, family: Family, op: str, location: str, suggestion: str, ends: list[Any], out: Any
    ) -> Site:
        found = self.site(family, op, location, suggestion)
        found.count += 1
        if found.resolutions < MAX_RESOLUTIONS:
            leaves, upstream = leaves_below(ends, self.zero_outs)
            key = (found.key, frozenset(leaves))
            self.drop(key)
            self.pending[key] = Pending(found, ends, out, leaves, upstream)
            if out is not None:
                self.zero_outs[id(out)] = (out, found.key)
            if len(self.pending) > MAX_PENDING:
                self.drop(next(iter(self.pending)))
        return found

    def drop(self, key: tuple[Any, ...]) -> None:
        old = self.pending.pop(key, None)
        if old is not None and old.out is not None:
            self.zero_outs.pop(id(old.out), None)

    def hardgrad_callable(self, frame: FrameType) -> bool:
        """Whether user code at ``frame`` runs inside a hardgrad op (the ``hard`` and
        ``soft`` callables of :func:`hardgrad.straight_through` are meant to be hard);
        cached per code object."""
        known = self._inside_hardgrad.get(frame.f_code)
        if known is None:
            known = self._inside_hardgrad[frame.f_code] = _inside(frame, _OPS_DIR)
        return known

    # -- calls -----------------------------------------------------------------------------
    def handle(
        self, family: Family, func: Any, args: Any, kwargs: Any, frame: FrameType | None
    ) -> Any:
        if family is Family.BACKWARD:
            return self.backward(func, args, kwargs, frame)
        if family is Family.GRAD:
            return self.autograd_grad(func, args, kwargs)
        if family is Family.REQUIRES_GRAD:
            result = func(*args, **kwargs)
            wanted = args[1] if len(args) > 1 else kwargs.get("requires_grad", True)
            if args and isinstance(args[0], torch.Tensor) and wanted is True:
                self.tensor_born(args[0], frame, _REQUIRES)
            return result
        if family in (Family.SAMPLE, Family.SAMPLE_PRIMITIVE):
            return self.sample(family, func, args, kwargs, frame)
        if family is Family.DATA_SET:
            return self.data_set(func, args, kwargs, frame)
        if not torch.is_grad_enabled():
            return func(*args, **kwargs)
        positions = (0, 1) if family is Family.COMPARE else (0,)
        inputs = _grad_tensors(args, {}, positions)
        if not inputs:
            return func(*args, **kwargs)
        if family is Family.CAST and not ops.casts_to_non_float(func, args, kwargs):
            return func(*args, **kwargs)
        user = self.user_frame(frame, func)
        if user is None or self.hardgrad_callable(user):
            return func(*args, **kwargs)
        ends = [end_of(t) for t in inputs]
        result = func(*args, **kwargs)
        if family is Family.TUPLE_INDEX and not isinstance(result, tuple):
            return result
        out = None
        if family is Family.ZERO and isinstance(result, torch.Tensor):
            out = result.grad_fn
        self.record(
            family,
            ops.op_label(family, func),
            _where(user),
            ops.suggestion(family, func),
            ends,
            out,
        )
        return result

    def user_frame(self, frame: FrameType | None, func: Any) -> FrameType | None:
        """The user's frame that made the call, or None when torch, hardgrad or another
        installed library made it."""
        frame = _past_plumbing(frame)
        code = getattr(func, "__code__", None)
        if frame is not None and code is not None and frame.f_code is code:
            frame = _past_plumbing(frame.f_back)
        if frame is None or _category(frame.f_code.co_filename) != "user":
            return None
        return frame

    def sample(
        self, family: Family, func: Any, args: Any, kwargs: Any, frame: FrameType | None
    ) -> Any:
        caller = _past_plumbing(frame)
        if caller is not None and caller.f_code.co_filename.startswith(_DISTRIBUTIONS_DIR):
            self.distribution_sample(caller)
            return func(*args, **kwargs)
        if family is Family.SAMPLE_PRIMITIVE:
            return func(*args, **kwargs)
        inputs = _grad_tensors(args, kwargs, (1,) if ops.raw_name(func) == "bernoulli_" else (0,))
        user = self.user_frame(frame, func) if inputs else None
        if user is None or self.hardgrad_callable(user) or _inside(user, _FUNCTION_FILE):
            return func(*args, **kwargs)
        ends = [end_of(t) for t in inputs]
        result = func(*args, **kwargs)
        out = result.grad_fn if isinstance(result, torch.Tensor) else None
        self.record(family, ops.op_label(family, func), _where(user), ops.SAMPLE_HINT, ends, out)
        return result

    def distribution_sample(self, caller: FrameType) -> None:
        """A torch.distributions sampler is drawing: when the user called ``.sample()`` on
        a distribution whose parameters require grad, record it (once per call)."""
        outer: FrameType | None = None
        frame: FrameType | None = caller
        while frame is not None and _category(frame.f_code.co_filename) != "user":
            if frame.f_code.co_filename.startswith(_DISTRIBUTIONS_DIR):
                outer = frame
            frame = frame.f_back
        if outer is None or frame is None or outer.f_code.co_name not in ("sample", "sample_n"):
            return
        if outer is self.last_sample:
            return
        self.last_sample = outer
        if self.hardgrad_callable(frame) or _inside(frame, _FUNCTION_FILE):
            return
        dist = outer.f_locals.get("self")
        inputs = _distribution_tensors(dist)
        if not inputs:
            return
        op = f"{type(dist).__name__}.sample"
        self.record(
            Family.SAMPLE,
            op,
            _where(frame),
            ops.DIST_SAMPLE_HINT,
            [end_of(t) for t in inputs],
            None,
        )

    def data_set(self, func: Any, args: Any, kwargs: Any, frame: FrameType | None) -> Any:
        """``x.data = value`` on a tensor that requires grad: autograd never sees the op
        that made ``value``. Noted when the values are hard (a sign or a rounding)."""
        result = func(*args, **kwargs)
        if len(args) < 2 or not isinstance(args[0], torch.Tensor) or not args[0].requires_grad:
            return result
        user = self.user_frame(frame, func)
        if user is None or _inside(user, _FUNCTION_FILE):
            return result
        location = _where(user)
        key = (Family.DATA_SET, "Tensor.data =", location)
        found = self.sites.get(key)
        if found is None:
            values = _hard_values(args[1])
            if values is None:
                return result
            found = self.site(Family.DATA_SET, "Tensor.data =", location, "")
            found.values = values
        found.count += 1
        return result

    def tensor_born(
        self, t: torch.Tensor, frame: FrameType | None, pattern: re.Pattern[str]
    ) -> None:
        """A leaf that requires grad was made by user code (``requires_grad=True`` or
        ``requires_grad_()``): it should get a gradient once a backward runs."""
        if not (t.requires_grad and t.grad_fn is None) or isinstance(t, torch.nn.Parameter):
            return
        user = _past_plumbing(frame)
        if user is None or _category(user.f_code.co_filename) != "user":
            return
        name = _name_on_line(user.f_code.co_filename, user.f_lineno, pattern)
        label = f"tensor {name}" if name else f"tensor of shape {tuple(t.shape)}"
        known = self.leaves.get(id(t))
        if known is not None and known.tensor is t:
            return
        self.add_leaf(Leaf(t, label, _where(user), self._next(), "tensor", None))

    # -- backward --------------------------------------------------------------------------
    def backward(self, func: Any, args: Any, kwargs: Any, frame: FrameType | None) -> Any:
        first = args[0] if args else kwargs.get("tensors")
        roots = [first] if isinstance(first, torch.Tensor) else list(first or ())
        roots = [r for r in roots if isinstance(r, torch.Tensor)]
        ok = any(r.requires_grad for r in roots)
        if self.unread:
            self.read_grads()
        self.any_backward = True
        if not ok:
            user = _first_user(_past_plumbing(frame))
            self.failures.append(_where(user) if user is not None else "?")
        if self.pending:
            self.resolve(roots if ok else [], failed=not ok)
        result = func(*args, **kwargs)
        self.backward_seen = True
        return result

    def autograd_grad(self, func: Any, args: Any, kwargs: Any) -> Any:
        outputs = args[0] if args else kwargs.get("outputs")
        inputs = args[1] if len(args) > 1 else kwargs.get("inputs")
        roots = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs or ())
        targets = [inputs] if isinstance(inputs, torch.Tensor) else list(inputs or ())
        self.grad_inputs.update(id(t) for t in targets if isinstance(t, torch.Tensor))
        if self.unread:
            self.read_grads()
        self.any_backward = True
        if self.pending:
            self.resolve([r for r in roots if isinstance(r, torch.Tensor)], failed=False)
        return func(*args, **kwargs)

    def resolve(self, roots: list[torch.Tensor], *, failed: bool) -> None:
        """Decide the pending occurrences against the graph of ``roots``."""
        pending = list(self.pending.values())
        self.pending.clear()
        self.zero_outs.clear()
        reached = reach(roots, clean=any(p.out is not None for p in pending))
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
            for leaf in p.leaves.values():
                if id(leaf) not in self.leaves:
                    label = f"tensor of shape {tuple(leaf.shape)}"
                    self.add_leaf(Leaf(leaf, label, site.location, self._next(), "seen", None))

    # -- modules and optimizers ------------------------------------------------------------
    def module_called(self, module: torch.nn.Module, _inputs: Any) -> None:
        if torch.is_grad_enabled():
            if id(module) in self.grad_modules:
                return
            self.grad_modules[id(module)] = module
            if self.covered.get(id(module)) is False:  # its parameters are known already
                return
            self.register_module(module, sys._getframe(1), from_no_grad=False)
            return
        found = self.no_grad_sites.get(id(module))
        if found is not None:
            found.count += 1
            return
        frame = _first_user(sys._getframe(1))
        if frame is None or _inside(frame, _HARDGRAD_DIR) or _inside(frame, _FUNCTION_FILE):
            return
        if not any(p.requires_grad for p in module.parameters()):
            return
        op = f"{type(module).__name__} called under torch.no_grad()"
        found = Site(
            Family.NO_GRAD_CALL, "graph_cut", op, _where(frame), NO_GRAD_HINT, self._next(), count=1
        )
        found.module = module
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
        user = _first_user(frame)
        where = _where(user) if user is not None else "?"
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
                self.add_leaf(Leaf(p, label, where, self._next(), "module", None, from_no_grad))

    def add_leaf(self, leaf: Leaf) -> None:
        """Track a tensor that should get a gradient; what its ``.grad`` is now is read
        before the next backward (or now, when one ran already)."""
        self.leaves[id(leaf.tensor)] = leaf
        if self.any_backward:
            leaf.grad_state = grad_state(leaf.tensor)
        else:
            self.unread.append(leaf)

    def read_grads(self) -> None:
        """Called inside the watcher (where ``.grad`` costs no dispatch) before a backward."""
        for leaf in self.unread:
            leaf.grad_state = grad_state(leaf.tensor)
        self.unread.clear()

    def optimizer_step(self, optimizer: torch.optim.Optimizer, _args: Any, _kwargs: Any) -> None:
        if id(optimizer) in self.optimizers:
            return
        self.optimizers.add(id(optimizer))
        user = _first_user(sys._getframe(1))
        where = _where(user) if user is not None else "?"
        for group in optimizer.param_groups:
            for p in group["params"]:
                if not isinstance(p, torch.Tensor) or not p.requires_grad:
                    continue
                self.stepped[id(p)] = p
                if id(p) not in self.leaves:
                    label = f"{type(optimizer).__name__} parameter of shape {tuple(p.shape)}"
                    self.leaves[id(p)] = Leaf(p, label, where, self._next(), "optimizer", None)


NO_GRAD_HINT = (
    "move the call out of torch.no_grad() if it should be trained; if it is frozen on "
    "purpose, call .requires_grad_(False) on it or leave its parameters out of the optimizer"
)


def _hard_values(value: Any) -> str | None:
    """What a tensor written through ``.data`` holds: ``"sign"`` (only -1, 0 and 1, some
    -1), ``"scaled sign"`` (+-alpha per output row, XNOR-Net's alpha * sign(W)),
    ``"integer"`` (whole numbers beyond 0 and 1), else None."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.numel() < 2:
        return None
    v = value.detach()
    if not bool(torch.isfinite(v).all()):
        return None
    if bool(((v == 1) | (v == -1) | (v == 0)).all()) and bool((v == -1).any()):
        return "sign"
    if bool((v == torch.round(v)).all()) and bool(((v != 0) & (v != 1)).any()):
        return "integer"
    magnitude = v.abs()
    rows = magnitude.reshape(magnitude.shape[0], -1) if v.dim() > 1 else magnitude.reshape(1, -1)
    if rows.shape[1] > 1 and bool((rows == rows.amax(dim=1, keepdim=True)).all()):
        return "scaled sign"
    return None


class AuditMode(TorchFunctionMode):
    """Sees every torch call made while the block runs; calls it unchanged. The common
    case (a call that cannot lose a gradient) costs a counter and a dictionary lookup."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder
        self.calls = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.calls += 1
        try:
            family = _FAMILIES.get(func)
        except TypeError:  # an unhashable callable
            family = ops.classify(func)
        if family is None:
            family = ops.classify(func)
            if len(_FAMILIES) < 4096:
                _FAMILIES[func] = family
        if family is _IGNORE:
            if not kwargs:
                return func(*args)
            if kwargs.get("requires_grad") is True:
                result = func(*args, **kwargs)
                if isinstance(result, torch.Tensor):
                    self.recorder.tensor_born(result, sys._getframe(1), _ASSIGNED)
                return result
            return func(*args, **kwargs)
        return self.recorder.handle(family, func, args, kwargs or {}, sys._getframe(1))


_IGNORE = Family.IGNORE
#: Family of each function object seen (shared by all audits: functions do not change).
_FAMILIES: dict[Any, Family] = {}
