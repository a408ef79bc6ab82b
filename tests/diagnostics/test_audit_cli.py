"""``hardgrad audit SCRIPT ARGS``: a script written into ``tmp_path``, run by the command
line's entry point."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from hardgrad.bench.cli import main


def function_modes() -> list[Any]:
    return list(torch.overrides._get_current_function_mode_stack())


# --------------------------------------------------------------------------------------
# 3. hardgrad audit SCRIPT ARGS
# --------------------------------------------------------------------------------------

SCRIPT = textwrap.dedent(
    """\
    import sys

    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 1)
            self.spare = nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(x)


    steps, code = int(sys.argv[1]), int(sys.argv[2])
    torch.manual_seed(0)
    net = Net()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    x = torch.randn(4, 3)
    for _ in range(steps):
        opt.zero_grad()
        out = net(x)  # CALL
        loss = (torch.round(out) - 0.5).square().mean()  # ROUND
        loss.backward()
        opt.step()
    print("script argv:", sys.argv[1:], __name__)
    if code < 0:
        raise RuntimeError("the script failed")
    sys.exit(code)
    """
)

#: The same training step inside a main() function, the usual layout of a script.
SCRIPT_IN_MAIN = textwrap.dedent(
    """\
    import sys

    import torch
    from torch import nn


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 1)
            self.spare = nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(x)


    def main(steps):
        net = Net()
        x = torch.randn(4, 3)
        for _ in range(steps):
            net.zero_grad()
            out = net(x)  # CALL
            loss = (torch.round(out) - 0.5).square().mean()  # ROUND
            loss.backward()


    if __name__ == "__main__":
        main(int(sys.argv[1]))
    """
)


def _script_line(marker: str, script: str = SCRIPT) -> int:
    (line,) = [i + 1 for i, text in enumerate(script.splitlines()) if text.endswith(marker)]
    return line


@pytest.mark.parametrize(("steps", "code"), [(3, 0), (2, 7)])
def test_cli_audit_runs_a_script(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], steps: int, code: int
) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    argv_before, path_before = list(sys.argv), list(sys.path)
    assert main(["audit", str(script), str(steps), str(code), "--flag"]) == code
    assert sys.argv == argv_before and sys.path == path_before
    assert function_modes() == []
    out = capsys.readouterr().out
    assert f"script argv: ['{steps}', '{code}', '--flag'] __main__" in out
    round_at = f"{script}:{_script_line('# ROUND')}"
    call_at = f"{script}:{_script_line('# CALL')}"
    (round_line,) = [ln for ln in out.splitlines() if round_at in ln]
    assert "zero_gradient" in round_line and "torch.round" in round_line
    assert f"(x{steps})" in round_line
    spare = [ln for ln in out.splitlines() if call_at in ln and "no_gradient" in ln]
    assert len(spare) == 2 and all("spare." in ln for ln in spare), out
    # fc gets an all-zero gradient because of the round: named in the round's finding, not
    # a finding of its own (a note, not printed without --all).
    assert not any("fc." in ln and "no_gradient" in ln for ln in out.splitlines()), out
    assert "cut off behind it: Net.fc.weight, Net.fc.bias" in out
    assert "hg.round" in out  # the suggestion


def test_cli_audit_reports_unused_parameters_of_a_model_built_in_main(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The model lives in main() and is gone when the script ends: its never-used layer
    must still be reported (as it is when the model is a module-level global)."""
    script = tmp_path / "train_main.py"
    script.write_text(SCRIPT_IN_MAIN)
    assert main(["audit", str(script), "2"]) == 0
    out = capsys.readouterr().out
    round_at = f"{script}:{_script_line('# ROUND', SCRIPT_IN_MAIN)}"
    assert any(round_at in ln and "(x2)" in ln for ln in out.splitlines()), out
    call_at = f"{script}:{_script_line('# CALL', SCRIPT_IN_MAIN)}"
    spare = [ln for ln in out.splitlines() if call_at in ln and "no_gradient" in ln]
    assert len(spare) == 2 and all("spare." in ln for ln in spare), out


def test_cli_audit_script_that_raises_exits_1_and_still_reports(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    assert main(["audit", str(script), "1", "-1"]) == 1
    captured = capsys.readouterr()
    assert "the script failed" in captured.err  # the traceback
    assert f"{script}:{_script_line('# ROUND')}" in captured.out  # found before it failed
    assert function_modes() == []


def test_cli_audit_missing_script_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no_such_script.py"
    assert main(["audit", str(missing)]) == 2
    assert "no_such_script.py" in capsys.readouterr().err
