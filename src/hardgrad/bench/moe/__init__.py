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
  subsets (the reference optimiser; 28 times sparse's expert compute);
* ``noisy_topk``: noisy top-k gating (Shazeer et al. 2017, ``hg.nn.MoE(noisy_gating=True)``,
  the noise map initialised to 0), trained with 0.01 times the importance and load
  :math:`\mathrm{CV}^2` losses (``moe.aux_losses``; the smooth load estimator) in place of
  Switch's loss, sparse gradient through the noisy logits;
* ``sparse_c1.0``, ``sparse_c1.25``, ``sparse_c2.0``: the sparse gradient with the capacity
  factor 1.0, 1.25 or 2.0 (Fedus et al. 2021, https://arxiv.org/abs/2101.03961: each expert
  takes at most :math:`\lceil c N k / E \rceil` assignments of a call's N tokens, the rest
  are dropped; ``--quick`` leaves out 2.0), Switch's loss on.

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
* **test MSE** in eval mode (deterministic top-2; with a capacity, over the test set's
  2048 tokens at once);
* **dropped %**: the share of the :math:`N k` (token, expert) assignments past capacity
  (``moe.dropped_fraction``), the mean over the last quarter of the training steps (128
  tokens per call) and in the test forward;
* expert-MLP **FLOPs** per training step relative to ``sparse`` (forward 2(8·16 + 16·4)
  per expert evaluation, backward twice that where a gradient flows; DenseMixer's extra
  evaluations are forward-only), and measured **time** per step relative to ``sparse``
  (medians of a separate timing run that interleaves the estimators round by round in
  shuffled orders, so that the machine's load affects them alike).

The closing notes say whether DenseMixer's (and Default MoE's) gradients help here,
paired by seed against ``sparse`` (the runs of one seed share data, initialisation and
batches): a difference counts only where the mean per-seed difference exceeds twice its
standard error (so not with one seed); likewise noisy gating and capacity factor 1.0. The
verdict checks Switch's advice that a capacity factor of 1.0-1.25 suffices with the load loss
on, read as: under 1 % of the assignments dropped in training.
"""

from ._config import ESTIMATORS, MoEConfig, default_config
from ._report import _paired as _paired
from ._report import _paired_table as _paired_table
from ._run import run
from ._train import _flops as _flops
from ._train import _matching_accuracy as _matching_accuracy
from ._train import make_data, train_one

__all__ = ["ESTIMATORS", "MoEConfig", "default_config", "make_data", "run", "train_one"]
