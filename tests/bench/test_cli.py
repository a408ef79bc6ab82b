"""The ``hardgrad`` command line: ``list``, ``--version``, task errors, ``python -m``."""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

import hardgrad
from hardgrad.bench import TASKS
from hardgrad.bench.cli import main
from hardgrad.ops import OPS
from hardgrad.surrogates import SURROGATES

ROOT = Path(__file__).resolve().parents[2]


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
    from hardgrad._core.registry import Registry
    from hardgrad.bench._catalog import public_entries

    public_entries()  # every submodule imported before the fake estimators module is in place
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


# --------------------------------------------------------------------------------------
# Every argument is checked before any work: a usage error (exit 2) naming the option
# (issue 14, item 5). Each of these ran the benchmark first, or raised a raw traceback.
# --------------------------------------------------------------------------------------


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "results.txt"
    path.write_text("not a folder")
    return path


def _usage_error(capsys: pytest.CaptureFixture[str], argv: list[str], *words: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "usage:" in err and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)
    return err


def test_bench_out_that_is_a_file_is_refused_before_running(
    capsys: pytest.CaptureFixture[str], a_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[object] = []
    monkeypatch.setattr("hardgrad.bench.run_tasks", lambda *args, **kwargs: ran.append(args))
    _usage_error(capsys, ["bench", "toy", "--quick", "--out", str(a_file)], "--out", "not a folder")
    _usage_error(capsys, ["bench", "toy", "--out", str(a_file / "sub")], "--out", "not a folder")
    assert ran == []


def test_bench_out_folder_that_can_be_made_is_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[object] = []
    monkeypatch.setattr("hardgrad.bench.run_tasks", lambda *args, **kwargs: ran.append(args))
    assert main(["bench", "toy", "--out", str(tmp_path / "new" / "deeper")]) == 0
    assert len(ran) == 1


@pytest.mark.parametrize("device", ["meta", "not-a-device"])
def test_bench_device_without_real_values_is_refused(
    capsys: pytest.CaptureFixture[str], device: str
) -> None:
    _usage_error(capsys, ["bench", "toy", "--device", device], "--device", device)


@pytest.mark.parametrize("seed", ["-1", str(2**63)])
def test_bench_and_plot_seed_out_of_range(capsys: pytest.CaptureFixture[str], seed: str) -> None:
    _usage_error(capsys, ["bench", "toy", "--seed", seed], "--seed")
    _usage_error(capsys, ["plot", "--seed", seed], "--seed")


def test_plot_out_that_is_a_file_and_too_few_draws(
    capsys: pytest.CaptureFixture[str], a_file: Path, tmp_path: Path
) -> None:
    _usage_error(capsys, ["plot", "--out", str(a_file)], "--out", "not a folder")
    for draws in ("0", "1", "-3"):
        _usage_error(capsys, ["plot", "--draws", draws, "--out", str(tmp_path)], "--draws")
    assert not any(tmp_path.glob("*.png"))


def test_audit_usage_shows_args_as_optional(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", "--help"]) == 0
    assert "usage: hardgrad audit [-h] SCRIPT [ARGS ...]" in capsys.readouterr().out
    # Without a script the error names SCRIPT alone (argparse listed "SCRIPT, ARGS").
    assert main(["audit"]) == 2
    err = capsys.readouterr().err
    assert "required: SCRIPT" in err and "ARGS" not in err.splitlines()[-1]


@pytest.mark.parametrize(
    ("exit_call", "code", "message"),
    [
        ('sys.exit("training diverged")', 1, "training diverged"),
        ("sys.exit(3)", 3, None),
        ("sys.exit()", 0, None),
        ("sys.exit(None)", 0, None),
    ],
)
def test_audit_reports_sys_exit_as_python_does(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    exit_call: str,
    code: int,
    message: str | None,
) -> None:
    script = tmp_path / "train.py"
    script.write_text(f"import sys\n{exit_call}\n")
    assert main(["audit", str(script)]) == code
    err = capsys.readouterr().err
    if message is not None:
        assert err.strip().splitlines() == [message]
    else:
        assert err.strip() == ""
    # The real interpreter, for comparison: the same status and the same message.
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == code
    assert done.stderr.strip() == (message or "")


# --------------------------------------------------------------------------------------
# Issue 38: a missing [bench] extra is a usage error with the install line.
# --------------------------------------------------------------------------------------

INSTALL = 'pip install "hardgrad[bench]"'


@pytest.mark.parametrize(
    ("blocked", "argv", "package"),
    [
        (("matplotlib", "matplotlib.pyplot"), ["plot", "--draws", "2"], "matplotlib"),
        (("sklearn", "sklearn.datasets"), ["bench", "l0", "--quick"], "scikit-learn"),
    ],
)
def test_a_missing_bench_extra_exits_2_with_the_install_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    blocked: tuple[str, ...],
    argv: list[str],
    package: str,
) -> None:
    """matplotlib or scikit-learn not installed (``None`` in sys.modules makes the import
    fail as for a missing package): an ImportError traceback before (exit 1 for plot)."""
    for name in blocked:
        monkeypatch.setitem(sys.modules, name, None)
    if argv[0] == "plot":
        argv = [*argv, "--out", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert f"hardgrad {argv[0]}: error:" in err and package in err and INSTALL in err, err


def test_an_unrelated_import_error_is_not_blamed_on_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise ImportError("cannot import name 'x' from 'somewhere'", name="somewhere")

    monkeypatch.setattr("hardgrad.bench.run_tasks", broken)
    with pytest.raises(ImportError, match="somewhere"):
        main(["bench", "toy", "--quick"])


@pytest.mark.slow  # a fresh interpreter imports torch: seconds
def test_a_missing_bench_extra_in_a_fresh_interpreter(tmp_path: Path) -> None:
    """``python -m hardgrad bench l0`` with scikit-learn made unimportable: one line on
    stderr with the install command, exit status 2, no traceback."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text("import sys\nsys.modules['sklearn'] = None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(shim), str(ROOT / "src")])}
    done = subprocess.run(
        [sys.executable, "-m", "hardgrad", "bench", "l0", "--quick"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert INSTALL in done.stderr and "scikit-learn" in done.stderr, done.stderr


def test_task_modules_names_every_registered_task_in_order() -> None:
    # The parser reads task names from TASK_MODULES (no task imported for --help): it must
    # be exactly the registry, in its order, and each task filed by the module named.
    from hardgrad import bench

    assert tuple(bench.TASK_MODULES) == TASKS.names()
    for name, module in bench.TASK_MODULES.items():
        assert TASKS.get(name).run.__module__ == f"hardgrad.bench.{module}", name


# --------------------------------------------------------------------------------------
# Every capability is findable (issue 41, item 2): `hardgrad list`, the README's table and
# the docs name every public name and task. They omitted VQ, MoE routing, sorting,
# solvers, subsets, the QAT and binary layers, LIF, and the benchmarks guide the vq task.
# --------------------------------------------------------------------------------------


def test_list_names_every_public_name_grouped_by_family(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from hardgrad.bench._catalog import FAMILIES, OTHER, by_family, public_entries

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    words = set(out.split())
    groups = by_family()
    assert [f for f, _ in groups] == list(FAMILIES), "a public name belongs to no family"
    assert all(entries for _, entries in groups), [f.title for f, e in groups if not e]
    shown_by_registry = {id(o) for _, o in SURROGATES.items()} | {id(OPS), id(SURROGATES)}
    for entry in public_entries():
        if entry.path.startswith("hg.") and entry.path[3:] in OPS:
            assert entry.path[3:] in words  # in the ops block, by its registry name
        elif id(entry.obj) not in shown_by_registry and not entry.path.startswith("hg.estimators."):
            assert entry.path in words, entry.path
    for family in FAMILIES:
        assert family.title in out
    assert OTHER.title + " [" not in out
    for capability in ("LIF", "PACT", "QuantLinear", "BinaryLinear", "VectorQuantize", "FSQ"):
        assert f"hg.nn.{capability}" in words
    for capability in ("hg.imle", "hg.perturbed", "hg.blackbox", "hg.subset", "hg.sort"):
        assert capability in words
    assert "hg.vq.rotation_gradient" in words and "hg.topk_route" in words


def test_every_family_has_docs_pages_that_exist_and_the_docs_index_links_it() -> None:
    import re

    from hardgrad.bench._catalog import FAMILIES

    index = (ROOT / "docs" / "index.md").read_text()
    linked = set(re.findall(r"\{doc\}`([^`]+)`", index))
    for family in FAMILIES:
        assert family.guides, family.title
        for page in family.guides:
            assert (ROOT / "docs" / f"{page}.md").is_file(), page
        assert linked & set(family.guides), (family.title, family.guides)


def test_readme_table_is_the_generated_one() -> None:
    from hardgrad.bench._catalog import readme_table

    readme = (ROOT / "README.md").read_text()
    assert readme_table() in readme, (
        "README.md's table of families is stale: replace it with the output of "
        "`python -m hardgrad.bench._catalog`"
    )


def test_benchmarks_guide_names_every_task_in_order() -> None:
    import re

    guide = (ROOT / "docs" / "guides" / "benchmarks.md").read_text()
    rows = re.findall(r"^\| `([a-z0-9-]+)` \|", guide, flags=re.MULTILINE)
    assert tuple(rows) == TASKS.names()
