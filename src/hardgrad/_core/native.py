"""Small C kernels compiled on first use (private).

A few loops have no fast form in tensor operations (pool-adjacent-violators for the soft
sorts is one: a sequential scan per row). hardgrad ships their C source and, the first
time one is needed, compiles it with the machine's C compiler into a cache directory and
loads it with :mod:`ctypes`. Nothing is compiled at install: the package stays pure
Python. When no compiler is found, or it fails, or ``HARDGRAD_NATIVE=0`` is set, callers
get ``None`` and use their tensor-operation path (the same results, more slowly).

* The kernels are plain C99 with no Python or torch headers: one library serves every
  Python and torch version; they take raw pointers of contiguous CPU tensors.
* The compiler: ``$CC`` if set (split as a shell would), else the first of ``cc``, ``gcc``, ``clang`` on the path,
  with ``-O2 -std=c99 -ffp-contract=off`` (no fused multiply-adds: the results are the
  plain IEEE operations the tensor path and its tests assume).
* The cache: ``$HARDGRAD_CACHE_DIR``, else ``$XDG_CACHE_HOME/hardgrad`` (an absolute
  path), else ``~/.cache/hardgrad`` (made readable by its owner only); a library's file name carries a hash of its source, the
  compiler command and the platform, so an edit or another compiler makes a new one.
  It is written under a temporary name and renamed into place (processes compiling at
  once each load a complete file). A cached file that fails to load is compiled again.
* Each kernel is compiled at most once per process; a failure is remembered (and logged
  at debug level on the ``hardgrad`` logger), not retried.

Example:
    >>> import os
    >>> from hardgrad._core.native import enabled
    >>> enabled() == (os.environ.get("HARDGRAD_NATIVE", "1") != "0")
    True
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

__all__ = ["cache_dir", "compiler", "disabled", "enabled", "failure", "load"]

_LOG = logging.getLogger("hardgrad")
_FLAGS = ("-O2", "-std=c99", "-ffp-contract=off", "-shared", "-fPIC")
#: Seconds a compilation may take before it counts as failed.
COMPILE_TIMEOUT_S = 120.0

_lock = threading.Lock()
_off = 0  # open disabled() blocks
_loaded: dict[str, ctypes.CDLL | None] = {}
_failures: dict[str, str] = {}  # why a source gave None (no compiler, the compiler's error)


def enabled() -> bool:
    """Whether compiled kernels may be used (``HARDGRAD_NATIVE=0`` turns them off, and so
    does :func:`disabled` while it is open)."""
    return _off == 0 and os.environ.get("HARDGRAD_NATIVE", "1") != "0"


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Within this block no compiled kernel is used (every caller takes its tensor path),
    in every thread: for comparing the two paths (e.g. the ``speed`` benchmark).

    Example:
        >>> from hardgrad._core import native
        >>> with native.disabled():
        ...     native.enabled()
        False
    """
    global _off
    with _lock:
        _off += 1
    try:
        yield
    finally:
        with _lock:
            _off -= 1


def cache_dir() -> Path:
    """Where compiled kernels are kept (see the module's text)."""
    explicit = os.environ.get("HARDGRAD_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):  # unset, empty or relative: ignored (as the XDG spec says)
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hardgrad"


def compiler() -> str | None:
    """The C compiler command: ``$CC``, else ``cc``, ``gcc`` or ``clang`` if on the path."""
    explicit = os.environ.get("CC")
    if explicit:
        return explicit
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _suffix() -> str:
    if sys.platform == "win32":
        return ".dll"
    return ".dylib" if sys.platform == "darwin" else ".so"


def _target(source: Path, command: list[str]) -> Path:
    digest = hashlib.sha256()
    digest.update(source.read_bytes())
    digest.update("\0".join(command).encode())
    digest.update(f"{sys.platform}-{platform.machine()}".encode())
    return cache_dir() / f"{source.stem}-{digest.hexdigest()[:20]}{_suffix()}"


def _compile(source: Path, command: list[str], target: Path) -> None:
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    handle, partial = tempfile.mkstemp(prefix=target.stem, suffix=_suffix(), dir=target.parent)
    os.close(handle)
    try:
        subprocess.run(
            [*command, str(source), "-o", partial, "-lm"],
            check=True,
            capture_output=True,
            timeout=COMPILE_TIMEOUT_S,
        )
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.remove(partial)


def _build(source: Path) -> ctypes.CDLL | None:
    cc = compiler()
    if cc is None:
        _LOG.debug("hardgrad: no C compiler found; %s runs as tensor operations", source.name)
        _failures[str(source)] = "no C compiler found (set CC, or put cc, gcc or clang on PATH)"
        return None
    command = [*shlex.split(cc), *_FLAGS]
    try:
        target = _target(source, command)
    except OSError as error:  # the source cannot be read
        _LOG.debug("hardgrad: %s not compiled (%s)", source.name, error)
        _failures[str(source)] = f"cannot read the source: {error}"
        return None
    for attempt in range(2):
        fresh = attempt > 0 or not target.exists()
        try:
            if fresh:
                _compile(source, command, target)
            return ctypes.CDLL(str(target))
        except (OSError, subprocess.SubprocessError) as error:
            detail = getattr(error, "stderr", b"") or b""
            _failures[str(source)] = f"{error} {detail.decode(errors='replace')[-500:]}".strip()
            _LOG.debug(
                "hardgrad: %s not compiled/loaded (%s) %s",
                source.name,
                error,
                detail.decode(errors="replace")[-2000:],
            )
            if fresh:  # only a cached file that fails to load is worth a second compile
                break
    return None


def failure(source: Path) -> str | None:
    """Why :func:`load` gave ``None`` for ``source`` in this process (``None`` if it did not,
    or was not called): no compiler, the compiler's message, or ``HARDGRAD_NATIVE=0``."""
    if not enabled():
        return "compiled kernels are turned off (HARDGRAD_NATIVE=0 or native.disabled())"
    return _failures.get(str(source)) if _loaded.get(str(source), False) is None else None


def load(source: Path) -> ctypes.CDLL | None:
    """The compiled library of the C file ``source`` (compiled now if not cached), or
    ``None`` when compiled kernels are off or cannot be built here."""
    if not enabled():
        return None
    key = str(source)
    if key in _loaded:
        return _loaded[key]
    with _lock:
        if key not in _loaded:
            _loaded[key] = _build(source)
    return _loaded[key]
