r"""Every ``hardgrad.nn`` module under ``torch.distributed.fsdp.fully_shard`` (FSDP2) and
per-channel LSQ scales under ``DistributedDataParallel`` wrapped before the first batch.

**Without a process group** (fast): no ``hg.nn`` module has a 0-d parameter (FSDP2 refuses
them: one learned number is stored as ``(1,)`` and used as 0-d); the ``(1,)`` storage gives
the 0-d values and gradients bit for bit; checkpoints with 0-d entries load into the new
modules and ``(1,)`` entries into modules holding a 0-d parameter; every module builds on
the meta device and gets its values from ``to_empty`` + ``reset_parameters``.

**Two gloo ranks on the CPU** (one spawned run for all of it, ~10-20 s): each module of
:data:`SPECS` (one entry per ``hg.nn`` module class at least, checked against
``hg.nn.__all__``) sits between two ``Linear`` layers; the module (if it has parameters)
and the whole model are ``fully_shard``-ed, and ``STEPS`` SGD steps with momentum run on
each rank's half of a global float64 batch. The test process trains the same model
without a process group on the loss ``(1/W) sum_r L_r`` (rank ``r``'s shard, in the same
call order and with the same seeds: every random draw is the one rank ``r`` made), which
is what the ranks' averaged gradients descend: the trained parameters must match to
float64 rounding (``RTOL``), and they must have moved far beyond it. Quantizers are
initialised before sharding (``init_scale``, or one calibration batch that every rank and
the test process see whole). A trained FSDP model's checkpoints, the full state dict
(``get_model_state_dict``) and a sharded ``torch.distributed.checkpoint`` save, load into a
plain module. A per-channel ``Quantize`` with ``num_channels`` inside DDP, wrapped before
its first batch (which sets the scale from the ranks' batches, averaged), trains to the
single process's parameters (one call on the whole batch: the mean over equal shards);
without ``num_channels``, and uninitialised under ``fully_shard``, the first batch raises
naming what to do.
"""

from __future__ import annotations

import datetime
import math
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn

import hardgrad as hg
from _spawn import run_ranks

F64 = torch.float64
WORLD, B, IN, H, OUT, STEPS = 2, 8, 4, 6, 3, 3
LR, MOMENTUM = 0.2, 0.5
# float64 rounding over a few steps (the summation order of the averaged gradients)
RTOL, ATOL = 1e-10, 1e-12
#: Specs whose trained FSDP model is also checkpointed (full state dict and DCP).
CHECKPOINTED = ("QuantLinear", "Quantize", "PACT", "LIF")

MODULES = sorted(
    name
    for name in hg.nn.__all__
    if isinstance(getattr(hg.nn, name), type) and issubclass(getattr(hg.nn, name), nn.Module)
)


# --------------------------------------------------------------------------- the models


def _plain(module: nn.Module, h: Tensor) -> tuple[Tensor, Tensor | float]:
    return module(h), 0.0


def _tuple(module: nn.Module, h: Tensor) -> tuple[Tensor, Tensor | float]:
    y, *rest = module(h)  # (y, indices) or (y, indices, loss)
    return y, rest[1] if len(rest) > 1 else 0.0


def _gate(module: nn.Module, h: Tensor) -> tuple[Tensor, Tensor | float]:
    return module(h), 0.01 * module.l0()


def _spiking(module: nn.Module, h: Tensor) -> tuple[Tensor, Tensor | float]:
    mem, total = None, 0.0
    for _ in range(3):  # one step at a time through forward (FSDP's hooks run on it)
        spikes, mem = module(h, mem)
        total = total + spikes
    return total + mem, 0.0


def _image(module: nn.Module, h: Tensor) -> tuple[Tensor, Tensor | float]:
    return module(h.reshape(-1, H, 1, 1)).flatten(1), 0.0


