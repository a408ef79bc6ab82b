r"""``torch.nn.Module`` wrappers over the hard ops, for use inside ``nn.Sequential`` models.

Each module holds its settings (surrogate, bounds, temperature) and calls the matching
function of :mod:`hardgrad.ops`; see there for the forward and backward math.

>>> import torch, hardgrad as hg
>>> model = torch.nn.Sequential(torch.nn.Linear(4, 3), hg.nn.Sign(surrogate="tanh"))
>>> model
Sequential(
  (0): Linear(in_features=4, out_features=3, bias=True)
  (1): Sign(surrogate=Tanh(slope=1.0))
)
"""

from ._anneal import Anneal, anneal
from ._binary import (
    BinaryConv2d,
    BinaryLinear,
    clip_latent_weights_,
    clip_latent_weights_after_step,
)
from ._hard import Binarize, Clamp, Heaviside, OneHotArgmax, Round, Sign
from ._l0 import HardConcreteGate
from ._moe import MoE
from ._pact import PACT
from ._qat import QuantConv2d, QuantLinear, quantize_
from ._quantize import Quantize
from ._spiking import LIF
from ._stochastic import Bernoulli, Categorical
from ._vq import FSQ, LFQ, VectorQuantize

__all__ = [
    "FSQ",
    "LFQ",
    "LIF",
    "PACT",
    "Anneal",
    "Bernoulli",
    "Binarize",
    "BinaryConv2d",
    "BinaryLinear",
    "Categorical",
    "Clamp",
    "HardConcreteGate",
    "Heaviside",
    "MoE",
    "OneHotArgmax",
    "QuantConv2d",
    "QuantLinear",
    "Quantize",
    "Round",
    "Sign",
    "VectorQuantize",
    "anneal",
    "clip_latent_weights_",
    "clip_latent_weights_after_step",
    "quantize_",
]
