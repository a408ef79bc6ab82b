"""hardgrad: gradients through hard, non-differentiable operations in PyTorch.

>>> import torch, hardgrad as hg
>>> x = torch.tensor([0.4, 1.6], requires_grad=True)
>>> hg.round(x).sum().backward()
>>> x.grad
tensor([1., 1.])

Every submodule and every name of ``__all__`` is imported on first use (``import hardgrad``
alone imports neither torch nor a submodule, so the ``hardgrad`` command's ``--help`` is
quick); ``import hardgrad.sorting`` and the like import a submodule at once.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:  # what the lazy names below resolve to, for type checkers and IDEs
    from . import (
        diagnostics,
        estimators,
        gates,
        nn,
        ops,
        policy,
        routing,
        solvers,
        sorting,
        stochastic,
        subsets,
        surrogates,
        testing,
        vq,
    )
    from ._core.validation import set_validation, validation_enabled
    from .gates import hard_concrete
    from .ops import (
        binarize,
        ceil,
        clamp,
        floor,
        heaviside,
        one_hot_argmax,
        quantize,
        round,
        sign,
        stochastic_round,
        straight_through,
        ternarize,
        topk_mask,
        trunc,
    )
    from .routing import topk_route
    from .solvers import blackbox, identity_solver, imle, perturbed
    from .sorting import rank, soft_rank, soft_sort, sort
    from .stochastic import bernoulli, categorical, noisy_rectifier, stochastic_times_smooth
    from .stochastic._expectation import expectation
    from .subsets import subset
    from .vq import vector_quantize

#: The public submodules, imported when first read as ``hardgrad.<name>``.
_SUBMODULES = frozenset(
    {
        "diagnostics",
        "estimators",
        "gates",
        "nn",
        "ops",
        "policy",
        "routing",
        "solvers",
        "sorting",
        "stochastic",
        "subsets",
        "surrogates",
        "testing",
        "vq",
    }
)

#: The module each top-level function comes from (relative to this package).
_FROM = {
    "expectation": ".stochastic._expectation",
    "set_validation": "._core.validation",
    "validation_enabled": "._core.validation",
    "hard_concrete": ".gates",
    "topk_route": ".routing",
    "subset": ".subsets",
    "vector_quantize": ".vq",
    **dict.fromkeys(
        [
            "binarize",
            "ceil",
            "clamp",
            "floor",
            "heaviside",
            "one_hot_argmax",
            "quantize",
            "round",
            "sign",
            "stochastic_round",
            "straight_through",
            "ternarize",
            "topk_mask",
            "trunc",
        ],
        ".ops",
    ),
    **dict.fromkeys(("blackbox", "identity_solver", "imle", "perturbed"), ".solvers"),
    **dict.fromkeys(("rank", "soft_rank", "soft_sort", "sort"), ".sorting"),
    **dict.fromkeys(
        ("bernoulli", "categorical", "noisy_rectifier", "stochastic_times_smooth"), ".stochastic"
    ),
}


def __getattr__(name: str) -> Any:
    """A public submodule or function, imported on first use and then kept here."""
    if name in _SUBMODULES:
        value: Any = importlib.import_module(f".{name}", __name__)
    elif name in _FROM:
        value = getattr(importlib.import_module(_FROM[name], __name__), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "__version__",
    "bernoulli",
    "binarize",
    "blackbox",
    "categorical",
    "ceil",
    "clamp",
    "diagnostics",
    "estimators",
    "expectation",
    "floor",
    "gates",
    "hard_concrete",
    "heaviside",
    "identity_solver",
    "imle",
    "nn",
    "noisy_rectifier",
    "one_hot_argmax",
    "ops",
    "perturbed",
    "policy",
    "quantize",
    "rank",
    "round",
    "routing",
    "set_validation",
    "sign",
    "soft_rank",
    "soft_sort",
    "solvers",
    "sort",
    "sorting",
    "stochastic",
    "stochastic_round",
    "stochastic_times_smooth",
    "straight_through",
    "subset",
    "subsets",
    "surrogates",
    "ternarize",
    "testing",
    "topk_mask",
    "topk_route",
    "trunc",
    "validation_enabled",
    "vector_quantize",
    "vq",
]
