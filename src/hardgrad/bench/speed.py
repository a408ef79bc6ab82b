r"""The ``speed`` benchmark: hardgrad's ops against the code people write by hand.

For every op in :data:`hardgrad.ops.OPS` it times forward plus backward,

.. code-block:: python

    y = fn(x); torch.autograd.grad(y, x, g)

for hardgrad and for the common hand-written alternatives with the *same* semantics:

* the **detach trick** ``soft + (hard - soft).detach()`` (e.g. ``x + (torch.round(x) -
  x).detach()``; for ``sign`` the clipped STE through ``clamp(x, -1, 1)``; for
  ``heaviside`` through ``sigmoid``; for ``one_hot_argmax`` the ``y_hard - y_soft.detach()
  + y_soft`` of ``F.gumbel_softmax``);
* a classic ``torch.autograd.Function`` written as blog posts write it: it saves the float
  input with ``ctx.save_for_backward(x)`` and masks or multiplies in backward (for the
  identity straight-through of the rounding ops it saves nothing);
* PyTorch's own op where one has the same forward and backward: ``torch.clamp`` and
  ``torch.fake_quantize_per_tensor_affine``.

Before anything is timed, every alternative's forward is checked against the op's plain
torch reference (bit for bit, except the detach trick's known rounding: ``s + (h - s)``
need not be exactly ``h`` in floating point, the mismatches are counted and reported) and
its gradient against hardgrad's (``allclose``).

Candidates of one op are timed in interleaved rounds (``blocked_autorange`` per candidate
per round, the order shuffled each round) and the median over rounds is kept. The
**floor** is timed in the same rounds: the two tensors of ``x``'s size that any such op
must write (forward output and input gradient), as ``dst.copy_(x)`` twice into
preallocated tensors. Bytes saved for backward are counted with
``torch.autograd.graph.saved_tensors_hooks``. All of it runs eagerly and again with every
candidate under ``torch.compile`` (compilation time excluded from the timings).
"""

from __future__ import annotations

import dataclasses
import gc
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..ops import OPS, OpSpec, soft_topk_mask
from ._task import BenchSettings, Progress, Table, TaskResult, available_threads, task
from ._timing import median, saved_bytes_per_element, time_interleaved

__all__ = ["ALTERNATIVES", "Candidate", "SpeedConfig", "alternatives_for", "default_config", "run"]


@dataclass(frozen=True)
class SpeedConfig:
    """Sizes and repeats of the speed benchmark.

    Attributes:
        numel: elements of the 1-D float32 input of the elementwise ops.
        matrix: ``(N, C)`` shape of the logits of the selection ops (``one_hot_argmax``,
            ``topk_mask``), which select along the last dimension.
        ops: op names to run (``None``: every op in ``OPS``).
        rounds: interleaved timing rounds; the median over rounds is reported.
        min_run_time: seconds of ``blocked_autorange`` per candidate per round.
        compile: also time every candidate under ``torch.compile``.
        compile_ops: the ops timed under compile (``None``: all of ``ops``).
        candidates: the alternatives to time, by key (``"detach"``, ``"function"``,
            ``"torch"``); ``None``: all. hardgrad itself is always timed.
        small_numel: also time every candidate eagerly on this many elements (selection
            ops: ``(small_numel // C, C)``), where the fixed per-call cost (Python,
            autograd bookkeeping) dominates; ``None`` skips it.
        plot: write ``speed_ratio.png`` next to the report (needs matplotlib).
    """

    numel: int = 2**22
    matrix: tuple[int, int] = (2**16, 64)
    ops: tuple[str, ...] | None = None
    rounds: int = 15
    min_run_time: float = 0.05
    compile: bool = True
    compile_ops: tuple[str, ...] | None = None
    candidates: tuple[str, ...] | None = None
    small_numel: int | None = 4096
    plot: bool = True


#: Ops compiled in the ``--quick`` setting (compiling all of them takes minutes on 2 cores).
QUICK_COMPILE_OPS = ("round", "sign", "clamp", "quantize")


def default_config(quick: bool) -> SpeedConfig:
    """The full setting, or the ``--quick`` one: fewer rounds, a compiled subset."""
    if quick:
        return SpeedConfig(
            numel=2**22,
            matrix=(2**14, 64),
            rounds=7,
            min_run_time=0.02,
            compile_ops=QUICK_COMPILE_OPS,
        )
    return SpeedConfig()


# --------------------------------------------------------------------------- candidates


@dataclass(frozen=True)
class Candidate:
    """One implementation of an op's forward and backward.

    Attributes:
        key: ``"hardgrad"``, ``"detach"``, ``"function"`` or ``"torch"``.
        label: short display name.
        code: what it computes, as code.
        fn: ``fn(x) -> y``.
        exact: whether its forward must equal the reference bit for bit (the detach trick
            is allowed rounding differences).
    """

    key: str
    label: str
    code: str
    fn: Callable[[Tensor], Tensor]
    exact: bool = True


