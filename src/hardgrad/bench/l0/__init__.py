r"""The ``l0`` benchmark: L0 pruning of an MLP on the digits with Hard Concrete gates.

An MLP ``64-hidden-10`` (ReLU) classifies scikit-learn's 8x8 digits (``x/16``). A
:class:`hardgrad.nn.HardConcreteGate` sits on each of its 64 inputs and each hidden unit
(Louizos et al. 2018, https://arxiv.org/abs/1712.01312: group sparsity, a pruned input or
unit removes a row or column of weights). The loss is the cross-entropy plus
:math:`\lambda` times the expected share of non-zero gates
(:math:`\sum P(z \ne 0)` over all gates, divided by their number), for several
:math:`\lambda`. Reported on the test set with the deterministic test-time gates: accuracy,
the share of gates that are exactly 0, and the share of the two weight matrices' entries
that the pruned inputs and units remove; the trade-off of sparsity against accuracy.
"""

from ._config import L0Config, default_config
from ._run import run
from ._train import GatedMLP, train_and_evaluate

__all__ = ["GatedMLP", "L0Config", "default_config", "run", "train_and_evaluate"]
