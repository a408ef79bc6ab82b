"""The ``qat`` benchmark: the models really quantize, a tiny run, IDX data."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import hardgrad as hg
import hardgrad.bench.qat  # registers the task
from hardgrad.bench import BenchSettings, run_tasks
from hardgrad.bench.data import Dataset, load_digits, write_idx
from hardgrad.bench.qat import BinaryLinear, QatConfig, QuantLinear, Variant, build_model
from hardgrad.bench.report import PlainProgress

TINY = QatConfig(
    hidden=(32, 32), bits=(4, 2), epochs=6, seeds=2, batch_size=64, lr=3e-3, binary_lr=3e-3
)
LABELS = ["float", "STE 4-bit", "LSQ 4-bit", "STE 2-bit", "LSQ 2-bit", "binary", "ternary"]


def _finite_fraction(value: Any) -> bool:
    return isinstance(value, float) and math.isfinite(value) and 0.0 <= value <= 1.0


# --------------------------------------------------------------------------- the models


@pytest.fixture(scope="module")
def digits() -> Dataset:
    return load_digits(0)


@pytest.mark.parametrize("kind", ["ste", "lsq"])
@pytest.mark.parametrize("bits", [2, 3])
def test_quantized_forward_is_quantized(kind: str, bits: int, digits: Dataset) -> None:
    """Every weight row and every hidden activation takes at most 2^bits values, and each
    layer's output is computed from the quantized weight (not the float one), also after
    a few Adam steps."""
    torch.manual_seed(0)
    x, y = digits.x_train[:128], digits.y_train[:128]
    model = build_model(Variant(kind, bits), 64, (16, 16), 10)
    model(x)  # calibration: sets the scales
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(3):
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    linears = [m for m in model if isinstance(m, QuantLinear)]
    assert linears[0].act_quantizer is None  # the input pixels stay float
    quantizers = [m.act_quantizer for m in linears[1:]]
    assert len(linears) == 3 and all(isinstance(q, hg.nn.Quantize) for q in quantizers)
    assert all(q.learn_scale == (kind == "lsq") and q.bits == bits for q in quantizers)
    seen: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def remember(module: torch.nn.Module, args: tuple[torch.Tensor], out: torch.Tensor) -> None:
        seen[id(module)] = (args[0].detach(), out.detach())

    handles = [m.register_forward_hook(remember) for m in [*linears, *quantizers]]
    with torch.no_grad():
        model(x)
    for handle in handles:
        handle.remove()
    for layer in linears:
        weight = layer.quantized_weight().detach()
        for row in weight:
            assert len(torch.unique(row)) <= 2**bits
        assert not torch.equal(weight, layer.weight.detach())
        inputs, out = seen[id(layer)]
        if layer.act_quantizer is not None:
            inputs = layer.act_quantizer(inputs)
        torch.testing.assert_close(out, F.linear(inputs, weight, layer.bias))
    for quantizer in quantizers:
        _, out = seen[id(quantizer)]
        assert len(torch.unique(out)) <= 2**bits and bool((out >= 0).all())
        assert len(torch.unique(out)) >= 2  # not collapsed to a constant


def test_binary_network_is_binary_inside_with_float_ends(digits: Dataset) -> None:
    model = build_model(Variant("binary"), 64, (16, 16), 10)
    x = digits.x_train[:64]
    outputs: list[torch.Tensor] = []
    handles = [
        m.register_forward_hook(lambda _m, _a, out: outputs.append(out.detach()))
        for m in model
        if isinstance(m, hg.nn.Binarize)
    ]
    model(x)
    for handle in handles:
        handle.remove()
    assert len(outputs) == 2
    assert all(set(out.unique().tolist()) == {-1.0, 1.0} for out in outputs)
    (binary,) = [m for m in model if isinstance(m, BinaryLinear)]
    assert set(binary.quantized_weight().unique().tolist()) == {-1.0, 1.0}
    assert type(model[0]) is torch.nn.Linear and type(model[-1]) is torch.nn.Linear


def test_ternary_network_has_ternary_weights_per_channel(digits: Dataset) -> None:
    model = build_model(Variant("ternary"), 64, (16, 16), 10)
    model(digits.x_train[:64])
    (ternary,) = [m for m in model if isinstance(m, BinaryLinear)]
    assert ternary.weights == "ternary"
    for row in ternary.quantized_weight().detach():
        assert len(torch.unique(row)) == 3  # -alpha, 0, +alpha
    assert not any(isinstance(m, hg.nn.Binarize) for m in model)


def test_unknown_method_is_a_value_error() -> None:
    config = QatConfig(methods=("ste", "pact"), epochs=1, seeds=1)
    with pytest.raises(ValueError, match=r"Unknown method 'pact'"):
        run_tasks(["qat"], BenchSettings(threads=1), configs={"qat": config})


# --------------------------------------------------------------------------- a tiny run


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, dict[str, Any]]:
    out = tmp_path_factory.mktemp("qat")
    settings = BenchSettings(out=out, seed=1, threads=1)
    (result,) = run_tasks(["qat"], settings, configs={"qat": TINY}, progress=PlainProgress())
    document: dict[str, Any] = json.loads((out / "results.json").read_text())
    return out, result, document


def test_tiny_run_rows_are_complete_and_finite(tiny_run: tuple[Path, Any, dict[str, Any]]) -> None:
    _, result, document = tiny_run
    task = document["tasks"]["qat"]
    data = task["results"]
    assert task["settings"]["epochs"] == TINY.epochs and task["wall_s"] > 0
    assert data["dataset"] == "digits" and data["n_train"] + data["n_test"] == 1797
    rows = data["rows"]
    assert [r["label"] for r in rows] == LABELS
    for r in rows:
        for key in ("test_accuracy", "train_accuracy"):
            acc = r[key]
            assert len(acc["values"]) == TINY.seeds
            assert all(_finite_fraction(v) for v in acc["values"]), (r["label"], key)
            assert acc["min"] <= acc["mean"] <= acc["max"] and acc["std"] >= 0
            # accuracies are counts over the test (or train) set
            n = data["n_test"] if key == "test_accuracy" else data["n_train"]
            assert all(abs(v * n - round(v * n)) < 1e-6 for v in acc["values"])
        assert all(math.isfinite(v) and v > 0 for v in r["final_loss"])
    # The float network beats chance (10 %) by far even in this tiny setting.
    float_row = rows[0]
    assert float_row["test_accuracy"]["min"] > 0.8
    main, compare = result.tables
    assert len(main.rows) == len(LABELS) and [row[0] for row in compare.rows] == ["4", "2"]


def test_tiny_run_figure_and_notes(tiny_run: tuple[Path, Any, dict[str, Any]]) -> None:
    out, result, document = tiny_run
    assert result.figures == ["qat_accuracy.png"]
    assert document["tasks"]["qat"]["results"]["figures"] == result.figures
    assert (out / "qat_accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text()
    assert "![qat_accuracy.png](qat_accuracy.png)" in report and "| LSQ 2-bit " in report
    assert "Figure: qat_accuracy.png — test accuracy per precision" in report
    notes = result.notes
    assert any(n.startswith("Float baseline:") for n in notes)
    for bits in TINY.bits:
        (note,) = [n for n in notes if n.startswith(f"{bits}-bit: ")]
        assert "LSQ" in note
    rows = document["tasks"]["qat"]["results"]["rows"]
    ste2, lsq2 = rows[3], rows[4]
    (lowest,) = [n for n in notes if n.startswith("At the lowest width (2 bits)")]
    difference = lsq2["test_accuracy"]["mean"] - ste2["test_accuracy"]["mean"]
    if "helps test accuracy" in lowest:
        assert difference > 0
    if "does not help test accuracy" in lowest:
        assert difference <= 0
    lower_loss = sum(lsq2["final_loss"]) < sum(ste2["final_loss"])
    assert ("LSQ fits the training set better" in lowest) == lower_loss


# --------------------------------------------------------------------------- IDX data


def test_runs_on_idx_files(tmp_path: Path) -> None:
    generator = torch.Generator().manual_seed(0)
    folder = tmp_path / "mnist"
    folder.mkdir()
    for split, n in (("train", 40), ("t10k", 20)):
        images = torch.randint(0, 256, (n, 8, 8), generator=generator, dtype=torch.uint8)
        labels = (torch.arange(n) % 10).to(torch.uint8)
        write_idx(folder / f"{split}-images-idx3-ubyte", images)
        write_idx(folder / f"{split}-labels-idx1-ubyte.gz", labels)
    config = QatConfig(hidden=(8, 8), bits=(2,), epochs=2, seeds=1, batch_size=16, plot=False)
    settings = BenchSettings(data=folder, threads=1)
    (result,) = run_tasks(["qat"], settings, configs={"qat": config}, progress=PlainProgress())
    data = result.data
    assert data["dataset"] == f"idx:{folder}" and (data["n_train"], data["n_test"]) == (40, 20)
    assert [r["label"] for r in data["rows"]] == [
        "float",
        "STE 2-bit",
        "LSQ 2-bit",
        "binary",
        "ternary",
    ]
    for r in data["rows"]:
        (value,) = r["test_accuracy"]["values"]
        assert _finite_fraction(value) and round(value * 20) == pytest.approx(value * 20)
    assert result.figures == []
