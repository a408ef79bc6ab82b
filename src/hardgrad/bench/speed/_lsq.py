"""LSQ against PyTorch's fused learnable fake-quantize kernels.

``hg.quantize`` with a learned scale (LSQ, Esser et al. 2020,
https://arxiv.org/abs/1902.08153), and with a learned zero point as well (LSQ+, Bhalgat
et al. 2020, https://arxiv.org/abs/2004.09576), per tensor and per channel, against
``torch._fake_quantize_learnable_per_tensor_affine`` and
``torch._fake_quantize_learnable_per_channel_affine``, the kernels behind
``torch.ao.quantization._LearnableFakeQuantize``. Each row times forward plus backward to
``x``, the scale and (when learned) the zero point, at a small size, where the per-call
cost shows, and at the large one, in interleaved rounds.

The two compute the same function: before timing, the forward must agree bit for bit
(float32, an integral zero point, which torch rounds and hardgrad uses as given), the
gradient to ``x`` too, and the scale and zero-point gradients to 1e-5 of their largest
entry (torch
computes :math:`(x_q s - x)/s` where hardgrad computes
:math:`\\operatorname{round}(x/s) - x/s`: the same value up to rounding).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ... import ops as _ops
from .._task import BenchSettings, Table
from .._timing import (
    UNRESOLVED,
    median,
    ratio_interval,
    ratio_verdict,
    round_ratios,
    time_interleaved,
)
from ._candidates import SpeedCheckError

#: (scheme, learns the zero point) of the rows.
ROWS = (("per-tensor", False), ("per-channel", False), ("per-tensor", True), ("per-channel", True))
QUANT_MIN, QUANT_MAX = -8, 7  # 4-bit signed
SCALE, ZERO_POINT = 0.3, 1.0


def _shape(numel: int) -> tuple[int, int]:
    """A square-ish (channels, features) shape of ``numel`` elements."""
    channels = 2 ** (int(math.log2(numel)) // 2)
    return channels, numel // channels


def _steps(
    scheme: str, learns_zero: bool, shape: tuple[int, int], settings: BenchSettings
) -> tuple[Callable[[], Any], Callable[[], Any]]:
    """``(hardgrad, torch)``: each a call of forward and backward with its own parameters
    (the same values), checked to agree first."""
    generator = torch.Generator().manual_seed(settings.seed)
    device = settings.device
    x = (torch.randn(shape, generator=generator) * 2).to(device).requires_grad_()
    g = torch.randn(shape, generator=generator).to(device)
    channel = scheme == "per-channel"
    per_scale = shape[1] if channel else shape[0] * shape[1]
    factor = 1.0 / math.sqrt(per_scale * QUANT_MAX)  # LSQ's gradient scale
    torch_shape, hg_shape = ((shape[0],), (shape[0], 1)) if channel else ((1,), (1,))

    def parameter(value: float, shape: tuple[int, ...], learns: bool = True) -> Tensor:
        return torch.full(shape, value, device=device).requires_grad_(learns)

    scale_t, scale_h = parameter(SCALE, torch_shape), parameter(SCALE, hg_shape)
    zero_value = ZERO_POINT if learns_zero else 0.0
    zero_t = parameter(zero_value, torch_shape, learns_zero)
    zero_h: Tensor | int = parameter(zero_value, hg_shape) if learns_zero else 0
    wanted_t = [x, scale_t] + ([zero_t] if learns_zero else [])
    wanted_h = [x, scale_h] + ([zero_h] if isinstance(zero_h, Tensor) else [])

    def forward_torch() -> Tensor:
        if channel:
            return torch._fake_quantize_learnable_per_channel_affine(
                x, scale_t, zero_t, 0, QUANT_MIN, QUANT_MAX, factor
            )
        return torch._fake_quantize_learnable_per_tensor_affine(
            x, scale_t, zero_t, QUANT_MIN, QUANT_MAX, factor
        )

    def forward_hg() -> Tensor:
        return _ops.quantize(
            x, scale_h, zero_h, quant_min=QUANT_MIN, quant_max=QUANT_MAX, grad_scale=factor
        )

    def step_torch() -> tuple[Tensor, ...]:
        return torch.autograd.grad(forward_torch(), wanted_t, g)

    def step_hg() -> tuple[Tensor, ...]:
        return torch.autograd.grad(forward_hg(), wanted_h, g)

    _check(forward_hg(), forward_torch(), step_hg(), step_torch(), f"{scheme} {shape}")
    return step_hg, step_torch


def _check(
    y_hg: Tensor, y_torch: Tensor, grads_hg: tuple[Tensor, ...], grads_torch: tuple[Tensor, ...],
    where: str,
) -> None:  # fmt: skip
    if not torch.equal(y_hg, y_torch):
        raise SpeedCheckError(f"LSQ {where}: the forward differs from torch's kernel")
    if not torch.equal(grads_hg[0], grads_torch[0]):
        raise SpeedCheckError(f"LSQ {where}: the gradient to x differs from torch's kernel")
    for mine, theirs in zip(grads_hg[1:], grads_torch[1:], strict=True):
        # (relative to the largest entry: a channel's sum can cancel to near 0)
        error = float((mine.flatten() - theirs.flatten()).abs().max())
        if not error <= 1e-5 * float(theirs.abs().max()):
            raise SpeedCheckError(
                f"LSQ {where}: a quantization-parameter gradient differs from torch's kernel"
            )


def run_lsq(
    sizes: dict[str, int],
    settings: BenchSettings,
    rounds: int,
    min_run_time: float,
    rng: random.Random,
) -> dict[str, Any]:
    """Per row and size: median ms of both, their ratio, the per-round ratios."""
    results: dict[str, Any] = {}
    for scheme, learns_zero in ROWS:
        for size_label, numel in sizes.items():
            shape = _shape(numel)
            step_hg, step_torch = _steps(scheme, learns_zero, shape, settings)
            times = time_interleaved(
                {"hardgrad": step_hg, "torch": step_torch},
                rounds=rounds,
                min_run_time=min_run_time,
                threads=settings.threads,
                rng=rng,
            )
            hg_s, torch_s = median(times["hardgrad"]), median(times["torch"])
            ratios = round_ratios(times, "hardgrad", "torch")
            learned = "scale, zero point" if learns_zero else "scale"
            results[f"{scheme}/{learned}/{size_label}"] = {
                "scheme": scheme,
                "learned": learned,
                "shape": list(shape),
                "torch_ms": torch_s * 1e3,
                "hardgrad_ms": hg_s * 1e3,
                "ratio": hg_s / torch_s,
                "round_ratios": ratios,
                "rounds_faster": sum(r < 1.0 for r in ratios),
                "ratio_ci": list(ratio_interval(ratios)),
                "verdict": ratio_verdict(ratios),
            }
    return results


def lsq_table(results: dict[str, Any]) -> Table:
    table = Table(
        "LSQ: hg.quantize with a learned scale (and zero point) against torch's fused learnable "
        "fake-quantize kernels, forward+backward, float32, 4-bit",
        ["scheme", "learned", "shape", "torch ms", "hardgrad ms", "ratio", "hardgrad faster"],
    )
    for r in results.values():
        table.rows.append(
            [
                r["scheme"],
                r["learned"],
                " x ".join(map(str, r["shape"])),
                f"{r['torch_ms']:.3f}",
                f"{r['hardgrad_ms']:.3f}",
                f"{r['ratio']:.2f}"
                + (" unresolved (noise)" if r.get("verdict") == UNRESOLVED else ""),
                f"{r['rounds_faster']}/{len(r['round_ratios'])}",
            ]
        )
    table.notes.append(
        "Checked before timing: the same forward and x gradient bit for bit, the scale and "
        "zero-point gradients to 1e-5 of their largest entry (torch computes (x_q s - x)/s, hardgrad "
        "round(x/s) - x/s). Per-channel scales are (C,) for torch and (C, 1) for hardgrad; "
        "the gradient scale is LSQ's 1/sqrt(N q_max)."
    )
    return table
