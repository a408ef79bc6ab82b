r"""The ``models`` benchmark: a training step of small real-style models, hardgrad vs hand-written.

Public code around hard ops is written in a few recurring ways; this task writes eleven small
models each way and times one full training step (``zero_grad``, forward, loss, backward,
optimizer step) of the hand-written original against the same model with hardgrad,
interleaved in one run (:func:`hardgrad.bench._timing.time_interleaved`: each round times
every candidate once, in a shuffled order). The figure is the median over rounds; the
ratio is hardgrad's median over the original's, with the rounds in which hardgrad was the
faster of the pair.

* ``lsq-mlp``: a 64-256-256-10 MLP (the input width is the data's) with 3-bit LSQ weights (one scale per tensor) and 3-bit
  unsigned LSQ activations after each ReLU (Esser et al. 2020,
  https://arxiv.org/abs/1902.08153). The original is the paper's own recipe, as most
  repositories copy it: ``gradscale(s, g) = (s - s g).detach() + s g`` and
  ``roundpass(v) = (v.round() - v).detach() + v`` around ``clamp(v / s, Q_n, Q_p)``;
  hardgrad's is :class:`hardgrad.nn.Quantize` (``in_range="unrounded"``, the paper's
  clamp-then-round, with its :math:`1/\sqrt{N Q_p}` gradient scale).
* ``pact-mlp``: a 64-256-256-10 MLP whose two hidden activations are PACT's (Choi et
  al. 2018, https://arxiv.org/abs/1805.06085): a ReLU clipped at a learned level
  :math:`\alpha` and quantized to 4 bits (:math:`\alpha` starts at 0.1, which about a third of
  the first layer's outputs and 1-3 % of the second's exceed on the batch, so that both
  levels learn; the paper's 10 suits larger activations). The original is
  the custom ``autograd.Function`` public PACT code carries: forward
  ``round(clamp(x, 0, alpha.item()) * n / alpha) / (n / alpha)``, saving ``x`` and
  :math:`\alpha`; backward ``grad`` on :math:`0 \le x \le \alpha` and the sum of ``grad``
  over :math:`x \ge \alpha` for :math:`\alpha`. hardgrad's is :class:`hardgrad.nn.PACT`
  (the same gradients off :math:`x = \alpha` exactly, where the paper gives :math:`\alpha`
  alone the gradient).
* ``binarynet-mlp``: BinaryNet (Hubara et al. 2016, https://arxiv.org/abs/1602.02830):
  ``BinaryLinear -> BatchNorm -> sign`` twice, then ``BinaryLinear -> BatchNorm``, with
  binary weights everywhere, the first layer's input left real, and the latent weights
  clipped to [-1, 1] after each step. The original is the usual custom
  ``autograd.Function`` (forward ``where(x >= 0, 1, -1)``, saves ``x``, backward
  ``grad * (|x| <= 1)``); hardgrad's is :func:`hardgrad.binarize`.
* ``twn-mlp``: a 64-256-256-10 MLP with ternary weights in its two hidden layers
  (TWN, Li, Zhang & Liu 2016, https://arxiv.org/abs/1605.04711: threshold
  :math:`0.7\,\overline{|w|}`, one scale per tensor, straight-through). The original
  builds the {-1, 0, 1} pattern from two comparisons and applies the detach trick, as
  public TWN code does; hardgrad's is :func:`hardgrad.ternarize`.
* ``snn``: a spiking 64-128-10 network over 25 time steps of rate-coded input (Bernoulli
  spikes of the pixel intensities, drawn once), leaky integrate-and-fire neurons
  (:math:`m_t = \beta m_{t-1} + W x_t - \theta s_{t-1}`, reset by subtraction with the
  previous spike detached, :math:`\beta = 0.9`, :math:`\theta = 1`), the loss the
  cross-entropy of the output spike counts (Neftci et al. 2019,
  https://arxiv.org/abs/1901.09948). The original's spike is the SuperSpike custom
  ``autograd.Function`` (Zenke & Ganguli 2018: backward ``grad / (25 |v| + 1)^2``);
  hardgrad's is :func:`hardgrad.heaviside` with ``FastSigmoid(slope=25)``, the same
  derivative.
* ``snn-lif``: the same spiking network and original, with hardgrad's neurons as
  :class:`hardgrad.nn.LIF` modules (``FastSigmoid(slope=25)``), called once per step as
  snnTorch's ``Leaky`` is.
* ``stochastic-mlp``: a 64-256-256-10 MLP with stochastic binary hidden units and the
  sigmoid-adjusted straight-through gradient (Bengio et al. 2013,
  https://arxiv.org/abs/1308.3432). The original draws ``torch.bernoulli(p, generator=g)``
  and writes ``p + (b - p).detach()``; hardgrad's is :func:`hardgrad.bernoulli` with
  ``estimator="st"``.
* ``vq-vae``: an MLP autoencoder whose latent is 16 vectors of size 32, each replaced by
  the nearest of 256 learned codes (VQ-VAE, van den Oord et al. 2017,
  https://arxiv.org/abs/1711.00937), trained on the reconstruction error plus the
  codebook and commitment losses (:math:`\beta = 0.25`). The original is the layer most
  repositories copy: an ``nn.Embedding`` codebook, distances by the expansion
  :math:`\lVert z\rVert^2 + \lVert c\rVert^2 - 2 z\cdot c`, ``argmin``, and
  ``z + (z_q - z).detach()``; hardgrad's is :class:`hardgrad.nn.VectorQuantize` (which
  also keeps usage statistics).
* ``fsq-ae``: an MLP autoencoder whose latent is 16 vectors of 4 channels, each
  channel bounded and rounded to a few levels, (8, 5, 5, 5): 1,000 implicit codes per
  vector (finite scalar quantization, Mentzer et al. 2023,
  https://arxiv.org/abs/2309.15505), trained on the reconstruction error. The original
  is the layer as public FSQ code writes it: ``half_l * tanh(z + shift) - offset``,
  ``round_ste`` by the detach trick, the division by the half width, and the code
  indices from the digits; hardgrad's is :class:`hardgrad.nn.FSQ` (the same constants).
* ``moe``: a residual top-2 mixture of 8 GELU experts (64 -> 128 -> 64) between an input
  and an output layer, each of the batch's rows a token, trained on the cross-entropy plus
  0.01 times the Switch load-balancing loss (Shazeer et al. 2017,
  https://arxiv.org/abs/1701.06538; Fedus et al. 2021, https://arxiv.org/abs/2101.03961).
  The original is the usual hand-written layer: softmax router, ``topk``, renormalised
  gates, a loop over the experts on their tokens with ``index_add_``; hardgrad's is
  :class:`hardgrad.nn.MoE` (the same "sparse" router gradient).
* ``l0-mlp``: a 64-256-10 MLP whose hidden units are pruned by Hard Concrete gates with
  the L0 penalty (Louizos et al. 2018, https://arxiv.org/abs/1712.01312, weight 1e-3).
  The original writes the gate's sample and penalty out in torch ops; hardgrad's is
  :class:`hardgrad.nn.HardConcreteGate`.

Before timing, every pair is checked to compute the same thing: from the same initial
weights and batch, the deterministic models give the same loss and the same parameter
gradients (the VQ-VAE's codebook gradient, the experts' and the gates' parameters included; the
stochastic gates with the global seed set alike before each) (relative error at most 1e-4: ``x / s`` against ``x * (1/s)`` may put an
element that lies on a rounding tie on the other side); for the stochastic MLP, whose two
versions draw different noise, one stochastic layer's gradient given the same upstream
gradient is compared (straight-through through the sigmoid does not depend on the draw).
Batch 64, Adam (learning rate 1e-3), float32, on the bench's device and threads.

Every round starts both models again from the snapshot taken after their two warm-up
steps (weights, buffers and Adam state), so that both time the same stretch of early
training. Without it, a run trains each model for thousands of steps on its one batch, to a
loss near 0 with subnormal numbers in the optimizer state, and the faster model, taking
more steps per round, gets there first: the timed work drifted apart between the two.
"""

from ._config import MODELS, ModelCheckError, ModelsConfig, default_config
from ._pairs import ModelPair, build_pair, check_pair
from ._pairs import Training as Training
from ._run import run

__all__ = [
    "MODELS",
    "ModelCheckError",
    "ModelPair",
    "ModelsConfig",
    "build_pair",
    "check_pair",
    "default_config",
    "run",
]
