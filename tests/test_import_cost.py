"""What ``import hardgrad`` and ``hardgrad --help`` import (issue 41, item 5).

``import hardgrad`` cost about 2 s on top of ``import torch`` (``torch._dynamo`` and sympy
pulled in by decorators in module bodies), and ``hardgrad --help`` took 4-5 s: it imported
torch, every submodule and every benchmark task to build its parser. Now ``import hardgrad``
imports its submodules on first use, and the parser is built from light metadata. Times are
not asserted here (a loaded machine makes them noise); the imports that made them are.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import hardgrad

ROOT = Path(__file__).resolve().parents[1]

#: Modules that cost a second or more to import and that nothing needs before it is used.
HEAVY = ("torch._dynamo", "torch._inductor", "sympy", "matplotlib", "rich", "scipy", "sklearn")


def _modules_after(code: str) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter; it prints a JSON object, returned here."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("PYTHONWARNINGS", None)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_hardgrad_pulls_in_no_heavy_module_until_used() -> None:
    found = _modules_after(f"""\
        import json, sys
        HEAVY = {HEAVY!r}
        def loaded(names):
            return sorted(m for m in names if m in sys.modules)
        out = {{}}
        import hardgrad
        out["bare"] = loaded((*HEAVY, "torch", "hardgrad.ops", "hardgrad.diagnostics"))
        import torch
        out["torch"] = loaded(HEAVY)
        for name in hardgrad.__all__:  # every public name, every submodule imported
            getattr(hardgrad, name)
        out["all"] = loaded(HEAVY)
        x = torch.tensor([0.4, 1.6], requires_grad=True)
        hardgrad.round(x).sum().backward()
        hardgrad.stochastic_round(x).sum().backward()
        layer = torch.nn.Sequential(hardgrad.nn.Quantize(bits=4), hardgrad.nn.VectorQuantize(8, 2))
        layer(torch.randn(3, 2))[0].sum().backward()  # first-batch initialisations included
        out["used"] = loaded(HEAVY)
        print(json.dumps(out))
        """)
    # Bare `import hardgrad` imports not even torch (the CLI's --help relies on it). A
    # `compiler_disabled` function (Quantize's and VectorQuantize's initialisations) imported
    # Dynamo at its first call, about 2 s. (Some uses still do: torch.func.vjp, which sort's
    # and soft_rank's backwards call, imports it itself.)
    assert found == {"bare": [], "torch": [], "all": [], "used": []}


def test_hardgrad_help_version_and_usage_errors_import_neither_torch_nor_a_task() -> None:
    found = _modules_after(f"""\
        import contextlib, io, json, sys
        from hardgrad.bench.cli import main
        codes = []
        for argv in (["--help"], ["bench", "--help"], ["audit", "--help"], ["--version"],
                     ["bench", "no-such-task"]):
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
                codes.append(main(argv))
        heavy = {HEAVY!r} + ("torch", "hardgrad.bench.toy", "hardgrad.bench.speed")
        print(json.dumps({{"codes": codes, "loaded": sorted(m for m in heavy if m in sys.modules)}}))
        """)
    assert found == {"codes": [0, 0, 0, 0, 2], "loaded": []}


def test_every_public_name_resolves_to_its_module_object() -> None:
    # The lazy table in hardgrad/__init__.py is a hand list: it must name exactly __all__
    # (less __version__) and give the very objects the submodules define.
    lazy = set(hardgrad._SUBMODULES) | set(hardgrad._FROM)
    assert lazy == set(hardgrad.__all__) - {"__version__"}
    assert len(hardgrad.__all__) == len(set(hardgrad.__all__))
    for name in hardgrad._SUBMODULES:
        assert getattr(hardgrad, name) is importlib.import_module(f"hardgrad.{name}")
    for name, module in hardgrad._FROM.items():
        source = importlib.import_module(module, "hardgrad")
        assert getattr(hardgrad, name) is getattr(source, name), name
    assert set(hardgrad.__all__) <= set(dir(hardgrad))


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    try:
        hardgrad.no_such_name  # noqa: B018
    except AttributeError as error:
        assert "no_such_name" in str(error)
    else:  # pragma: no cover
        raise AssertionError("hardgrad.no_such_name did not raise")


@pytest.mark.compile
def test_a_module_first_run_eagerly_without_dynamo_still_compiles() -> None:
    # compiler_disabled calls its function directly while Dynamo is not imported; once a
    # torch.compile imports it, the same module's data-dependent parts run outside the graph.
    found = _modules_after("""\
        import json, sys, torch, hardgrad as hg
        torch.manual_seed(0)
        model = torch.nn.Sequential(hg.nn.Quantize(bits=4), torch.nn.Linear(4, 4))
        x = torch.randn(8, 4)
        eager = model(x)  # first batch: the scale is initialised, Dynamo not imported
        before = "torch._dynamo" in sys.modules
        fresh = torch.nn.Sequential(hg.nn.Quantize(bits=4), torch.nn.Linear(4, 4))
        fresh.load_state_dict(model.state_dict())
        compiled = torch.compile(model, backend="eager")(x)
        initialised = torch.compile(fresh, backend="eager")(x)  # its first batch compiled
        print(json.dumps({
            "before": before,
            "same": torch.equal(compiled, eager),
            "fresh": torch.equal(initialised, model(x)),
        }))
        """)
    assert found == {"before": False, "same": True, "fresh": True}
