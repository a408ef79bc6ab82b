"""The torch function mode behind :func:`hardgrad.diagnostics.audit`: every torch call
made while the block runs passes here once, unchanged; the few that can lose a gradient go
to the :class:`~._recorder.Recorder`, and while values that left the graph are alive
their taint is carried to what each call returns (:mod:`._terms`)."""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from . import _frames as frames
from . import _ops as ops
from ._graph import end_of, leaves_below
from ._ops import Family
from ._recorder import Recorder


class AuditMode(TorchFunctionMode):
    """Sees every torch call made while the block runs; calls it unchanged. The common
    case (a call that cannot lose a gradient) costs a counter and a dictionary lookup."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder
        self.taints = recorder.taints
        self.outside = recorder.outside
        self.calls = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.calls += 1
        taints = self.taints
        if not (taints.values or taints.carried) and _grad_enabled():
            # Nothing tainted is alive: the common case, a call that cannot lose a gradient.
            try:
                family = _FAMILIES.get(func)
            except TypeError:  # an unhashable callable
                family = None
            if family is _IGNORE and not kwargs and not self.outside.reads:
                return func(*args)
            return self.dispatch(func, args, kwargs)
        labels = carried = None
        try:
            labels = taints.labels_of(args, kwargs) if taints.values else None
            if not torch.is_grad_enabled():
                carried = self.carried(func, args)
        except Exception:  # never fail the user's call
            pass
        result = self.dispatch(func, args, kwargs)
        with contextlib.suppress(Exception):
            if labels:
                taints.propagate(labels, func, args, result)
            if carried:
                taints.carry(result, carried)
        return result

    def carried(self, func: Any, args: Any) -> dict[int, torch.Tensor] | None:
        """Under no_grad: the trainable tensors a call's result is computed from, when
        user code reads them (or values computed from them under no_grad): what an index
        taken there later cuts off (``with torch.no_grad(): idx = cdist(z, e).argmin()``)."""
        found = self.taints.carried_by(args)
        grads = [a for a in args[:4] if isinstance(a, torch.Tensor) and a.requires_grad]
        if grads:
            user = frames.caller(sys._getframe(2), func)
            if user is not None and not self.recorder.hardgrad_callable(user):
                leaves, _ = leaves_below([end_of(t) for t in grads], {})
                found = {**(found or {}), **leaves}
        return found

    def dispatch(self, func: Any, args: Any, kwargs: Any) -> Any:
        try:
            family = _FAMILIES.get(func)
        except TypeError:  # an unhashable callable
            family = ops.classify(func)
        if family is None:
            family = ops.classify(func)
            if len(_FAMILIES) < 4096:
                _FAMILIES[func] = family
        if family is _IGNORE:
            if self.outside.reads and self.outside.is_maker(func):
                return self.recorder.handle(Family.COPY, func, args, kwargs or {}, sys._getframe(2))
            if not kwargs:
                return func(*args)
            if kwargs.get("requires_grad") is True:
                result = func(*args, **kwargs)
                if isinstance(result, torch.Tensor):
                    with contextlib.suppress(Exception):  # never fail the user's call
                        self.recorder.tensor_born(result, sys._getframe(2), frames.ASSIGNED)
                return result
            return func(*args, **kwargs)
        return self.recorder.handle(family, func, args, kwargs or {}, sys._getframe(2))


_IGNORE = Family.IGNORE
_grad_enabled = torch.is_grad_enabled
#: Family of each function object seen (shared by all audits: functions do not change).
_FAMILIES: dict[Any, Family] = {}
