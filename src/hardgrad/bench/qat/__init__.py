r"""The ``qat`` benchmark: quantization-aware training of an MLP classifier on the digits.

One multilayer perceptron (64-256-256-10 on scikit-learn's 8x8 digits, or the images of
``--data``) is trained in several forms and its test accuracy compared:

* ``float``: the full-precision baseline (``Linear -> ReLU`` twice, then ``Linear``).
* ``STE b-bit`` for b in {8, 4, 2}: the same network built from
  :class:`hardgrad.nn.QuantLinear` layers, with fake-quantized weights and
  activations. Every weight matrix (all three layers) is quantized to ``b``-bit signed
  integers with one scale per output channel; the inputs of the second and third layer
  (the hidden activations, after ReLU) to ``b``-bit unsigned integers with one scale per
  tensor; biases and the input pixels stay in floating point. Forward:
  :func:`hardgrad.quantize` through the layers' :class:`hardgrad.nn.Quantize` quantizers;
  backward: the masked straight-through estimator (the gradient passes where the value is
  inside the integer range, Jacob et al. 2018). The scale is *fixed*
  (``learn_scale=False``): set once from the initial weights and the first batch with LSQ's
  rule :math:`s = 2\,\overline{|x|}/\sqrt{q_+}` and never trained.
* ``LSQ b-bit``: the same quantizers with the scale learned by gradient descent with the
  LSQ gradient and its :math:`1/\sqrt{N q_+}` scaling (Esser et al. 2020,
  https://arxiv.org/abs/1902.08153). STE and LSQ start from the same scales, so the
  difference between the two rows is only whether the scale is trained. Adam normalises
  away LSQ's gradient scaling, so the scales get their own, smaller learning rate
  (``scale_lr``) and are kept above 1e-6 after every step.
* ``binary``: sign weights and sign activations (:func:`hardgrad.binarize`, :math:`\pm 1`)
  with the clipped straight-through estimator (Hubara et al. 2016,
  https://arxiv.org/abs/1602.02830): ``Linear(float) -> BatchNorm -> binarize ->
  BinaryLinear -> BatchNorm -> binarize -> Linear(float)`` with
  :class:`hardgrad.nn.BinaryLinear`. As is customary, the first and last layers keep
  floating-point weights (the middle 256x256 matrix, 80 % of the weights, is binary) and
  BatchNorm precedes each sign; the latent float weights of the binary layer are clipped to
  [-1, 1] after every step (:func:`hardgrad.nn.clip_latent_weights_`), as Hubara et al. do.
* ``ternary``: ternary weights of TWN (Li, Zhang & Liu 2016,
  https://arxiv.org/abs/1605.04711; :math:`\{-\alpha, 0, \alpha\}` per output channel,
  threshold :math:`0.7\,\overline{|W|}`, straight-through backward) in the middle layer,
  ``hg.nn.BinaryLinear(weights="ternary")``, with float ReLU activations: ``Linear(float) ->
  BatchNorm -> ReLU -> ternary Linear -> BatchNorm -> ReLU -> Linear(float)``.

Every configuration is trained with Adam (batch 64) from ``seeds`` seeds; the table gives
the test accuracy at the end of training, mean ± sample standard deviation over seeds and
the range, with the training accuracy and the mean cross-entropy of the last epoch (at
low bit widths the loss separates the quantizers more clearly than the accuracy on this
easy data set). Under ``torchrun`` the model is wrapped in DistributedDataParallel, each rank
trains on its shard of the training set with its own shuffling seed, and the quantizers'
scales are set (and averaged across ranks) on a calibration batch before wrapping.

Wall time on two shared cores: 49 s for the full run (3 seeds, 30 epochs, ternary row
included; ``docs/results/full/`` holds an earlier run without it), 7 s with ``--quick``.
"""

from ._config import QatConfig, default_config
from ._model import BinaryLinear, QuantLinear, Variant, build_model, variants
from ._run import run, train_and_evaluate

__all__ = [
    "BinaryLinear",
    "QatConfig",
    "QuantLinear",
    "Variant",
    "build_model",
    "default_config",
    "run",
    "train_and_evaluate",
    "variants",
]
