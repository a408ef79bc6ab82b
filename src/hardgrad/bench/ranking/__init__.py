r"""The ``ranking`` benchmark: learning to rank with the sort and rank ops.

Each instance is a list of ``items`` items with features :math:`x_i \in R^p` (standard
normal); the true score of an item is a fixed random two-layer network of its features plus
Gaussian noise, and the target is the ranking of the list by true score. A small network
(``p``-``hidden``-1, shared across items) predicts a score per item; its ranks are trained
against the target ranks with the squared rank error :math:`\frac1n\sum_i (r_i - r^*_i)^2`
(which is :math:`\frac{n^2 - 1}{6}(1 - \rho)` for Spearman's :math:`\rho` when ``r`` are
exact ranks), where :math:`r` is, per method:

* ``soft_rank l2`` / ``soft_rank kl``: :func:`hardgrad.soft_rank` (Blondel et al. 2020,
  https://arxiv.org/abs/2002.08871), a relaxed forward;
* ``rank: soft``, ``rank: neuralsort``, ``rank: softsort``: :func:`hardgrad.rank` (exact
  ranks in forward) with the soft-rank, NeuralSort (Grover et al. 2019,
  https://arxiv.org/abs/1903.08850) or SoftSort (Prillo & Eisenschlos 2020,
  https://arxiv.org/abs/2006.16038) backward;
* ``rank: none``: exact ranks with PyTorch's own gradient (none: rank is an integer map), a
  check that the task cannot be learned without a relaxation;
* ``score MSE``: regression of the (privileged) true scores, a reference.

Reported on the test set: Spearman's :math:`\rho` between predicted and true ranks (mean
over lists), the share of lists ranked exactly right, and the time per step.
"""

from ._config import METHODS, RankingConfig, default_config
from ._run import run
from ._train import make_data as make_data
from ._train import train_and_evaluate

__all__ = ["METHODS", "RankingConfig", "default_config", "run", "train_and_evaluate"]
