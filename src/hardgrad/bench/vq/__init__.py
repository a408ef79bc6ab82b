r"""The ``vq`` benchmark: a small VQ-VAE on the digits with each quantizer, at equal steps.

An MLP autoencoder (``64-128-(T·D)`` encoder, ``(T·D)-128-64`` decoder with a sigmoid
output, ``T = 4`` tokens per image) is trained to reconstruct scikit-learn's 8x8 digits
(``x/16``) with mean squared error, with one of these bottlenecks, each with a codebook of
``K = 64`` codes shared by the tokens:

* ``STE``: :class:`hardgrad.nn.VectorQuantize` (D = 8), straight-through gradient, codebook
  loss (van den Oord et al. 2017, https://arxiv.org/abs/1711.00937);
* ``rotation``: the same with the rotation trick (Fifty et al. 2024,
  https://arxiv.org/abs/2410.06424);
* ``Gumbel``: the same with codes drawn by straight-through Gumbel over :math:`-d/\tau`;
* ``EMA``: straight-through with the exponential-moving-average codebook;
* ``FSQ``: finite scalar quantization with levels (4, 4, 4) (D = 3, 64 codes; no
  auxiliary loss), Mentzer et al. 2023, https://arxiv.org/abs/2309.15505;
* ``LFQ``: lookup-free quantization with 6 bits (64 codes) and its entropy loss, Yu et al.
  2023, https://arxiv.org/abs/2310.05737.

Every configuration trains for the same number of Adam steps (batch 64) from the same
seeds. The table reports, on the test set in eval mode: reconstruction MSE per pixel, the
percentage of codes used and the perplexity of the code distribution over all test tokens,
the codes never used on the whole training set ("dead"), the commitment error
:math:`\overline{\lVert z - \operatorname{sg}[z_q]\rVert^2}` (not for FSQ, whose input is
unbounded and bounded inside), and the time per training step. It then checks the papers'
qualitative claims: the rotation trick gives lower reconstruction error and higher codebook
usage than the straight-through estimator, and FSQ uses (nearly) all codes without
auxiliary losses; a claim counts as resolved only with at least two seeds and a difference
beyond twice the larger seed spread.

Residual rows: the same autoencoder with :class:`hardgrad.nn.ResidualVQ` (``K = 64`` codes
of ``D = 8`` per stage, straight-through, EMA codebooks, k-means initialisation; SoundStream,
Zeghidour et al. 2021, https://arxiv.org/abs/2107.03312) for each of
``config.residual_stages`` stages (1, 2, 4, 8; ``--quick``: 1, 2, 4 with one seed) with
``gradient="total"``, and at ``config.residual_compare`` stages (4) also with
``gradient="per_stage"`` and with quantizer dropout. For each trained model and each
``k <= n`` it reports, on the test set, the reconstruction MSE of the decoder fed the first
``k`` stages' codes, the latent residual :math:`\lVert z - \sum_{j<k} c^{(j)}\rVert^2`, and
stage ``k``'s codebook usage and perplexity; ``vq_residual.png`` plots the first two against
``k``. The verdict states whether each stage lowered the error, whether more stages gave a
lower final error, whether the two gradient conventions trained alike, and whether dropout
lowered the error with fewer stages (:mod:`hardgrad.bench.vq._verdict`).
"""

from ._config import VARIANTS, VQConfig, default_config
from ._run import run
from ._train import VQVAE, train_and_evaluate

__all__ = ["VARIANTS", "VQVAE", "VQConfig", "default_config", "run", "train_and_evaluate"]
