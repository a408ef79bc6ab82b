"""hardgrad: gradients through hard, non-differentiable operations in PyTorch.

>>> import torch, hardgrad as hg
>>> x = torch.tensor([0.4, 1.6], requires_grad=True)
>>> hg.round(x).sum().backward()
>>> x.grad
tensor([1., 1.])
"""

from . import diagnostics, estimators, nn, ops, stochastic, surrogates, testing, vq
from ._expectation import expectation
from ._validation import set_validation, validation_enabled
from ._version import __version__
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
from .stochastic import bernoulli, categorical, noisy_rectifier, stochastic_times_smooth
from .vq import vector_quantize

__all__ = [
    "__version__",
    "bernoulli",
    "binarize",
    "categorical",
    "ceil",
    "clamp",
    "diagnostics",
    "estimators",
    "expectation",
    "floor",
    "heaviside",
    "nn",
    "noisy_rectifier",
    "one_hot_argmax",
    "ops",
    "quantize",
    "round",
    "set_validation",
    "sign",
    "stochastic",
    "stochastic_round",
    "stochastic_times_smooth",
    "straight_through",
    "surrogates",
    "ternarize",
    "testing",
    "topk_mask",
    "trunc",
    "validation_enabled",
    "vector_quantize",
    "vq",
]
