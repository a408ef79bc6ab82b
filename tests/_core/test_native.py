"""hardgrad._core.native: C files compiled on first use into a cache and loaded with ctypes.

Every test compiles a tiny C file of its own (not the package's kernels) into a cache
directory under ``tmp_path``, with the environment variables it depends on set or removed
and a fresh ``native._loaded`` memo, so the tests neither see nor touch the real cache.
Tests that need a C compiler skip when there is none; the no-compiler paths run
everywhere (a missing program, a program that exits with an error, an empty ``PATH``).
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import stat
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from hardgrad._core import native

ADD = "int hg_add(int a, int b) { return a + b; }\n"
ADD_ONE = "int hg_add(int a, int b) { return a + b + 1; }\n"
BROKEN = "int hg_add(int a, int b) { return a + ; }\n"
#: A compiler command that starts and exits with status 1 (portable: no /bin/false needed).
FAILING_CC = f"{sys.executable} -c raise(SystemExit(1))"

#: A child process that loads native.py (argv[1]) by its path (no torch import: it starts
#: in milliseconds) and prints hg_add(40, 2) from the library of the C file argv[2], or
#: "none"; with a third argument "forbid", running the compiler raises (and fails the child).
CHILD = """
import importlib.util, pathlib, subprocess, sys
spec = importlib.util.spec_from_file_location("hg_native_child", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
if sys.argv[3:] == ["forbid"]:
    def refuse(*args, **kwargs):
        raise RuntimeError("the child ran the compiler")
    subprocess.run = refuse
lib = mod.load(pathlib.Path(sys.argv[2]))
print("none" if lib is None else lib.hg_add(40, 2))
"""

_VARIABLES = ("HARDGRAD_NATIVE", "HARDGRAD_CACHE_DIR", "XDG_CACHE_HOME", "CC")


@pytest.fixture(autouse=True)
def cache(monkeypatch, tmp_path) -> Path:
    """A fresh memo and a cache directory of the test's own (not yet created)."""
    monkeypatch.setattr(native, "_loaded", {})
    for name in _VARIABLES:
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "cache"
    monkeypatch.setenv("HARDGRAD_CACHE_DIR", str(path))
    return path


@pytest.fixture
def cc() -> str:
    """The compiler found with ``CC`` unset; skips the test when there is none."""
    found = native.compiler()
    if found is None:
        pytest.skip("no C compiler (cc, gcc or clang) on PATH")
    return found


@pytest.fixture
def compiles(monkeypatch) -> list[list[str]]:
    """The command lines native runs (through subprocess.run), in order."""
    calls: list[list[str]] = []
    real = subprocess.run

    def counting(args, *rest, **kwargs):
        calls.append(list(args))
        return real(args, *rest, **kwargs)

    monkeypatch.setattr(native.subprocess, "run", counting)
    return calls


def _source(tmp_path: Path, text: str = ADD, name: str = "hg_add.c") -> Path:
    path = tmp_path / "src" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def _expected(source: Path, cc: str) -> Path:
    """Where native puts the library of ``source`` compiled with ``cc`` and its flags."""
    return native._target(source, [*shlex.split(cc), *native._FLAGS])


def _forbid_compiling(monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("native ran the compiler again")

    monkeypatch.setattr(native.subprocess, "run", refuse)


def _run_child(source: Path, env: dict[str, str], *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, native.__file__, str(source), *extra],
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# ---------------------------------------------------------------------------------------
# Compiling, naming and reusing


def test_compiles_loads_and_names_the_file_by_a_hash(tmp_path, cache, cc, compiles) -> None:
    source = _source(tmp_path)
    lib = native.load(source)
    assert lib is not None
    assert lib.hg_add(40, 2) == 42
    assert lib.hg_add(-7, 3) == -4
    assert len(compiles) == 1
    assert compiles[0][: len(cc.split())] == cc.split()
    assert str(source) in compiles[0]
    files = sorted(cache.iterdir())
    assert files == [_expected(source, cc)]
    suffix = re.escape(native._suffix())
    assert re.fullmatch(rf"hg_add-[0-9a-f]{{20}}{suffix}", files[0].name), files[0].name
    assert native._loaded == {str(source): lib}


def test_a_second_load_returns_the_same_library_without_compiling(
    tmp_path, cc, monkeypatch
) -> None:
    source = _source(tmp_path)
    lib = native.load(source)
    assert lib is not None
    _forbid_compiling(monkeypatch)
    assert native.load(source) is lib


def test_a_fresh_memo_reuses_the_cached_file(tmp_path, cache, cc, monkeypatch) -> None:
    source = _source(tmp_path)
    first = native.load(source)
    assert first is not None
    target = _expected(source, cc)
    written = target.stat().st_mtime_ns
    monkeypatch.setattr(native, "_loaded", {})  # what a new process starts with
    _forbid_compiling(monkeypatch)
    again = native.load(source)
    assert again is not None and again is not first
    assert again.hg_add(1, 2) == 3
    assert target.stat().st_mtime_ns == written
    assert sorted(cache.iterdir()) == [target]


def test_a_new_process_reuses_the_cached_file(tmp_path, cache, cc) -> None:
    """A child that may not run the compiler loads the library this process cached."""
    source = _source(tmp_path)
    assert native.load(source) is not None
    child = _run_child(source, {"HARDGRAD_CACHE_DIR": str(cache)}, "forbid")
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert out.strip() == "42"
    assert sorted(cache.iterdir()) == [_expected(source, cc)]


def test_the_file_name_covers_the_source(tmp_path, cache, cc) -> None:
    source = _source(tmp_path)
    first = native.load(source)
    assert first is not None
    source.write_text(ADD_ONE)
    native._loaded.clear()
    second = native.load(source)
    assert second is not None
    assert second.hg_add(40, 2) == 43  # the edited code, not the cached one
    assert first.hg_add(40, 2) == 42
    names = {p.name for p in cache.iterdir()}
    assert len(names) == 2
    assert {n.split("-")[0] for n in names} == {"hg_add"}


def test_the_file_name_covers_the_compiler_and_its_flags(tmp_path, cache, cc, monkeypatch) -> None:
    source = _source(tmp_path)
    assert native.load(source) is not None
    native._loaded.clear()
    monkeypatch.setenv("CC", f"{cc} -g")
    lib = native.load(source)
    assert lib is not None and lib.hg_add(2, 2) == 4
    native._loaded.clear()
    monkeypatch.setattr(native, "_FLAGS", (*native._FLAGS, "-DHG_UNUSED=1"))
    lib = native.load(source)
    assert lib is not None and lib.hg_add(2, 3) == 5
    assert len(list(cache.iterdir())) == 3


def test_the_cache_follows_xdg_cache_home_when_no_cache_dir_is_set(
    tmp_path, cc, monkeypatch
) -> None:
    monkeypatch.delenv("HARDGRAD_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    source = _source(tmp_path)
    assert native.load(source) is not None
    assert [p.parent for p in (tmp_path / "xdg").rglob("*.*")] == [tmp_path / "xdg" / "hardgrad"]


# ---------------------------------------------------------------------------------------
# Off, no compiler, a failing compiler, bad source


def test_hardgrad_native_0_turns_compiling_off(tmp_path, cache, compiles, monkeypatch) -> None:
    assert native.enabled()
    monkeypatch.setenv("HARDGRAD_NATIVE", "1")
    assert native.enabled()
    monkeypatch.setenv("HARDGRAD_NATIVE", "0")
    assert not native.enabled()
    assert native.load(_source(tmp_path)) is None
    assert compiles == []
    assert not cache.exists()
    assert native._loaded == {}  # nothing remembered: turning it back on compiles then


def _assert_fails_quietly(source: Path, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="hardgrad")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert native.load(source) is None
    assert caught == []
    assert [r.levelno for r in caplog.records] == [logging.DEBUG]
    assert source.name in caplog.records[0].getMessage()
    assert native._loaded == {str(source): None}


def test_no_compiler_on_path_gives_none(tmp_path, cache, compiles, monkeypatch, caplog) -> None:
    path = os.environ.get("PATH", "")
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert native.compiler() is None
    source = _source(tmp_path)
    _assert_fails_quietly(source, caplog)
    assert compiles == []
    monkeypatch.setenv("PATH", path)
    assert native.load(source) is None  # remembered, even where a compiler is back
    assert compiles == []


@pytest.mark.parametrize("kind", ["missing", "failing"])
def test_a_compiler_that_is_missing_or_fails_gives_none_once(
    tmp_path, cache, compiles, monkeypatch, caplog, kind
) -> None:
    command = str(tmp_path / "no-such-cc") if kind == "missing" else FAILING_CC
    monkeypatch.setenv("CC", command)
    assert native.compiler() == command
    source = _source(tmp_path)
    _assert_fails_quietly(source, caplog)
    assert len(compiles) == 1  # one try, not a second compile of the same failure
    assert native.load(source) is None
    assert len(compiles) == 1  # remembered, not retried in this process
    assert list(cache.iterdir()) == []  # the temporary output file is removed


def test_a_source_with_a_syntax_error_gives_none_and_leaves_nothing(
    tmp_path, cache, cc, compiles, caplog
) -> None:
    source = _source(tmp_path, BROKEN, "hg_broken.c")
    _assert_fails_quietly(source, caplog)
    assert len(compiles) == 1
    assert cache.is_dir()
    assert list(cache.iterdir()) == []


def test_a_corrupted_cached_file_is_compiled_again(tmp_path, cache, cc, compiles) -> None:
    source = _source(tmp_path)
    target = _expected(source, cc)
    cache.mkdir()
    garbage = b"not a shared library\0" * 64
    target.write_bytes(garbage)
    lib = native.load(source)
    assert lib is not None
    assert lib.hg_add(40, 2) == 42
    assert len(compiles) == 1
    assert target.read_bytes() != garbage
    assert sorted(cache.iterdir()) == [target]


# ---------------------------------------------------------------------------------------
# The cache directory


def test_cache_dir_precedence(tmp_path, monkeypatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("USERPROFILE", str(home))  # what expanduser reads on Windows
    monkeypatch.setenv("HARDGRAD_CACHE_DIR", str(tmp_path / "explicit"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert native.cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("HARDGRAD_CACHE_DIR")
    assert native.cache_dir() == tmp_path / "xdg" / "hardgrad"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert native.cache_dir() == home / ".cache" / "hardgrad"
    monkeypatch.setenv("HARDGRAD_CACHE_DIR", "")  # empty counts as unset
    monkeypatch.setenv("XDG_CACHE_HOME", "")
    assert native.cache_dir() == home / ".cache" / "hardgrad"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # the XDG spec: ignored
    assert native.cache_dir() == home / ".cache" / "hardgrad"
    monkeypatch.setenv("HARDGRAD_CACHE_DIR", "~/kernels")  # the user's home expanded
    assert native.cache_dir() == home / "kernels"


def test_a_source_that_does_not_exist_gives_none(tmp_path, cache, compiles) -> None:
    assert native.load(tmp_path / "missing.c") is None
    assert compiles == []


@pytest.mark.skipif(os.name == "nt", reason="a POSIX wrapper script stands in for the compiler")
def test_a_compiler_path_with_spaces_is_split_as_a_shell_would(
    tmp_path, cache, cc, monkeypatch
) -> None:
    folder = tmp_path / "my tools"
    folder.mkdir()
    wrapper = folder / "c compiler"
    wrapper.write_text(f'#!/bin/sh\nexec "{cc}" "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", f"'{wrapper}'")
    lib = native.load(_source(tmp_path))
    assert lib is not None and lib.hg_add(2, 3) == 5


@pytest.mark.skipif(os.name == "nt", reason="fake compilers here are POSIX executables")
def test_compiler_prefers_cc_then_gcc_then_clang(tmp_path, monkeypatch) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    for name in ("clang", "gcc", "cc"):
        fake = bin_dir / name
        fake.write_text("#!/bin/sh\nexit 1\n")
        fake.chmod(0o755)
        assert native.compiler() == str(fake)  # each new one outranks those before it
    monkeypatch.setenv("CC", "my-cc --flag")
    assert native.compiler() == "my-cc --flag"


def test_a_cache_dir_that_cannot_be_made_gives_none(tmp_path, cc, compiles, monkeypatch) -> None:
    """The cache path runs through a regular file (fails for root as well)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("HARDGRAD_CACHE_DIR", str(blocker / "cache"))
    assert native.load(_source(tmp_path)) is None
    assert compiles == []
    assert blocker.read_text() == ""


@pytest.mark.skipif(os.name == "nt", reason="POSIX permissions")
@pytest.mark.skipif(
    hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes to a read-only dir"
)
def test_a_read_only_cache_dir_gives_none_but_serves_what_it_holds(
    tmp_path, cache, cc, compiles, monkeypatch
) -> None:
    cache.mkdir()
    cache.chmod(stat.S_IRUSR | stat.S_IXUSR)  # 0o500
    try:
        assert native.load(_source(tmp_path)) is None
        assert compiles == []
        assert list(cache.iterdir()) == []
        # A library compiled before the directory became read-only is still loaded.
        cache.chmod(0o700)
        other = _source(tmp_path, ADD, "hg_other.c")
        assert native.load(other) is not None
        native._loaded.clear()
        cache.chmod(stat.S_IRUSR | stat.S_IXUSR)
        _forbid_compiling(monkeypatch)
        lib = native.load(other)
        assert lib is not None and lib.hg_add(1, 1) == 2
    finally:
        cache.chmod(0o700)


# ---------------------------------------------------------------------------------------
# Processes compiling at once


@pytest.mark.skipif(os.name == "nt", reason="the compiler wrapper is a POSIX shell script")
def test_two_processes_compiling_at_once_both_load_a_complete_library(tmp_path, cache, cc) -> None:
    """Each compile waits (up to 10 s) until the other has started, so both processes find
    the cache empty and compile; each must load a whole library, and no partial file
    stays behind."""
    log = tmp_path / "compiles.log"
    log.write_text("")
    wrapper = tmp_path / "slow-cc"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"echo started >> '{log}'\n"
        "n=0\n"
        f"while [ \"$(wc -l < '{log}')\" -lt 2 ] && [ $n -lt 1000 ]; do\n"
        "  sleep 0.01; n=$((n + 1))\n"
        "done\n"
        f'exec {cc} "$@"\n'
    )
    wrapper.chmod(0o755)
    source = _source(tmp_path)
    env = {"HARDGRAD_CACHE_DIR": str(cache), "CC": str(wrapper)}
    children = [_run_child(source, env) for _ in range(2)]
    results = [child.communicate(timeout=60) for child in children]
    for child, (out, err) in zip(children, results, strict=True):
        assert child.returncode == 0, err
        assert out.strip() == "42"
    assert log.read_text().split() == ["started", "started"]
    assert sorted(cache.iterdir()) == [_expected(source, str(wrapper))]


def test_disabled_turns_kernels_off_inside_the_block_only(tmp_path, cache, cc) -> None:
    source = _source(tmp_path)
    with native.disabled():
        assert not native.enabled()
        with native.disabled():  # nested blocks
            assert native.load(source) is None
        assert native.load(source) is None
    assert native.enabled()
    lib = native.load(source)
    assert lib is not None and lib.hg_add(1, 1) == 2
    with native.disabled():
        assert native.load(source) is None  # even once loaded
    assert native.load(source) is lib