#: name -> (the module, how the model calls it, calibrate before sharding).
#: A module added to hardgrad.nn without an entry fails test_every_module_has_a_spec.
SPECS: dict[str, tuple[Callable[[], nn.Module], Callable[..., Any], bool]] = {
    "Round": (lambda: hg.nn.Round(), _plain, False),
    "Sign": (lambda: hg.nn.Sign(surrogate="tanh"), _plain, False),
    "Binarize": (lambda: hg.nn.Binarize(), _plain, False),
    "Heaviside": (lambda: hg.nn.Heaviside(surrogate="sigmoid"), _plain, False),
    "Clamp": (lambda: hg.nn.Clamp(-0.5, 0.5), _plain, False),
    "OneHotArgmax": (lambda: hg.nn.OneHotArgmax(tau=0.5), _plain, False),
    "Quantize": (lambda: hg.nn.Quantize(4, init_scale=0.25), _plain, False),
    "Quantize/per_channel": (
        lambda: hg.nn.Quantize(4, per_channel_dim=1, num_channels=H),
        _plain,
        True,
    ),
    "PACT": (lambda: hg.nn.PACT(3, alpha=0.3), _plain, False),
    "Bernoulli": (lambda: hg.nn.Bernoulli("st"), _plain, False),
    "Categorical": (lambda: hg.nn.Categorical("st_gumbel", tau=0.7), _plain, False),
    "VectorQuantize": (lambda: hg.nn.VectorQuantize(5, H), _tuple, False),
    "ResidualVQ": (lambda: hg.nn.ResidualVQ(2, 5, H), _tuple, False),
    "FSQ": (lambda: hg.nn.FSQ([3, 5, 4, 3, 5, 4]), _tuple, False),
    "LFQ": (lambda: hg.nn.LFQ(H), _tuple, False),
    "MoE": (lambda: hg.nn.MoE(H, num_experts=3, k=2), _tuple, False),
    "HardConcreteGate": (lambda: hg.nn.HardConcreteGate(H), _gate, False),
    "L0Linear": (lambda: hg.nn.L0Linear(H, H), _gate, False),
    "L0Conv2d": (lambda: hg.nn.L0Conv2d(H, H, 1), _image, False),
    "LIF": (
        lambda: hg.nn.LIF(0.8, 0.7, learn_beta=True, learn_threshold=True),
        _spiking,
        False,
    ),
    "BinaryLinear": (
        lambda: hg.nn.BinaryLinear(H, H, scale=True, activations=True),
        _plain,
        False,
    ),
    "BinaryConv2d": (lambda: hg.nn.BinaryConv2d(H, H, 1, weights="ternary"), _image, False),
    "QuantLinear": (lambda: hg.nn.QuantLinear(H, H, weight_bits=4, act_bits=4), _plain, True),
    "QuantConv2d": (
        lambda: hg.nn.QuantConv2d(H, H, 1, weight_bits=3, act_bits=4),
        _image,
        True,
    ),
}


class _Net(nn.Module):
    """``Linear -> module -> Linear``; the loss is the mean squared output plus the
    module's own loss (VQ, MoE, L0)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        build, self.call, _ = SPECS[name]
        torch.manual_seed(0)  # the same initial weights in every process
        self.pre = nn.Linear(IN, H)
        self.inner = build()
        self.post = nn.Linear(H, OUT)
        self.double()

    def forward(self, x: Tensor) -> Tensor:
        y, extra = self.call(self.inner, self.pre(x))
        return (self.post(y) - 0.5).square().mean() + extra


def _inputs(step: int) -> Tensor:
    """The global batch of ``step`` (every process makes all of it; -1: calibration)."""
    return torch.randn(B, IN, generator=torch.Generator().manual_seed(100 + step), dtype=F64)


def _seed(step: int, rank: int) -> int:
    """The global RNG's seed for rank ``rank``'s call at ``step`` (same in both runs)."""
    return 10_000 + 7 * step + rank


def _build(name: str) -> _Net:
    model = _Net(name)
    if SPECS[name][2]:
        with torch.no_grad():
            model(_inputs(-1))  # calibration on the whole batch, before sharding
    return model


def _train(model: nn.Module, losses: Callable[[int], Tensor]) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for step in range(STEPS):
        optimizer.zero_grad()
        losses(step).backward()
        optimizer.step()


def _shard(step: int, rank: int) -> Tensor:
    per = B // WORLD
    return _inputs(step)[rank * per : (rank + 1) * per]


def _single(name: str) -> dict[str, Tensor]:
    """One process, no process group: the mean of the ranks' losses, call by call."""
    model = _build(name)

    def loss(step: int) -> Tensor:
        total = torch.zeros((), dtype=F64)
        for rank in range(WORLD):
            torch.manual_seed(_seed(step, rank))
            total = total + model(_shard(step, rank))
        return total / WORLD

    _train(model, loss)
    return {k: v.detach().clone() for k, v in model.named_parameters()}


