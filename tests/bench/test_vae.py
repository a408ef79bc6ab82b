"""The ``vae-bernoulli`` and ``vae-categorical`` benchmarks: the ELBO's pieces, the
diagnostics, tiny in-process runs (digits and IDX files) and a 2-process DDP run."""

from __future__ import annotations

import itertools
import math
import multiprocessing as mp
import os
import socket
from pathlib import Path
from typing import Any

import pytest
import torch

from _spawn import run_ranks
from hardgrad.bench import BenchSettings, run_tasks
from hardgrad.bench._vae import (
    VAE,
    diagnose,
    estimator_names,
    exact_reference,
    kl_bernoulli,
    kl_categorical,
    make_estimator,
    samples_for,
)
from hardgrad.bench.data import write_idx
from hardgrad.bench.report import PlainProgress
from hardgrad.bench.vae_bernoulli import BernoulliVAEConfig
from hardgrad.bench.vae_categorical import CategoricalVAEConfig
from hardgrad.estimators import ESTIMATORS, Exact

TINY_BERNOULLI = BernoulliVAEConfig(
    latent_bits=4,
    hidden=16,
    steps=6,
    batch=16,
    curve_points=2,
    checkpoints=2,
    diag_batch=4,
    num_draws=8,
    curve_samples=2,
    test_samples=2,
)
TINY_CATEGORICAL = CategoricalVAEConfig(
    configurations=((2, 3),),
    enc_hidden=(16,),
    dec_hidden=(16,),
    steps=6,
    batch=16,
    curve_points=2,
    checkpoints=2,
    diag_batch=3,
    num_draws=8,
    curve_samples=2,
    test_samples=2,
)


def _quiet() -> PlainProgress:
    import io

    return PlainProgress(io.StringIO())


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


# --------------------------------------------------------------------------- pieces


def test_kl_bernoulli_matches_enumeration() -> None:
    logits = torch.tensor([[0.3, -1.2, 2.0], [-0.5, 0.0, 4.0]], dtype=torch.float64)
    q = torch.sigmoid(logits)
    expected = torch.zeros(2, dtype=torch.float64)
    for bits in itertools.product((0.0, 1.0), repeat=3):
        b = torch.tensor(bits, dtype=torch.float64)
        prob = (q * b + (1 - q) * (1 - b)).prod(-1)
        expected += prob * (prob.log() - 3 * math.log(0.5))
    torch.testing.assert_close(kl_bernoulli(logits), expected)


def test_kl_categorical_matches_enumeration() -> None:
    logits = torch.tensor([[[0.3, -1.2, 2.0], [1.0, 0.0, -3.0]]], dtype=torch.float64)
    p = torch.softmax(logits, -1)
    expected = torch.zeros(1, dtype=torch.float64)
    for i, j in itertools.product(range(3), repeat=2):
        prob = p[:, 0, i] * p[:, 1, j]
        expected += prob * (prob.log() - 2 * math.log(1 / 3))
    torch.testing.assert_close(kl_categorical(logits), expected)
    # A uniform q has no KL to the uniform prior.
    assert float(kl_categorical(torch.zeros(1, 4, 5))) == pytest.approx(0.0, abs=1e-6)


def test_equal_evaluations() -> None:
    for name in ("st", "rloo", "arm", "disarm", "reinforce", "gumbel_rao"):
        assert samples_for(make_estimator(name, 0), 2) == (2, 2), name
    for name in ("rebar", "relax"):  # three evaluations per draw: one draw
        assert samples_for(make_estimator(name, 0), 2) == (1, 3), name
    assert "exact" not in estimator_names("bernoulli")
    assert "arm" not in estimator_names("categorical")
    assert "disarm" in estimator_names("bernoulli")


def test_exact_reference_has_zero_bias_and_rloo_is_unbiased() -> None:
    torch.manual_seed(0)
    model = VAE(8, 2, 3, (8,), (8,))
    x = torch.rand(3, 8)
    reference = exact_reference(model, x)
    assert reference.shape == (3, 2, 3) and float(reference.norm()) > 0
    exact = diagnose(model, Exact(), x, None, 4, 0, reference)
    assert exact["bias"] == pytest.approx(0.0, abs=1e-5)  # float32 rounding
    assert exact["cosine"] == pytest.approx(1.0, abs=1e-6)
    assert exact["var"] == pytest.approx(0.0, abs=1e-10)
    # RLOO is unbiased: its bias is at the level of its noise floor std / sqrt(draws);
    # the straight-through estimator is not.
    rloo = diagnose(model, make_estimator("rloo", 0), x, 2, 4000, 1, reference)
    assert rloo["bias"] < 5 * rloo["bias_floor"]
    st = diagnose(model, make_estimator("st", 0), x, 2, 4000, 1, reference)
    assert st["bias"] > 5 * st["bias_floor"]


# --------------------------------------------------------------------------- runs


