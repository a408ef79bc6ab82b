"""hardgrad: gradients through hard, non-differentiable operations in PyTorch.

>>> import torch, hardgrad as hg
>>> x = torch.tensor([0.4, 1.6], requires_grad=True)
>>> hg.round(x).sum().backward()
>>> x.grad
tensor([1., 1.])
"""

from . import (
    diagnostics,
    estimators,
    gates,
    nn,
    ops,
    routing,
    solvers,
    sorting,
    stochastic,
    surrogates,
    testing,
    vq,
)
from ._expectation import expectation
from ._validation import set_validation, validation_enabled
from ._version import __version__
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
from .subsets import subset
from .vq import vector_quantize

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
