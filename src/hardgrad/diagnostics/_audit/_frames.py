"""Whose code made a torch call, for :func:`hardgrad.diagnostics.audit`.

Only calls made by *your* files are inspected: not torch's, hardgrad's, the standard
library's or an installed package's. A file's category is computed once per file name.
"""

from __future__ import annotations

import linecache
import os
import re
import sys
import sysconfig
from types import CodeType, FrameType
from typing import Any

import torch

TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
#: hardgrad.diagnostics (this file is in its _audit package): its frames are plumbing.
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
HARDGRAD_DIR = os.path.dirname(os.path.dirname(_HERE)) + os.sep
OPS_DIR = os.path.join(HARDGRAD_DIR, "ops") + os.sep
DISTRIBUTIONS_DIR = os.path.join(TORCH_DIR, "distributions") + os.sep
FUNCTION_FILE = os.path.join(TORCH_DIR, "autograd", "function.py")
_LIBRARY_DIRS = tuple(
    {TORCH_DIR, HARDGRAD_DIR}
    | {
        os.path.abspath(path) + os.sep
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if (path := sysconfig.get_paths().get(key))
    }
)
#: torch's dispatch code between a call and the code that made it.
_PLUMBING = {
    os.path.join(TORCH_DIR, "overrides.py"),
    os.path.join(TORCH_DIR, "_tensor.py"),
    os.path.join(TORCH_DIR, "utils", "_device.py"),
}
#: The code objects that run a module's forward.
_MODULE_CALL: set[CodeType] = {
    code
    for name in ("_call_impl", "_wrapped_call_impl")
    if (code := getattr(getattr(torch.nn.Module, name, None), "__code__", None)) is not None
}
ASSIGNED = re.compile(r"^\s*([A-Za-z_][\w.]*)\s*(?::[^=]+)?=[^=]")
REQUIRES = re.compile(r"([A-Za-z_][\w.]*)\.requires_grad(?:_\x28|\s*=)")  # \x28: "("

_categories: dict[str, str] = {}


def category(filename: str) -> str:
    """``"plumbing"`` (torch's dispatch, this package), ``"library"`` (torch, hardgrad,
    the standard library, installed packages) or ``"user"`` for a code file name."""
    known = _categories.get(filename)
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
        _categories[filename] = known
    return known


def past_plumbing(frame: FrameType | None) -> FrameType | None:
    while frame is not None and category(frame.f_code.co_filename) == "plumbing":
        frame = frame.f_back
    return frame


def first_user(frame: FrameType | None) -> FrameType | None:
    while frame is not None and category(frame.f_code.co_filename) != "user":
        frame = frame.f_back
    return frame


def caller(frame: FrameType | None, func: Any) -> FrameType | None:
    """The user's frame that made a call to ``func``, or None when torch, hardgrad or
    another installed package made it."""
    frame = past_plumbing(frame)
    code = getattr(func, "__code__", None)
    if frame is not None and code is not None and frame.f_code is code:
        frame = past_plumbing(frame.f_back)
    if frame is None or category(frame.f_code.co_filename) != "user":
        return None
    return frame


def where(frame: FrameType) -> str:
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


def inside(frame: FrameType | None, prefix: str, outer: frozenset[int] = frozenset()) -> bool:
    """Whether a frame above ``frame`` runs code from a file starting with ``prefix``; the
    frames that were running when the audit began (ids in ``outer``: the ``hardgrad audit``
    command's own, say) and those above them are not looked at."""
    parent = frame.f_back if frame is not None else None
    while parent is not None and id(parent) not in outer:
        if os.path.abspath(parent.f_code.co_filename).startswith(prefix):
            return True
        parent = parent.f_back
    return False


def in_module_forward(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside an ``nn.Module`` call (a forward, not set-up code)."""
    while frame is not None:
        if frame.f_code in _MODULE_CALL:
            return True
        frame = frame.f_back
    return False


def name_on_line(filename: str, line: int, pattern: re.Pattern[str]) -> str | None:
    match = pattern.search(linecache.getline(filename, line))
    return match[1] if match else None


def running() -> frozenset[int]:
    """The ids of the frames running now (the caller's and those above it)."""
    found = set()
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        found.add(id(frame))
        frame = frame.f_back
    return frozenset(found)