# --------------------------------------------------------------------------- DDP


def _ddp_model(num_channels: int | None) -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(
        nn.Linear(IN, H),
        hg.nn.Quantize(4, per_channel_dim=1, num_channels=num_channels),
        nn.Linear(H, OUT),
    ).double()


def _ddp_loss(model: nn.Module, x: Tensor) -> Tensor:
    return (model(x) - 0.5).square().mean()


def _ddp_single() -> dict[str, Tensor]:
    """The ranks' first batch sets the scale from both shards (averaged: the whole
    batch's mean up to rounding); LSQ's gradient scale counts the elements of a call,
    so the losses are the ranks', shard by shard."""
    model = _ddp_model(H)
    with torch.no_grad():
        model[1].init_from(model[0](_inputs(0)))
    _train(model, lambda step: sum(_ddp_loss(model, _shard(step, r)) for r in range(WORLD)) / WORLD)
    return {k: v.detach().clone() for k, v in model.named_parameters()}


# --------------------------------------------------------------------------- the ranks


def _worker(rank: int, store: str, outdir: str) -> None:
    warnings.simplefilter("error")
    # FSDP2's advice for a module whose output is a view (MoE's): no in-place op follows.
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
    torch.set_num_threads(1)  # the ranks share the machine's cores
    torch.distributed.init_process_group(
        "gloo",
        init_method=f"file://{store}",
        rank=rank,
        world_size=WORLD,
        timeout=datetime.timedelta(seconds=60),
    )
    try:
        results = _rank_results(rank, Path(outdir))
        if rank == 0:
            partial = Path(outdir) / "rank0.partial"
            torch.save(results, partial)
            os.replace(partial, Path(outdir) / "rank0.pt")
        else:
            (Path(outdir) / f"rank{rank}.done").touch()
    finally:
        torch.distributed.destroy_process_group()


def _rank_results(rank: int, outdir: Path) -> dict[str, Any]:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard, register_fsdp_forward_method

    mesh = init_device_mesh("cpu", (WORLD,))
    results: dict[str, Any] = {"fsdp": {}, "full_state": {}}
    for name in SPECS:
        model = _build(name)
        if any(True for _ in model.inner.parameters()):
            fully_shard(model.inner, mesh=mesh)
        if name in ("HardConcreteGate", "L0Linear"):  # l0() reads the parameters outside forward
            register_fsdp_forward_method(model.inner, "l0")
        fully_shard(model, mesh=mesh)

        def loss(step: int, model: nn.Module = model) -> Tensor:
            torch.manual_seed(_seed(step, rank))
            out: Tensor = model(_shard(step, rank))
            return out

        try:
            _train(model, loss)
        except Exception as error:
            raise RuntimeError(f"{name} under fully_shard: {error}") from error
        results["fsdp"][name] = {
            k: v.full_tensor().detach().clone()  # type: ignore[attr-defined]
            for k, v in model.named_parameters()
        }
        if name in CHECKPOINTED:
            options = StateDictOptions(full_state_dict=True, cpu_offload=True)
            full = get_model_state_dict(model, options=options)
            results["full_state"][name] = {k: v for k, v in full.items()}
            dcp.save(model.state_dict(), checkpoint_id=str(outdir / f"dcp_{name}"))
    # DDP wrapped before the first batch, per-channel scale with num_channels.
    model = _ddp_model(H)
    wrapped = nn.parallel.DistributedDataParallel(model)
    _train(wrapped, lambda step: _ddp_loss(wrapped, _shard(step, rank)))
    results["ddp"] = {k: v.detach().clone() for k, v in model.named_parameters()}
    # The refusals: a shape to find out inside DDP, a first batch under fully_shard.
    errors = {}
    wrapped = nn.parallel.DistributedDataParallel(_ddp_model(None))
    try:
        wrapped(_shard(0, rank))
    except ValueError as error:
        errors["ddp"] = str(error)
    sharded = nn.Sequential(nn.Linear(IN, H), hg.nn.Quantize(4)).double()
    fully_shard(sharded, mesh=mesh)
    try:
        sharded(_shard(0, rank))
    except ValueError as error:
        errors["fsdp"] = str(error)
    results["errors"] = errors
    results["deferred"] = _deferred(mesh)
    return results


