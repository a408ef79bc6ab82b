r"""``torch.nn.Module`` wrappers over the hard ops, for use inside ``nn.Sequential`` models.

Each module holds its settings (surrogate, bounds, temperature) and calls the matching
function of :mod:`hardgrad.ops` or of its family; see there for the forward and backward
math. One private module per family:

* ``_hard``: the hard ops as layers; ``_stochastic``, ``_anneal``: stochastic units and
  temperature schedules (Jang et al. 2017, https://arxiv.org/abs/1611.01144).
* ``_quantize``, ``_qat``, ``_pact``: LSQ fake quantization (Esser et al. 2020,
  https://arxiv.org/abs/1902.08153), quantized layers and ``quantize_``, PACT (Choi et al.
  2018, https://arxiv.org/abs/1805.06085).
* ``_binary``: binary and ternary layers (Courbariaux et al. 2016,
  https://arxiv.org/abs/1602.02830; XNOR-Net, https://arxiv.org/abs/1603.05279; TWN,
  https://arxiv.org/abs/1605.04711).
* ``_spiking``: leaky integrate-and-fire neurons with surrogate gradients (Neftci et al.
  2019, https://arxiv.org/abs/1901.09948).
* ``_vq``: vector quantization with a codebook (van den Oord et al. 2017,
  https://arxiv.org/abs/1711.00937), residual VQ (SoundStream,
  https://arxiv.org/abs/2107.03312), FSQ (https://arxiv.org/abs/2309.15505) and LFQ
  (https://arxiv.org/abs/2310.05737).
* ``_moe``: a mixture-of-experts layer (Shazeer et al. 2017, https://arxiv.org/abs/1701.06538;
  Fedus et al. 2021, https://arxiv.org/abs/2101.03961).
* ``_l0``, ``_l0_layers``: Hard Concrete gates for L0 regularization, and linear and
  convolutional layers with gated weights (Louizos et al. 2018,
  https://arxiv.org/abs/1712.01312).

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
from ._l0_layers import L0Conv2d, L0Linear
from ._moe import MoE
from ._pact import PACT
from ._qat import QuantConv2d, QuantLinear
from ._qat_convert import quantize_
from ._quantize import Quantize
from ._spiking import LIF
from ._stochastic import Bernoulli, Categorical
from ._vq import VectorQuantize
from ._vq_residual import ResidualVQ
from ._vq_scalar import FSQ, LFQ

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
    "L0Conv2d",
    "L0Linear",
    "MoE",
    "OneHotArgmax",
    "QuantConv2d",
    "QuantLinear",
    "Quantize",
    "ResidualVQ",
    "Round",
    "Sign",
    "VectorQuantize",
    "anneal",
    "clip_latent_weights_",
    "clip_latent_weights_after_step",
    "quantize_",
]