# Classic (old-style, ctx-first) autograd Functions, written the way tutorials write them.


class _STE(torch.autograd.Function):
    """Straight-through: forward ``hard(x)``, backward returns the gradient unchanged."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, hard: Callable[[Tensor], Tensor]) -> Tensor:
        return hard(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad, None


class _ClippedSTE(torch.autograd.Function):
    """Saves ``x``; backward ``grad * (|x| <= 1)``."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, hard: Callable[[Tensor], Tensor]) -> Tensor:
        ctx.save_for_backward(x)
        return hard(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        (x,) = ctx.saved_tensors
        return grad * (x.abs() <= 1).to(grad.dtype), None


class _SigmoidSTE(torch.autograd.Function):
    """Saves ``x``; backward ``grad * s * (1 - s)`` with ``s = sigmoid(x)``."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, hard: Callable[[Tensor], Tensor]) -> Tensor:
        ctx.save_for_backward(x)
        return hard(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(x)
        return grad * s * (1 - s), None


class _ClampSTE(torch.autograd.Function):
    """Saves ``x``; backward ``grad * (lo <= x <= hi)``."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, lo: float, hi: float) -> Tensor:
        ctx.save_for_backward(x)
        ctx.lo, ctx.hi = lo, hi
        return torch.clamp(x, lo, hi)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None]:
        (x,) = ctx.saved_tensors
        return grad * ((x >= ctx.lo) & (x <= ctx.hi)).to(grad.dtype), None, None


class _FakeQuantSTE(torch.autograd.Function):
    """Saves ``x``; forward ``clamp(round(x / s), qmin, qmax) * s``; masked backward."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, scale: float, qmin: int, qmax: int) -> Tensor:
        ctx.save_for_backward(x)
        ctx.scale, ctx.qmin, ctx.qmax = scale, qmin, qmax
        return torch.clamp(torch.round(x / scale), qmin, qmax) * scale

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None]:
        (x,) = ctx.saved_tensors
        q = torch.round(x / ctx.scale)
        return grad * ((q >= ctx.qmin) & (q <= ctx.qmax)).to(grad.dtype), None, None, None


def _one_hot(logits: Tensor) -> Tensor:
    index = logits.argmax(-1, keepdim=True)
    return torch.zeros_like(logits).scatter_(-1, index, 1.0)


def _topk_hard(x: Tensor, k: int) -> Tensor:
    return torch.zeros_like(x).scatter_(-1, x.topk(k, -1).indices, 1.0)


class _SoftmaxSTE(torch.autograd.Function):
    """Saves the logits; forward one-hot argmax; backward the softmax's VJP."""

    @staticmethod
    def forward(ctx: Any, logits: Tensor) -> Tensor:
        ctx.save_for_backward(logits)
        return _one_hot(logits)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        (logits,) = ctx.saved_tensors
        s = torch.softmax(logits, -1)
        return s * (grad - (grad * s).sum(-1, keepdim=True))


