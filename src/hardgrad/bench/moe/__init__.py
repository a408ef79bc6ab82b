r"""The ``moe`` benchmark: router-gradient quality in a toy mixture of experts.

Data: a synthetic mixture of regressions with a known expert assignment. Each of
``clusters = 8`` clusters has a centre :math:`c_z \in \mathbb{R}^8` and its own affine map;
a token is :math:`x = c_z + \sigma \epsilon` with a uniformly drawn cluster :math:`z`, and
its target :math:`t = A_z x + b_z + 0.05\,\eta`.

Model: :class:`hardgrad.nn.MoE` with 8 experts (8-16-4 MLPs), top-2, trained with Adam on the
mean squared error plus 0.01 times the Switch load-balancing loss. One run per router
gradient (Shazeer et al. 2017, https://arxiv.org/abs/1701.06538; see
:mod:`hardgrad.routing` for each estimator's paper):

* ``sparse``: the standard gradient through the selected gates;
* ``dense``: DenseMixer (Yao et al. 2025), the unselected experts evaluated in backward;
* ``default``: Default MoE (Panda et al. 2025): DenseMixer's gradient with EMA default
  outputs in place of the unselected experts (no extra expert evaluations);
* ``sparsemixer``: SparseMixer as in GRIN / PhiMoE (Liu et al. 2023 and 2024), with
  PhiMoE's sparsity threshold ``jitter_eps = 0.01``; ``sparsemixer_eps0.1`` with the 2023
  paper's 0.1 (more experts stay candidates, so the router gets a gradient more often);
* ``st_gumbel`` and ``reinmax``: stochastic Gumbel top-2 routing with straight-through
  Gumbel and ReinMax one-hots;
* ``rloo``: stochastic routing trained on the expected loss with the leave-one-out
  score-function estimator (2 samples; unbiased);
* ``exact``: the expected loss under stochastic routing, trained by enumerating the 28
  subsets (the reference optimiser; 28 times sparse's expert compute).

Measured per estimator:

* router-gradient **cosine**, **bias** and **std** (relative to the exact gradient's norm,
  :func:`hardgrad.diagnostics.compare`) on a fixed probe batch at several points of its own
  training run. The reference is the exact gradient, with respect to the router logits,
  of the expected loss under stochastic top-2 routing (Plackett-Luce on the router's
  softmax; all 28 subsets enumerated) at the current parameters. The deterministic
  estimators change the objective (the hard top-k) and are biased against it by design;
  the figure says how far their gradient is from the one the smoothed objective has;
* **routing accuracy**: the share of test tokens whose top-1 expert (eval mode,
  deterministic top-k) is the one matched to their true cluster, under the best one-to-one
  matching of experts to clusters;
* **test MSE** in eval mode (deterministic top-2);
* expert-MLP **FLOPs** per training step relative to ``sparse`` (forward 2(8·16 + 16·4)
  per expert evaluation, backward twice that where a gradient flows; DenseMixer's extra
  evaluations are forward-only), and measured **time** per step relative to ``sparse``
  (medians of a separate timing run that interleaves the estimators round by round in
  shuffled orders, so that the machine's load affects them alike).

The closing notes say whether DenseMixer's (and Default MoE's) gradients help here,
paired by seed against ``sparse`` (the runs of one seed share data, initialisation and
batches): a difference counts only where the mean per-seed difference exceeds twice its
standard error (so not with one seed).
"""

from ._config import ESTIMATORS, MoEConfig, default_config
from ._report import _paired as _paired
from ._report import _paired_table as _paired_table
from ._run import run
from ._train import _flops as _flops
from ._train import _matching_accuracy as _matching_accuracy
from ._train import make_data, train_one

__all__ = ["ESTIMATORS", "MoEConfig", "default_config", "make_data", "run", "train_one"]
