r"""The ``snn`` benchmark: a rate-coded spiking MLP on the digits, one run per step surrogate.

Each image (scikit-learn's 8x8 digits, ``x/16``, or the images of ``--data``) is presented
for ``T = 25`` time steps as Poisson-like spike trains: at every step pixel :math:`i`
spikes with probability :math:`x_i` (Bernoulli rate coding, drawn from a seeded generator).
The network is ``Linear(64, 128) -> LIF -> Linear(128, 10) -> LIF``
(:class:`hardgrad.nn.LIF`, :math:`\beta = 0.9`, threshold 1, reset by subtraction,
reset detached: snnTorch's ``Leaky`` defaults), run with :meth:`hardgrad.nn.LIF.sequence`
over time. The prediction is the output neuron that spikes most; the loss is the
cross-entropy of the output spike counts over the ``T`` steps (a rate code), trained by
back-propagation through time with Adam (Neftci, Mostafa & Zenke 2019,
https://arxiv.org/abs/1901.09948).

The only thing that changes between rows is the surrogate derivative of the spike,
:math:`\partial s_t / \partial m_t = \sigma'(m_t - \theta)`: every surrogate of the
registry that serves step functions, at its default setting (for ``fast_sigmoid`` the slope
25 of snnTorch's, SuperSpike's; ``atan`` with :math:`\alpha = 2`, snnTorch's default), plus
``sigmoid`` at slope 25 (snnTorch's ``surrogate.sigmoid()``; hardgrad's default slope is 1).
The table gives test accuracy (mean ± std over seeds), the mean spike rate of the hidden
layer (spikes per neuron per step, test set), and the milliseconds per training step
(forward and backward of one batch over all ``T`` steps). A surrogate *trains* when its
mean test accuracy is within ``close_to_best`` (5 pp) of the best surrogate's, *partly*
when it reaches ``trains_at`` (50 %, five times chance) but not that, and *does not train*
below; the notes name them.

Wall time on two shared cores: 54 s for the full run (3 seeds, 10 epochs, 10 surrogates),
6 s with ``--quick`` (1 seed, 3 epochs). Under ``torchrun`` every rank trains on the whole
training set (no sharding) and rank 0 reports.
"""

from ._config import SnnConfig, default_config, surrogate_choices
from ._run import run
from ._train import SpikingMLP, train_and_evaluate
from ._train import _encode as _encode

__all__ = [
    "SnnConfig",
    "SpikingMLP",
    "default_config",
    "run",
    "surrogate_choices",
    "train_and_evaluate",
]