class _TopKSTE(torch.autograd.Function):
    """Saves ``x``; backward differentiates the soft top-k relaxation with autograd."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, k: int) -> Tensor:
        ctx.save_for_backward(x)
        ctx.k = k
        return _topk_hard(x, k)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            leaf = x.detach().requires_grad_()
            (grad_x,) = torch.autograd.grad(soft_topk_mask(leaf, ctx.k), leaf, grad)
        return grad_x, None


AlternativesFn = Callable[[OpSpec], list[Candidate]]
#: Hand-written alternatives per op name; ops without an entry are timed alone.
ALTERNATIVES: dict[str, AlternativesFn] = {}


def _alternatives(*names: str) -> Callable[[AlternativesFn], AlternativesFn]:
    def register(fn: AlternativesFn) -> AlternativesFn:
        for name in names:
            ALTERNATIVES[name] = fn
        return fn

    return register


def _check_default(spec: OpSpec, surrogate: str | None) -> None:
    if spec.default_surrogate != surrogate or "surrogate" in spec.kwargs:
        raise RuntimeError(
            f"The speed alternatives for {spec.name!r} implement the {surrogate!r} backward, "
            f"but the op's benchmark setting uses {spec.kwargs.get('surrogate', spec.default_surrogate)!r}"
        )


@_alternatives("round", "floor", "ceil", "trunc")
def _staircase(spec: OpSpec) -> list[Candidate]:
    _check_default(spec, "identity")
    hard = spec.reference
    name = spec.name

    def detach(x: Tensor) -> Tensor:
        return x + (hard(x) - x).detach()

    def function(x: Tensor) -> Tensor:
        return _STE.apply(x, hard)

    return [
        Candidate("detach", "detach", f"x + (torch.{name}(x) - x).detach()", detach, exact=False),
        Candidate(
            "function", "Function", f"Function: fwd torch.{name}(x); bwd returns grad", function
        ),
    ]


@_alternatives("sign", "binarize")
def _clipped(spec: OpSpec) -> list[Candidate]:
    _check_default(spec, "clipped")
    hard = spec.reference
    what = "torch.sign(x)" if spec.name == "sign" else "where(x >= 0, 1, -1)"

    def detach(x: Tensor) -> Tensor:
        h = torch.clamp(x, -1.0, 1.0)
        return h + (hard(x) - h).detach()

    def function(x: Tensor) -> Tensor:
        return _ClippedSTE.apply(x, hard)

    return [
        Candidate(
            "detach",
            "detach",
            f"h = x.clamp(-1, 1); h + ({what} - h).detach()",
            detach,
            exact=False,
        ),
        Candidate(
            "function",
            "Function",
            f"Function: save x; fwd {what}; bwd grad * (x.abs() <= 1)",
            function,
        ),
    ]


@_alternatives("heaviside")
def _sigmoid_step(spec: OpSpec) -> list[Candidate]:
    _check_default(spec, "sigmoid")
    hard = spec.reference

    def detach(x: Tensor) -> Tensor:
        s = torch.sigmoid(x)
        return s + (hard(x) - s).detach()

    def function(x: Tensor) -> Tensor:
        return _SigmoidSTE.apply(x, hard)

    return [
        Candidate(
            "detach",
            "detach",
            "s = sigmoid(x); s + ((x > 0).float() - s).detach()",
            detach,
            exact=False,
        ),
        Candidate(
            "function",
            "Function",
            "Function: save x; bwd grad * s * (1 - s), s = sigmoid(x)",
            function,
        ),
    ]


@_alternatives("clamp")
def _clamp(spec: OpSpec) -> list[Candidate]:
    _check_default(spec, "masked")
    lo, hi = float(spec.kwargs["min"]), float(spec.kwargs["max"])

    def native(x: Tensor) -> Tensor:
        return torch.clamp(x, lo, hi)

    def function(x: Tensor) -> Tensor:
        return _ClampSTE.apply(x, lo, hi)

    return [
        Candidate("torch", "torch.clamp", f"torch.clamp(x, {lo:g}, {hi:g})", native),
        Candidate(
            "function",
            "Function",
            "Function: save x; bwd grad * ((x >= lo) & (x <= hi))",
            function,
        ),
    ]


@_alternatives("quantize")
def _quantize(spec: OpSpec) -> list[Candidate]:
    _check_default(spec, "masked")
    scale = float(spec.kwargs["scale"])
    zero_point = int(spec.kwargs.get("zero_point", 0))
    qmin, qmax = int(spec.kwargs["quant_min"]), int(spec.kwargs["quant_max"])

    def native(x: Tensor) -> Tensor:
        return torch.fake_quantize_per_tensor_affine(x, scale, zero_point, qmin, qmax)

    def detach(x: Tensor) -> Tensor:
        v = x / scale
        v = v + (torch.round(v) - v).detach()
        if zero_point:
            return (torch.clamp(v + zero_point, qmin, qmax) - zero_point) * scale
        return torch.clamp(v, qmin, qmax) * scale

    candidates = [
        Candidate(
            "torch",
            "torch.fake_quantize",
            f"torch.fake_quantize_per_tensor_affine(x, {scale:g}, {zero_point}, {qmin}, {qmax})",
            native,
        ),
        Candidate(
            "detach",
            "detach",
            "v = x / s; v = v + (v.round() - v).detach(); v.clamp(qmin, qmax) * s",
            detach,
            exact=False,
        ),
    ]
    if zero_point == 0:

        def function(x: Tensor) -> Tensor:
            return _FakeQuantSTE.apply(x, scale, qmin, qmax)

        candidates.append(
            Candidate(
                "function",
                "Function",
                "Function: save x; bwd grad * (qmin <= round(x / s) <= qmax)",
                function,
            )
        )
    return candidates


@_alternatives("one_hot_argmax")
def _one_hot_argmax(spec: OpSpec) -> list[Candidate]:
    if spec.kwargs.get("tau", 1.0) != 1.0 or spec.kwargs.get("dim", -1) != -1:
        raise RuntimeError("The speed alternatives of one_hot_argmax assume tau=1, dim=-1")

    def detach(logits: Tensor) -> Tensor:
        y_soft = torch.softmax(logits, -1)
        return _one_hot(logits) - y_soft.detach() + y_soft

    def function(logits: Tensor) -> Tensor:
        return _SoftmaxSTE.apply(logits)

    return [
        Candidate(
            "detach",
            "detach",
            "y_soft = softmax(l); y_hard - y_soft.detach() + y_soft",
            detach,
            exact=False,
        ),
        Candidate(
            "function",
            "Function",
            "Function: save l; bwd softmax VJP (softmax recomputed)",
            function,
        ),
    ]


@_alternatives("topk_mask")
def _topk_mask(spec: OpSpec) -> list[Candidate]:
    if spec.kwargs.get("tau", 1.0) != 1.0 or spec.kwargs.get("dim", -1) != -1:
        raise RuntimeError("The speed alternatives of topk_mask assume tau=1, dim=-1")
    k = int(spec.kwargs["k"])

    def detach(x: Tensor) -> Tensor:
        m = soft_topk_mask(x, k)
        return _topk_hard(x, k) - m.detach() + m

    def function(x: Tensor) -> Tensor:
        return _TopKSTE.apply(x, k)

    return [
        Candidate(
            "detach",
            "detach",
            "m = hg.ops.soft_topk_mask(x, k); hard - m.detach() + m",
            detach,
            exact=False,
        ),
        Candidate(
            "function",
            "Function",
            "Function: save x; bwd autograd.grad(soft_topk_mask(x, k))",
            function,
        ),
    ]


_SELECTION_SURROGATE = {"one_hot_argmax": "softmax (τ=1)", "topk_mask": "soft top-k (τ=1)"}


def alternatives_for(spec: OpSpec) -> list[Candidate]:
    """hardgrad's candidate followed by the hand-written alternatives for ``spec``."""
    hardgrad = Candidate("hardgrad", "hardgrad", f"hg.{spec.name}(x)", spec.__call__)
    builder = ALTERNATIVES.get(spec.name)
    return [hardgrad, *(builder(spec) if builder is not None else [])]


