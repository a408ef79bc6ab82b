r"""End to end under ``DistributedDataParallel``: 2 gloo processes against 1 process.

A small model (``Linear -> hg.quantize`` with a learned LSQ scale ``-> Linear ->
hg.bernoulli`` with the straight-through estimator ``-> Linear``) gives the logits of 4
Bernoulli bits per example; the loss is the mean over examples of
``hg.expectation(f, logits, estimator=est)`` with ``f(b) = sum_j (b_j - t_j)^2`` and a
learned target ``t`` (a parameter of ``f``). It trains for ``STEPS`` SGD steps (one
optimizer over the model's and the estimator's parameters, API.md section 3) with each
stateful estimator: ``Reinforce(baseline="ema")``, ``REBAR``, ``RELAX`` with a
control-variate network that each rank initialises differently, and that RELAX again as a
submodule of the module DDP wraps. Two gloo ranks train on their halves of a global batch
of ``B`` examples; one process (the test process, no process group) trains on the whole
batch. Everything is float64.

**What must match, and why.** Write ``W`` for the world size, ``S_r`` for rank ``r``'s
``B/W`` examples and ``l_i`` for example ``i``'s expectation. The single process
minimises ``L = (1/B) sum_i l_i``; rank ``r`` minimises ``L_r = (W/B) sum_{i in S_r} l_i``
and ``(1/W) sum_r L_r = L``.

* *Noise.* Every random draw must be the same in both runs, which no per-rank seed can
  give (a rank's stream would depend on ``W``). The sampler and the REBAR/RELAX
  expectations draw per example: each example has its own generator, seeded from the step
  and the example's *global* index, and is its own call (one row of logits). The EMA
  baseline moves once per call, so ``Reinforce`` must see the whole shard in one call; with
  one sample per call its uniforms, shaped ``(1, B/W, 4)``, are a contiguous slice of the
  global batch's ``(1, B, 4)``, so every rank seeds one generator for the step and first
  draws (and discards) the uniforms of the ranks before it. The test checks this premise
  directly: every input ``f`` received (hard samples and REBAR's relaxed ones) and every
  sampled bit is the same in both runs, per example.
* *The model and the losses.* Given the same noise and parameters every ``l_i`` and its
  gradient are the same deterministic function (hard ops included), DDP averages the
  ranks' gradients, ``(1/W) sum_r grad L_r = grad L``, so each SGD step is the same: the
  parameters after training match to float64 rounding (summation order), and the mean of
  the ranks' losses is the single loss at every step.
* *The EMA baseline.* A rank's update uses the mean of ``f`` over its ``1 x B/W`` values,
  averaged across ranks: for equal shards the mean of rank means is the global mean, so the
  state matches (the average is taken in ``f``'s precision, then stored in float32: equal
  up to one float32 rounding of the same float64 number).
* *REBAR/RELAX parameters.* They receive the gradient of ``V = sum (w g_hat)^2``, ``w``
  the gradient flowing into the expectation's value. On rank ``r`` the value of example
  ``i`` gets ``w = W/B`` (its share of ``L_r``), in the single process ``1/B``: ``W`` times
  less. ``V`` is quadratic in ``w``, so a rank's variance gradient ``G_r = W^2 sum_{i in
  S_r} grad_phi (g_hat_i / B)^2``, and the single process's ``G = sum_i grad_phi (g_hat_i /
  B)^2 = (1/W^2) sum_r G_r``: the SUM over ranks divided by ``W^2``, not the mean (which is
  ``W`` times too large). The estimators reduce this way (the DDP convention that
  gradients are averaged across ranks); the test asserts that the trained parameters match
  the single process's, and checks that they moved far more than the tolerance, so a
  factor ``W`` would show.
* *Across ranks.* Model and estimator state are bitwise identical on the two ranks
  (RELAX's network starts from different weights on each rank: rank 0's, broadcast on
  first use, must win, and the single process starts from rank 0's).
* *Inside DDP.* RELAX as a submodule of the wrapped module: DDP broadcasts it at
  construction and averages its gradients, which the estimator has already reduced, so
  they are the same on both ranks and averaging leaves them unchanged: the run equals the
  one with RELAX outside DDP.

Runs in about 10 s on two idle cores, 20 s on loaded ones (two spawned processes and the
test process, one thread each). The processes meet through a
file store in the test's temporary folder (no port to find) and every collective times
out after 60 s, so a hang fails instead of stalling CI.
"""

from __future__ import annotations

import datetime
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor

import hardgrad as hg
from _spawn import run_ranks
from hardgrad.estimators import REBAR, RELAX, Reinforce

pytestmark = pytest.mark.distributed

F64 = torch.float64
WORLD, B, IN, HIDDEN, D, STEPS = 2, 8, 3, 5, 4, 3
LR, MOMENTUM = 0.3, 0.5
KINDS = ("reinforce_ema", "rebar", "relax", "relax_in_ddp")
SAMPLER, EXPECTATION = 0, 1  # the two noise streams of an example
# float64 rounding, accumulated over a few steps (measured differences: below 1e-15)
RTOL, ATOL = 1e-10, 1e-12


