"""What the modules with learned scalars share to work under DDP and FSDP2.

``torch.distributed.fsdp.fully_shard`` refuses 0-d parameters, so a learned scalar (a
per-tensor LSQ scale, PACT's clipping level, LIF's decay and threshold) is stored as a
one-element 1-D parameter and viewed as 0-d where it is used (a view: the values and the
gradients are those of the 0-d parameter, bit for bit). Checkpoints saved with the 0-d
parameter load (:func:`accept_scalar_entry`).

Under FSDP2 the parameters outside a forward are ``DTensor`` shards and inside it
unsharded copies that are freed afterwards: a value written into them in a forward is
lost, and a parameter whose shape changes after ``DistributedDataParallel`` or
``fully_shard`` registered it breaks their buffers. :func:`wrapped_forward` tells the
modules when that is so, so that they refuse with a message instead.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import torch
from torch import Tensor, nn


def as_scalar(value: Tensor) -> Tensor:
    """``value`` (a one-element parameter) viewed as 0-d; a 0-d tensor as it is."""
    return value if value.dim() == 0 else value.view(())


def accept_scalar_entry(state_dict: MutableMapping[str, Any], key: str, current: Tensor) -> None:
    """Give a one-element ``state_dict[key]`` the shape of ``current``, the module's own
    one-element tensor: a 0-d entry (saved when the parameter was 0-d) loads into the
    ``(1,)`` parameter, and a ``(1,)`` entry into a module that holds it 0-d. Other
    entries are left to the shape check of ``load_state_dict``."""
    stored = state_dict.get(key)
    if (
        isinstance(stored, Tensor)
        and stored.dim() <= 1
        and stored.numel() == 1
        and current.dim() <= 1
        and current.numel() == 1
        and stored.shape != current.shape
        and not is_dtensor(stored)
        and not is_dtensor(current)
    ):
        state_dict[key] = stored.reshape(current.shape)


def is_dtensor(value: Any) -> bool:
    """Whether ``value`` is a ``torch.distributed.tensor.DTensor`` (an FSDP2 shard)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(value, DTensor)


def full(value: Tensor) -> Tensor:
    """``value`` whole: a ``DTensor`` gathered, any other tensor as it is."""
    if is_dtensor(value):
        gathered: Tensor = value.full_tensor()  # type: ignore[attr-defined]
        return gathered
    return value


@torch.no_grad()
def copy_into(target: Tensor, values: Tensor) -> None:
    """``target.copy_(values)`` in place (the parameter object and its storage kept, as
    DDP and FSDP2 need), also for a ``DTensor`` target: ``values`` is the whole tensor,
    the same on every rank, and each rank keeps its own shard."""
    if is_dtensor(target):
        from torch.distributed.tensor import distribute_tensor

        values = distribute_tensor(
            values.detach().to(device=target.device, dtype=target.dtype),
            target.device_mesh,  # type: ignore[attr-defined]
            target.placements,  # type: ignore[attr-defined]
            src_data_rank=None,  # the same values everywhere: no communication
        )
    target.copy_(values)


def wrapped_forward(module: nn.Module) -> str:
    """``"fully_shard"`` for a module whose parameters FSDP manages (in a forward they
    are unsharded copies, freed afterwards), ``"DistributedDataParallel"`` inside DDP's
    forward, else ``""``."""
    if getattr(module, "_is_fsdp_managed_module", False):
        return "fully_shard"
    if torch.distributed.is_available():
        ddp = torch.nn.parallel.DistributedDataParallel
        if getattr(ddp, "_active_ddp_module", None) is not None:
            return "DistributedDataParallel"
    return ""
