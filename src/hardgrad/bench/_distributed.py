"""Running the training benchmarks under ``torchrun`` (DistributedDataParallel).

``torchrun --nproc_per_node N -m hardgrad bench TASK ...`` starts N processes with the
``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` environment; :func:`setup` then joins the default
process group (gloo on CPU, NCCL on CUDA). Training tasks wrap their model with
:func:`wrap` (DDP when a group is up), give each rank its own shard of the data
(:func:`shard`) and its own sampling seed (:func:`rank_seed`), and only rank 0 prints and
writes files (:func:`is_main`). Without ``torchrun`` all of this is a no-op.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

#: The variables ``torchrun`` sets that the benchmarks read, with their least valid value.
ENVIRONMENT = {"WORLD_SIZE": 1, "RANK": 0, "LOCAL_RANK": 0, "LOCAL_WORLD_SIZE": 1}


def env_int(name: str, default: int) -> int:
    """The integer in the environment variable ``name`` (``default`` when unset).

    Raises:
        ValueError: it is set to something other than an integer of at least the variable's
            least valid value (:data:`ENVIRONMENT`), naming the variable and the value.
    """
    text = os.environ.get(name)
    if text is None:
        return default
    low = ENVIRONMENT.get(name, 0)
    try:
        value = int(text.strip())
    except ValueError:
        value = None
    if value is None or value < low:
        raise ValueError(
            f"Expected the environment variable {name} to be an integer >= {low} (as "
            f"torchrun sets it), but found {text!r}"
        )
    return value


def check_environment() -> None:
    """Every variable of :data:`ENVIRONMENT` that is set is valid, and ``RANK`` is below
    ``WORLD_SIZE`` when both are set (a ``ValueError`` naming them otherwise)."""
    values = {name: env_int(name, low) for name, low in ENVIRONMENT.items()}
    both = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if both and values["RANK"] >= values["WORLD_SIZE"]:
        raise ValueError(
            f"Expected the environment variable RANK to be below WORLD_SIZE "
            f"({values['WORLD_SIZE']}), but found {values['RANK']}"
        )


def _dist() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def setup(device: str = "cpu") -> bool:
    """Join the default process group if launched by ``torchrun`` (and not already in one).

    Returns whether a group with more than one process is up.
    """
    dist = torch.distributed
    if not dist.is_available():
        return False
    if not dist.is_initialized() and env_int("WORLD_SIZE", 1) > 1:
        backend = "nccl" if device.startswith("cuda") else "gloo"
        if backend == "nccl":  # one GPU per rank on a node, as torchrun numbers them
            torch.cuda.set_device(local_device(device))
        dist.init_process_group(backend)
    return world_size() > 1


def local_device(device: str) -> str:
    """This rank's device: ``cuda`` becomes ``cuda:LOCAL_RANK`` under ``torchrun`` (one GPU
    per process on a node); an explicit index and every other device are kept."""
    if device == "cuda" and "LOCAL_RANK" in os.environ:
        return f"cuda:{env_int('LOCAL_RANK', 0)}"
    return device


def teardown() -> None:
    """Leave the process group (if this module's :func:`setup` joined one)."""
    if _dist():
        torch.distributed.destroy_process_group()


def world_size() -> int:
    return torch.distributed.get_world_size() if _dist() else 1


def rank() -> int:
    return torch.distributed.get_rank() if _dist() else 0


def is_main() -> bool:
    """Whether this process prints and writes (rank 0, or the only process)."""
    return rank() == 0


def rank_seed(seed: int) -> int:
    """A seed for this rank's random draws: ranks must sample differently."""
    return seed * 1009 + rank()


def shard(x: Tensor) -> Tensor:
    """This rank's contiguous share of the rows of ``x`` (all of them without a group)."""
    n, size = world_size(), x.shape[0]
    if n == 1:
        return x
    per = size // n
    return x[rank() * per : (rank() + 1) * per]


def wrap(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` in DistributedDataParallel when a group is up (parameters broadcast from
    rank 0, gradients averaged), ``model`` itself otherwise."""
    if world_size() == 1:
        return model
    return torch.nn.parallel.DistributedDataParallel(model)


def mean_across_ranks(value: float) -> float:
    """The mean of a Python number over the ranks (itself without a group)."""
    if world_size() == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64)
    torch.distributed.all_reduce(t)
    return float(t) / world_size()