def test_vae_bernoulli_tiny_run(tmp_path: Path) -> None:
    settings = BenchSettings(threads=1, out=tmp_path)
    (result,) = run_tasks(
        ["vae-bernoulli"], settings, configs={"vae-bernoulli": TINY_BERNOULLI}, progress=_quiet()
    )
    runs = result.data["runs"]
    expected = [
        n
        for n, c in ESTIMATORS.items()
        if n != "exact" and "bernoulli" in getattr(c, "dists", ("bernoulli",))
    ]
    assert list(runs) == expected
    for name, r in runs.items():
        assert _finite(r["train_neg_elbo"]) and _finite(r["test_neg_elbo"]), name
        assert r["test_neg_elbo"] > 0
        assert [d["step"] for d in r["diagnostics"]] == [0, 6]
        assert all(d["var"] >= 0 and _finite(d["var"]) for d in r["diagnostics"]), name
    assert runs["rebar"]["evaluations"] == 3 and runs["disarm"]["evaluations"] == 2
    assert len(result.tables) == 2 and len(result.tables[0].rows) == len(expected)
    assert any("DisARM vs ARM" in n for n in result.notes)
    for figure in ("vae_bernoulli_curves.png", "vae_bernoulli_variance.png"):
        assert figure in result.figures and (tmp_path / figure).stat().st_size > 1000
    assert (tmp_path / "results.json").is_file()


def test_vae_categorical_tiny_run(tmp_path: Path) -> None:
    settings = BenchSettings(threads=1, out=tmp_path)
    (result,) = run_tasks(
        ["vae-categorical"],
        settings,
        configs={"vae-categorical": TINY_CATEGORICAL},
        progress=_quiet(),
    )
    config = result.data["configurations"]["2x3"]
    expected = estimator_names("categorical")
    assert list(config["runs"]) == expected
    for name, r in config["runs"].items():
        assert _finite(r["test_neg_elbo"]) and _finite(r["train_neg_elbo"]), name
    for per in config["shared"].values():
        for name, d in per.items():
            assert _finite(d["bias"]) and _finite(d["std"]) and -1 <= d["cosine"] <= 1, name
    assert any("Gumbel-Rao" in n for n in result.notes)
    assert any("ReinMax" in n for n in result.notes)
    for figure in ("vae_categorical_curves.png", "vae_categorical_bias.png"):
        assert figure in result.figures and (tmp_path / figure).stat().st_size > 1000


def test_vae_bernoulli_on_idx_files(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    for split, count in (("train", 48), ("t10k", 16)):
        images = torch.randint(0, 256, (count, 6, 5), generator=g, dtype=torch.int64)
        write_idx(tmp_path / f"{split}-images-idx3-ubyte", images.to(torch.uint8))
        labels = torch.randint(0, 10, (count,), generator=g, dtype=torch.int64)
        write_idx(tmp_path / f"{split}-labels-idx1-ubyte", labels.to(torch.uint8))
    settings = BenchSettings(threads=1, data=tmp_path)
    config = BernoulliVAEConfig(
        latent_bits=3, hidden=0, steps=4, batch=8, estimators=("disarm", "st"),
        curve_points=2, checkpoints=2, diag_batch=4, num_draws=4, curve_samples=2,
        test_samples=2, plot=False,
    )  # fmt: skip
    (result,) = run_tasks(
        ["vae-bernoulli"], settings, configs={"vae-bernoulli": config}, progress=_quiet()
    )
    assert result.data["dataset"] == f"idx:{tmp_path}"
    # 30 pixels with a Bernoulli likelihood: -ELBO of random images is about 30 log 2.
    for r in result.data["runs"].values():
        assert 10 < r["test_neg_elbo"] < 60


# --------------------------------------------------------------------------- distributed


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ddp_worker(rank: int, world: int, port: int, out: Any) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world)
    )
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    try:
        from hardgrad.bench import vae_bernoulli  # registers the task in this process

        config = BernoulliVAEConfig(
            latent_bits=4, hidden=8, steps=5, batch=8, estimators=("disarm", "rebar", "st"),
            curve_points=2, checkpoints=2, diag_batch=4, num_draws=4, curve_samples=2,
            test_samples=2, plot=False,
        )  # fmt: skip
        assert vae_bernoulli.run is not None
        (result,) = run_tasks(
            ["vae-bernoulli"],
            BenchSettings(threads=1),
            configs={"vae-bernoulli": config},
            progress=_quiet(),
        )
        out[rank] = {
            "digests": dict(result.data["parameter_digests"]),
            "world": result.data["world_size"],
            "test": {n: r["test_neg_elbo"] for n, r in result.data["runs"].items()},
        }
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
@pytest.mark.distributed
def test_vae_bernoulli_ddp_ranks_end_identical() -> None:
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager:
        out = manager.dict()
        run_ranks(_ddp_worker, (2, _free_port(), out), 2, lambda: len(out) == 2)
        results = dict(out)
    assert results[0]["world"] == 2 and results[1]["world"] == 2
    assert results[0]["digests"] == results[1]["digests"]  # bitwise-equal parameters
    assert len(set(results[0]["digests"].values())) == 3  # the estimators trained differently
    assert results[0]["test"] == results[1]["test"]
