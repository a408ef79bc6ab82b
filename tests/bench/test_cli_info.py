"""``hardgrad info``: versions, devices and whether the soft sorts' C kernel is compiled."""

from __future__ import annotations

import pytest
import torch

from hardgrad._core import native
from hardgrad.bench.cli import main
from hardgrad.sorting import _native_pav as native_pav


def _info(capsys) -> dict[str, str]:
    assert main(["info"]) == 0
    lines = capsys.readouterr().out.splitlines()
    pairs = (line.split(": ", 1) if ": " in line else line.split(" ", 1) for line in lines)
    return {key: value for key, value in pairs}


def test_info_names_the_versions_and_the_kernel(capsys):
    out = _info(capsys)
    assert out["torch"] == torch.__version__
    assert out["hardgrad"]
    assert out["cuda"] == ("not available" if not torch.cuda.is_available() else out["cuda"])
    kernel = out["soft sort kernel"]
    if native.compiler() is None:
        assert kernel.startswith("not available, tensor path used (no C compiler found")
    elif native_pav.available(torch.zeros(1)):
        assert kernel.startswith("compiled (") and str(native.cache_dir()) in kernel
    else:  # a compiler that fails ($CC pointing nowhere, say): its error
        assert kernel.startswith("not available, tensor path used (")


def test_info_says_why_the_kernel_is_not_used(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HARDGRAD_NATIVE", "0")
    assert "HARDGRAD_NATIVE=0" in _info(capsys)["soft sort kernel"]
    monkeypatch.delenv("HARDGRAD_NATIVE")
    monkeypatch.setattr(native, "_loaded", {})  # as in a fresh process
    monkeypatch.setenv("HARDGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    kernel = _info(capsys)["soft sort kernel"]
    assert kernel.startswith("not available, tensor path used (") and "no-such-compiler" in kernel
    with native.disabled():
        assert "turned off" in _info(capsys)["soft sort kernel"]


@pytest.mark.parametrize("argv", [["info", "extra"], ["info", "--bogus"]])
def test_info_takes_no_arguments(argv, capsys):
    assert main(argv) == 2
    assert "unrecognized arguments" in capsys.readouterr().err
