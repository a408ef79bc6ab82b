"""The ``speed`` benchmark, in-process in a tiny setting."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from hardgrad.bench import BenchSettings, run_tasks
from hardgrad.bench.report import PlainProgress
from hardgrad.bench.speed import SpeedConfig, alternatives_for
from hardgrad.estimators import ESTIMATORS
from hardgrad.ops import OPS
from hardgrad.ops._autograd import MASK_CONVERT_MIN_NUMEL

PATHWISE = [name for name, cls in ESTIMATORS.items() if cls.pathwise]

TINY = SpeedConfig(
    numel=4096,
    matrix=(32, 16),
    rao_ks=(),  # test_gumbel_rao_sweep covers it
    ops=("round", "clamp", "one_hot_argmax"),
    rounds=2,
    min_run_time=0.002,
    compile=False,
    small_numel=64,
    plot=False,
    samplers=(),  # test_speed_samplers_every_pathwise_estimator covers them
    sorting=(),  # test_sorting_rows_without_torchsort covers them
)


def _run(tmp_path: Path, config: SpeedConfig, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    settings = BenchSettings(out=tmp_path, seed=1, threads=1)
    (result,) = run_tasks(["speed"], settings, configs={"speed": config}, progress=PlainProgress())
    assert "[speed" in capsys.readouterr().err
    assert result.tables and result.wall_s > 0
    document: dict[str, Any] = json.loads((tmp_path / "results.json").read_text())
    return document


def _positive(value: Any) -> bool:
    return isinstance(value, float) and math.isfinite(value) and value > 0


@pytest.mark.slow
def test_speed_eager_writes_results_and_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = _run(tmp_path, TINY, capsys)
    for key in ("hardgrad", "torch", "device", "seed", "threads", "date", "quick"):
        assert key in document
    assert document["seed"] == 1 and document["threads"] == 1
    task = document["tasks"]["speed"]
    assert task["settings"]["numel"] == 4096
    ops = task["results"]["ops"]
    assert list(ops) == list(TINY.ops or ())
    for name, entry in ops.items():
        eager = entry["eager"]
        for key in ("hardgrad_ms", "best_alternative_ms", "ratio", "x_floor", "floor_ms"):
            assert _positive(eager[key]), (name, key, eager[key])
        assert eager["best_alternative"] in entry["candidates"]
        assert entry["compiled"] is None
        small = entry["small"]
        assert _positive(small["hardgrad_ms"]) and _positive(small["ratio"])
        assert entry["small_shape"] == ([4, 16] if name == "one_hot_argmax" else [64])
        expected = {c.key for c in alternatives_for(OPS.get(name))}
        assert set(entry["candidates"]) == expected
        for cand in entry["candidates"].values():
            assert _positive(cand["eager_ms"])
            assert len(cand["eager_rounds_ms"]) == TINY.rounds
            assert cand["bytes_per_element"] >= 0
            assert _positive(cand["small_ms"])
            assert cand["page_faults"] is None or cand["page_faults"] >= 0
    # Saved for backward: nothing for round's identity STE, a bool mask for clamp, while
    # torch.clamp keeps the float input alive.
    assert ops["round"]["candidates"]["hardgrad"]["bytes_per_element"] == 0
    # A bool mask from MASK_CONVERT_MIN_NUMEL elements on; below, 0/1 in x's dtype.
    mask_bytes = 1 if TINY.numel >= MASK_CONVERT_MIN_NUMEL else 4
    assert ops["clamp"]["candidates"]["hardgrad"]["bytes_per_element"] == mask_bytes
    assert ops["clamp"]["candidates"]["torch"]["bytes_per_element"] == 4
    report = (tmp_path / "report.md").read_text()
    assert "| op " in report and "| round " in report and "| clamp " in report
    assert "hardgrad ms" in report and "× floor" in report and "Small tensors" in report
    assert "| one_hot_argmax (4, 16) " in report


@pytest.mark.slow
def test_speed_samplers_every_pathwise_estimator(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = SpeedConfig(
        matrix=(32, 16),
        ops=(),
        rounds=2,
        min_run_time=0.002,
        compile=False,
        plot=False,
        lsq=False,
        sorting=(),
        small_numel=64,
    )
    document = _run(tmp_path, config, capsys)
    results = document["tasks"]["speed"]["results"]
    assert results["ops"] == {}
    samplers = results["samplers"]
    assert list(samplers) == ["categorical", "bernoulli"]
    categorical, bernoulli = samplers["categorical"], samplers["bernoulli"]
    assert categorical["shape"] == [32, 16] and bernoulli["shape"] == [512]
    assert list(categorical["eager"]["rows"]) == PATHWISE and bernoulli["estimators"] == PATHWISE
    for entry in samplers.values():
        assert entry["compiled"] is None
        eager = entry["eager"]
        assert _positive(eager["floor_ms"])
        for name, row in eager["rows"].items():
            for key in ("hardgrad_ms", "best_alternative_ms", "ratio", "x_floor"):
                assert _positive(row[key]), (name, key, row[key])
            assert row["best_alternative"] in entry["candidates"]
            assert row["compared_with"] in ("same semantics", "common reference")
            assert len(row["round_ratios"]) == config.rounds
        for cand in entry["candidates"].values():
            assert _positive(cand["eager_ms"]) and len(cand["eager_rounds_ms"]) == config.rounds
            assert cand["bytes_per_element"] >= 0
            assert _positive(cand["small_ms"]) and cand["bytes_per_element_small"] >= 0
        # The same rows on the small input (64 elements), compared with the same candidates.
        small = entry["small"]
        assert list(small["rows"]) == PATHWISE and _positive(small["floor_ms"])
        for name, row in small["rows"].items():
            assert _positive(row["ratio"]) and len(row["round_ratios"]) == config.rounds
            assert row["compared_with"] == eager["rows"][name]["compared_with"]
    assert categorical["small_shape"] == [4, 16] and bernoulli["small_shape"] == [64]
    rows = categorical["eager"]["rows"]
    # Each estimator against the torch sampler with its semantics, the rest labelled.
    expected = {
        "st_gumbel": ("gumbel_softmax_hard", "same semantics"),
        "gumbel_softmax": ("gumbel_softmax_soft", "same semantics"),
        "st": ("one_hot_st", "same semantics"),
    }
    for name in PATHWISE:
        best = rows[name]["best_alternative"], rows[name]["compared_with"]
        assert best == expected.get(name, ("gumbel_softmax_hard", "common reference")), name
    bernoulli_expected = {
        "st": ("bernoulli_st", "same semantics"),
        "gumbel_softmax": ("relaxed_bernoulli", "same semantics"),
        "st_gumbel": ("relaxed_bernoulli_st", "same semantics"),
    }
    for name in PATHWISE:
        row = bernoulli["eager"]["rows"][name]
        best = row["best_alternative"], row["compared_with"]
        assert best == bernoulli_expected.get(name, ("bernoulli_st", "common reference")), name
    # The plain straight-through saves nothing for backward; hardgrad's samples are exact.
    assert categorical["candidates"]["hg.st_identity"]["bytes_per_element"] == 0
    assert categorical["candidates"]["hg.st_gumbel"]["forward_mismatches"] == 0
    report = (tmp_path / "report.md").read_text()
    assert "### Samplers, eager" in report and "| categorical st_gumbel " in report
    assert "### Samplers, small tensors" in report and "| bernoulli st (64,) " in report
    assert "| bernoulli st " in report and "common reference" in report
    assert "### Eager: hardgrad" not in report  # no ops were run


@pytest.mark.compile
@pytest.mark.slow
def test_speed_compiled_one_op(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = SpeedConfig(
        numel=1024,
        ops=("round",),
        rounds=1,
        min_run_time=0.002,
        compile=True,
        candidates=("detach",),
        small_numel=None,
        plot=False,
        samplers=(),  # compiling a sampler takes ~10 s more
        rao_ks=(),
        lsq=False,
        sorting=(),
    )
    document = _run(tmp_path, config, capsys)
    entry = document["tasks"]["speed"]["results"]["ops"]["round"]
    compiled = entry["compiled"]
    assert _positive(compiled["hardgrad_ms"]) and _positive(compiled["ratio"])
    for cand in entry["candidates"].values():
        assert _positive(cand["compiled_ms"]) and cand["fullgraph"] is True
        assert cand["bytes_per_element_compiled"] == 0
    assert "torch.compile" in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize(
    "config",
    [SpeedConfig(samplers=("categorical/nope",)), SpeedConfig(samplers=("poisson/st",))],
)
def test_unknown_sampler_is_a_value_error(config: SpeedConfig) -> None:
    with pytest.raises(ValueError, match=r"Unknown sampler.*available: 'categorical/st'"):
        run_tasks(["speed"], BenchSettings(threads=1), configs={"speed": config})


def test_unknown_op_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="available"):
        run_tasks(
            ["speed"],
            BenchSettings(threads=1),
            configs={"speed": SpeedConfig(ops=("nope",))},
            progress=PlainProgress(),
        )


def test_audit_overhead_rows_are_finite_and_the_watched_step_is_clean():
    import math
    import random

    from hardgrad.bench._task import BenchSettings
    from hardgrad.bench.speed._audit import SIZES, audit_table, run_audit_overhead

    results = run_audit_overhead(BenchSettings(threads=1), 1, 0.001, random.Random(0))
    assert list(results) == [label for label, _, _ in SIZES]
    for r in results.values():
        assert r["findings"] == 0  # hardgrad ops and plain layers: nothing to report
        assert r["torch_calls_watched"] > 10
        assert math.isfinite(r["ratio"]) and r["ratio"] > 0
        assert r["plain_ms"] > 0 and r["audit_ms"] > 0
    table = audit_table(results)
    assert len(table.rows) == len(SIZES) and len(table.columns) == len(table.rows[0])


@pytest.mark.slow
def test_lsq_rows_against_torch_learnable_kernels(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every scheme (per tensor, per channel; scale, scale and zero point) at both sizes,
    in the report and the results, with finite ratios."""
    from hardgrad.bench.speed._lsq import ROWS

    document = _run(tmp_path, TINY, capsys)
    lsq = document["tasks"]["speed"]["results"]["lsq"]
    assert len(lsq) == 2 * len(ROWS)
    shapes = {tuple(r["shape"]) for r in lsq.values()}
    assert shapes == {(8, 8), (64, 64)}
    for r in lsq.values():
        assert r["torch_ms"] > 0 and r["hardgrad_ms"] > 0 and r["ratio"] > 0
        assert 0 <= r["rounds_faster"] <= len(r["round_ratios"]) == TINY.rounds
    assert "fused learnable fake-quantize" in (tmp_path / "report.md").read_text()


