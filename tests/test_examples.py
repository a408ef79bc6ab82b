"""The scripts in examples/ run in their quick mode and print what their docstrings claim.

Each script runs in-process (``runpy``, as ``python examples/NAME.py --quick`` would; the
interpreter and its imports are already warm) and its last printed line is parsed. The
thresholds are set so that the result a broken gradient would give misses them: each is
commented with the value measured in the quick run and what a broken run gives. The
scripts are seeded, so their figures do not vary between runs on one machine.
"""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("sklearn")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture
def run_example(monkeypatch, capsys):
    """Run ``examples/NAME`` with ``--quick`` as ``__main__``; return its stdout."""
    threads = torch.get_num_threads()

    def run(name: str, *args: str) -> str:
        monkeypatch.setattr(sys, "argv", [str(EXAMPLES / name), "--quick", *args])
        try:
            runpy.run_path(str(EXAMPLES / name), run_name="__main__")
        finally:
            torch.set_num_threads(threads)  # the scripts use one thread
        return capsys.readouterr().out

    return run


def numbers(line: str) -> list[float]:
    return [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?", line)]


def test_vq_vae_reconstructs_and_restarts_keep_the_codebook_alive(run_example):
    last = run_example("vq_vae_digits.py").strip().splitlines()[-1]
    assert last.startswith("test mse"), last
    mse, baseline, used, codes, used_without, codes_without = numbers(last)
    assert codes == codes_without == 256
    # Measured: mse 0.024 against 0.074 for the mean image. An encoder without gradient
    # (a cut lookup) leaves the decoder a fixed random code per image: 0.046 (measured with z.detach()).
    assert mse < 0.4 * baseline
    # Measured: 246 codes used with restarts, 75 without.
    assert used >= 0.8 * codes
    assert used > 2 * used_without


def test_qat_export_reproduces_the_fake_quantized_model(run_example):
    last = run_example("qat_4bit_mlp.py").strip().splitlines()[-1]
    match = re.fullmatch(
        r"float (\S+), 4-bit before QAT (\S+), after QAT (\S+); integer export: bit-exact "
        r"(True|False), predictions agree (\d+)/(\d+), max \|logit difference\| (\S+)",
        last,
    )
    assert match, last
    float_acc, before, after = (float(match[i]) for i in (1, 2, 3))
    # Measured: 0.947, 0.931, 0.969 (chance is 0.1; a QAT whose weights got no gradient
    # stays at the 4-bit-before value or below).
    assert float_acc > 0.9 and after > 0.9
    assert after > before
    # The integer weights and input codes times their scales are the fake-quantized values
    # bit for bit; the logits differ only by the order of float products (measured 7e-6).
    assert match[4] == "True"
    assert match[5] == match[6] == "360"
    assert float(match[7]) < 1e-4


def test_spiking_classifier_learns_through_the_surrogate(run_example):
    last = run_example("spiking_digits.py").strip().splitlines()[-1]
    assert last.startswith("test accuracy"), last
    accuracy, rate = numbers(last)
    # Measured: 0.950 after 4 epochs. Without a surrogate (a zero derivative) no weight
    # moves and the untrained network scores 0.050; chance is 0.1.
    assert accuracy > 0.85
    assert 0.0 < rate < 1.0  # the hidden layer spikes, but not at every step


def test_moe_router_gradients_against_the_exact_one(run_example):
    out = run_example("moe_router_gradients.py").strip().splitlines()
    (same,) = [line for line in out if line.startswith("layer's router gradient")]
    # The layer's own router gradient is the "sparse" estimator's, computed independently
    # through hg.routing.expectation (measured: identical).
    assert numbers(same.split(":")[1])[0] < 1e-6
    match = re.fullmatch(
        r"test accuracy (\S+); router gradient cosine to exact: layer \(sparse\) (\S+), "
        r"dense (\S+), st_gumbel (\S+), rloo (\S+)",
        out[-1],
    )
    assert match, out[-1]
    accuracy, sparse, dense, st_gumbel, rloo = (float(match[i]) for i in range(1, 6))
    assert accuracy > 0.85  # measured 0.939 (chance 0.1)
    # RLOO is unbiased: the mean of 200 draws points along the exact gradient (measured
    # 0.994). The biased estimators are farther (measured 0.57, 0.59, 0.81); a router
    # gradient of the wrong sign or zero would give a cosine <= 0 or NaN.
    assert rloo > 0.95
    assert 0.2 < sparse < rloo and 0.2 < dense < rloo and 0.2 < st_gumbel < rloo


def test_audit_finds_the_planted_bug_and_passes_the_fix(monkeypatch, capsys):
    from hardgrad.bench.cli import main  # the `hardgrad` command's entry point

    script = EXAMPLES / "audit_planted_bug.py"
    lines = script.read_text().splitlines()
    (planted,) = [i + 1 for i, line in enumerate(lines) if line.endswith("# the planted bug")]
    threads = torch.get_num_threads()
    try:
        assert main(["audit", str(script), "--quick"]) == 0
        buggy = capsys.readouterr().out
        assert main(["audit", str(script), "--quick", "--fixed"]) == 0
        fixed = capsys.readouterr().out
    finally:
        torch.set_num_threads(threads)
    # The bug: one problem, at the argmin's line, naming the encoder and the fix.
    assert "audit: 1 problem in" in buggy, buggy
    assert f"audit_planted_bug.py:{planted}: graph_cut: Tensor.argmin indices" in buggy, buggy
    assert "VQVAE.encoder.0.weight" in buggy and "hg.vector_quantize(z, codebook)" in buggy
    # The fix (hg.vector_quantize): no problem left.
    assert "audit: no problems found" in fixed, fixed
    assert "test mse" in buggy and "(fixed: True)" in fixed