# --------------------------------------------------------------------------- the training


def _generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _example_seed(step: int, index: int, stream: int) -> int:
    """A seed for one example's draws: from the step and its global index, never the rank."""
    return 1_000 + 2 * (step * B + index) + stream


def _inputs(step: int) -> Tensor:
    """The global batch of step ``step`` (every process makes all of it)."""
    return torch.randn(B, IN, generator=_generator(100 + step), dtype=F64)


class _Model(torch.nn.Module):
    """``Linear -> hg.quantize (learned scale) -> Linear -> hg.bernoulli -> Linear``: the
    logits of ``D`` bits per example; ``target`` is a parameter of the objective."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Linear(IN, HIDDEN, dtype=F64)
        self.middle = torch.nn.Linear(HIDDEN, D, dtype=F64)
        self.head = torch.nn.Linear(D, D, dtype=F64)
        self.scale = torch.nn.Parameter(torch.tensor(0.25, dtype=F64))
        self.target = torch.nn.Parameter(torch.linspace(0.2, 0.8, D, dtype=F64))
        g = _generator(0)  # the same initial weights in every process, global RNG untouched
        with torch.no_grad():
            for layer in (self.encoder, self.middle, self.head):
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=g, dtype=F64))
                layer.bias.copy_(0.3 * torch.randn(layer.bias.shape, generator=g, dtype=F64))

    def forward(
        self, x: Tensor, indices: list[int], step: int, record: dict[str, Tensor]
    ) -> Tensor:
        h = hg.quantize(self.encoder(x), self.scale, quant_min=-8, quant_max=7)
        logits = self.middle(h)
        rows = []
        for k, i in enumerate(indices):  # one generator per example
            g = _generator(_example_seed(step, i, SAMPLER))
            rows.append(hg.bernoulli(logits[k : k + 1], estimator="st", generator=g))
            record[f"{step}/{i}/bits"] = rows[-1].detach().clone()
        return self.head(2 * torch.cat(rows) - 1)


class _Holder(torch.nn.Module):
    """The model with the estimator as a submodule, for the estimator-inside-DDP run."""

    def __init__(self, model: _Model, estimator: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.estimator = estimator

    def forward(self, *args: Any) -> Tensor:
        return self.model(*args)


def _net(seed: int) -> torch.nn.Module:
    g = _generator(seed)
    net = torch.nn.Sequential(
        torch.nn.Linear(D, 6, dtype=F64),
        torch.nn.Tanh(),
        torch.nn.Linear(6, 1, dtype=F64),
        torch.nn.Flatten(-2),
    )
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(0.5 * torch.randn(p.shape, generator=g, dtype=F64))
    return net


def _estimator(kind: str, rank: int) -> torch.nn.Module:
    if kind == "reinforce_ema":
        return Reinforce(baseline="ema", decay=0.6)
    if kind == "rebar":
        return REBAR(tau=0.6, scale=0.8).double()
    return RELAX(_net(50 + rank), tau=0.6, scale=0.8).double()  # rank 0's must win


def _objective(target: Tensor, indices: list[int], step: int, record: dict[str, list[Tensor]]):
    """``f(b) = sum_j (b_j - t_j)^2``, recording each example's inputs in call order."""

    def f(b: Tensor) -> Tensor:
        for k, i in enumerate(indices):
            record.setdefault(f"{step}/{i}/f", []).append(b[:, k].detach().clone())
        return (b - target).square().sum(-1)

    return f


def _train(kind: str, rank: int, world: int) -> dict[str, Any]:
    """Train on this rank's shard (the whole batch for ``world == 1``); the results."""
    model = _Model()
    est = _estimator(kind, rank)
    initial = {k: v.detach().clone() for k, v in est.state_dict().items()}  # before DDP
    module: torch.nn.Module = _Holder(model, est) if kind == "relax_in_ddp" else model
    wrapped = torch.nn.parallel.DistributedDataParallel(module) if world > 1 else module
    optimizer = torch.optim.SGD([*model.parameters(), *est.parameters()], lr=LR, momentum=MOMENTUM)
    per = B // world
    indices = list(range(rank * per, (rank + 1) * per))
    bits: dict[str, Tensor] = {}
    seen: dict[str, list[Tensor]] = {}
    losses = []
    for step in range(STEPS):
        optimizer.zero_grad()
        logits = wrapped(_inputs(step)[indices], indices, step, bits)
        if kind == "reinforce_ema":  # one call: the shard's slice of the global stream
            g = _generator(10_000 + step)
            torch.rand(rank * per * D, generator=g, dtype=F64)  # the lower ranks' draws
            f = _objective(model.target, indices, step, seen)
            values = hg.expectation(f, logits, estimator=est, num_samples=1, generator=g)
        else:  # one call per example, with the example's own generator
            values = torch.cat(
                [
                    hg.expectation(
                        _objective(model.target, [i], step, seen),
                        logits[k : k + 1],
                        estimator=est,
                        num_samples=2,
                        generator=_generator(_example_seed(step, i, EXPECTATION)),
                    )
                    for k, i in enumerate(indices)
                ]
            )
        loss = values.mean()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().clone())
    return {
        "model": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "estimator": {k: v.detach().clone() for k, v in est.state_dict().items()},
        "initial": initial,
        "losses": torch.stack(losses),
        "bits": bits,
        "seen": {k: torch.stack(v) for k, v in seen.items()},
    }


