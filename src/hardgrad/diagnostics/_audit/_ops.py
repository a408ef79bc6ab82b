"""What :func:`hardgrad.diagnostics.audit` watches for: each torch call's family, its
display name and the advice that goes with it.

Every torch function or tensor method is classified once (the result is cached per
function object), so the per-call cost of the watcher is one dictionary lookup for the
calls that cannot lose a gradient, which are nearly all of them.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import torch
from torch.utils._pytree import tree_flatten


class Family(IntEnum):
    """How a torch call can change gradient flow (``IGNORE``: it cannot)."""

    IGNORE = 0
    BACKWARD = 1  # Tensor.backward, torch.autograd.backward: fills .grad
    GRAD = 2  # torch.autograd.grad: returns gradients
    ZERO = 3  # round, sign...: the output has a graph, the derivative is 0
    COMPARE = 4  # x > y...: a bool, no graph
    INDEX = 5  # argmax...: integer indices, no graph
    TUPLE_INDEX = 6  # sort, topk, max(dim)...: values keep a graph, indices do not
    CAST = 7  # .long(), .to(torch.int64)...
    DETACH = 8  # .detach()
    DATA_GET = 9  # x.data
    DATA_SET = 10  # x.data = value
    LOG = 11  # .item(), .tolist(), .numpy(): the value leaves autograd
    SAMPLE = 12  # torch.bernoulli, torch.multinomial...: a random draw
    SAMPLE_PRIMITIVE = 13  # what torch.distributions' .sample() calls (rand, normal_...)
    REQUIRES_GRAD = 14  # x.requires_grad_() / x.requires_grad = True: a leaf is born
    NO_GRAD_CALL = 15  # a module with trainable parameters called under torch.no_grad()
    COPY = 16  # torch.tensor(t) / t.new_tensor(...): a copy of the values without the graph


#: name -> (kind, suggestion) of the ops whose derivative is zero almost everywhere.
ZERO_OPS: dict[str, str] = {
    "round": "hg.round(x): the same forward, an identity straight-through backward "
    "(hg.quantize for fake quantization with a learned LSQ scale)",
    "floor": "hg.floor(x): the same forward, an identity straight-through backward",
    "ceil": "hg.ceil(x): the same forward, an identity straight-through backward",
    "trunc": "hg.trunc(x): the same forward, an identity straight-through backward",
    "fix": "hg.trunc(x): the same forward, an identity straight-through backward",
    "sign": "hg.sign(x): the same forward with a clipped straight-through backward "
    "(surrogate='identity' for the plain one), or hg.binarize(x) for +-1 without 0",
    "sgn": "hg.sign(x): the same forward with a clipped straight-through backward",
    "heaviside": "hg.heaviside(x, surrogate=...): the same step with a surrogate gradient",
}
COMPARISONS = {
    "gt", "lt", "ge", "le", "eq", "ne", "greater", "less", "greater_equal", "less_equal",
    "not_equal", "isclose",
}  # fmt: skip
COMPARISON_HINT = (
    "a comparison's bool result has no gradient: for a trainable step use "
    "hg.heaviside(x - threshold, surrogate=...) (a spike or gate with a surrogate gradient), "
    "hg.binarize / hg.sign for +-1, or hg.bernoulli(logits) for a random binary unit"
)
INDICES: dict[str, str] = {
    "argmax": "hg.one_hot_argmax(logits): the one-hot of the argmax forward, the softmax's "
    "gradient backward (or hg.categorical for a random choice)",
    "argmin": "if it picks the nearest codebook vector (VQ-VAE), hg.vector_quantize(z, "
    "codebook) does the lookup with a straight-through (or rotation-trick) gradient to the "
    "encoder (or keep yours and write the copy as hg.straight_through(z_q)(z)); the codebook "
    "learns from a loss on z_q or hg.nn.VectorQuantize's EMA",
    "argsort": "hg.rank(x) (exact ranks, soft-rank gradient) or hg.sort(x) (sorted values, "
    "soft-sort gradient), hg.soft_rank / hg.soft_sort for the relaxations, "
    "hg.topk_mask(x, k) for a differentiable selection of the k largest",
    "bucketize": "hg.quantize or hg.round on a rescaled input keep a straight-through gradient",
    "searchsorted": "hg.quantize or hg.round on a rescaled input keep a straight-through gradient",
}
TUPLE_INDICES: dict[str, str] = {
    "sort": "the sorted values keep a gradient, the indices do not: use the values, "
    "hg.rank(x) for ranks with a gradient (hg.sort(x) spreads the values' gradient like a "
    "soft sort), or hg.topk_mask(x, k) for a differentiable selection",
    "topk": "the values keep a gradient, the indices do not: use the values (a "
    "mixture-of-experts router: weight each chosen expert by its top-k probability, or let "
    "hg.topk_route(logits, k) return gates with a gradient), or hg.topk_mask(x, k) for a "
    "differentiable selection, hg.subset(logits, k) for a random k-subset; a top-k or other "
    "combinatorial solver inside a model: hg.imle(solver, k=k), hg.perturbed(solver) or "
    "hg.blackbox(solver, lam=...)",
    "max": "the values keep a gradient, the indices do not: use the values, or "
    "hg.one_hot_argmax(logits) for a one-hot choice with a softmax gradient; if it picks "
    "the nearest codebook vector (the max of minus the distances), hg.vector_quantize(z, "
    "codebook) does the lookup with a straight-through gradient to the encoder",
    "min": "the values keep a gradient, the indices do not: use the values; if it picks "
    "the nearest codebook vector, hg.vector_quantize(z, codebook) does the lookup with a "
    "straight-through gradient to the encoder",
    "median": "the values keep a gradient, the indices do not: use the values",
    "mode": "the values keep a gradient, the indices do not: use the values",
    "kthvalue": "the values keep a gradient, the indices do not: use the values",
}
INTEGER_CASTS = {"long", "int", "short", "byte", "char", "bool"}
CAST_HINT = (
    "an integer or bool cast has no gradient: hg.round / hg.floor / hg.binarize keep a float "
    "result with a straight-through gradient"
)
DETACH_HINT = (
    "detach() stops the gradient: remove it if what it cuts should be trained; for a "
    "straight-through estimator write hg.straight_through(hard)(soft)"
)
DATA_HINT = (
    "x.data is a detached view (like x.detach()): use x itself so that the gradient "
    "reaches it; for a hard forward with a straight-through backward use hg.sign(x) / "
    "hg.round(x)"
)
COPY_HINT = (
    "torch.tensor(...) copies the values and leaves the graph behind: use the tensor itself, "
    "torch.stack / torch.cat for a list of tensors, or .clone() for a copy that keeps the "
    "gradient"
)
LOG_OPS = {"item", "tolist", "numpy", "__float__", "__int__", "__index__", "__bool__"}
LOG_HINT = (
    "the value left autograd as a Python number or an array: build the loss from tensors "
    "(fine for logging)"
)
SAMPLERS = {"bernoulli", "multinomial", "poisson", "binomial"}
SAMPLE_HINT = (
    "a random draw has no gradient to its probabilities: hg.bernoulli(logits, "
    "estimator=...) / hg.categorical(logits, estimator=...) keep the draw and give the "
    "logits a gradient; for REINFORCE keep the draw and add the score-function term "
    "dist.log_prob(action) * advantage to the loss (hg.expectation does it with a baseline)"
)
DIST_SAMPLE_HINT = (
    "sample() draws without a gradient: for REINFORCE add -dist.log_prob(action) * "
    "advantage to the loss, use rsample() where the distribution has one, or "
    "hg.categorical / hg.bernoulli (pathwise estimators) for discrete draws"
)
#: In-place and factory calls torch.distributions' samplers make; seen from user code they
#: are ordinary random numbers.
SAMPLE_PRIMITIVES = {
    "multinomial", "bernoulli", "poisson", "normal", "binomial", "_standard_gamma",
    "_sample_dirichlet", "rand", "randn", "rand_like", "randn_like", "randint", "empty",
    "uniform_", "normal_", "exponential_", "geometric_", "log_normal_", "cauchy_", "random_",
    "bernoulli_",
}  # fmt: skip
SYMBOLS = {
    "gt": ">", "lt": "<", "ge": ">=", "le": "<=", "eq": "==", "ne": "!=", "pow": "**",
    "rpow": "**", "add": "+", "radd": "+", "sub": "-", "rsub": "-", "mul": "*", "rmul": "*",
    "truediv": "/", "rtruediv": "/", "div": "/", "floordiv": "//", "rfloordiv": "//",
    "mod": "%", "matmul": "@", "rmatmul": "@", "and": "&", "or": "|", "xor": "^",
    "invert": "~", "neg": "-", "getitem": "[...]", "setitem": "[...] =",
}  # fmt: skip

#: Autograd node classes whose backward multiplies by zero (used to tell whether a
#: tensor gets gradient by a path that does not go through one of them).
ZERO_NODE_PREFIXES = (
    "RoundBackward", "FloorBackward", "CeilBackward", "TruncBackward", "SignBackward",
    "SgnBackward", "BernoulliBackward", "PoissonBackward",
)  # fmt: skip

_DISPATCH_NAMES = {"__get__", "__set__", "__delete__"}
_TENSOR_MODULES = ("torch._tensor", "torch._C")


def raw_name(func: Any) -> str:
    return getattr(func, "__name__", None) or type(func).__name__


def base_name(func: Any) -> str:
    """``round`` for ``torch.round``, ``Tensor.round_`` and ``Tensor.__round__``; the
    attribute for a property (``data`` for ``x.data``)."""
    name = raw_name(func)
    if name in _DISPATCH_NAMES:
        return str(getattr(getattr(func, "__self__", None), "__name__", name))
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
        if name.startswith("i") and name[1:] in SYMBOLS:  # __iadd__ -> add
            name = name[1:]
    if name.endswith("_") and not name.startswith("_"):
        name = name[:-1]
    return name


def display(func: Any) -> str:
    """A name for reports: ``torch.round``, ``Tensor.round``, ``operator >``,
    ``Tensor.data`` (a read), ``Tensor.data =`` (a write)."""
    raw = raw_name(func)
    if raw in _DISPATCH_NAMES:
        attribute = base_name(func)
        return f"Tensor.{attribute} =" if raw == "__set__" else f"Tensor.{attribute}"
    if raw.startswith("__") and raw.endswith("__"):
        core = raw[2:-2]
        core = core[1:] if core.startswith("i") and core[1:] in SYMBOLS else core
        if core in SYMBOLS:
            return f"operator {SYMBOLS[core]}"
        return f"Tensor.{raw}"
    module = getattr(func, "__module__", None) or ""
    if getattr(torch.Tensor, raw, None) is func or module.startswith(_TENSOR_MODULES):
        if module in ("torch", "torch.functional") and getattr(torch, raw, None) is func:
            return f"torch.{raw}"
        return f"Tensor.{raw}"
    if not module or module.startswith("torch._C") or module in ("torch", "torch.functional"):
        return f"torch.{raw}"
    return f"{module}.{raw}"


def classify(func: Any) -> Family:
    """The family of a torch call (cached by the caller per function object)."""
    raw = raw_name(func)
    if raw in _DISPATCH_NAMES:
        attribute = base_name(func)
        if attribute == "data":
            return Family.DATA_GET if raw == "__get__" else Family.DATA_SET
        if attribute == "requires_grad" and raw == "__set__":
            return Family.REQUIRES_GRAD
        return Family.IGNORE
    if func is torch.autograd.grad:
        return Family.GRAD
    if raw == "backward" and (func is torch.Tensor.backward or func is torch.autograd.backward):
        return Family.BACKWARD
    if raw in LOG_OPS:
        return Family.LOG
    name = base_name(func)
    if name in ZERO_OPS:
        return Family.ZERO
    if name in COMPARISONS:
        return Family.COMPARE
    if name in INDICES:
        return Family.INDEX
    if name in TUPLE_INDICES:
        return Family.TUPLE_INDEX
    if name in INTEGER_CASTS or name in ("to", "type"):
        return Family.CAST
    if name == "detach":
        return Family.DETACH
    if name in SAMPLERS or raw in SAMPLE_PRIMITIVES:
        return Family.SAMPLE if name in SAMPLERS else Family.SAMPLE_PRIMITIVE
    if raw == "requires_grad_":
        return Family.REQUIRES_GRAD
    if func is torch.tensor or raw == "new_tensor":
        return Family.COPY
    return Family.IGNORE


def casts_to_non_float(func: Any, args: Any, kwargs: Any) -> bool:
    """Whether ``.long()``-like or ``.to(dtype)``-like call makes an integer or bool."""
    name = base_name(func)
    if name in INTEGER_CASTS:
        return True
    leaves, _ = tree_flatten((args[1:], kwargs))
    return any(
        isinstance(x, torch.dtype) and not (x.is_floating_point or x.is_complex) for x in leaves
    )


def suggestion(family: Family, func: Any) -> str:
    """The fix for a call that is found to be a problem."""
    by_name = _HINTS_BY_NAME.get(family)
    if by_name is not None:
        return by_name[base_name(func)]
    return _FAMILY_HINTS.get(family, "")


#: Families whose fix depends on the op's name, and those with one fix for the family.
_HINTS_BY_NAME: dict[Family, dict[str, str]] = {
    Family.ZERO: ZERO_OPS,
    Family.INDEX: INDICES,
    Family.TUPLE_INDEX: TUPLE_INDICES,
}
_FAMILY_HINTS: dict[Family, str] = {
    Family.COMPARE: COMPARISON_HINT,
    Family.CAST: CAST_HINT,
    Family.DETACH: DETACH_HINT,
    Family.DATA_GET: DATA_HINT,
    Family.LOG: LOG_HINT,
    Family.SAMPLE: SAMPLE_HINT,
    Family.COPY: COPY_HINT,
}


def kind_of(family: Family) -> str:
    return "zero_gradient" if family in (Family.ZERO, Family.COMPARE) else "graph_cut"


def op_label(family: Family, func: Any) -> str:
    """The ``op`` of a finding: the display name, with what makes it lose gradient."""
    shown = display(func)
    if family is Family.COMPARE:
        return f"comparison {shown}"
    if family in (Family.INDEX, Family.TUPLE_INDEX):
        return f"{shown} indices"
    if family is Family.CAST:
        return f"integer/bool cast {shown}"
    if family is Family.SAMPLE:
        return f"{shown} (random draw)"
    if family is Family.COPY:
        return f"{shown} (copy without graph)"
    return shown


def is_zero_node(node: Any) -> bool:
    """Whether an autograd node is torch's own ``round``/``sign``/... backward (a custom
    ``autograd.Function`` called ``Round`` has a node of the same name: not this)."""
    return type(node).__name__.startswith(ZERO_NODE_PREFIXES) and not isinstance(
        node, torch.autograd.function.BackwardCFunction
    )


def distribution_tensors(dist: Any) -> list[torch.Tensor]:
    """The tensors that require grad among a distribution's attributes (one level into a
    wrapped ``base_dist``)."""
    found: dict[int, torch.Tensor] = {}
    for owner in (dist, getattr(dist, "base_dist", None)):
        for value in getattr(owner, "__dict__", {}).values():
            if isinstance(value, torch.Tensor) and value.requires_grad:
                found[id(value)] = value
    return list(found.values())


def hard_values(value: Any) -> str | None:
    """What a tensor written through ``.data`` holds: ``"sign"`` (only -1, 0 and 1, some
    -1), ``"scaled sign"`` (+-alpha per output row, XNOR-Net's alpha * sign(W)),
    ``"integer"`` (whole numbers beyond 0 and 1), else None."""
    if not isinstance(value, torch.Tensor) or not value.is_floating_point() or value.numel() < 2:
        return None
    v = value.detach()
    if not bool(torch.isfinite(v).all()):
        return None
    if bool(((v == 1) | (v == -1) | (v == 0)).all()) and bool((v == -1).any()):
        return "sign"
    if bool((v == torch.round(v)).all()) and bool(((v != 0) & (v != 1)).any()):
        return "integer"
    magnitude = v.abs()
    rows = magnitude.reshape(magnitude.shape[0], -1) if v.dim() > 1 else magnitude.reshape(1, -1)
    if rows.shape[1] > 1 and bool((rows == rows.amax(dim=1, keepdim=True)).all()):
        return "scaled sign"
    return None
