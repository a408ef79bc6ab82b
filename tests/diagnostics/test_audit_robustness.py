"""``audit()`` when the run does not go as planned: stopped by Ctrl-C (in the block and under
``hardgrad audit SCRIPT``), other threads running torch at the same time, and gradient
accumulation (several backwards per optimizer step).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
from torch import nn

from hardgrad.bench.cli import main
from hardgrad.diagnostics import AuditReport, audit

ROOT = Path(__file__).resolve().parents[2]


def ops_of(report: AuditReport, severity: str = "problem") -> list[tuple[str, str]]:
    return sorted((f.kind, f.op) for f in report.findings if f.severity == severity)


def hooks_left() -> tuple[int, int, int]:
    """Global module and optimizer hooks, and torch function modes, now."""
    from torch.nn.modules import module
    from torch.optim import optimizer

    return (
        len(module._global_forward_pre_hooks),
        len(optimizer._global_optimizer_pre_hooks),
        len(torch.overrides._get_current_function_mode_stack()),
    )


# --------------------------------------------------------------------------------------
# (a) Ctrl-C
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError])
def test_findings_are_kept_when_the_block_is_stopped(stop: type[BaseException]) -> None:
    """Regression: the verdicts were made after the ``with`` only on a normal exit, so a
    Ctrl-C (or an error) in a long run left ``report.findings`` empty."""
    before = hooks_left()
    layer = nn.Linear(3, 1)
    with pytest.raises(stop), audit() as report:
        torch.round(layer(torch.ones(2, 3))).sum().backward()
        raise stop("stopped")
    assert ("zero_gradient", "torch.round") in ops_of(report), report.format(notes=True)
    assert hooks_left() == before


SCRIPT = """\
import torch

layer = torch.nn.Linear(3, 1)
torch.round(layer(torch.ones(2, 3))).sum().backward()
{stop}
"""


def test_cli_audit_prints_the_report_on_ctrl_c(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(stop="raise KeyboardInterrupt"))
    assert main(["audit", str(script)]) == 130
    captured = capsys.readouterr()
    assert "interrupted" in captured.err and "Traceback" not in captured.err
    assert "zero_gradient: torch.round (x1)" in captured.out, captured.out


@pytest.mark.slow  # a fresh interpreter imports torch: seconds
def test_cli_audit_prints_the_report_on_sigint(tmp_path: Path) -> None:
    """A real Ctrl-C (SIGINT) while the script sleeps in its training loop."""
    ready = tmp_path / "ready"
    script = tmp_path / "train.py"
    stop = textwrap.dedent(f"""\
        import pathlib, time
        pathlib.Path({str(ready)!r}).write_text("ok")
        time.sleep(60)
        """)
    script.write_text(SCRIPT.format(stop=stop))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    with subprocess.Popen(
        [sys.executable, "-m", "hardgrad", "audit", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as process:
        deadline = time.monotonic() + 60
        while not ready.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists(), process.communicate()
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 130, (out, err)
    assert "zero_gradient: torch.round (x1)" in out, (out, err)
    assert "Traceback" not in err, err


# --------------------------------------------------------------------------------------
# (b) threads
# --------------------------------------------------------------------------------------


def test_other_threads_are_not_recorded() -> None:
    """Regression: the module and optimizer hooks are global, so a model run (and never
    trained) by another thread was reported as a parameter without gradient."""
    done = threading.Event()
    errors: list[BaseException] = []

    def elsewhere() -> None:
        try:
            other = nn.Linear(3, 1)
            optimizer = torch.optim.SGD(other.parameters(), lr=0.1)
            other(torch.ones(2, 3))  # never trained: a problem if it were ours
            torch.round(other(torch.ones(2, 3))).sum().backward()
            optimizer.step()
        except BaseException as error:  # pragma: no cover - shown by the assert below
            errors.append(error)
        finally:
            done.set()

    mine = nn.Linear(3, 1)
    with audit() as report:
        loss = mine(torch.ones(2, 3)).sum()
        thread = threading.Thread(target=elsewhere)
        thread.start()
        assert done.wait(60)
        loss.backward()
        thread.join()
    assert not errors, errors
    assert report.findings == [], report.format(notes=True)


def test_two_threads_each_audit_their_own() -> None:
    """Two audits at once, one per thread: each reports its own problem only."""
    barrier = threading.Barrier(2, timeout=60)
    reports: dict[str, AuditReport] = {}
    errors: list[BaseException] = []

    def run(name: str, hard: bool) -> None:
        try:
            layer = nn.Linear(3, 1)
            with audit() as report:
                out = layer(torch.ones(2, 3))
                barrier.wait()  # both forwards done before either backward
                (torch.round(out) if hard else torch.tanh(out)).sum().backward()
                barrier.wait()
            reports[name] = report
        except BaseException as error:  # pragma: no cover - shown by the assert below
            errors.append(error)

    threads = [threading.Thread(target=run, args=a) for a in (("hard", True), ("soft", False))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert ops_of(reports["hard"]) == [("zero_gradient", "torch.round")]
    assert reports["soft"].findings == [], reports["soft"].format(notes=True)


# --------------------------------------------------------------------------------------
# (c) gradient accumulation
# --------------------------------------------------------------------------------------


class Branches(nn.Module):
    """Micro-batch ``k`` uses branch ``a`` (k even) or ``b`` (k odd); ``c`` is never used."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(3, 1), nn.Linear(3, 1), nn.Linear(3, 1)

    def forward(self, x: torch.Tensor, k: int) -> torch.Tensor:
        return self.a(x) if k % 2 == 0 else self.b(x)


def accumulate(model: nn.Module, params: list[nn.Parameter], set_to_none: bool) -> AuditReport:
    torch.manual_seed(0)
    optimizer = torch.optim.SGD(params, lr=0.1)
    with audit() as report:
        for _ in range(2):
            optimizer.zero_grad(set_to_none=set_to_none)
            for k in range(4):
                (model(torch.randn(2, 3), k).sum() / 4).backward()
            optimizer.step()
    return report


@pytest.mark.parametrize("set_to_none", [True, False])
def test_accumulation_with_every_parameter_trained_is_clean(set_to_none: bool) -> None:
    """Each backward gives only half of the parameters a gradient; together they all get
    one: no finding."""
    model = Branches()
    params = [*model.a.parameters(), *model.b.parameters()]
    report = accumulate(model, params, set_to_none)
    assert report.findings == [], report.format(notes=True)


@pytest.mark.parametrize("warm", [False, True])
@pytest.mark.parametrize("set_to_none", [True, False])
def test_accumulation_reports_a_parameter_that_never_gets_a_gradient(
    set_to_none: bool, warm: bool
) -> None:
    """Regression (``warm`` with ``set_to_none=False``): a parameter that had a gradient
    from before the block, zeroed in place by ``zero_grad(set_to_none=False)``, was taken
    as "touched by a backward" and reported as a note (all-zero gradient), not as the
    problem it is: no backward in the block reaches it."""
    model = Branches()
    if warm:  # trained before the audit was opened
        for p in model.parameters():
            p.grad = torch.ones_like(p)
    report = accumulate(model, list(model.parameters()), set_to_none)
    problems = ops_of(report)
    assert [kind for kind, _ in problems] == ["no_gradient", "no_gradient"], report
    assert {op.split(":")[0] for _, op in problems} == {
        "parameter Branches.c.weight",
        "parameter Branches.c.bias",
    }, report
    assert report.notes == [], report.format(notes=True)