def _surrogate_label(spec: OpSpec) -> str:
    return spec.default_surrogate or _SELECTION_SURROGATE.get(spec.name, "-")


# --------------------------------------------------------------------------- checks


class SpeedCheckError(AssertionError):
    """An alternative does not compute what hardgrad computes: the timing would be unfair."""


@dataclass
class _Check:
    mismatches: int = 0
    max_error: float = 0.0


def _check_forward(cand: Candidate, y: Tensor, ref: Tensor, x: Tensor, where: str) -> _Check:
    if y.shape != ref.shape or y.dtype != ref.dtype:
        raise SpeedCheckError(
            f"{where}: {cand.label} returns shape {tuple(y.shape)} {y.dtype}, "
            f"expected {tuple(ref.shape)} {ref.dtype}"
        )
    y = y.detach()
    if torch.equal(y, ref):
        return _Check()
    diff = (y - ref).abs()
    mismatches = int((y != ref).sum())
    max_error = float(diff.max())
    # The detach trick's s + (h - s) may be off by a few ulps of the values involved.
    scale = 1.0 + float(ref.abs().max()) + float(x.detach().abs().max())
    tolerance = 8 * torch.finfo(ref.dtype).eps * scale
    if cand.exact or not max_error <= tolerance:
        raise SpeedCheckError(
            f"{where}: the forward of {cand.label} ({cand.code}) differs from the reference in "
            f"{mismatches} of {ref.numel()} elements (max |diff| {max_error:.3g})"
        )
    return _Check(mismatches, max_error)


def _check_gradient(cand: Candidate, grad: Tensor, expected: Tensor, where: str) -> None:
    try:
        torch.testing.assert_close(grad, expected, rtol=1e-5, atol=1e-6)
    except AssertionError as error:
        raise SpeedCheckError(
            f"{where}: the gradient of {cand.label} ({cand.code}) differs from hardgrad's: {error}"
        ) from None


# --------------------------------------------------------------------------- running


