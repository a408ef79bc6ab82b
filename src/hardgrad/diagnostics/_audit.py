r"""``audit()``: where does gradient flow die or change in *your* forward and backward?

Inside ``with hg.diagnostics.audit() as report:`` a :class:`torch.overrides.TorchFunctionMode`
watches every torch function and tensor method that your own code calls (calls made from
inside torch or hardgrad are not inspected, so ``F.gumbel_softmax``'s internal ``argmax``
or ``hg.round``'s ``torch.round`` are not reported, but your own ``torch.round`` is). It
records, with your ``file:line`` and a count:

* ``"zero_gradient"``: an op whose derivative is zero almost everywhere applied to a tensor
  that requires grad: ``round``, ``floor``, ``ceil``, ``trunc``, ``sign``, ``heaviside``
  and comparisons (``x > 0``, ``torch.eq``...), whose bool result carries no gradient (a
  ``torch.where`` condition or a mask built from them trains nothing);
* ``"graph_cut"``: a tensor that requires grad flows into an op whose result cannot carry a
  gradient: ``argmax``/``argmin``/``argsort``/``sort``/``topk`` indices, integer or bool
  casts, ``.detach()``, ``.item()``, ``.tolist()``, ``.numpy()``, or any op run under
  ``torch.no_grad()`` inside the block;
* ``"no_gradient"``: after a backward inside the block, a parameter of a module called in
  the block that requires grad but got no gradient (``grad is None`` or unchanged) or an
  all-zero one.

Each finding carries a concrete suggestion (e.g. ``hg.round``). The watcher only observes:
every call runs unchanged, so results are bit-identical, and the mode and the module hook
are removed when the block ends, even when it raises.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from types import FrameType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

_TORCH_DIR = os.path.dirname(torch.__file__)
_HARDGRAD_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_THIS_FILE = os.path.abspath(__file__)

ROUNDING = {
    "round": "hg.round (straight-through) or hg.quantize (fake quantization with LSQ)",
    "floor": "hg.floor (straight-through)",
    "ceil": "hg.ceil (straight-through)",
    "trunc": "hg.trunc (straight-through)",
    "fix": "hg.trunc (straight-through)",
    "sign": "hg.sign (clipped straight-through) or hg.binarize",
    "sgn": "hg.sign (clipped straight-through)",
    "heaviside": "hg.heaviside(x, surrogate=...) (a surrogate gradient)",
}
COMPARISONS = {
    "gt", "lt", "ge", "le", "eq", "ne", "greater", "less", "greater_equal", "less_equal",
    "not_equal", "isclose",
}  # fmt: skip
COMPARISON_HINT = (
    "the bool result carries no gradient: use hg.heaviside(x - threshold, surrogate=...) "
    "for a trainable step, or hg.binarize / hg.sign"
)
INDICES = {
    "argmax": "hg.one_hot_argmax (one-hot forward, softmax backward) or hg.categorical",
    "argmin": "hg.one_hot_argmax(-x)",
    "argsort": "hg.topk_mask for a differentiable selection",
    "sort": "hg.topk_mask (the sorted values keep a gradient, the indices do not)",
    "topk": "hg.topk_mask (the values keep a gradient, the indices do not)",
    "bucketize": "hg.quantize or hg.round on a rescaled input",
    "searchsorted": "hg.quantize or hg.round on a rescaled input",
}
INTEGER_CASTS = {"long", "int", "short", "byte", "char", "bool"}
CAST_HINT = "hg.round / hg.binarize keep a float result with a straight-through gradient"
LEAVES = {
    "detach": "hg.straight_through(hard, soft) if you meant a straight-through estimator",
    "detach_": "hg.straight_through(hard, soft) if you meant a straight-through estimator",
    "item": "the value leaves autograd (fine for logging; not if it feeds the loss)",
    "tolist": "the values leave autograd (fine for logging; not if they feed the loss)",
    "numpy": "the values leave autograd (fine for logging; not if they feed the loss)",
}
NO_GRAD_HINT = "move this computation out of torch.no_grad() if it should be trained"
#: Calls that fill ``.grad`` (``torch.autograd.grad`` returns gradients instead, so after it
#: an empty ``.grad`` means nothing).
BACKWARD = {"backward"}
_OPS_DIR = os.path.join(_HARDGRAD_DIR, "ops")


@dataclass
class Finding:
    """One place where gradient flow dies or is altered.

    Attributes:
        kind: ``"zero_gradient"``, ``"graph_cut"`` or ``"no_gradient"``.
        op: the operation (``"torch.round"``, ``"Tensor.detach"``) or the parameter name.
        location: ``file:line`` in your code.
        count: how many times it happened.
        suggestion: what to use instead.
    """

    kind: str
    op: str
    location: str
    count: int
    suggestion: str

    @property
    def line(self) -> int:
        """The line number of :attr:`location`."""
        return int(self.location.rsplit(":", 1)[1])


@dataclass
class AuditReport:
    """What :func:`audit` found; ``str()`` prints it, most frequent first per kind."""

    findings: list[Finding] = field(default_factory=list)
    ops_seen: int = 0

    def of_kind(self, kind: str) -> list[Finding]:
        return [f for f in self.findings if f.kind == kind]

    def to_dict(self) -> dict[str, Any]:
        return {"findings": [asdict(f) for f in self.findings], "ops_seen": self.ops_seen}

    def __bool__(self) -> bool:
        return bool(self.findings)

    def __str__(self) -> str:
        if not self.findings:
            return f"audit: no problems found ({self.ops_seen} torch calls watched)"
        lines = [f"audit: {len(self.findings)} finding(s) in {self.ops_seen} torch calls watched"]
        for f in self.findings:
            lines.append(f"  {f.location}: {f.kind}: {f.op} (x{f.count})")
            lines.append(f"      -> {f.suggestion}")
        return "\n".join(lines)


_PLUMBING = {
    os.path.join(_TORCH_DIR, "overrides.py"),
    os.path.join(_TORCH_DIR, "_tensor.py"),
    os.path.join(_TORCH_DIR, "utils", "_device.py"),
    _THIS_FILE,
}
_LIBRARY_CACHE: dict[str, bool] = {}
_PLUMBING_CACHE: dict[str, bool] = {}


def _is_library(filename: str) -> bool:
    """Whether a code file belongs to torch or hardgrad (cached per file name)."""
    known = _LIBRARY_CACHE.get(filename)
    if known is None:
        path = os.path.abspath(filename)
        known = path.startswith(_TORCH_DIR) or path.startswith(_HARDGRAD_DIR)
        _LIBRARY_CACHE[filename] = known
    return known


def _is_plumbing(filename: str) -> bool:
    known = _PLUMBING_CACHE.get(filename)
    if known is None:
        known = os.path.abspath(filename) in _PLUMBING
        _PLUMBING_CACHE[filename] = known
    return known


def _called_by_hardgrad_op(frame: FrameType) -> bool:
    """Whether user code at ``frame`` runs inside a hardgrad op (e.g. the ``hard`` and
    ``soft`` callables of :func:`hardgrad.straight_through`, whose forward is meant to be
    hard)."""
    parent = frame.f_back
    while parent is not None:
        if os.path.abspath(parent.f_code.co_filename).startswith(_OPS_DIR):
            return True
        parent = parent.f_back
    return False


def _caller(frame: FrameType | None) -> FrameType | None:
    """The frame that called the torch function: past this module and torch's own
    dispatch plumbing (``torch/overrides.py``, ``torch/_tensor.py``'s operator wrappers)."""
    while frame is not None and _is_plumbing(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


SYMBOLS = {"gt": ">", "lt": "<", "ge": ">=", "le": "<=", "eq": "==", "ne": "!="}


def _op_name(func: Any) -> str:
    name = getattr(func, "__name__", None) or repr(func)
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
    return name


def _display(func: Any, name: str) -> str:
    """``x > y`` for operators, ``Tensor.round`` for methods, ``torch.round`` otherwise."""
    raw = getattr(func, "__name__", "")
    if raw.startswith("__") and name in SYMBOLS:
        return f"operator {SYMBOLS[name]}"
    if getattr(torch.Tensor, raw, None) is func:
        return f"Tensor.{name}"
    module = getattr(func, "__module__", None) or "torch"
    prefix = "torch" if module.startswith("torch._C") or module == "torch" else module
    return f"{prefix}.{name}"


def _requires_grad(args: Any, kwargs: Any) -> bool:
    """Whether a tensor among the arguments (or in a list/tuple of them) requires grad."""
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor):
            if value.requires_grad:
                return True
        elif isinstance(value, (list, tuple)) and any(
            isinstance(v, torch.Tensor) and v.requires_grad for v in value
        ):
            return True
    return False


def _casts_to_non_float(name: str, args: Any, kwargs: Any) -> bool:
    if name in INTEGER_CASTS:
        return True
    if name not in ("to", "type"):
        return False
    leaves, _ = tree_flatten((args[1:], kwargs))
    return any(
        isinstance(x, torch.dtype) and not (x.is_floating_point or x.is_complex) for x in leaves
    )


class _AuditMode(TorchFunctionMode):
    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        self.recorder.inspect(func, args, kwargs, sys._getframe(1))
        return func(*args, **kwargs)


class _Recorder:
    def __init__(self, report: AuditReport) -> None:
        self.report = report
        self.counts: dict[tuple[str, str, str], Finding] = {}
        self.backward_seen = False
        # Strong references: a model built inside a function is gone by the end of the block,
        # but its parameters must still be checked; they are released with the recorder.
        self.modules: list[tuple[torch.nn.Module, str]] = []
        self.module_ids: set[int] = set()
        self.grad_versions: dict[int, int | None] = {}

    def add(self, kind: str, op: str, location: str, suggestion: str) -> None:
        key = (kind, op, location)
        if key in self.counts:
            self.counts[key].count += 1
        else:
            finding = Finding(kind, op, location, 1, suggestion)
            self.counts[key] = finding
            self.report.findings.append(finding)

    def inspect(self, func: Any, args: Any, kwargs: Any, frame: FrameType | None) -> None:
        self.report.ops_seen += 1
        name = _op_name(func)
        if name in BACKWARD:
            self.backward_seen = True
            return
        if not _requires_grad(args, kwargs):
            return
        caller = _caller(frame)
        if caller is None or _is_library(caller.f_code.co_filename):
            return
        base = name[:-1] if name.endswith("_") and not name.startswith("_") else name
        qualified = _display(func, name)
        finding: tuple[str, str, str] | None = None
        if name in LEAVES:
            finding = ("graph_cut", f"Tensor.{name}", LEAVES[name])
        elif not torch.is_grad_enabled():
            finding = ("graph_cut", f"{qualified} under torch.no_grad()", NO_GRAD_HINT)
        elif base in ROUNDING:
            finding = ("zero_gradient", qualified, ROUNDING[base])
        elif base in COMPARISONS:
            finding = ("zero_gradient", f"comparison ({qualified})", COMPARISON_HINT)
        elif base in INDICES:
            finding = ("graph_cut", f"{qualified} indices", INDICES[base])
        elif _casts_to_non_float(base, args, kwargs):
            finding = ("graph_cut", f"integer/bool cast {qualified}", CAST_HINT)
        # The hard/soft functions a user hands to hg.straight_through are meant to be hard.
        if finding is not None and not _called_by_hardgrad_op(caller):
            kind, op, suggestion = finding
            self.add(kind, op, f"{caller.f_code.co_filename}:{caller.f_lineno}", suggestion)

    # -- parameters ------------------------------------------------------------------------
    def module_called(self, module: torch.nn.Module, _inputs: Any) -> None:
        grad_off = not torch.is_grad_enabled()
        if id(module) in self.module_ids and not grad_off:
            return
        frame = _caller(sys._getframe(1))
        while frame is not None and _is_library(frame.f_code.co_filename):
            frame = frame.f_back
        where = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"
        if grad_off and any(p.requires_grad for p in module.parameters(recurse=False)):
            name = type(module).__name__
            self.add("graph_cut", f"{name} called under torch.no_grad()", where, NO_GRAD_HINT)
        if id(module) in self.module_ids:
            return
        self.module_ids.add(id(module))
        self.modules.append((module, where))
        for p in module.parameters():
            if id(p) not in self.grad_versions:
                self.grad_versions[id(p)] = None if p.grad is None else p.grad._version

    def check_parameters(self) -> None:
        if not self.backward_seen:
            return
        seen: set[int] = set()
        for module, where in self.modules:
            for pname, p in module.named_parameters():
                if id(p) in seen or not p.requires_grad:
                    continue
                seen.add(id(p))
                label = f"{type(module).__name__}.{pname}"
                before = self.grad_versions.get(id(p))
                if p.grad is None or (before is not None and p.grad._version == before):
                    self.add("no_gradient", f"parameter {label}: grad is None", where,
                             "it does not reach the loss: check for an unused layer or a graph cut above")  # fmt: skip
                elif not bool(p.grad.any()):
                    self.add("no_gradient", f"parameter {label}: all-zero gradient", where,
                             "every path from it to the loss has zero gradient (see zero_gradient findings)")  # fmt: skip


@contextmanager
def audit() -> Iterator[AuditReport]:
    """Watch a forward and backward for places where gradient flow dies or is altered.

    Yields:
        An :class:`AuditReport`, filled while the block runs; its ``no_gradient`` findings
        are added when the block ends (after your backward).

    Example:
        >>> import torch, hardgrad as hg
        >>> w = torch.nn.Linear(3, 1)
        >>> with hg.diagnostics.audit() as report:
        ...     loss = torch.round(w(torch.ones(2, 3))).sum()
        ...     loss.backward()
        >>> [(f.kind, f.op) for f in report.findings]
        [('zero_gradient', 'torch.round'), ('no_gradient', 'parameter Linear.weight: all-zero gradient'), ('no_gradient', 'parameter Linear.bias: all-zero gradient')]
    """
    report = AuditReport()
    recorder = _Recorder(report)
    handle = torch.nn.modules.module.register_module_forward_pre_hook(recorder.module_called)
    try:
        with _AuditMode(recorder):
            yield report
    finally:
        handle.remove()
    recorder.check_parameters()
