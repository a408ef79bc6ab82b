"""QAT layers under ``torch.distributed``: two gloo ranks calibrate on different batches.

The activation quantizers initialise their scale from the first batch, averaged across
ranks (:class:`hardgrad.nn.Quantize`), so both replicas start from the same scales: the
first layer's equals the mean of the ranks' own LSQ initialisations. Then one
DistributedDataParallel step keeps every parameter identical across ranks. About 5 s
(two spawned processes); every collective times out after 60 s, and the run as a whole
after ``DEADLINE_S`` (the ranks are killed and the test fails). Ranks that saved their
results but hang at interpreter exit are killed after ``LINGER_S`` (see ``_run_ranks``).
"""

from __future__ import annotations

import datetime
import faulthandler
import math
import os
import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

import hardgrad as hg
from _spawn import run_ranks

pytestmark = pytest.mark.distributed

WORLD = 2
#: A hard bound on the whole spawned run (it takes about 5 s; a stuck rank fails the test).
DEADLINE_S = 120
#: How long ranks that have saved their results may take to exit before they are killed.
LINGER_S = 10


def _batch(rank: int) -> torch.Tensor:
    return torch.randn(6, 4, generator=torch.Generator().manual_seed(10 + rank)) * (rank + 1)


def _worker(rank: int, world: int, store: str, outdir: str) -> None:
    # A rank still working after 60 s writes its stack (the test shows it) and exits.
    with open(Path(outdir) / f"stack{rank}.txt", "w") as stacks:
        faulthandler.dump_traceback_later(60, exit=True, file=stacks)
        try:
            _train(rank, world, store, outdir)
        finally:
            faulthandler.cancel_dump_traceback_later()


def _train(rank: int, world: int, store: str, outdir: str) -> None:
    warnings.simplefilter("error")
    torch.set_num_threads(1)
    torch.distributed.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        torch.manual_seed(0)  # the same initial weights on every rank
        model = nn.Sequential(
            nn.Linear(4, 8), nn.ReLU(), nn.Unflatten(1, (8, 1, 1)), nn.Conv2d(8, 2, 1), nn.Flatten()
        )
        hg.nn.quantize_(model, weight_bits=4, act_bits=4, optimizer=None)  # optimizer made below
        x = _batch(rank)
        with torch.no_grad():
            model(x)  # calibration: the activation scales, averaged across ranks
        scales = {n: p.detach().clone() for n, p in model.named_parameters() if "scale" in n}
        wrapped = nn.parallel.DistributedDataParallel(model)
        optimizer = torch.optim.SGD(wrapped.parameters(), lr=0.1)
        wrapped(x).square().mean().backward()
        optimizer.step()
        after = {n: p.detach().clone() for n, p in model.named_parameters()}
        partial = Path(outdir) / f"rank{rank}.partial"
        torch.save({"scales": scales, "after": after}, partial)
        os.replace(partial, Path(outdir) / f"rank{rank}.pt")  # complete, or absent
    finally:
        torch.distributed.destroy_process_group()


def _run_ranks(tmp_path: Path) -> None:
    """Spawn the ranks and wait for their results (:func:`_spawn.run_ranks`: ranks stuck at
    exit after saving are killed, a run past ``DEADLINE_S`` fails). A rank still working
    after 60 s writes its stack to ``stack<rank>.txt`` and exits."""
    results = [tmp_path / f"rank{r}.pt" for r in range(WORLD)]
    run_ranks(
        _worker,
        (WORLD, str(tmp_path / "store"), str(tmp_path)),
        WORLD,
        lambda: all(path.exists() for path in results),
        linger_s=LINGER_S,
        deadline_s=DEADLINE_S,
    )


@pytest.mark.slow
def test_ranks_agree_on_scales_initialised_from_different_batches(tmp_path):
    _run_ranks(tmp_path)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=True) for r in range(WORLD)]
    first, second = ranks
    assert set(first["scales"]) == {
        "0.weight_quantizer.scale",
        "0.act_quantizer.scale",
        "3.weight_quantizer.scale",
        "3.act_quantizer.scale",
    }
    for name, value in first["scales"].items():
        assert torch.equal(value, second["scales"][name]), name
    own = [2 * _batch(r).abs().mean() / math.sqrt(7) for r in range(WORLD)]
    expected = torch.stack(own).mean().reshape(1)  # one scale, stored as (1,)
    torch.testing.assert_close(first["scales"]["0.act_quantizer.scale"], expected)
    assert not torch.allclose(own[0], own[1])  # the batches did differ
    for name, value in first["after"].items():
        assert torch.equal(value, second["after"][name]), name