def _deferred(mesh: Any) -> dict[str, Tensor]:
    """Deferred initialisation under fully_shard: built on the meta device, sharded,
    ``to_empty``, ``reset_parameters`` children first; then a scale set by
    ``init_from`` on the sharded module (outside a forward)."""
    from torch.distributed.fsdp import fully_shard

    with torch.device("meta"):
        model = nn.Sequential(
            hg.nn.QuantLinear(IN, H, weight_bits=4, act_bits=4),
            hg.nn.PACT(3, alpha=0.5),
            hg.nn.Quantize(4, init_scale=0.25),
            hg.nn.LIF(0.8, learn_beta=True),
        )
    for module in model:
        fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    model.to_empty(device="cpu")
    with warnings.catch_warnings():  # torch's note on DTensor random ops on a CPU mesh
        warnings.filterwarnings("ignore", message="DTensor random operators")
        model.apply(_reset)
    state = {k: v.full_tensor() for k, v in model.named_parameters()}  # type: ignore[attr-defined]
    model[0].act_quantizer.init_from(_inputs(5))
    state["set_scale"] = model[0].act_quantizer.scale.full_tensor()  # type: ignore[attr-defined]
    return state


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    outdir = tmp_path_factory.mktemp("fsdp")
    done = [outdir / "rank0.pt", *(outdir / f"rank{r}.done" for r in range(1, WORLD))]
    run_ranks(
        _worker,
        (str(outdir / "store"), str(outdir)),
        WORLD,
        lambda: all(path.exists() for path in done),
    )
    ranks = torch.load(outdir / "rank0.pt", weights_only=True)
    assert not torch.distributed.is_initialized()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        single = {name: _single(name) for name in SPECS}
        ddp = _ddp_single()
    finally:
        torch.set_num_threads(threads)
    return {"ranks": ranks, "single": single, "ddp": ddp, "dir": outdir}


def _close(actual: Tensor, expected: Tensor, what: str) -> None:
    torch.testing.assert_close(actual, expected, rtol=RTOL, atol=ATOL, msg=lambda m: f"{what}: {m}")


def _initial(name: str) -> dict[str, Tensor]:
    return {k: v.detach().clone() for k, v in _build(name).named_parameters()}


# --------------------------------------------------------------------------- the tests


def test_every_module_has_a_spec():
    assert {name.split("/")[0] for name in SPECS} == set(MODULES)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("name", sorted(SPECS))
