"""The ``hardgrad`` command line: ``list``, ``--version``, task errors, ``python -m``."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

import hardgrad
from hardgrad.bench import TASKS
from hardgrad.bench.cli import main
from hardgrad.ops import OPS
from hardgrad.surrogates import SURROGATES


def test_list_names_every_op_surrogate_and_task(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    words = out.split()
    for name in (*OPS.names(), *SURROGATES.names(), *TASKS.names()):
        assert name in words, name
    for _, cls in SURROGATES.items():
        assert cls.__name__ in words
    assert "Estimators" in out


def test_list_picks_up_an_estimator_registry(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from hardgrad._registry import Registry

    registry: Registry[type] = Registry("estimator")

    class FakeEstimator:
        """A fake estimator for this test."""

    registry.register("fake_st")(FakeEstimator)
    module = types.ModuleType("hardgrad.estimators")
    module.ESTIMATORS = registry  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "hardgrad.estimators", module)
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    (line,) = [ln for ln in out.splitlines() if "fake_st" in ln]
    assert "FakeEstimator" in line and "A fake estimator for this test." in line
    assert "none yet" not in out


def test_list_shows_one_line_summaries(capsys: pytest.CaptureFixture[str]) -> None:
    main(["list"])
    lines = capsys.readouterr().out.splitlines()
    for name, spec in OPS.items():
        (line,) = [ln for ln in lines if ln.split()[:1] == [name] and "[" in ln]
        assert spec.summary.split()[0] in line
    assert not any(":math:" in ln for ln in lines)


def test_unknown_task_exits_2_and_lists_tasks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "no-such-task"]) == 2
    err = capsys.readouterr().err
    assert "no-such-task" in err
    for name in TASKS.names():
        assert name in err


def test_bad_device_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "speed", "--device", "not-a-device"]) == 2
    assert "--device" in capsys.readouterr().err


def test_no_command_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "usage" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip().startswith(f"hardgrad {hardgrad.__version__}")


def test_python_dash_m_list() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "hardgrad", "list"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for name in (*OPS.names(), *SURROGATES.names()):
        assert name in done.stdout