def test_lsq_rows_refuse_a_kernel_that_computes_something_else(monkeypatch):
    """The semantics check runs before timing: a forward that differs from torch's kernel
    stops the row with SpeedCheckError."""
    import random

    from hardgrad.bench._task import BenchSettings
    from hardgrad.bench.speed import _lsq as _speed_lsq
    from hardgrad.bench.speed._candidates import SpeedCheckError

    real = _speed_lsq._ops.quantize

    def off_by_a_step(x, scale, *args, **kwargs):
        return real(x, scale, *args, **kwargs) + 0.3

    monkeypatch.setattr(_speed_lsq._ops, "quantize", off_by_a_step)
    with pytest.raises(SpeedCheckError, match="forward differs"):
        _speed_lsq.run_lsq({"small": 64}, BenchSettings(threads=1), 1, 0.001, random.Random(0))


def test_an_alternative_that_computes_something_else_is_reported_and_not_timed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A backend's wrong gradient (seen: compiled fake-quantize on one CUDA build) leaves
    that alternative out with the reason, and the run goes on."""
    from hardgrad.bench.speed import _candidates as candidates

    def with_a_wrong_one(spec: Any) -> list[Any]:
        def wrong(x: Any) -> Any:
            return x.round().detach() + 0.5 * (x - x.detach())  # half the STE gradient

        return [candidates.Candidate("half", "half", "0.5 STE", wrong)]

    monkeypatch.setitem(candidates.ALTERNATIVES, "round", with_a_wrong_one)
    config = SpeedConfig(
        numel=4096,
        ops=("round",),
        rounds=2,
        min_run_time=0.002,
        compile=False,
        small_numel=0,
        plot=False,
        samplers=(),
        rao_ks=(),
        lsq=False,
        sorting=(),
    )
    ops = _run(tmp_path, config, capsys)["tasks"]["speed"]["results"]["ops"]
    half = ops["round"]["candidates"]["half"]
    assert "gradient of half" in half["check_error"] and "eager_ms" not in half
    report = (tmp_path / "report.md").read_text()
    assert "not timed: round/half (eager: " in report


def test_compiled_hardgrad_that_differs_from_eager_is_reported_not_timed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seen with torch 2.11: compiled hg.quantize had a zero backward. The speed task
    checks compiled hardgrad against eager hardgrad, reports a difference and goes on."""
    from hardgrad.bench.speed import _run as speed

    def miscompiled(fn: Any, x: Any, g: Any) -> tuple[Any, bool]:
        return (lambda t: fn(t).detach() + 0 * t), True  # the right values, zero gradient

    monkeypatch.setattr(speed, "compile_warm", miscompiled)
    config = SpeedConfig(
        numel=4096,
        ops=("round",),
        rounds=2,
        min_run_time=0.002,
        compile=True,
        small_numel=0,
        plot=False,
        samplers=(),
        rao_ks=(),
        lsq=False,
        sorting=(),
    )
    ops = _run(tmp_path, config, capsys)["tasks"]["speed"]["results"]["ops"]
    assert ops["round"]["compiled"] is None
    assert "gradient" in ops["round"]["compiled_error"]
    assert ops["round"]["eager"]["hardgrad_ms"] > 0
    assert "computed something else than in eager mode" in (tmp_path / "report.md").read_text()


