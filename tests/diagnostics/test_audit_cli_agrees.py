"""``hardgrad audit SCRIPT`` and ``with hg.diagnostics.audit():`` give the same findings
(issue 39): the command runs the script from hardgrad's own code, which must not make the
script's calls look like calls made inside hardgrad. And a failed ``backward()`` names the
round trip through NumPy that caused it."""

from __future__ import annotations

import contextlib
import io
import re
import runpy
import textwrap
from pathlib import Path

import pytest
import torch

from hardgrad.bench.cli import main
from hardgrad.diagnostics import audit

CORPUS = Path(__file__).resolve().parent / "audit_corpus"

NO_GRAD_ENCODER = """
import torch
from torch.nn import functional as F

torch.manual_seed(0)
encoder = torch.nn.Linear(8, 8)
head = torch.nn.Linear(8, 2)
opt = torch.optim.Adam([*encoder.parameters(), *head.parameters()], lr=1e-3)
for _ in range(2):
    x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
    with torch.no_grad():
        h = encoder(x)  # CUT
    loss = F.cross_entropy(head(h), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

SOLVER_WITHOUT_WRAPPER = """
import numpy as np
import torch


def solve(costs):  # a hand-written solver on NumPy: one-hot of the cheapest item per row
    out = np.zeros_like(costs)
    out[np.arange(len(costs)), costs.argmin(1)] = 1.0
    return out


torch.manual_seed(0)
w = torch.nn.Parameter(torch.randn(8, 5))
opt = torch.optim.Adam([w], lr=1e-3)
target = torch.randn(8, 5)
for _ in range(2):
    result = solve(w.detach().cpu().numpy())  # READ
    y = torch.tensor(result)  # COPY
    loss = ((y - target) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""

_FINDING = re.compile(r"^\s+(\S+):(\d+): (?:(note|problem): )?(\w+): (.*) \(x\d+\)$")


def _line(script: str, marker: str) -> int:
    (number,) = [i for i, t in enumerate(script.splitlines(), 1) if t.endswith(f"# {marker}")]
    return number


def _from_context(path: Path) -> set[tuple[int, str, str, str]]:
    quiet = contextlib.redirect_stdout(io.StringIO())
    with quiet, torch.random.fork_rng(), contextlib.suppress(RuntimeError), audit() as report:
        runpy.run_path(str(path), run_name="__main__")
    return {(f.line, f.severity, f.kind, f.op) for f in report.findings if f.path == str(path)}


def _from_cli(path: Path, capsys: pytest.CaptureFixture[str]) -> set[tuple[int, str, str, str]]:
    capsys.readouterr()
    with torch.random.fork_rng():
        main(["audit", "--all", str(path)])
    found = set()
    for text in capsys.readouterr().out.splitlines():
        match = _FINDING.match(text)
        if match and match[1] == str(path):
            found.add((int(match[2]), match[3] or "problem", match[4], match[5]))
    return found


@pytest.mark.parametrize(
    "name", ["no_grad_encoder", "solver", "vqvae_no_straight_through.py", "gan_wrong_detach.py"]
)
def test_command_line_and_context_manager_agree(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if name.endswith(".py"):
        path = CORPUS / name
    else:
        path = tmp_path / f"{name}.py"
        text = NO_GRAD_ENCODER if name == "no_grad_encoder" else SOLVER_WITHOUT_WRAPPER
        path.write_text(textwrap.dedent(text))
    context, command = _from_context(path), _from_cli(path, capsys)
    assert any(severity == "problem" for _, severity, _, _ in context), context
    assert command == context


def test_module_under_no_grad_named_by_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "train.py"
    path.write_text(NO_GRAD_ENCODER)
    problems = {(line, op) for line, sev, _, op in _from_cli(path, capsys) if sev == "problem"}
    assert problems == {(_line(NO_GRAD_ENCODER, "CUT"), "Linear called under torch.no_grad()")}


def test_failed_backward_names_the_numpy_round_trip(tmp_path: Path) -> None:
    """``loss.backward()`` raises 'does not require grad': the ``torch.tensor(result)``
    copy is named as the cause, with the read of the parameter it came from."""
    path = tmp_path / "solver.py"
    path.write_text(SOLVER_WITHOUT_WRAPPER)
    with pytest.raises(RuntimeError, match="does not require grad"), audit() as report:
        runpy.run_path(str(path), run_name="__main__")
    copy = [f for f in report.problems if f.line == _line(SOLVER_WITHOUT_WRAPPER, "COPY")]
    assert [f.kind for f in copy] == ["graph_cut"], report.format(notes=True)
    assert "torch.tensor" in copy[0].op
    assert f"{path}:{_line(SOLVER_WITHOUT_WRAPPER, 'READ')}" in copy[0].suggestion
    assert "hg.perturbed" in copy[0].suggestion
    assert "tensor of shape (8, 5)" in copy[0].detail
