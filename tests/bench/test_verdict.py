"""The end of ``hardgrad bench``: the verdict block, the progress lines with estimates, the
"Wrote:" line, and the time budget that caps the speed task's timing rounds."""

from __future__ import annotations

import itertools
import json
import math
import os
import random
from pathlib import Path
from typing import Any

import pytest

from hardgrad._core.registry import Registry
from hardgrad.bench import _eta, _timing
from hardgrad.bench._task import BenchSettings, Table, Task, TaskResult
from hardgrad.bench.verdict import (
    HELD,
    NOT_HELD,
    UNRESOLVED,
    Claim,
    Verdict,
    derive,
    verdict_lines,
)

# --------------------------------------------------------------------------- verdicts


def _toy_row(name: str, t: float, phi: float, var: float, mean: float = 0.02, **kw: Any) -> dict:
    row = {
        "estimator": name,
        "t": t,
        "phi": phi,
        "var": var,
        "mean": mean,
        "se_mean": 0.001,
        "z": 0.5,
        "evaluations": 2,
        "mean_check": {"status": "ok"},
        "var_check": {"status": "ok"},
    }
    row.update(kw)
    return row


def _toy_data(disarm_var: float, reinmax_z: float, fail: bool) -> dict:
    rows = []
    for t, phi in ((0.45, 0.0), (0.45, -1.0)):
        rows += [
            _toy_row("arm", t, phi, 1.0),
            _toy_row("rloo", t, phi, 1.0),
            _toy_row("disarm", t, phi, disarm_var),
            _toy_row("st_gumbel", t, phi, 1.0),
            _toy_row("gumbel_rao", t, phi, 0.8),
            _toy_row("reinmax", t, phi, 1.0, z=reinmax_z),
        ]
    rows[0]["var_check"] = {"status": "FAIL" if fail else "unresolved"}
    curves = {"estimators": {"arm": {"final_mean": 0.05}, "exact": {"final_mean": 0.01}}}
    return {"rows": rows, "curves": curves}


def _status(verdict: Verdict, start: str) -> str:
    (claim,) = [c for c in verdict.claims if c.text.startswith(start)]
    return claim.status


def test_toy_verdict_held_from_its_rows() -> None:
    verdict = derive("toy", "", _toy_data(disarm_var=0.5, reinmax_z=1.0, fail=False), {})
    assert verdict.compared == "6 estimators vs closed forms"
    assert verdict.winner.startswith("arm (final p 0.050")  # "exact" is the reference
    assert [c.status for c in verdict.claims] == [HELD] * 4
    assert "23/24 ok, 1 unresolved, 0 failed" in verdict.claims[0].detail


def test_toy_verdict_not_held() -> None:
    verdict = derive("toy", "", _toy_data(disarm_var=2.0, reinmax_z=6.0, fail=True), {})
    assert _status(verdict, "closed forms") == NOT_HELD
    assert _status(verdict, "DisARM") == NOT_HELD  # 0 of 4 comparisons
    assert _status(verdict, "ReinMax") == NOT_HELD
    assert _status(verdict, "Gumbel-Rao") == HELD


def test_share_between_half_and_all_is_unresolved() -> None:
    data = _toy_data(disarm_var=0.5, reinmax_z=1.0, fail=False)
    for row in data["rows"]:  # DisARM above RLOO at one phi: 3 of 4 comparisons hold
        if row["estimator"] == "rloo" and row["phi"] == 0.0:
            row["var"] = 0.1
    verdict = derive("toy", "", data, {})
    claim = next(c for c in verdict.claims if c.text.startswith("DisARM"))
    assert (claim.status, claim.detail) == (UNRESOLVED, "3/4")


def _qat_row(label: str, bits: int | None, values: list[float]) -> dict:
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / max(len(values) - 1, 1))
    accuracy = {"mean": mean, "std": std, "values": values}
    return {"label": label, "bits": bits, "test_accuracy": accuracy}


def test_qat_one_seed_is_unresolved_several_resolve() -> None:
    one = {"rows": [_qat_row("float", None, [0.97]), _qat_row("STE 2-bit", 2, [0.95])]}
    one["rows"].append(_qat_row("LSQ 2-bit", 2, [0.96]))
    verdict = derive("qat", "", one, {})
    assert [c.status for c in verdict.claims] == [UNRESOLVED]  # one seed: no spread known
    assert verdict.winner == "LSQ 2-bit (96.0 %; float 97.0 %)"
    seeds = {
        "rows": [
            _qat_row("STE 2-bit", 2, [0.90, 0.91, 0.90]),
            _qat_row("LSQ 2-bit", 2, [0.95, 0.96, 0.95]),
            _qat_row("STE 4-bit", 4, [0.96, 0.97, 0.96]),
            _qat_row("LSQ 4-bit", 4, [0.90, 0.91, 0.90]),
        ]
    }
    statuses = [c.status for c in derive("qat", "", seeds, {}).claims]
    assert statuses == [HELD, NOT_HELD]


def _timed(verdict: str, ratio: float) -> dict:
    return {"ratio": ratio, "verdict": verdict}


