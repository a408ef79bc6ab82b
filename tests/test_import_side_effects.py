"""``import hardgrad`` changes no global state (issue 38).

In a fresh interpreter (this process has pytest's warning filters and imports of its own):
the ``warnings`` filters, torch's global settings, its RNG, global hooks and function
modes, the root logger, and which heavy packages are imported, snapshotted after
``import torch``, after ``import hardgrad`` and after importing every public submodule
(the benchmark modules included): all equal. It used to differ: ``@torch.compiler.disable``
in three ``hardgrad.nn`` module bodies imported ``torch._dynamo`` and sympy at import (about
a second), and sympy adds a ``warnings`` filter.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""\
    import importlib, json, logging, pkgutil, sys, warnings
    import torch

    HEAVY = ("torch._dynamo", "torch._inductor", "sympy", "matplotlib", "sklearn", "scipy",
             "pandas", "triton", "torch.distributed.fsdp")

    def hooks():
        from torch.nn.modules import module
        from torch.optim import optimizer
        names = [n for n in dir(module) if n.startswith("_global_") and n.endswith("hooks")]
        counts = {n: len(getattr(module, n)) for n in names}
        counts["optimizer_pre"] = len(optimizer._global_optimizer_pre_hooks)
        counts["optimizer_post"] = len(optimizer._global_optimizer_post_hooks)
        return counts

    def snapshot():
        state = {
            "warnings": [repr(f) for f in warnings.filters],
            "default_dtype": str(torch.get_default_dtype()),
            "grad": torch.is_grad_enabled(),
            "inference": torch.is_inference_mode_enabled(),
            "anomaly": torch.is_anomaly_enabled(),
            "deterministic": torch.are_deterministic_algorithms_enabled(),
            "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
            "threads": torch.get_num_threads(),
            "matmul_precision": torch.get_float32_matmul_precision(),
            "cudnn": [torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark,
                      torch.backends.cudnn.allow_tf32],
            "tf32": torch.backends.cuda.matmul.allow_tf32,
            "rng": torch.random.get_rng_state().tolist(),
            "modes": len(torch.overrides._get_current_function_mode_stack()),
            "hooks": hooks(),
            "print": repr(torch._tensor_str.PRINT_OPTS.__dict__),
            "root_logger": [logging.root.level, len(logging.root.handlers)],
            "heavy": sorted(m for m in HEAVY if m in sys.modules),
        }
        if "torch._dynamo" in sys.modules:
            config = sys.modules["torch._dynamo"].config.get_config_copy()
            state["dynamo_config"] = repr(sorted(config.items()))
        return state

    states = {"torch": snapshot()}
    import hardgrad
    states["hardgrad"] = snapshot()
    public = [
        m.name
        for m in pkgutil.walk_packages(hardgrad.__path__, "hardgrad.")
        if not any(part.startswith("_") for part in m.name.split("."))
    ]
    library = [m for m in public if not m.startswith("hardgrad.bench")]
    for name in library:
        importlib.import_module(name)
    states["library"] = snapshot()
    for name in public:
        importlib.import_module(name)
    states["bench"] = snapshot()
    states["modules"] = public
    print(json.dumps(states))
    """)


@pytest.mark.slow  # a fresh interpreter imports torch and every module: seconds
def test_importing_hardgrad_and_every_public_submodule_changes_no_global_state() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    env.pop("PYTHONWARNINGS", None)
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    states = json.loads(done.stdout.strip().splitlines()[-1])
    modules = states.pop("modules")
    assert "hardgrad.diagnostics" in modules and "hardgrad.bench.cli" in modules
    before = states.pop("torch")
    assert before["heavy"] == []  # a bare torch import loads none of them
    for stage, state in states.items():
        differs = sorted(k for k in before.keys() | state.keys() if before.get(k) != state.get(k))
        assert not differs, (stage, {k: (before.get(k), state.get(k)) for k in differs})
