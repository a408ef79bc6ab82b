"""The ``toy`` benchmark: closed forms, checks, a tiny in-process run and the CLI."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from hardgrad.bench import TASKS, BenchSettings, run_tasks
from hardgrad.bench.cli import main
from hardgrad.bench.report import PlainProgress
from hardgrad.bench.toy import VARIANTS, ToyConfig, check_moment, closed_form
from hardgrad.estimators import ESTIMATORS, get

BERNOULLI = [
    name for name, cls in ESTIMATORS.items() if "bernoulli" in getattr(cls, "dists", ("bernoulli",))
]
EXPECTED_NAMES = [*BERNOULLI, *VARIANTS]

#: One t, two logits (phi = -1 shows straight-through's bias), 2^15 replicas: enough for
#: every closed-form variance to be resolved well inside 5 %.
TINY = ToyConfig(
    targets=(0.45,),
    phis=(0.0, -1.0),
    replicas=2**15,
    chunk=2**15,
    ema_warmup=5,
    curve_target=0.499,
    steps=60,
    seeds=4,
    record_every=20,
)


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


# --------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize("t", [0.45, 0.49, 0.499])
def test_closed_forms_at_phi_zero(t: float) -> None:
    """Special values derived by hand at p = 1/2 (independent of the general formulas)."""
    exact = (1 - 2 * t) / 4
    st = closed_form(get("st"), t, 0.0, 1)
    assert st.mean == pytest.approx(2 * (0.5 - t) / 4) and st.var == pytest.approx(1 / 16)
    reinforce = closed_form(get("reinforce"), t, 0.0, 1)
    second = 0.5 * (1 - t) ** 4 / 4 + 0.5 * t**4 / 4
    assert reinforce.mean == pytest.approx(exact)
    assert reinforce.var == pytest.approx(second - exact**2)
    rloo = closed_form(get("rloo"), t, 0.0, 2)  # q = 1/2
    assert rloo.var == pytest.approx((1 - 2 * t) ** 2 / 16)
    arm = closed_form(get("arm"), t, 0.0, 2)  # (1-2t)|u - 1/2|, |u - 1/2| ~ U(0, 1/2)
    assert arm.var == pytest.approx((1 - 2 * t) ** 2 / 48)
    disarm = closed_form(get("disarm"), t, 0.0, 2)
    assert disarm.mean == pytest.approx(exact) and disarm.var == 0
    # ST-Gumbel: E[sigma'(d) 1[d > 0]] = 1/12, E[sigma'(d)^2 1[d > 0]] = 1/60 at phi = 0.
    gumbel = closed_form(get("st_gumbel"), t, 0.0, 1)
    assert gumbel.mean == pytest.approx((1 - 2 * t) / 6, rel=1e-6, abs=1e-12)
    second = 4 * ((1 - t) ** 2 + t**2) / 60
    assert gumbel.var == pytest.approx(second - ((1 - 2 * t) / 6) ** 2, rel=1e-6)
    # Gumbel-Rao keeps ST-Gumbel's mean and lowers its variance.
    rao = closed_form(get("gumbel_rao"), t, 0.0, 1)
    assert rao.mean == pytest.approx(gumbel.mean, rel=1e-9, abs=1e-14)
    assert rao.var is not None and gumbel.var is not None and rao.var < gumbel.var
    assert closed_form(get("exact"), t, 0.0, 0).var == 0


@pytest.mark.parametrize("phi", [-2.0, -1.0, 0.3, 1.5])
def test_closed_forms_against_direct_integration(phi: float) -> None:
    """ARM and DisARM variances and ReinMax's mean, against sums written from the estimators'
    definitions (a fine grid over the shared uniform u)."""
    t = 0.45
    p = _sigmoid(phi)
    f = {1: (1 - t) ** 2, 0: t**2}
    u = (torch.arange(200_000, dtype=torch.float64) + 0.5) / 200_000
    first, second = (u > 1 - p).long(), (u < p).long()  # ARM's pair
    arm = (torch.where(first == 1, f[1], f[0]) - torch.where(second == 1, f[1], f[0])) * (u - 0.5)
    b, anti = (u < p).long(), (1 - u < p).long()  # DisARM's pair
    disarm = (
        0.5
        * (torch.where(b == 1, f[1], f[0]) - torch.where(anti == 1, f[1], f[0]))
        * (1 - 2 * anti)
        * (b != anti)
        * _sigmoid(abs(phi))
    )
    exact = p * (1 - p) * (1 - 2 * t)
    for name, values in (("arm", arm), ("disarm", disarm)):
        form = closed_form(get(name), t, phi, 2)
        assert float(values.mean()) == pytest.approx(exact, rel=1e-4)
        assert form.var == pytest.approx(float(values.var(unbiased=False)), rel=1e-3)
    reinmax = closed_form(get("reinmax"), t, phi, 1)
    assert reinmax.mean == pytest.approx(exact)  # unbiased on quadratics at tau = 1
    st = closed_form(get("st"), t, phi, 1)
    assert st.mean == pytest.approx(2 * (p - t) * p * (1 - p))
    assert st.var == pytest.approx(4 * p**3 * (1 - p) ** 3)


def test_check_moment_statuses() -> None:
    assert check_moment(1.03, 0.001, 1.0, 0.0)["status"] == "ok"
    assert check_moment(1.2, 0.1, 1.0, 0.0)["status"] == "unresolved"
    failed = check_moment(1.2, 0.001, 1.0, 0.0)
    assert failed["status"] == "FAIL" and failed["rel_error"] == pytest.approx(0.2)
    assert check_moment(1e-33, 0.0, 0.0, 1e-30)["status"] == "ok"
    assert check_moment(1e-6, 0.0, 0.0, 1e-30)["status"] == "FAIL"


def test_unknown_estimator_is_a_value_error() -> None:
    config = dataclasses.replace(TINY, estimators=("st", "nope"))
    with pytest.raises(ValueError, match=r"Unknown estimator 'nope'.*'disarm'"):
        run_tasks(["toy"], BenchSettings(threads=1), configs={"toy": config})


# --------------------------------------------------------------------------- a tiny run


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any, dict[str, Any]]:
    out = tmp_path_factory.mktemp("toy")
    settings = BenchSettings(out=out, seed=3, threads=1)
    (result,) = run_tasks(["toy"], settings, configs={"toy": TINY}, progress=PlainProgress())
    document: dict[str, Any] = json.loads((out / "results.json").read_text())
    return out, result, document


def test_tiny_run_rows_are_complete_and_finite(tiny_run: tuple[Path, Any, dict[str, Any]]) -> None:
    _, result, document = tiny_run
    task = document["tasks"]["toy"]
    assert task["settings"]["replicas"] == TINY.replicas and task["wall_s"] > 0
    rows = task["results"]["rows"]
    assert [(r["phi"], r["estimator"]) for r in rows] == [
        (phi, name) for phi in TINY.phis for name in EXPECTED_NAMES
    ]
    evaluations = {r["estimator"]: r["evaluations"] for r in rows}
    assert evaluations["exact"] == 2 and evaluations["st"] == 1 and evaluations["reinforce"] == 1
    assert evaluations["rloo"] == evaluations["arm"] == evaluations["disarm"] == 2
    assert evaluations["rebar"] == evaluations["relax"] == 3
    for r in rows:
        assert r["replicas"] == TINY.replicas
        for key in ("mean", "se_mean", "var", "se_var", "bias", "rel_bias", "z", "exact"):
            assert _finite(r[key]), (r["estimator"], key, r[key])
        p = _sigmoid(r["phi"])
        assert r["exact"] == pytest.approx(p * (1 - p) * (1 - 2 * r["t"]))
    # Tables: one per (phi, t), the check summary, the curves.
    assert len(result.tables) == len(TINY.phis) * len(TINY.targets) + 2
    assert all(len(table.rows) == len(EXPECTED_NAMES) for table in result.tables[:2])


@pytest.mark.statistical
def test_tiny_run_matches_the_closed_forms(tiny_run: tuple[Path, Any, dict[str, Any]]) -> None:
    """False-failure rate: each mean is off by > 4.5 standard errors with probability 7e-6
    (about 40 such comparisons); variances at 2^15 replicas have relative standard errors
    below 1 %, so 5 % is more than 5 of them. Seeded, so deterministic."""
    rows = tiny_run[2]["tasks"]["toy"]["results"]["rows"]
    with_var = [r for r in rows if r["closed_form_var"] is not None]
    assert {r["estimator"] for r in with_var} >= {
        "st", "st_identity", "reinmax", "gst", "st_gumbel", "gumbel_rao", "gumbel_softmax",
        "reinforce", "rloo", "arm", "disarm", "exact", "reinforce(ema)", "reinforce(optimal)",
    }  # fmt: skip
    for r in with_var:
        assert r["var_check"]["status"] == "ok", (r["estimator"], r["phi"], r["var_check"])
        if r["closed_form_var"] > 0:
            assert abs(r["var"] / r["closed_form_var"] - 1) <= 0.05, r["estimator"]
    for r in rows:
        expected = r["closed_form_mean"]
        if expected is None:
            continue
        assert r["mean_check"]["status"] != "FAIL", (r["estimator"], r["phi"])
        off = abs(r["mean"] - expected)
        assert off <= max(0.05 * abs(expected), 4.5 * r["se_mean"] + 1e-15), r["estimator"]
    # Unbiased estimators show no bias; DisARM (one pair) is exact at phi = 0.
    for r in rows:
        if r["unbiased"]:
            assert abs(r["z"]) < 4.5, (r["estimator"], r["phi"], r["z"])
    (disarm,) = [r for r in rows if r["estimator"] == "disarm" and r["phi"] == 0.0]
    assert disarm["var_is_zero"] and disarm["var"] < 1e-28
    assert disarm["mean"] == pytest.approx(disarm["exact"], rel=1e-12)
    # Straight-through: unbiased at p = 1/2 but strongly biased at phi = -1, where its mean
    # 2(p-t)p(1-p) has the wrong sign.
    st = {r["phi"]: r for r in rows if r["estimator"] == "st"}
    assert abs(st[0.0]["z"]) < 4.5
    assert st[-1.0]["z"] < -20 and st[-1.0]["mean"] < 0 < st[-1.0]["exact"]
    assert st[-1.0]["mean_check"]["status"] == "ok"


def test_tiny_run_curves_and_figures(tiny_run: tuple[Path, Any, dict[str, Any]]) -> None:
    out, result, document = tiny_run
    data = document["tasks"]["toy"]["results"]
    curves = data["curves"]
    assert curves["steps"] == [0, 20, 40, 60] and curves["target"] == TINY.curve_target
    assert list(curves["estimators"]) == EXPECTED_NAMES
    for name, c in curves["estimators"].items():
        assert len(c["mean"]) == len(c["min"]) == len(c["max"]) == len(curves["steps"])
        assert len(c["final"]) == TINY.seeds, name
        values = [*c["mean"], *c["min"], *c["max"], *c["final"]]
        assert all(_finite(v) and 0 < v < 1 for v in values), name
        assert c["mean"][0] == 0.5 and c["ms_per_step"] > 0
        assert all(lo <= m <= hi for lo, m, hi in zip(c["min"], c["mean"], c["max"], strict=True))
    # The exact gradient is positive at every p, so Adam lowers p at every step.
    exact = curves["estimators"]["exact"]["mean"]
    assert all(b < a for a, b in itertools.pairwise(exact)) and exact[-1] < 0.45
    assert result.figures == ["toy_curves.png", "toy_variance.png"]
    assert set(data["figures"]) == set(result.figures)
    for figure in result.figures:
        assert (out / figure).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (out / "report.md").read_text()
    assert "closed-form var" in report and "![toy_curves.png](toy_curves.png)" in report
    assert "| disarm " in report and "DisARM's variance is at most" in report
    # each figure under the table it shows, with its caption
    assert report.index("### Optimisation at t =") < report.index("Figure: toy_curves.png — ")
    notes = document["tasks"]["toy"]["notes"]
    assert any(n.startswith("Closed forms:") and "0 failed" in n for n in notes)


def test_cli_runs_the_toy_task(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``hardgrad bench toy --quick --out DIR`` end to end, with the quick config shrunk."""
    small = dataclasses.replace(
        TINY, phis=(0.0,), replicas=2048, chunk=2048, estimators=("st", "disarm"), steps=10
    )
    entry = dataclasses.replace(TASKS.get("toy"), config=lambda quick: small)
    monkeypatch.setitem(TASKS._entries, "toy", entry)
    assert main(["bench", "toy", "--quick", "--out", str(tmp_path), "--threads", "1"]) == 0
    captured = capsys.readouterr()
    assert "## toy:" in captured.out and "| disarm " in captured.out
    assert "[toy" in captured.err
    document = json.loads((tmp_path / "results.json").read_text())
    assert document["quick"] is True
    rows = document["tasks"]["toy"]["results"]["rows"]
    assert [r["estimator"] for r in rows] == ["st", "disarm"]
    assert (tmp_path / "report.md").is_file() and (tmp_path / "toy_curves.png").is_file()


@pytest.mark.slow
def test_cli_quick_setting(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The real ``--quick`` setting through the command line (tens of seconds)."""
    assert main(["bench", "toy", "--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Closed-form checks per estimator" in out and "Optimisation at t = 0.499" in out
    document = json.loads((tmp_path / "results.json").read_text())
    task = document["tasks"]["toy"]
    assert task["settings"]["steps"] == 600 and document["quick"] is True
    rows = task["results"]["rows"]
    assert len(rows) == 3 * 2 * len(EXPECTED_NAMES)
    assert not [
        r for r in rows for k in ("mean_check", "var_check") if (r[k] or {}).get("status") == "FAIL"
    ]
    assert task["figures"] == ["toy_curves.png", "toy_variance.png"]
    for name in ("results.json", "report.md", "toy_curves.png", "toy_variance.png"):
        assert (tmp_path / name).stat().st_size > 0
    # Literature: unbiased estimators with a baseline reach the optimum; ST stalls at p ~ t.
    final = {n: c["final_mean"] for n, c in task["results"]["curves"]["estimators"].items()}
    assert final["disarm"] < 0.25 and final["rloo"] < 0.25 and final["exact"] < 0.1
    assert abs(final["st"] - 0.499) < 0.1