def _worker(rank: int, world: int, store: str, outdir: str) -> None:
    warnings.simplefilter("error")
    torch.set_num_threads(1)  # the ranks share the machine's cores
    torch.distributed.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        results = {kind: _train(kind, rank, world) for kind in KINDS}
        torch.save(results, Path(outdir) / f"rank{rank}.pt")
    finally:
        torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``{"single": {kind: results}, "ranks": [{kind: results}, ...]}``."""
    outdir = tmp_path_factory.mktemp("ddp_e2e")
    run_ranks(
        _worker,
        (WORLD, str(outdir / "store"), str(outdir)),
        WORLD,
        lambda: all((outdir / f"rank{r}.pt").exists() for r in range(WORLD)),
    )
    ranks = [torch.load(outdir / f"rank{r}.pt", weights_only=True) for r in range(WORLD)]
    assert not torch.distributed.is_initialized()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # many tiny ops: thread hand-offs only slow them down
    try:
        single = {kind: _train(kind, rank=0, world=1) for kind in KINDS}
    finally:
        torch.set_num_threads(threads)
    return {"single": single, "ranks": ranks}


def _close(actual: Tensor, expected: Tensor, what: str) -> None:
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL, msg=lambda m: f"{what}: {m}")


# --------------------------------------------------------------------------- the tests


@pytest.mark.parametrize("kind", KINDS)
def test_every_draw_is_the_same_as_in_one_process(runs, kind):
    """The premise of the other tests: per example, the sampled bits and every input of
    ``f`` (hard and relaxed) are the same in the 2-rank run as in the single process."""
    single = runs["single"][kind]
    for part in ("bits", "seen"):
        merged: dict[str, Tensor] = {}
        for rank in runs["ranks"]:
            assert not set(merged) & set(rank[kind][part])  # the shards are disjoint
            merged.update(rank[kind][part])
        assert set(merged) == set(single[part])
        assert len(merged) == STEPS * B
        for key, value in single[part].items():
            _close(merged[key], value, f"{part} {key}")
    # f saw 3 inputs per REBAR/RELAX sample (hard, two relaxed), 1 for REINFORCE
    per_call = 1 if kind == "reinforce_ema" else 3
    assert all(v.shape[0] == per_call for v in single["seen"].values())


@pytest.mark.parametrize("kind", KINDS)
def test_model_and_losses_match_one_process(runs, kind):
    single = runs["single"][kind]
    initial = _Model().state_dict()
    for rank in runs["ranks"]:
        for key, value in single["model"].items():
            _close(rank[kind]["model"][key], value, f"model {key}")
            assert (value - initial[key]).abs().max() > 1e-3, f"{key} did not train"
    mean_loss = sum(rank[kind]["losses"] for rank in runs["ranks"]) / WORLD
    _close(mean_loss, single["losses"], "mean of the ranks' losses")


@pytest.mark.parametrize("kind", KINDS)
def test_estimator_state_matches_one_process(runs, kind):
    single = runs["single"][kind]["estimator"]
    initial = runs["single"][kind]["initial"]
    for rank in runs["ranks"]:
        state = rank[kind]["estimator"]
        assert list(state) == list(single)
        for key, value in single.items():
            if kind == "reinforce_ema" and key == "ema":  # float32 storage of equal means
                torch.testing.assert_close(state[key], value, rtol=1.2e-7, atol=0)
            else:
                _close(state[key], value, f"estimator {key}")
    if kind == "reinforce_ema":
        assert int(single["steps"]) == STEPS and float(single["ema"]) > 0
        return
    # Trained far beyond the tolerance: a variance gradient W times too large (the mean
    # over ranks instead of sum / W^2) would leave them far apart.
    for key, value in single.items():
        assert (value - initial[key]).abs().max() > 1e-4, f"{key} did not train"


@pytest.mark.parametrize("kind", KINDS)
def test_state_is_identical_across_ranks(runs, kind):
    first, second = (rank[kind] for rank in runs["ranks"])
    for part in ("model", "estimator"):
        assert list(first[part]) == list(second[part])
        for key in first[part]:
            assert torch.equal(first[part][key], second[part][key]), f"{part} {key}"
    if kind.startswith("relax"):  # the ranks did start from different networks
        key = "control_variate.0.weight"
        assert not torch.equal(first["initial"][key], second["initial"][key])


def test_estimator_inside_ddp_is_the_same_as_outside(runs):
    """RELAX as a submodule of the DDP module: DDP averages gradients the estimator has
    already made identical, so nothing changes (W = 2: ``(x + x) / 2 == x`` exactly)."""
    for rank in runs["ranks"]:
        inside, outside = rank["relax_in_ddp"], rank["relax"]
        for part in ("model", "estimator"):
            for key in outside[part]:
                _close(inside[part][key], outside[part][key], f"{part} {key}")
