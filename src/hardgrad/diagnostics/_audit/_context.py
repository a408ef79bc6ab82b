"""The :func:`~hardgrad.diagnostics.audit` context manager: it installs the watcher (the
torch function mode, the module and optimizer hooks) and judges what it saw when the block
ends (the package docstring explains what is reported)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from ._judge import judge
from ._mode import AuditMode
from ._recorder import Recorder
from ._report import AuditReport, normalise_ignore


@contextmanager
def audit(*, ignore: str | Iterable[str] | None = None) -> Iterator[AuditReport]:
    """Watch a forward and backward for places where gradient flow dies or is altered.

    Args:
        ignore: findings to leave out: kinds (``"graph_cut"``), ops (``"torch.round"``,
            ``"round"``, ``"Tensor.detach"``), ``"file.py:LINE"`` or a whole
            ``"file.py"``; a string (comma-separated) or an iterable of strings. A line
            ending in ``# hardgrad: ignore`` or ``# hardgrad: ignore[kind-or-op, ...]`` is
            left out too.

    Yields:
        An :class:`AuditReport`, filled when the block ends (the verdicts need the
        backward), also when it ends by an exception such as ``KeyboardInterrupt``:
        ``report.problems``, ``report.notes``, ``report.findings`` (both).

    Example:
        >>> import torch, hardgrad as hg
        >>> w = torch.nn.Linear(3, 1)
        >>> with hg.diagnostics.audit() as report:
        ...     loss = torch.round(w(torch.ones(2, 3))).sum()
        ...     loss.backward()
        >>> [(f.severity, f.kind, f.op) for f in report.findings]
        [('problem', 'zero_gradient', 'torch.round'), ('note', 'no_gradient', 'parameter Linear.weight: all-zero gradient'), ('note', 'no_gradient', 'parameter Linear.bias: all-zero gradient')]
    """
    skip = normalise_ignore(ignore)
    report = AuditReport()
    recorder = Recorder()
    module_hook = torch.nn.modules.module.register_module_forward_pre_hook(recorder.module_called)
    step_hook = register_optimizer_step_pre_hook(recorder.optimizer_step)
    mode = AuditMode(recorder)
    finished = False
    try:
        with mode:
            yield report
        finished = True
    finally:
        module_hook.remove()
        step_hook.remove()
        report.ops_seen = mode.calls
        if finished:
            report.findings = judge(recorder, skip)
        else:  # stopped by Ctrl-C or an error: what was seen until then, never a new error
            with suppress(Exception):
                report.findings = judge(recorder, skip)