def test_speed_verdict_faster_slower_unresolved() -> None:
    ops = {
        "round": {"eager": _timed("faster", 0.9), "compiled": None},
        "sign": {"eager": _timed("faster", 0.8), "compiled": None},
    }
    assert _status(derive("speed", "", {"ops": ops}, {}), "ops") == HELD
    ops["sign"]["eager"] = _timed(_timing.UNRESOLVED, 1.01)
    verdict = derive("speed", "", {"ops": ops}, {})
    assert _status(verdict, "ops") == UNRESOLVED
    assert verdict.claims[0].detail == "1/2 faster, 1 unresolved (noise)"
    ops["round"]["eager"] = _timed("slower", 1.3)
    verdict = derive("speed", "", {"ops": ops}, {})
    assert _status(verdict, "ops") == NOT_HELD
    assert "slower: round" in verdict.claims[0].detail


def test_speed_samplers_claim_counts_same_semantics_rows_only() -> None:
    rows = {
        "st_gumbel": {**_timed("faster", 0.7), "compared_with": "same semantics"},
        "gumbel_rao": {**_timed("slower", 20.0), "compared_with": "common reference"},
    }
    data = {"ops": {}, "samplers": {"categorical": {"eager": {"rows": rows}}}}
    claim = next(c for c in derive("speed", "", data, {}).claims if c.text.startswith("samplers"))
    assert (claim.status, claim.detail) == (HELD, "1/1 faster")


def test_speed_soft_sort_claim_only_where_torchsort_was_timed() -> None:
    """The soft sorts against torchsort: a claim from the rows torchsort was timed in (it is
    optional: none without it), naming whether the kernel ran."""
    untimed = {"op": "soft_rank", "torchsort_ms": None, "native_kernel": True}
    data = {"ops": {}, "sorting": {"soft_rank/l2/256x100": untimed}}
    assert not [c for c in derive("speed", "", data, {}).claims if "torchsort" in c.text]
    timed = {**_timed("faster", 0.6), "torchsort_ms": 1.3, "native_kernel": True}
    data["sorting"]["soft_rank/kl/256x100"] = timed
    (claim,) = [c for c in derive("speed", "", data, {}).claims if "torchsort" in c.text]
    assert (claim.text, claim.status, claim.detail) == (
        "soft sort/rank <= 1.0x torchsort (with the C kernel)",
        HELD,
        "1/1 faster",
    )
    data["sorting"]["soft_rank/kl/256x100"] = {**timed, **_timed("slower", 2.5)}
    data["sorting"]["soft_rank/kl/256x100"]["native_kernel"] = False
    (claim,) = [c for c in derive("speed", "", data, {}).claims if "torchsort" in c.text]
    assert claim.status == NOT_HELD and "no C kernel" in claim.text
    assert "slower: soft_rank/kl/256x100" in claim.detail


def test_unknown_task_and_malformed_results_still_give_a_line() -> None:
    assert derive("unknown", "things", {}, {}).claims == []
    broken = derive("toy", "toy things", {"no rows": []}, {})
    assert broken.winner.startswith("no verdict: results lack")


def test_claim_status_is_checked() -> None:
    with pytest.raises(ValueError, match="status must be one of held"):
        Claim("x", "maybe")


def test_verdict_block_has_10_to_20_lines_for_13_tasks() -> None:
    verdicts = [
        Verdict(f"task{i}", "a vs b", "a", [Claim("c", s)])
        for i, s in zip(range(13), itertools.cycle((HELD, NOT_HELD, UNRESOLVED)), strict=False)
    ]
    lines = verdict_lines(verdicts, quick=True)
    assert 10 <= len(lines) <= 20
    assert lines[0].startswith("Verdict: quick run")
    assert lines[1].startswith("Published claims: 5 held, 4 not held, 4 unresolved")
    assert "c: NOT HELD" in lines[3]


# --------------------------------------------------------------------------- timing


def test_ratio_interval_matches_binomial_coverage() -> None:
    # Coverage of [r_(k), r_(n+1-k)] by enumeration of the 2^n sign patterns around the
    # median: the interval misses it when fewer than k ratios lie on one side.
    for n in range(3, 16):
        ratios = [float(i) for i in range(1, n + 1)]
        low, high = _timing.ratio_interval(ratios)
        k = int(low)
        misses = sum(
            1
            for signs in itertools.product((0, 1), repeat=n)
            if sum(signs) < k or n - sum(signs) < k
        )
        coverage = 1 - misses / 2**n
        assert high == n + 1 - k
        assert coverage >= 0.95 or k == 1, (n, k, coverage)
        if k + 1 <= (n + 1) // 2:  # the next k would fall below 95 %
            wider = sum(
                1
                for signs in itertools.product((0, 1), repeat=n)
                if sum(signs) < k + 1 or n - sum(signs) < k + 1
            )
            assert 1 - wider / 2**n < 0.95


def test_ratio_verdict() -> None:
    assert _timing.ratio_verdict([0.8, 0.9, 0.95]) == "faster"
    assert _timing.ratio_verdict([1.1, 1.2, 1.05]) == "slower"
    assert _timing.ratio_verdict([0.9, 1.1, 1.0]) == _timing.UNRESOLVED
    assert _timing.ratio_verdict([]) == "n/a"