def _shape(spec: OpSpec, config: SpeedConfig, small: bool = False) -> tuple[int, ...]:
    if small:
        numel = config.small_numel or 1
        cols = config.matrix[1]
        return (max(numel // cols, 1), cols) if spec.family is None else (numel,)
    return config.matrix if spec.family is None else (config.numel,)


def _inputs(spec: OpSpec, shape: tuple[int, ...], settings: BenchSettings) -> tuple[Tensor, Tensor]:
    generator = torch.Generator().manual_seed(settings.seed + sum(map(ord, spec.name)))
    spread = 4.0 if spec.family == "staircase" else 1.0
    x = (torch.randn(shape, generator=generator) * spread).to(settings.device)
    g = torch.randn(shape, generator=generator).to(settings.device)
    return x.requires_grad_(), g


def _step(fn: Callable[[Tensor], Tensor], x: Tensor, g: Tensor) -> Callable[[], None]:
    def step() -> None:
        y = fn(x)
        torch.autograd.grad(y, x, g)

    return step


def _floors(x: Tensor) -> dict[str, Callable[[], None]]:
    source = x.detach()
    out, grad_in = torch.empty_like(source), torch.empty_like(source)

    def floor() -> None:
        out.copy_(source)
        grad_in.copy_(source)

    def floor_alloc() -> None:
        torch.empty_like(source).copy_(source)
        torch.empty_like(source).copy_(source)

    return {"floor": floor, "floor_alloc": floor_alloc}


def _ms(seconds: float) -> float:
    return seconds * 1e3


def _run_mode(
    mode: str,
    spec: OpSpec,
    candidates: list[Candidate],
    x: Tensor,
    g: Tensor,
    ref: Tensor,
    config: SpeedConfig,
    settings: BenchSettings,
    rng: random.Random,
    progress: Progress,
    record: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """Check, measure bytes and time every candidate in one mode.

    ``mode`` is ``"eager"``, ``"compiled"`` (every candidate under ``torch.compile``) or
    ``"small"`` (eager, on the small input).
    """
    where = f"speed/{spec.name}/{mode}"
    steps: dict[str, Callable[[], None]] = {}
    expected: Tensor | None = None
    if mode == "compiled":
        torch._dynamo.reset()
    for cand in candidates:
        entry = record.setdefault(cand.key, {"label": cand.label, "code": cand.code})
        fn = cand.fn
        if mode == "compiled":
            t0 = time.perf_counter()
            try:
                fn, fullgraph = _compile(cand.fn, x, g)
            except Exception as error:  # a candidate that does not compile is reported
                entry["compile_error"] = f"{type(error).__name__}: {str(error).splitlines()[0]}"
                progress.log(
                    f"{spec.name}: {cand.label} failed to compile: {entry['compile_error']}"
                )
                continue
            entry["compile_s"] = time.perf_counter() - t0
            entry["fullgraph"] = fullgraph
        y = fn(x)
        check = _check_forward(cand, y, ref, x, where)
        (grad,) = torch.autograd.grad(y, x, g)
        del y
        if expected is None:
            if cand.key != "hardgrad":
                raise SpeedCheckError(f"{where}: hardgrad's candidate must come first")
            expected = grad
        else:
            _check_gradient(cand, grad, expected, where)
        del grad
        suffix = {"eager": "", "compiled": "_compiled"}.get(mode, f"_{mode}")
        entry[f"forward_mismatches{suffix}"] = check.mismatches
        entry[f"max_forward_error{suffix}"] = check.max_error
        if mode != "small":
            entry[f"bytes_per_element{suffix}"] = saved_bytes_per_element(fn, x)
        steps[cand.key] = _step(fn, x, g)
    del expected
    steps.update(_floors(x))
    for step in steps.values():  # warm-up: allocator, caches, lazy init
        step()
        step()
    times = time_interleaved(
        steps,
        rounds=config.rounds,
        min_run_time=config.min_run_time,
        threads=settings.threads,
        rng=rng,
    )
    medians = {key: _ms(median(ts)) for key, ts in times.items()}
    for cand in candidates:
        if cand.key in times:
            record[cand.key][f"{mode}_ms"] = medians[cand.key]
            record[cand.key][f"{mode}_rounds_ms"] = [_ms(t) for t in times[cand.key]]
    summary = _summarise(candidates, medians, times)
    summary["floor_ms"] = medians["floor"]
    summary["floor_alloc_ms"] = medians["floor_alloc"]
    summary["floor_rounds_ms"] = [_ms(t) for t in times["floor"]]
    summary["x_floor"] = summary["hardgrad_ms"] / medians["floor"]
    return summary


def _summarise(
    candidates: list[Candidate], medians: dict[str, float], times: dict[str, list[float]]
) -> dict[str, Any]:
    alternatives = [c for c in candidates if c.key != "hardgrad" and c.key in medians]
    hg_ms = medians.get("hardgrad", float("nan"))
    summary: dict[str, Any] = {
        "hardgrad_ms": hg_ms,
        "best_alternative": None,
        "best_alternative_label": None,
        "best_alternative_ms": float("nan"),
        "ratio": float("nan"),
        "round_ratios": [],
        "rounds_faster": 0,
    }
    if alternatives and "hardgrad" in times:
        best = min(alternatives, key=lambda c: medians[c.key])
        # Rounds are interleaved, so per-round ratios cancel slow drifts of the machine.
        paired = [h / a for h, a in zip(times["hardgrad"], times[best.key], strict=True)]
        summary.update(
            best_alternative=best.key,
            best_alternative_label=best.label,
            best_alternative_ms=medians[best.key],
            ratio=hg_ms / medians[best.key],
            round_ratios=paired,
            rounds_faster=sum(r <= 1.0 for r in paired),
        )
    return summary


#: Ratios up to this are reported as a tie ("≈") rather than a miss: below the
#: round-to-round noise of a shared machine.
TIE = 1.05


def _compile(
    fn: Callable[[Tensor], Tensor], x: Tensor, g: Tensor
) -> tuple[Callable[[Tensor], Tensor], bool]:
    """``torch.compile(fn, fullgraph=True)``, or with graph breaks if that fails; warmed up."""
    for fullgraph in (True, False):
        compiled = torch.compile(fn, fullgraph=fullgraph, dynamic=False)
        try:
            y = compiled(x)
            torch.autograd.grad(y, x, g)
        except Exception:
            if not fullgraph:
                raise
            continue
        return compiled, fullgraph
    raise AssertionError("unreachable")  # pragma: no cover


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - Windows
        return None


def _resolve_ops(config: SpeedConfig) -> tuple[list[str], list[str]]:
    names = list(OPS.names()) if config.ops is None else list(config.ops)
    for name in names:
        OPS.get(name, "ops")  # ValueError listing the ops
    if not config.compile:
        return names, []
    if config.compile_ops is None:
        return names, names
    for name in config.compile_ops:
        OPS.get(name, "compile_ops")
    return names, [n for n in names if n in config.compile_ops]


def _run_op(
    spec: OpSpec,
    compiled: bool,
    config: SpeedConfig,
    settings: BenchSettings,
    rng: random.Random,
    progress: Progress,
) -> dict[str, Any]:
    """Every mode for one op; its entry of ``results.json``."""
    name = spec.name
    candidates = [
        c
        for c in alternatives_for(spec)
        if c.key == "hardgrad" or config.candidates is None or c.key in config.candidates
    ]
    record: dict[str, dict[str, Any]] = {}
    x, g = _inputs(spec, _shape(spec, config), settings)
    entry: dict[str, Any] = {
        "shape": list(x.shape),
        "numel": x.numel(),
        "dtype": str(x.dtype).removeprefix("torch."),
        "surrogate": _surrogate_label(spec),
        "kwargs": dict(spec.kwargs),
        "candidates": record,
        "compiled": None,
        "small": None,
    }
    ref = spec.reference(x.detach())
    common = (spec, candidates, x, g, ref, config, settings, rng, progress, record)
    entry["eager"] = _run_mode("eager", *common)
    progress.advance(f"{name}: eager done")
    if compiled:
        entry["compiled"] = _run_mode("compiled", *common)
        torch._dynamo.reset()
        progress.advance(f"{name}: compiled done")
    del x, g, ref, common
    gc.collect()
    if config.small_numel:
        xs, gs = _inputs(spec, _shape(spec, config, small=True), settings)
        entry["small_shape"] = list(xs.shape)
        entry["small"] = _run_mode(
            "small",
            spec,
            candidates,
            xs,
            gs,
            spec.reference(xs.detach()),
            config,
            settings,
            rng,
            progress,
            record,
        )
        progress.advance(f"{name}: small done")
    return entry


@task(
    "speed",
    "forward+backward time and bytes saved for backward per op, vs hand-written alternatives",
    default_config,
)
def run(settings: BenchSettings, config: SpeedConfig | None, progress: Progress) -> TaskResult:
    """Run the speed benchmark; see the module docstring."""
    config = config if config is not None else default_config(settings.quick)
    names, compiled_names = _resolve_ops(config)
    rng = random.Random(settings.seed)
    progress.start("speed", len(names) * (2 if config.small_numel else 1) + len(compiled_names))
    t_start = time.perf_counter()
    load_before = _load_average()
    ops: dict[str, Any] = {}
    try:
        for name in names:
            ops[name] = _run_op(
                OPS.get(name), name in compiled_names, config, settings, rng, progress
            )
    finally:
        progress.finish()
    wall = time.perf_counter() - t_start
    data = {
        "ops": ops,
        "compiled_ops": compiled_names,
        "threads": torch.get_num_threads(),
        "load_average_before": load_before,
        "load_average_after": _load_average(),
    }
    result = TaskResult(
        name="speed",
        summary="forward+backward time (ms) and bytes saved for backward, float32 on "
        f"{settings.device}",
        settings={k: v for k, v in dataclasses.asdict(config).items()},
        data=data,
        wall_s=wall,
    )
    result.tables = _tables(ops, names, compiled_names)
    result.notes = _notes(ops, names, compiled_names, config, settings)
    if data["load_average_before"] is not None:
        result.notes.append(
            "1-minute load average of the machine: "
            f"{data['load_average_before']:.2f} before, {data['load_average_after']:.2f} after "
            f"the run (on {available_threads()} cores); other processes share the cores, so "
            "absolute times vary between runs more than the ratios of one run do."
        )
    if settings.out is not None and config.plot:
        figure = _plot(ops, names, settings.out)
        if figure is not None:
            result.figures.append(figure)
    return result


# --------------------------------------------------------------------------- reporting


def _fmt_ms(value: float | None) -> str:
    if value is None or value != value:
        return "n/a"
    return f"{value:.3f}" if value < 10 else f"{value:.1f}"


def _fmt_bytes(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.2f}".rstrip("0").rstrip(".") if value % 1 else f"{value:.0f}"


def _ratio_cell(summary: dict[str, Any]) -> str:
    ratio = summary["ratio"]
    if ratio != ratio:
        return "n/a"
    mark = "✓" if ratio <= 1.0 else ("≈" if ratio <= TIE else "✗")
    return f"{ratio:.2f} {mark} {summary['rounds_faster']}/{len(summary['round_ratios'])}"


_TITLES = {
    "eager": "Eager: hardgrad vs the fastest hand-written alternative",
    "compiled": "torch.compile: every candidate compiled (fullgraph where possible)",
    "small": "Small tensors, eager: the fixed per-call cost (µs)",
}


def _fmt_us(value: float | None) -> str:
    if value is None or value != value:
        return "n/a"
    return f"{value * 1e3:.1f}"


def _summary_table(ops: dict[str, Any], names: list[str], mode: str) -> Table:
    suffix = "" if mode != "compiled" else "_compiled"
    small = mode == "small"
    unit, fmt = ("µs", _fmt_us) if small else ("ms", _fmt_ms)
    columns = [
        "op",
        "surrogate",
        f"hardgrad {unit}",
        f"best alternative ({unit})",
        "ratio (≤ 1), rounds hg faster",
        "× floor",
    ]
    if not small:
        columns.append("bytes/elt saved: hg vs alternatives")
    table = Table(title=_TITLES[mode], columns=columns)
    for name in names:
        entry = ops[name]
        summary = entry[mode]
        if summary is None:
            continue
        record = entry["candidates"]
        best = summary["best_alternative_label"]
        row = [
            name if not small else f"{name} {tuple(entry['small_shape'])}",
            entry["surrogate"],
            fmt(summary["hardgrad_ms"]),
            "-" if best is None else f"{best} {fmt(summary['best_alternative_ms'])}",
            _ratio_cell(summary),
            f"{summary['x_floor']:.2f}",
        ]
        if not small:
            hg_bytes = record["hardgrad"].get(f"bytes_per_element{suffix}")
            alt_bytes = ", ".join(
                f"{c['label']} {_fmt_bytes(c.get(f'bytes_per_element{suffix}'))}"
                for key, c in record.items()
                if key != "hardgrad" and f"bytes_per_element{suffix}" in c
            )
            row.append(f"{_fmt_bytes(hg_bytes)} vs {alt_bytes or '-'}")
        table.rows.append(row)
    return table


def _detail_table(ops: dict[str, Any], names: list[str], compiled_names: list[str]) -> Table:
    table = Table(
        title="Every candidate (median over rounds; bytes saved for backward per element)",
        columns=[
            "op",
            "candidate",
            "code",
            "eager ms",
            "compiled ms",
            "small µs",
            "bytes/elt eager",
            "bytes/elt compiled",
        ],
    )
    for name in names:
        entry = ops[name]
        is_compiled = name in compiled_names
        for c in entry["candidates"].values():
            compiled = "-" if not is_compiled else _fmt_ms(c.get("compiled_ms"))
            if is_compiled and "compile_error" in c:
                compiled = "compile failed"
            elif is_compiled and c.get("fullgraph") is False:
                compiled += " (graph breaks)"
            table.rows.append(
                [
                    name,
                    c["label"],
                    f"`{c['code']}`",
                    _fmt_ms(c.get("eager_ms")),
                    compiled,
                    _fmt_us(c.get("small_ms")) if entry["small"] else "-",
                    _fmt_bytes(c.get("bytes_per_element")),
                    _fmt_bytes(c.get("bytes_per_element_compiled")) if is_compiled else "-",
                ]
            )
        comp, small = entry["compiled"], entry["small"]
        table.rows.append(
            [
                name,
                "floor",
                "`out.copy_(x); grad.copy_(x)`",
                _fmt_ms(entry["eager"]["floor_ms"]),
                _fmt_ms(comp["floor_ms"]) if comp else "-",
                _fmt_us(small["floor_ms"]) if small else "-",
                "",
                "",
            ]
        )
    return table


def _tables(ops: dict[str, Any], names: list[str], compiled_names: list[str]) -> list[Table]:
    tables = [_summary_table(ops, names, "eager")]
    if compiled_names:
        tables.append(_summary_table(ops, compiled_names, "compiled"))
    smalls = [n for n in names if ops[n]["small"] is not None]
    if smalls:
        tables.append(_summary_table(ops, smalls, "small"))
    tables.append(_detail_table(ops, names, compiled_names))
    return tables


def _notes(
    ops: dict[str, Any],
    names: list[str],
    compiled_names: list[str],
    config: SpeedConfig,
    settings: BenchSettings,
) -> list[str]:
    rows, cols = config.matrix
    notes = [
        f"float32 on {settings.device}, {torch.get_num_threads()} threads; elementwise ops on "
        f"{config.numel:,} elements, one_hot_argmax/topk_mask on ({rows:,}, {cols}) logits "
        f"along the last dim; timed statement `y = fn(x); torch.autograd.grad(y, x, g)`.",
        f"{config.rounds} interleaved rounds (order shuffled each round), "
        f"blocked_autorange(min_run_time={config.min_run_time}) per candidate per round; "
        "median over rounds.",
        "ratio = hardgrad / fastest alternative (target ≤ 1.0); × floor = hardgrad / the "
        "floor, two plain copies of x's size into preallocated tensors (forward output and "
        "input gradient), timed in the same rounds.",
        "Before timing, every alternative's forward was checked against the plain-torch "
        "reference (bit for bit; the detach trick within a few ulps) and its gradient "
        "against hardgrad's (allclose, rtol 1e-5, atol 1e-6); hardgrad's forward is "
        "bit-identical to the reference in every mode.",
        "Bytes saved for backward: distinct storages seen by "
        "torch.autograd.graph.saved_tensors_hooks, per element of x (a saved input counts: "
        "it keeps x alive).",
    ]
    floors = [ops[n]["eager"]["floor_ms"] for n in names]
    allocs = [ops[n]["eager"]["floor_alloc_ms"] for n in names]
    notes.append(
        f"Floor (eager rounds) ranged {min(floors):.3f}-{max(floors):.3f} ms; the same two copies "
        f"into freshly allocated tensors (page faults included) {min(allocs):.3f}-"
        f"{max(allocs):.3f} ms."
    )
    rounding = []
    for name in names:
        for c in ops[name]["candidates"].values():
            count = c.get("forward_mismatches", 0)
            if count:
                rounding.append(
                    f"{name} {count:,}/{ops[name]['numel']:,} (≤ {c['max_forward_error']:.2g})"
                )
    if rounding:
        notes.append(
            "The detach trick's forward is not bit-exact: elements that differ from the hard "
            "op, with the largest |difference|: " + "; ".join(rounding) + "."
        )
    if config.compile:
        skipped = [n for n in names if n not in compiled_names]
        compile_s = sum(
            c.get("compile_s", 0.0) for n in compiled_names for c in ops[n]["candidates"].values()
        )
        note = (
            f"torch.compile (inductor, dynamic=False): compilation and warm-up ({compile_s:.0f} s "
            "in all) excluded from the timings; each op's floor is re-timed in its compiled rounds."
        )
        if skipped:
            note += " Not compiled in this setting: " + ", ".join(skipped) + "."
        notes.append(note)
        broken = [
            f"{n}/{c['label']}"
            for n in compiled_names
            for c in ops[n]["candidates"].values()
            if c.get("fullgraph") is False
        ]
        if broken:
            notes.append(
                "Compiled with graph breaks (fullgraph=True failed): " + ", ".join(broken) + "."
            )
        failed = [
            f"{n}/{c['label']} ({c['compile_error']})"
            for n in compiled_names
            for c in ops[n]["candidates"].values()
            if "compile_error" in c
        ]
        if failed:
            notes.append("Failed to compile, not timed: " + "; ".join(failed) + ".")
    notes.append(
        "ratio marks: ✓ at most 1.0; ≈ within 5 % above (a tie on this noisy machine); ✗ "
        "more. k/n: rounds in which hardgrad beat that alternative (paired within a round)."
    )
    if config.small_numel:
        notes.append(
            f"Small tensors: {config.small_numel:,} elements (selection ops "
            f"({max(config.small_numel // cols, 1)}, {cols})), eager; at this size the time "
            "is the fixed cost of a call (Python, autograd bookkeeping), not memory traffic."
        )
    for mode in ("eager", "compiled", "small"):
        missed = [
            f"{n} ({ops[n][mode]['ratio']:.2f}× {ops[n][mode]['best_alternative_label']}, "
            f"faster in {ops[n][mode]['rounds_faster']}/{len(ops[n][mode]['round_ratios'])} rounds)"
            for n in names
            if ops[n][mode] is not None and ops[n][mode]["ratio"] > 1.0
        ]
        if missed:
            notes.append(f"{mode}: slower than the fastest alternative: " + ", ".join(missed) + ".")
    spreads = []
    for name in names:
        rounds = ops[name]["candidates"]["hardgrad"].get("eager_rounds_ms", [])
        if len(rounds) >= 2:
            spreads.append((max(rounds) - min(rounds)) / median(rounds))
    if spreads:
        notes.append(
            f"Noise: hardgrad's per-round times spread by {100 * median(spreads):.0f} % of the "
            "median (median over ops of (max - min) / median); per-round figures are in "
            "results.json."
        )
    return notes


def _plot(ops: dict[str, Any], names: list[str], out: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 3.5))
    width = 0.4
    positions = list(range(len(names)))
    eager = [ops[n]["eager"]["ratio"] for n in names]
    compiled = [ops[n]["compiled"]["ratio"] if ops[n]["compiled"] else float("nan") for n in names]
    ax.bar([p - width / 2 for p in positions], eager, width, label="eager")
    ax.bar([p + width / 2 for p in positions], compiled, width, label="torch.compile")
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xticks(positions)
    ax.set_xticklabels(names, rotation=30, ha="right")
    ax.set_ylabel("hardgrad / fastest alternative")
    ax.set_title("speed: forward+backward time ratio (lower is better, target ≤ 1)")
    ax.legend()
    fig.tight_layout()
    name = "speed_ratio.png"
    fig.savefig(out / name, dpi=120)
    plt.close(fig)
    return name