def test_fully_shard_trains_to_the_single_process_parameters(runs, name):
    sharded, single = runs["ranks"]["fsdp"][name], runs["single"][name]
    assert list(sharded) == list(single)
    initial = _initial(name)
    for key, value in single.items():
        _close(sharded[key], value, f"{name}: {key}")
    inner = [k for k in single if k.startswith("inner.")]
    for key in inner:  # the module's own parameters trained (far beyond the tolerance)
        assert (single[key] - initial[key]).abs().max() > 1e-6, f"{name}: {key} did not train"


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")  # (dcp.load)
@pytest.mark.parametrize("name", CHECKPOINTED)
def test_fsdp_checkpoints_load_into_a_plain_module(runs, name):
    import torch.distributed.checkpoint as dcp

    expected = runs["single"][name]
    full = _build(name)
    full.load_state_dict(runs["ranks"]["full_state"][name])
    sharded = _build(name)
    state = sharded.state_dict()
    dcp.load(state, checkpoint_id=str(runs["dir"] / f"dcp_{name}"), no_dist=True)
    sharded.load_state_dict(state)
    for model in (full, sharded):
        for key, value in model.named_parameters():
            _close(value.detach(), expected[key], f"{name}: {key}")
    with torch.no_grad():  # and the loaded modules compute as the trained one
        assert torch.equal(full(_inputs(9)), sharded(_inputs(9)))


@pytest.mark.slow
@pytest.mark.distributed
def test_per_channel_scale_in_ddp_wrapped_before_the_first_batch(runs):
    trained, single = runs["ranks"]["ddp"], runs["ddp"]
    initial = {k: v.detach().clone() for k, v in _ddp_model(H).named_parameters()}
    assert trained["1.scale"].shape == (H,)
    for key, value in single.items():
        _close(trained[key], value, key)
        assert (value - initial[key]).abs().max() > 1e-3, f"{key} did not train"


@pytest.mark.slow
@pytest.mark.distributed
def test_deferred_initialisation_under_fully_shard(runs):
    state = runs["ranks"]["deferred"]
    weight = state["0.weight"]
    assert torch.isfinite(weight).all() and weight.std() > 0
    expected = 2 * weight.abs().mean(1) / math.sqrt(7)  # LSQ's init from the new weights
    torch.testing.assert_close(state["0.weight_quantizer.scale"], expected)
    assert torch.equal(state["0.act_quantizer.scale"], torch.ones(1))  # the placeholder
    assert torch.equal(state["1.alpha"], torch.tensor([0.5]))
    assert torch.equal(state["2.scale"], torch.tensor([0.25]))
    assert torch.equal(state["3.beta"], torch.tensor([0.8]))
    set_scale = (2 * _inputs(5).abs().mean() / math.sqrt(7)).float().reshape(1)
    torch.testing.assert_close(state["set_scale"], set_scale)  # init_from on the shards


@pytest.mark.slow
@pytest.mark.distributed
def test_first_batches_that_cannot_work_wrapped_raise(runs):
    errors = runs["ranks"]["errors"]
    assert "DistributedDataParallel" in errors["ddp"] and "num_channels=6" in errors["ddp"]
    assert "fully_shard" in errors["fsdp"] and "init_scale" in errors["fsdp"]


# ---------------------------------------------------------------- without a process group


def _all_specs_built() -> list[tuple[str, nn.Module]]:
    return [(name, _build(name)) for name in SPECS]


def test_no_module_has_a_zero_dim_parameter():
    """fully_shard refuses 0-d parameters ("fully_shard doesn't support scalar parameters")."""
    for name, model in _all_specs_built():
        for key, value in model.named_parameters():
            assert value.dim() > 0, f"{name}: {key} is 0-d"
    for module in (hg.nn.LIF(torch.tensor(0.9), learn_beta=True), hg.nn.PACT(2)):
        assert all(p.dim() == 1 for p in module.parameters())


def _legacy(module: nn.Module, name: str) -> nn.Module:
    """``module`` with its one-element parameter ``name`` made 0-d, as it was stored before."""
    value = getattr(module, name)
    module._parameters[name] = nn.Parameter(value.detach().reshape(()).clone())
    return module


_LEARNED_NUMBERS = {
    "Quantize": (lambda: hg.nn.Quantize(5, init_scale=0.125), "scale"),
    "Quantize/unsigned": (
        lambda: hg.nn.Quantize(3, signed=False, in_range="unrounded", init_scale=0.3),
        "scale",
    ),
    "PACT": (lambda: hg.nn.PACT(3, alpha=1.5), "alpha"),
    "LIF/beta": (lambda: hg.nn.LIF(0.7, 0.9, learn_beta=True), "beta"),
    "LIF/threshold": (lambda: hg.nn.LIF(0.7, 0.4, learn_threshold=True), "threshold"),
}


