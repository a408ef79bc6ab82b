"""The findings of :func:`hardgrad.diagnostics.audit`, how they print, and suppression."""

from __future__ import annotations

import linecache
import os
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

#: The kinds of finding, in the order reports list them.
KINDS = ("zero_gradient", "graph_cut", "no_gradient")
SEVERITIES = ("problem", "note")

# "# hardgrad: ignore" or "# hardgrad: ignore[...]" (\x5b is "[").
_MARKER = re.compile(r"#\s*hardgrad:\s*ignore(?:\x5b([^\]]*)\])?", re.IGNORECASE)
_LOCATION = re.compile(r"^(?P<path>.+):(?P<line>\d+)$")


@dataclass
class Finding:
    """One place where gradient flow dies or is altered.

    Attributes:
        kind: ``"zero_gradient"``, ``"graph_cut"`` or ``"no_gradient"``.
        op: the operation (``"torch.round"``, ``"Tensor.detach"``) or the parameter.
        location: ``file:line`` in your code.
        count: how many times it happened.
        suggestion: what to do about it (a fix that keeps your estimator for a problem).
        severity: ``"problem"`` (something that should be trained gets no gradient
            through here) or ``"note"`` (a deliberate stop-gradient, a consequence of a
            problem reported elsewhere, or something to know).
        detail: what happens there, in words (which parameters lose their gradient).
    """

    kind: str
    op: str
    location: str
    count: int
    suggestion: str
    severity: str = "problem"
    detail: str = ""

    @property
    def line(self) -> int:
        """The line number of :attr:`location`."""
        return int(self.location.rsplit(":", 1)[1])

    @property
    def path(self) -> str:
        """The file of :attr:`location`."""
        return self.location.rsplit(":", 1)[0]

    @property
    def is_problem(self) -> bool:
        return self.severity == "problem"


@dataclass
class AuditReport:
    """What :func:`audit` found: problems first, then notes, each in order of first sight.

    ``str()`` prints the problems (and says how many notes there are);
    :meth:`format` with ``notes=True`` prints everything. ``bool(report)`` is true when
    there is a problem.
    """

    findings: list[Finding] = field(default_factory=list)
    ops_seen: int = 0

    @property
    def problems(self) -> list[Finding]:
        """The findings with severity ``"problem"``."""
        return [f for f in self.findings if f.severity == "problem"]

    @property
    def notes(self) -> list[Finding]:
        """The findings with severity ``"note"``."""
        return [f for f in self.findings if f.severity == "note"]

    def of_kind(self, kind: str, severity: str | None = None) -> list[Finding]:
        """The findings of one kind (of one severity too, when given)."""
        return [
            f
            for f in self.findings
            if f.kind == kind and (severity is None or f.severity == severity)
        ]

    def to_dict(self) -> dict[str, Any]:
        return {"findings": [asdict(f) for f in self.findings], "ops_seen": self.ops_seen}

    def __bool__(self) -> bool:
        return any(f.severity == "problem" for f in self.findings)

    def format(self, *, notes: bool = False, relative_to: str | None = None) -> str:
        """The report as text: the problems, and the notes too with ``notes=True``;
        ``relative_to`` (a folder) shortens the paths under it."""
        problems, others = self.problems, self.notes
        shown = problems + others if notes else problems
        if notes and others:
            head = f"audit: {_count(len(problems), 'problem')} and {_count(len(others), 'note')}"
        elif problems:
            head = f"audit: {_count(len(problems), 'problem')}"
        else:
            head = "audit: no problems found"
        head += f" in {self.ops_seen} torch calls watched"
        if others and not notes:
            head += f"; {_count(len(others), 'note')} (shown by --all or report.format(notes=True))"
        lines = [head]
        for f in shown:
            where = _shorten(f.location, relative_to)
            label = f"{f.kind}: {f.op} (x{f.count})"
            if notes:
                label = f"{f.severity}: {label}"
            lines.append(f"  {where}: {label}")
            if f.detail:
                lines.append(f"      {f.detail}")
            lines.append(f"      -> {f.suggestion}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _shorten(location: str, folder: str | None) -> str:
    if folder is None:
        return location
    match = _LOCATION.match(location)
    if match is None or not os.path.isabs(match["path"]):
        return location
    path = match["path"]
    try:
        relative = os.path.relpath(path, folder)
    except ValueError:  # another drive on Windows
        return location
    if relative.startswith(os.pardir):
        return location
    return f"{relative}:{match['line']}"


# -- suppression ---------------------------------------------------------------------------


def _op_matches(spec: str, op: str) -> bool:
    """``round`` matches ``torch.round`` and ``Tensor.round``; ``Tensor.detach`` matches
    itself; a parameter name (``fc1.weight``) matches a no_gradient finding about it."""
    spec = spec.strip()
    if not spec:
        return False
    words = re.findall(r"[\w.]+", op)
    if spec in words or spec == op:
        return True
    return any(w.rsplit(".", 1)[-1] == spec or w.endswith("." + spec) for w in words)


def _same_file(spec_path: str, path: str) -> bool:
    """Whether ``spec_path`` names ``path``: equal, or a trailing part of it."""
    a = os.path.normpath(spec_path)
    b = os.path.normpath(path)
    if a == b:
        return True
    if os.path.isabs(a) or os.path.isabs(b):
        try:
            if os.path.abspath(a) == os.path.abspath(b):
                return True
        except ValueError:
            pass
    return b.endswith(os.sep + a)


def spec_matches(spec: str, finding: Finding) -> bool:
    """Whether one ``ignore`` entry covers a finding: a kind (``"graph_cut"``), an op
    (``"torch.round"``, ``"round"``, ``"Tensor.detach"``), a ``file:line`` or a file
    (``"model.py"``, all its lines)."""
    spec = spec.strip()
    if spec in KINDS:
        return finding.kind == spec
    match = _LOCATION.match(spec)
    if match is not None:
        return int(match["line"]) == finding.line and _same_file(match["path"], finding.path)
    if spec.endswith(".py") or os.sep in spec or "/" in spec:
        return _same_file(spec, finding.path)
    return _op_matches(spec, finding.op)


def normalise_ignore(ignore: str | Iterable[str] | None) -> tuple[str, ...]:
    """``ignore=`` as a tuple of entries (a string may hold several, comma-separated)."""
    if ignore is None:
        return ()
    items = [ignore] if isinstance(ignore, str) else list(ignore)
    out: list[str] = []
    for item in items:
        if not isinstance(item, str):
            raise TypeError(f"ignore must hold strings, but found {type(item).__name__}")
        out.extend(part.strip() for part in item.split(",") if part.strip())
    return tuple(out)


def inline_marker(finding: Finding) -> bool:
    """Whether the finding's line ends with ``# hardgrad: ignore`` (everything on it) or
    ``# hardgrad: ignore[kind-or-op, ...]`` naming it."""
    try:
        text = linecache.getline(finding.path, finding.line)
    except (OSError, ValueError):  # pragma: no cover - unreadable source
        return False
    match = _MARKER.search(text)
    if match is None:
        return False
    if match[1] is None:
        return True
    return any(spec_matches(part, finding) for part in match[1].split(",") if part.strip())


def suppressed(finding: Finding, ignore: tuple[str, ...]) -> bool:
    return any(spec_matches(spec, finding) for spec in ignore) or inline_marker(finding)
