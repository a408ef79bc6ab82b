"""The ``vq`` benchmark: a tiny run end to end (every variant, the table and the notes), the
residual VQ rows and their claims."""

from __future__ import annotations

import itertools
import json
import math

from hardgrad.bench import TASKS, BenchSettings, run_tasks
from hardgrad.bench.report import PlainProgress
from hardgrad.bench.vq import VARIANTS, VQConfig
from hardgrad.bench.vq._residual import STAGE_KEYS
from hardgrad.bench.vq._verdict import residual_claims


def test_tiny_run(tmp_path, capsys):
    assert "vq" in TASKS.names()
    config = VQConfig(steps=5, seeds=2, plot=False)
    (result,) = run_tasks(
        ["vq"], BenchSettings(quick=True, out=tmp_path), configs={"vq": config},
        progress=PlainProgress(),
    )  # fmt: skip
    assert [row[0] for row in result.tables[0].rows] == list(VARIANTS)
    assert any("Rotation trick vs STE" in note for note in result.notes)
    assert any("FSQ" in note for note in result.notes)
    for row in result.data["rows"]:
        assert 0 <= row["usage"]["mean"] <= 1 and row["ms_per_step"]["mean"] > 0
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved


def test_residual_rows(tmp_path):
    """Residual VQ rows per stage count, both gradient conventions and quantizer dropout,
    measured per stage, with their verdict claims and figure."""
    from hardgrad.bench.verdict import derive

    config = VQConfig(
        steps=20, seeds=2, variants=("STE",), residual_stages=(1, 2, 4), residual_compare=2
    )
    (result,) = run_tasks(
        ["vq"], BenchSettings(quick=True, out=tmp_path), configs={"vq": config},
        progress=PlainProgress(),
    )  # fmt: skip
    rows = result.data["residual"]
    settings = [(r["stages"], r["gradient"], r["dropout"]) for r in rows]
    assert settings == [
        (1, "total", False), (2, "total", False), (4, "total", False),
        (2, "per_stage", False), (2, "total", True),
    ]  # fmt: skip
    assert [row[0] for row in result.tables[1].rows] == ["RVQ 1", "RVQ 2", "RVQ 4"] + 2 * ["RVQ 2"]
    for r in rows:
        assert r["ms_per_step"]["mean"] > 0 and len(r["runs"]) == 2
        for run in r["runs"]:
            assert len(run["stage_mse"]) == r["stages"] == len(run["stage_usage"])
            assert all(math.isfinite(v) for key in STAGE_KEYS for v in run[key])
            assert run["recon_mse"] == run["stage_mse"][-1]
            assert all(0 < u <= 1 for u in run["stage_usage"])
            assert all(1 <= p <= config.num_codes for p in run["stage_perplexity"])
            # each stage takes its residual's nearest code, and after k-means initialisation
            # on that residual a code near 0 is there: the residual shrinks stage by stage
            assert all(b <= a for a, b in itertools.pairwise(run["stage_residual"]))
            assert run["stage_residual"][0] <= run["latent_norm"]
            # the decoder's error need not fall (it was trained on all n stages' sum only),
            # but on these data it does, for every model and seed (the verdict's claim)
            assert all(b <= a for a, b in itertools.pairwise(run["stage_mse"]))
    verdict = derive("vq", result.summary, result.data, result.settings)
    texts = {c.text: c.status for c in verdict.claims}
    assert texts["each residual stage lowers test recon MSE"] == "held"
    assert "more stages, lower final recon MSE" in texts
    assert any(t.startswith("gradient total (EnCodec) and per-stage") for t in texts)
    assert any(t.startswith("quantizer dropout lowers") for t in texts)
    assert any(note.startswith("Residual VQ, each residual stage") for note in result.notes)
    if "vq_residual.png" in result.figures:  # (matplotlib installed)
        assert (tmp_path / "vq_residual.png").stat().st_size > 0


def _row(stages, gradient, dropout, mse, std=0.0, seeds=2):
    stats = [{"mean": m, "std": std} for m in mse]
    return {
        "label": f"RVQ {stages}", "stages": stages, "gradient": gradient, "dropout": dropout,
        "seeds": seeds, "runs": [{"stage_mse": list(mse)}] * seeds,
        "recon_mse": stats[-1], "stage_mse": stats,
    }  # fmt: skip


def test_residual_claims():
    """The residual claims from hand-made rows: held, not held and unresolved."""
    rows = [
        _row(1, "total", False, [0.02]),
        _row(2, "total", False, [0.021, 0.015]),
        _row(2, "per_stage", False, [0.02, 0.01]),
        _row(2, "total", True, [0.018, 0.016]),
    ]
    claims = {
        text: (status, detail) for text, status, detail in residual_claims({"residual": rows}, {})
    }
    assert claims["each residual stage lowers test recon MSE"][0] == "held"
    assert claims["more stages, lower final recon MSE"][0] == "held"
    (grad,) = [v for t, v in claims.items() if t.startswith("gradient total")]
    assert grad == ("not held", "recon MSE 15.00 vs 10.00 e-3, 2 seeds")
    (drop,) = [v for t, v in claims.items() if t.startswith("quantizer dropout")]
    assert drop[0] == "held" and "1: 18.00 vs 21.00" in drop[1]
    rows[1] = _row(2, "total", False, [0.021, 0.022], std=0.01)  # a stage that raises the error
    claims = {text: status for text, status, _ in residual_claims({"residual": rows}, {})}
    assert claims["each residual stage lowers test recon MSE"] == "not held"
    assert claims["more stages, lower final recon MSE"] == "unresolved"  # within the spread
    assert residual_claims({"rows": []}, {}) == []