@pytest.mark.parametrize("name", sorted(_LEARNED_NUMBERS))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
@pytest.mark.parametrize("shape", [(), (5,), (3, 7), (300, 240)])  # (the last: > 65,536)
def test_one_element_storage_gives_the_zero_dim_values_and_gradients_bit_for_bit(
    name, dtype, shape
):
    build, param = _LEARNED_NUMBERS[name]
    new, old = build(), _legacy(build(), param)
    assert getattr(new, param).shape == (1,) and getattr(old, param).shape == ()
    g = torch.Generator().manual_seed(3)
    x0 = (torch.randn(shape, generator=g, dtype=F64) * 2).to(dtype)
    up = torch.randn(shape, generator=g, dtype=F64).to(dtype)
    outputs, grads = [], []
    for module in (new, old):
        x = x0.clone().requires_grad_()
        y = module(x)[0] if name.startswith("LIF") else module(x)
        gx, gp = torch.autograd.grad(y, [x, getattr(module, param)], up)
        outputs.append(y.detach())
        grads.append((gx, gp.reshape(())))
    assert outputs[0].shape == outputs[1].shape == shape
    assert torch.equal(outputs[0], outputs[1])
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])
    assert grads[0][1] != 0 or name.startswith("LIF")  # (a spike-free LIF step: 0 too)


@pytest.mark.parametrize("name", sorted(_LEARNED_NUMBERS))
def test_checkpoints_with_zero_dim_entries_load_and_the_reverse(name, tmp_path):
    build, param = _LEARNED_NUMBERS[name]
    source = build()
    with torch.no_grad():
        getattr(source, param).mul_(1.375)  # a trained value
    old = _legacy(build(), param)
    old.load_state_dict(source.state_dict())  # (1,) into a module holding it 0-d
    assert old.state_dict()[param].shape == ()
    torch.save(old.state_dict(), tmp_path / "old.pt")
    new = build()
    new.load_state_dict(torch.load(tmp_path / "old.pt", weights_only=True))  # 0-d into (1,)
    assert getattr(new, param).shape == (1,)
    assert torch.equal(getattr(new, param).detach(), getattr(source, param).detach())
    # load_state_dict reshapes its own copy: the checkpoint is left as it was
    saved = old.state_dict()
    build().load_state_dict(saved)
    assert saved[param].shape == ()