def test_gumbel_rao_sweep_reports_time_bytes_and_faults_per_k() -> None:
    """The k sweep: every k and ST-Gumbel timed for both unit kinds, saved bytes per
    element that do not depend on k (categorical: logits and sample, 8; Bernoulli: the
    slope, 4), and a table row each."""
    from hardgrad.bench.speed._rao import rao_table, run_rao_sweep

    data = run_rao_sweep((1, 3), (16, 8), 2, 0.002, BenchSettings(threads=1), random.Random(0))
    assert data["ks"] == [1, 3]
    for kind, shape in (("categorical", [16, 8]), ("bernoulli", [128])):
        entry = data[kind]
        assert entry["shape"] == shape
        record = entry["candidates"]
        assert set(record) == {"st_gumbel", "k=1", "k=3"}
        for name, row in record.items():
            assert _positive(row["ms"]) and len(row["rounds_ms"]) == 2
            if name != "st_gumbel":
                saved = 8 if kind == "categorical" else 4
                assert row["saved_bytes_per_element"] == saved, (kind, name)
    table = rao_table(data)
    assert len(table.rows) == 6 and table.rows[1][1] == "gumbel_rao, k = 1"


def test_sorting_rows_without_torchsort(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without torchsort, every soft sort/rank row is there, hardgrad timed alone."""
    import sys

    from hardgrad.bench.speed._sorting import NOT_INSTALLED, ROWS, kernel_in_use

    monkeypatch.setitem(sys.modules, "torchsort", None)  # `import torchsort` fails
    config = SpeedConfig(
        ops=(),
        samplers=(),
        rao_ks=(),
        audit=False,
        lsq=False,
        sorting=((4, 8), (2, 16)),
        rounds=2,
        min_run_time=0.001,
        compile=False,
        small_numel=None,
        plot=False,
    )
    document = _run(tmp_path, config, capsys)
    rows = document["tasks"]["speed"]["results"]["sorting"]
    assert len(rows) == 2 * len(ROWS)
    assert {(r["op"], r["regularization"]) for r in rows.values()} == set(ROWS)
    kernel = kernel_in_use("cpu")  # a C compiler here: timed with and without the kernel
    for r in rows.values():
        assert r["note"] == NOT_INSTALLED and r["torchsort_ms"] is None
        assert _positive(r["hardgrad_ms"])
        assert r["native_kernel"] is kernel and r["native_compiled"] is kernel
        assert (
            _positive(r["hardgrad_no_kernel_ms"]) if kernel else r["hardgrad_no_kernel_ms"] is None
        )
        assert r["no_kernel_ratio"] is None
    report = (tmp_path / "report.md").read_text()
    assert report.count(NOT_INSTALLED) >= 2 * len(ROWS)
    assert "without kernel ms" in report


def test_sorting_rows_refuse_a_torchsort_that_computes_something_else() -> None:
    """A torchsort whose forward is off is reported and left out of the timing."""
    import types

    import torch

    from hardgrad.bench.speed import _sorting

    def off(x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        return x + 1e-2

    fake = types.SimpleNamespace(soft_sort=off, soft_rank=off)
    rows = _sorting.run_sorting(
        ((3, 5),), BenchSettings(threads=1), 1, 0.001, random.Random(0), torchsort=fake
    )
    for r in rows.values():
        assert r["torchsort_ms"] is None and r["note"].startswith("left out:")


def _agreeing_torchsort() -> Any:
    """A torchsort stand-in that computes what hardgrad does (it passes the forward check)."""
    import types

    import hardgrad as hg

    def wrap(fn: Any) -> Any:
        def call(x: Any, *, regularization_strength: float, regularization: str) -> Any:
            return fn(x, strength=regularization_strength, regularization=regularization)

        return call

    return types.SimpleNamespace(soft_sort=wrap(hg.soft_sort), soft_rank=wrap(hg.soft_rank))


def test_sorting_rows_time_hardgrad_with_and_without_the_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With the kernel in use, three contenders share the rounds; each gets its column."""
    import os

    from hardgrad._core import native
    from hardgrad.bench.speed import _sorting

    fake = _agreeing_torchsort()  # bound to the real hg.soft_sort, before the spy
    seen: list[bool] = []  # whether kernels were on, call by call, in the hardgrad steps
    real = _sorting._sorting.soft_sort

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(native.enabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(_sorting, "kernel_in_use", lambda device: True)  # even without cc
    monkeypatch.setattr(_sorting._sorting, "soft_sort", spy)
    rows = _sorting.run_sorting(
        ((3, 20),), BenchSettings(threads=1), 2, 0.001, random.Random(0), torchsort=fake
    )  # fmt: skip
    assert len(rows) == len(_sorting.ROWS)
    assert False in seen  # the "without kernel" step ran in disabled()
    assert (True in seen) == (os.environ.get("HARDGRAD_NATIVE", "1") != "0")
    assert native.enabled() == (os.environ.get("HARDGRAD_NATIVE", "1") != "0")  # block closed
    for r in rows.values():
        assert r["note"] is None and r["native_kernel"] is True
        for key in ("hardgrad_ms", "torchsort_ms", "hardgrad_no_kernel_ms", "ratio"):
            assert _positive(r[key]), key
        assert r["no_kernel_ratio"] == pytest.approx(r["hardgrad_no_kernel_ms"] / r["torchsort_ms"])
        assert len(r["round_ratios"]) == 2 and 0 <= r["rounds_faster"] <= 2
    table = _sorting.sorting_table(rows)
    assert table.columns[-2:] == ["without kernel ms", "without kernel ratio"]
    row = rows["soft_sort/l2/3x20"]
    assert table.rows[0][-2:] == [
        f"{row['hardgrad_no_kernel_ms']:.3f}",
        f"{row['no_kernel_ratio']:.2f}",
    ]
    assert "ran here" in table.notes[0]


def test_sorting_rows_without_the_kernel_say_the_hardgrad_column_is_the_tensor_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HARDGRAD_NATIVE=0 (as with no C compiler): hardgrad is timed once, the note says so."""
    from hardgrad.bench.speed import _sorting

    monkeypatch.setenv("HARDGRAD_NATIVE", "0")
    rows = _sorting.run_sorting(
        ((3, 20),), BenchSettings(threads=1), 1, 0.001, random.Random(0),
        torchsort=_agreeing_torchsort(),
    )  # fmt: skip
    for r in rows.values():
        assert r["native_kernel"] is False and r["native_compiled"] is False
        assert r["hardgrad_no_kernel_ms"] is None and r["no_kernel_ratio"] is None
        assert _positive(r["torchsort_ms"]) and _positive(r["hardgrad_ms"])
    table = _sorting.sorting_table(rows)
    assert {tuple(cells[-2:]) for cells in table.rows} == {("same as hardgrad", "-")}
    assert "not compiled here" in table.notes[0] and "tensor-operation path" in table.notes[0]
    # Compiled, but the device is not the CPU: the note says the kernel did not run there.
    on_gpu = {k: r | {"native_compiled": True} for k, r in rows.items()}
    assert "CPU tensors only" in _sorting.kernel_note(on_gpu)