class _FakeClock:
    """A clock that a fake timer advances: each timed call "takes" ``cost(call)`` seconds."""

    def __init__(self, cost: Any) -> None:
        self.now, self.calls, self.cost = 0.0, 0, cost

    def __call__(self) -> float:
        return self.now

    def timer(self, fn: Any, *, min_run_time: float, threads: int) -> float:
        self.calls += 1
        seconds = self.cost(self.calls)
        self.now += seconds
        return seconds


def _interleaved(clock: _FakeClock, rounds: int, **kw: Any) -> dict[str, list[float]]:
    return _timing.time_interleaved(
        dict.fromkeys("abc", lambda: None),
        rounds=rounds,
        min_run_time=0.01,
        threads=1,
        rng=random.Random(0),
        clock=clock,
        timer=clock.timer,
        **kw,
    )


def test_rounds_capped_by_the_budget() -> None:
    steady = _FakeClock(lambda call: 0.5)  # 1.5 s per round of three candidates
    times = _interleaved(steady, 100, budget_s=10.0)
    assert {len(v) for v in times.values()} == {6}  # a 7th would end at 10.5 s
    assert _interleaved(_FakeClock(lambda call: 0.5), 100, budget_s=1.0)["a"].__len__() == 3
    assert len(_interleaved(_FakeClock(lambda call: 0.5), 8)["a"]) == 8  # no budget


def test_noisy_machine_cannot_stretch_a_comparison() -> None:
    # Every call slower than the last (a machine filling up): without a budget the
    # comparison takes ~ rounds^2; with one it stops near the budget.
    slowing = _FakeClock(lambda call: 0.1 * call)
    with _timing.round_budget(5.0):
        times = _interleaved(slowing, 50)
    assert len(times["a"]) == 3
    assert slowing.now <= 5.0 + 1e-9
    unbounded = _FakeClock(lambda call: 0.1 * call)
    _interleaved(unbounded, 50)
    assert unbounded.now > 1000


def test_round_budget_rejects_a_bad_budget() -> None:
    with pytest.raises(ValueError, match="seconds must be > 0"), _timing.round_budget(0):
        pass


def test_quick_speed_config_has_a_budget_full_has_none() -> None:
    from hardgrad.bench.speed import default_config

    assert default_config(True).budget_s is not None
    assert default_config(False).budget_s is None


# --------------------------------------------------------------------------- the CLI run


def _fake_task(settings: BenchSettings, config: Any, progress: Any) -> TaskResult:
    progress.start("fake", 1)
    progress.advance("step")
    progress.finish()
    figures = []
    if settings.out is not None:
        (settings.out / "fake.png").write_bytes(b"png")
        figures.append("fake.png")
    table = Table("numbers", ["name", "value"], [["a", "1"]])
    return TaskResult("fake", "a fake task", {}, {"value": 1}, [table], figures=figures)


@pytest.fixture
def fake_task(monkeypatch: pytest.MonkeyPatch) -> None:
    import hardgrad.bench as bench

    registry: Registry[Task] = Registry("task")
    registry.register("fake")(Task("fake", "a fake task", _fake_task, lambda quick: None))
    monkeypatch.setitem(bench.TASK_MODULES, "fake", "fake")
    monkeypatch.setattr(bench, "_all_tasks", lambda: registry)
    monkeypatch.setitem(_eta.QUICK_ESTIMATES_S, "fake", 12.0)


def test_bench_progress_verdict_and_wrote_line(
    fake_task: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from hardgrad.bench.cli import main

    out = tmp_path / "res"
    out.mkdir()
    (out / "old.png").write_bytes(b"from before")  # not written by this run: not listed
    os.utime(out / "old.png", (0, 0))
    assert main(["bench", "fake", "--quick", "--out", str(out), "--threads", "1"]) == 0
    captured = capsys.readouterr()
    assert "[bench 1/1] fake: started, estimate 12 s (measured quick time)" in captured.err
    assert "[bench 1/1] fake: done in 0 s (estimate 12 s)" in captured.err
    lines = captured.out.rstrip("\n").splitlines()
    assert lines[-1] == f"Wrote: 3 files in {out}/: results.json, report.md, fake.png"
    assert lines[-2].startswith("Each task's tables")
    assert "- fake: a fake task; best: see its tables (no claims checked)." in lines
    assert "Verdict: quick run, reduced settings; drop --quick for the full ones" in lines
    report = (out / "report.md").read_text().splitlines()
    assert report[:3] == [
        "# hardgrad benchmark report",
        "",
        "## Verdict: quick run, reduced settings; drop --quick for the full ones",
    ]
    # The second run estimates from the first one's time, kept in results.json.
    document = json.loads((out / "results.json").read_text())
    document["tasks"]["fake"]["wall_s"] = 65.0
    (out / "results.json").write_text(json.dumps(document))
    assert main(["bench", "fake", "--quick", "--out", str(out), "--threads", "1"]) == 0
    err = capsys.readouterr().err
    assert "fake: started, estimate 1 min 05 s (previous run)" in err