def test_old_quant_linear_checkpoint_loads_strictly():
    """A ``quantize_``-d model saved with the 0-d activation scale (and its settings)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    hg.nn.quantize_(model, optimizer=None)
    model(torch.randn(5, 4))
    state = model.state_dict()
    old = type(state)(
        {k: v.reshape(()) if k.endswith("act_quantizer.scale") else v for k, v in state.items()}
    )
    old._metadata = state._metadata  # the settings travel in the metadata
    torch.manual_seed(1)
    fresh = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    hg.nn.quantize_(fresh, optimizer=None)
    fresh.load_state_dict(old)
    for key, value in state.items():
        if isinstance(value, Tensor):
            assert torch.equal(fresh.state_dict()[key], value), key
    x = torch.randn(6, 4)
    assert torch.equal(fresh(x), model(x))


def test_per_tensor_module_still_refuses_per_channel_scales():
    with pytest.raises(RuntimeError, match="per-channel scales of shape \\(3,\\)"):
        hg.nn.Quantize(4).load_state_dict({"scale": torch.ones(3)})


def test_num_channels_fixes_the_per_channel_shape():
    q = hg.nn.Quantize(4, per_channel_dim=1, num_channels=3)
    assert q.scale.shape == (3,) and not q.initialized
    scale = q.scale
    q(torch.randn(2, 3, 5))
    assert q.scale is scale and q.initialized
    with pytest.raises(ValueError, match="num_channels=3 channels along per_channel_dim=1"):
        hg.nn.Quantize(4, per_channel_dim=1, num_channels=3)(torch.randn(2, 4))
    with pytest.raises(ValueError, match="`num_channels` only with per-channel"):
        hg.nn.Quantize(4, num_channels=3)
    with pytest.raises(ValueError, match="num_channels"):
        hg.nn.Quantize(4, per_channel_dim=0, num_channels=0)
    with pytest.raises(ValueError, match="num_channels=3 scales, but found 2"):
        hg.nn.Quantize(4, per_channel_dim=0, num_channels=3, init_scale=torch.ones(2))
    with pytest.raises(RuntimeError, match="the checkpoint has 2 channel scales"):
        hg.nn.Quantize(4, per_channel_dim=0, num_channels=3).load_state_dict(
            {"scale": torch.ones(2)}
        )


def _reset(module: nn.Module) -> None:
    if hasattr(module, "reset_parameters"):
        module.reset_parameters()


@pytest.mark.parametrize("name", sorted(SPECS))
def test_meta_device_init_then_reset_parameters(name):
    """``with torch.device("meta")``, ``to_empty`` and ``reset_parameters`` (children
    first, ``model.apply``): the values of a normal construction where they are
    deterministic, finite values of the right shapes where they are drawn."""
    build = SPECS[name][0]
    torch.manual_seed(0)
    reference = build().double()
    with torch.device("meta"):
        module = build()
    module.to_empty(device="cpu")
    module.apply(_reset)
    module.double()
    expected = reference.state_dict()
    state = module.state_dict()
    assert list(state) == list(expected)
    for key, value in expected.items():
        if not isinstance(value, Tensor):
            assert _same(state[key], value), key
            continue
        assert state[key].shape == value.shape and state[key].dtype == value.dtype, key
        if value.is_floating_point():
            assert torch.isfinite(state[key]).all(), key
    for key, value in reference.named_parameters():
        drawn = value.numel() > 1 and bool((value != value.flatten()[0]).any())
        if not drawn and not key.endswith("weight_quantizer.scale"):
            assert torch.equal(getattr_path(module, key), value), key
    model = _Net.__new__(_Net)
    nn.Module.__init__(model)
    model.call = SPECS[name][1]
    model.pre, model.inner, model.post = (
        nn.Linear(IN, H).double(),
        module,
        nn.Linear(H, OUT).double(),
    )
    x = _inputs(0)
    if SPECS[name][2]:
        with torch.no_grad():
            model(x)
    loss = model(x)
    assert torch.isfinite(loss)
    loss.backward()


def _same(a: Any, b: Any) -> bool:
    """Equal, tensors (also inside dicts, e.g. an extra state) compared with torch.equal."""
    if isinstance(a, Tensor) or isinstance(b, Tensor):
        return isinstance(a, Tensor) and isinstance(b, Tensor) and torch.equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def getattr_path(module: nn.Module, key: str) -> Tensor:
    value: Tensor = module.get_parameter(key)
    return value.detach()


def test_quant_layer_weight_scales_follow_reset_weights():
    """QuantLinear's ``reset_parameters`` draws new weights and sets the weight scales
    from them, as construction does (also on the meta device, after ``to_empty``)."""
    torch.manual_seed(4)
    reference = hg.nn.QuantLinear(5, 3, weight_bits=4)
    with torch.device("meta"):
        layer = hg.nn.QuantLinear(5, 3, weight_bits=4)
    layer.to_empty(device="cpu")
    torch.manual_seed(4)
    layer.apply(_reset)
    assert torch.equal(layer.weight, reference.weight)
    assert torch.equal(layer.weight_quantizer.scale, reference.weight_quantizer.scale)
    assert layer.weight_quantizer.initialized and not layer.act_quantizer.initialized
    expected = 2 * reference.weight.detach().abs().mean(1) / math.sqrt(7)
    torch.testing.assert_close(layer.weight_quantizer.scale.detach(), expected)
