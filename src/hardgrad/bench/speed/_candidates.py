"""The hand-written alternatives the ``speed`` benchmark times hardgrad against.

For each op, the code people write by hand for the same forward and backward: the detach
trick, a classic ``torch.autograd.Function`` that saves its input (written the way
tutorials write it), and PyTorch's own op where one has the same semantics. Ops without
an entry in :data:`ALTERNATIVES` are timed alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ...ops import OpSpec, soft_topk_mask


class SpeedCheckError(AssertionError):
    """An alternative does not compute what hardgrad computes: the timing would be unfair."""


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


def surrogate_label(spec: OpSpec) -> str:
    """How the table names the op's backward."""
    return spec.default_surrogate or _SELECTION_SURROGATE.get(spec.name, "-")
